"""Held-out loss during training: :func:`evaluate` is the mean next-token loss over a fixed, ordered set of
validation windows — the first ``data.val_batches`` global batches (``val_loss``), or the ``data.tune_batches``
after them (``tune_loss``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate(trainer, n_batches: int | None = None, skip_batches: int = 0) -> float:
    """Mean next-token loss over a fixed, ordered set of validation windows (rank-strided, then averaged)."""
    from smallinit.data import val_batches

    c = trainer.cfg
    n = c.data.val_batches if n_batches is None else n_batches
    trainer.wrapped.eval()
    total = torch.zeros(2, dtype=torch.float64, device=trainer.device)
    it = val_batches(
        trainer.data.val,
        c.data.seq_len,
        trainer.micro_batch,
        max_batches=(skip_batches + n) * (c.train.batch_size // trainer.micro_batch),
        bos_id=trainer.bos_id,
    )
    per = c.train.batch_size // trainer.micro_batch
    for i, (x, y) in enumerate(it):
        if i < skip_batches * per or i % trainer.dist.world_size != trainer.dist.rank:
            continue
        with trainer.autocast():
            logits = trainer.forward(x.to(trainer.device))
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.to(trainer.device).flatten(), reduction="sum")
        total += torch.stack([loss.double(), torch.tensor(y.numel(), dtype=torch.float64, device=trainer.device)])
    if trainer.dist.enabled:
        torch.distributed.all_reduce(total)
    trainer.wrapped.train()
    if total[1].item() == 0:
        from smallinit.core.errors import DataError

        raise DataError(
            f"the validation split of {trainer.data_path} has no windows for batches "
            f"{skip_batches}..{skip_batches + n - 1} at seq_len {c.data.seq_len}; "
            "lower data.val_batches / data.tune_batches or prepare a larger --val-fraction"
        )
    return (total[0] / total[1]).item()


def eval_losses(trainer) -> dict[str, float]:
    """The held-out losses of an evaluated step's record: ``val_loss``, and ``tune_loss`` when ``data.tune_batches``
    is set."""
    c = trainer.cfg
    out = {"val_loss": trainer.evaluate()}
    if c.data.tune_batches:
        out["tune_loss"] = trainer.evaluate(c.data.tune_batches, skip_batches=c.data.val_batches)
    return out
