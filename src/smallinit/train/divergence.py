"""The divergence watch: a step whose loss exceeds max(ln V, L₁) + ``train.diverge_margin`` (V the vocabulary; ln V is
the loss of a uniform guess, about where training starts; L₁ the run's first-step loss, far above ln V when the
init is large, e.g. γ = 0.25) counts as diverged; ``train.diverge_steps`` consecutive diverged steps stop the run
like a NaN does (DivergenceError naming the first diverged step). L₁ is kept in the checkpoints, so a resumed run
draws the same line. While the loss is above that line no checkpoint is written, so pruning can never remove the
newest checkpoint from before it. Either stop writes ``diverged.json`` (:func:`write_diverged`)."""

from __future__ import annotations

import math

from smallinit.core.errors import DivergenceError
from smallinit.core.io import atomic_write_json
from smallinit.runs.checkpoint import latest_good_checkpoint


class DivergenceWatch:
    """The line (``threshold``) and the count of consecutive steps above it (``streak``) of one training loop."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.threshold = self.line()
        self.streak = 0  # consecutive steps with loss above `threshold`

    def line(self) -> float:
        """max(ln V, L₁) + margin (module docstring); L₁ is ``trainer._first_loss`` (0 until step 1 is known)."""
        t = self.trainer
        return max(math.log(t.model_cfg.vocab_size), t._first_loss or 0.0) + t.cfg.train.diverge_margin

    def observe(self, step: int, loss: float) -> None:
        """Count step ``step``'s loss; step 1's finite loss becomes L₁ and moves the line."""
        t = self.trainer
        if t._first_loss is None and step == 1 and math.isfinite(loss):
            t._first_loss = float(loss)
            self.threshold = self.line()
        self.streak = self.streak + 1 if loss > self.threshold else 0

    @property
    def diverged(self) -> bool:
        """``train.diverge_steps`` (when set) consecutive steps above the line."""
        n = self.trainer.cfg.train.diverge_steps
        return bool(n) and self.streak >= n

    def non_finite(self, error: DivergenceError) -> None:
        """Record the non-finite loss/gradient that ``train_step`` raised for the step it was taking."""
        step = self.trainer.step + 1
        write_diverged(self.trainer, "non-finite", step, step, None, self.threshold, str(error))

    def stop(self, step: int, loss: float) -> None:
        """Write ``diverged.json`` and raise the DivergenceError that stops the run at ``step``."""
        t = self.trainer
        c = t.cfg
        first = step - self.streak + 1
        kept = latest_good_checkpoint(t.run_dir) if t.dist.is_main else None
        msg = (
            f"the loss diverged: above max(ln V, first-step loss) + {c.train.diverge_margin:g} = "
            f"{self.threshold:.2f} for "
            f"{self.streak} consecutive steps from step {first} (loss {loss:.4g} at step {step}); "
            "stopped; "
            + (
                f"the newest checkpoint from before it is kept ({kept.name})"
                if kept
                else "no checkpoint was written before it"
            )
            + "; lower optim.lr"
        )
        write_diverged(t, "diverged", first, step, loss, self.threshold, msg)
        raise DivergenceError(msg)


def write_diverged(
    trainer, kind: str, first: int, stopped: int, loss: float | None, threshold: float, message: str
) -> None:
    """``diverged.json`` (rank 0): what stopped the run, where, the rule and the checkpoint a resume starts from."""
    if not trainer.dist.is_main:
        return
    good = latest_good_checkpoint(trainer.run_dir)
    atomic_write_json(
        trainer.run_dir / "diverged.json",
        {
            "kind": kind,
            "step": first,
            "stopped_at": stopped,
            "loss": loss if loss is None or math.isfinite(loss) else None,
            "threshold": threshold,
            "rule": f"loss > max(ln V, first-step loss) + {trainer.cfg.train.diverge_margin:g} for "
            f"{trainer.cfg.train.diverge_steps} consecutive steps, or a non-finite loss/gradient",
            "checkpoint": good.name if good else None,
            "message": message,
        },
    )
