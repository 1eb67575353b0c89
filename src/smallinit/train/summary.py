"""A run's ``summary.json``: written when the run completes (:func:`write_summary`), and read back to tell a
complete run from one to resume (:func:`completed_summary`)."""

from __future__ import annotations

import json
from typing import Any

from smallinit.core.io import atomic_write_json, read_jsonl
from smallinit.runs.checkpoint import latest_good_checkpoint


def write_summary(trainer, last_record: dict[str, Any], val_loss: float | None) -> dict[str, Any]:
    """The summary of a run that reached ``train.max_steps`` (``last_record``: the last logged metrics record;
    ``val_loss``: the last evaluated); rank 0 writes it as ``summary.json`` and removes a ``diverged.json`` left by
    an earlier stop. Config changes allowed on a resume (``config_changes.jsonl``) are listed under
    ``config_changes``. Returns it."""
    from smallinit.runs.config_changes import recorded

    c, model = trainer.cfg, trainer.model
    summary = {
        "completed": True,
        "step": trainer.step,
        "tokens": trainer.tokens_seen,
        "final_loss": last_record.get("loss"),
        "final_val_loss": val_loss,
        "wall_time": trainer.wall_time(),
        "params": model.num_params(),
        "non_embedding_params": model.num_params(non_embedding=True),
        "active_params": model.num_params(active=True),
        "dtype": c.train.dtype,
        "dtype_reason": trainer.dtype_decision.reason,
        "config_changes": recorded(trainer.run_dir) or None,
    }
    summary = fill_summary(trainer, summary)
    if trainer.dist.is_main:
        atomic_write_json(trainer.run_dir / "summary.json", summary)
        (trainer.run_dir / "diverged.json").unlink(missing_ok=True)  # completed after all (resumed past it)
    return summary


def fill_summary(trainer, summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with every None taken from values that exist: the last logged loss / val_loss of
    metrics.jsonl, else the previous summary.json; a key with no value anywhere is left out, never null."""
    recs = read_jsonl(trainer.run_dir / "metrics.jsonl")
    try:
        prev = json.loads((trainer.run_dir / "summary.json").read_text())
        prev = prev if isinstance(prev, dict) else {}
    except (OSError, ValueError):
        prev = {}
    logged = {"final_loss": "loss", "final_val_loss": "val_loss"}
    out = {}
    for k, v in summary.items():
        if v is None and k in logged:
            v = next(
                (
                    r[logged[k]]
                    for r in reversed(recs)
                    if isinstance(r.get(logged[k]), (int, float)) and r.get("step", 0) <= trainer.step
                ),
                None,
            )
        if v is None:
            v = prev.get(k)
        if v is not None:
            out[k] = v
    return out


def completed_summary(trainer) -> dict[str, Any] | None:
    """The run's summary.json when the run is complete: the summary says so at (or beyond) ``train.max_steps``
    and the newest checkpoint that verifies is that final step (a damaged final checkpoint is recomputed from
    the one before by an ordinary resume). Else None."""
    try:
        s = json.loads((trainer.run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not (
        isinstance(s, dict)
        and s.get("completed")
        and isinstance(s.get("step"), int)
        and s["step"] >= trainer.cfg.train.max_steps
    ):
        return None
    good = latest_good_checkpoint(trainer.run_dir)
    if good is None or int(good.name[5:]) != s["step"]:
        return None
    return s
