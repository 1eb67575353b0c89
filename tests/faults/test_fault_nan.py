"""Fault 4: a NaN (or inf) in the loss or in the gradients.

The divergence guard stops the run with a DivergenceError naming the step, before the optimizer
applies the bad update; no checkpoint holding a non-finite number (weights or AdamW moments) is ever
written — even when the bad step is a checkpoint step — and no non-finite loss is logged. Resuming
without the fault then ends exactly as the undisturbed run.
(test_train.py already covers a NaN loss at an ordinary step; these are the other cases.)
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from faultkit import fault_overrides, fault_table, losses, same_weights, weights  # noqa: F401

from smallinit.core.errors import DivergenceError
from smallinit.runs.checkpoint import list_checkpoints, read_checkpoint
from smallinit.train import load_config, resume, train


class LossFault:
    def __init__(self, at: int, value: float):
        self.at, self.value = at, value

    def on_loss(self, trainer, step, loss):
        return loss * self.value if step == self.at else loss


class GradFault:
    """One element of one gradient becomes NaN after the backward of step ``at + 1``."""

    def __init__(self, at: int, param: str):
        self.at, self.param = at, param

    def on_before_optimizer_step(self, trainer, step):
        if step == self.at:
            p = dict(trainer.model.named_parameters())[self.param]
            p.grad.view(-1)[0] = float("nan")


# (name, callback, extra overrides, step the guard must name); checkpoints every 4 steps
CASES = [
    ("NaN gradient at a checkpoint step", GradFault(7, "blocks.1.mlp.w_down.weight"), {}, 8),
    ("NaN gradient, clipping off", GradFault(5, "tok_emb.weight"), {"optim.grad_clip": 0.0}, 6),
    ("NaN loss at a checkpoint step", LossFault(11, float("nan")), {}, 12),
    ("inf loss", LossFault(2, float("inf")), {}, 3),
    ("NaN loss in one of two micro-batches", LossFault(9, float("nan")), {"train.micro_batch_size": 2}, 10),
]


def finite_everywhere(ckpt) -> bool:
    data = read_checkpoint(ckpt)
    tensors = list(data["model"].values())
    for st in data["optim"]["optimizer"]["state"].values():
        tensors += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return all(torch.isfinite(t).all() for t in tensors)


@pytest.mark.timeout(180)
def test_nan_and_inf_stop_the_run_naming_the_step(token_dir, tmp_path, fault_table):
    ref = tmp_path / "ref"
    train(load_config("tiny", fault_overrides(token_dir)), ref)
    survived = 0
    for i, (name, cb, extra, step) in enumerate(CASES):
        rd = tmp_path / f"c{i}"
        with pytest.raises(DivergenceError, match=rf"non-finite (loss|gradient norm) at step {step} ") as e:
            train(load_config("tiny", fault_overrides(token_dir, **extra)), rd, callbacks=[cb])
        assert ("gradient" in str(e.value)) == isinstance(cb, GradFault), (name, str(e.value))
        cks = list_checkpoints(rd)
        last_good = (step - 1) // 4 * 4
        assert [int(c.name[5:]) for c in cks][-1:] == ([last_good] if last_good else []), (name, cks)
        assert all(finite_everywhere(c) for c in cks), name
        logged = [json.loads(l) for l in (rd / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in logged] == list(range(1, step)), name  # the bad step is never logged
        assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in logged), name
        assert not (rd / "summary.json").exists()
        survived += 1
    # the fault gone (e.g. a lower learning rate), the run resumes from its last good checkpoint
    rd = tmp_path / "c0"
    resume(rd)
    assert losses(rd) == losses(ref) and same_weights(weights(rd), weights(ref))
    fault_table.record(
        "NaN/inf in the loss or the gradients",
        len(CASES),
        survived,
        "none (no non-finite checkpoint or log line)",
        "DivergenceError names the step",
    )
