"""The trainer's checkpoints: :func:`save` writes the current step (full state dicts, so a run resumes at any world
size; pruning to ``train.keep_ckpts`` plus ``train.ckpt_steps`` happens in
:func:`smallinit.runs.checkpoint.save_checkpoint`) and :func:`restore` puts a resumed run back exactly where its newest
good checkpoint left it: weights, optimizer, RNG, step, wall time, the divergence line's start, and ``metrics.jsonl``
cut back to that step. The format is :mod:`smallinit.runs.checkpoint`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from smallinit.core.errors import CheckpointError
from smallinit.core.io import atomic_write_text
from smallinit.runs.checkpoint import (
    latest_good_checkpoint,
    list_checkpoints,
    read_checkpoint,
    remove_partial_checkpoints,
    save_checkpoint,
)
from smallinit.train import distributed as dist_utils


def restore(trainer) -> None:
    """Load the newest checkpoint that verifies into ``trainer`` (built, not yet trained); with none, a run that
    never saved starts over (its ``metrics.jsonl`` removed) and a run whose checkpoints are all damaged refuses."""
    if trainer.dist.is_main:
        remove_partial_checkpoints(trainer.run_dir)  # a killed write's leftovers (we hold the lock)
    ckpt = latest_good_checkpoint(trainer.run_dir)
    if ckpt is None:
        bad = list_checkpoints(trainer.run_dir)
        if bad:  # never restart from scratch silently over a run whose checkpoints are all damaged
            raise CheckpointError(
                f"{trainer.run_dir}: none of the {len(bad)} checkpoint(s) verifies (newest: "
                f"{bad[-1].name}); see `smallinit doctor {trainer.run_dir}`, or delete "
                f"{trainer.run_dir / 'checkpoints'} to start over"
            )
        if (trainer.run_dir / "metrics.jsonl").exists() and trainer.dist.is_main:
            (trainer.run_dir / "metrics.jsonl").unlink()  # nothing was saved: start over cleanly
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    data = read_checkpoint(ckpt)
    tensors = data["model"]
    if trainer.model_cfg.tie_embeddings:
        tensors = {**tensors, "lm_head.weight": tensors["tok_emb.weight"]}
    opts = StateDictOptions(full_state_dict=True)
    try:
        set_model_state_dict(trainer.model, tensors, options=opts)
    except RuntimeError as e:  # shapes or names differ: config.yaml no longer describes the checkpointed model
        first = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln or "key" in ln), "")
        raise CheckpointError(
            f"{ckpt}: its weights do not fit the model of {trainer.run_dir / 'config.yaml'} "
            f"({first[:160]}); was config.yaml edited? Restore it (the checkpoint keeps its "
            "own copy) or start a new run"
        ) from None
    _check_config(trainer, ckpt, data["config"])  # another config than the checkpoint's: named, or refused
    set_optimizer_state_dict(trainer.model, trainer.optimizer, data["optim"]["optimizer"], options=opts)
    torch.set_rng_state(data["optim"]["rng_cpu"])
    trainer.step = int(data["state"]["step"])
    trainer._wall_before = float(data["state"].get("wall_time", 0.0))  # wall time accumulates across resumes
    trainer._first_loss = data["state"].get("first_loss")  # the divergence line's start (None: older checkpoints)
    trainer._t_start = time.time()
    truncate_metrics(trainer, trainer.step)


def _check_config(trainer, ckpt: Path, checkpoint_cfg: dict) -> None:
    """Refuse a config that differs from the checkpoint's in keys the user did not name (``--allow-change``); record
    the allowed changes in ``config_changes.jsonl`` and say so on stderr (:mod:`smallinit.runs.config_changes`)."""
    from smallinit.runs.config_changes import CHANGES_FILE, check_resume, format_changes, record_change

    changes = check_resume(trainer.run_dir, ckpt, checkpoint_cfg, trainer.cfg.to_dict(), trainer.allow_change)
    if changes and trainer.dist.is_main:
        record_change(trainer.run_dir, int(ckpt.name[5:]), changes, trainer.change_by)
        print(
            f"config changed from checkpoint {ckpt.name} on: {format_changes(changes)} (recorded in {CHANGES_FILE})",
            file=sys.stderr,
            flush=True,
        )


def truncate_metrics(trainer, step: int) -> None:
    """Drop metric lines logged after the checkpoint we resume from (they will be logged again)."""
    path = trainer.run_dir / "metrics.jsonl"
    if not trainer.dist.is_main or not path.exists():
        return
    keep = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            if json.loads(line)["step"] <= step:
                keep.append(line)
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a kill (or any line that is not a record): dropped
    atomic_write_text(path, "".join(l + "\n" for l in keep))


def save(trainer) -> Path | None:
    """Write a checkpoint of the current step (collective under FSDP; rank 0 writes)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    msd = get_model_state_dict(trainer.model, options=opts)
    osd = get_optimizer_state_dict(trainer.model, trainer.optimizer, options=opts)
    path = None
    if trainer.dist.is_main:
        tied = ("lm_head.weight",) if trainer.model_cfg.tie_embeddings else ()
        state = {
            "tokens": trainer.tokens_seen,
            "loader": trainer.loader.state_dict(),
            "world_size": trainer.dist.world_size,
            "wall_time": trainer.wall_time(),
            "first_loss": trainer._first_loss,
        }
        path = save_checkpoint(
            trainer.run_dir,
            trainer.step,
            msd,
            {"optimizer": osd, "rng_cpu": torch.get_rng_state()},
            state,
            trainer.cfg.to_dict(),
            keep=trainer.cfg.train.keep_ckpts,
            tied_keys=tied,
            keep_steps=tuple(trainer.cfg.train.ckpt_steps),
        )
    dist_utils.barrier(trainer.dist)
    return path
