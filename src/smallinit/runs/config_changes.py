"""A resumed run's config against its checkpoint's: changes are refused unless named, and named ones are recorded.

A checkpoint keeps a copy of the config it was trained with. When a run is resumed, :func:`check_resume` compares
the config it is about to train with (the run's ``config.yaml``, plus ``--max-steps``) against the copy in the
checkpoint it resumes from. Every key that differs must be named by the user (``smallinit train --resume RUN
--allow-change optim.lr,train.dtype``) or have been recorded before for that checkpoint (a crossover's cooldown
branch records the schedule it changes when it is laid out, :func:`record_change`); otherwise the resume is refused
with one line listing the keys, before any step. Allowed changes are appended to ``RUN/config_changes.jsonl``
(:data:`CHANGES_FILE`), one record per resume::

    {"step": 30, "checkpoint": "step_00000030", "by": "train --resume --allow-change optim.lr",
     "changes": {"optim.lr": [0.003, 0.3]}, "time": "2026-12-09T10:00:00+0000"}

``smallinit doctor`` shows them (and reports an unrecorded difference as a problem), and ``summary.json`` lists them
under ``config_changes``.

Keys that do not change what the run learns may differ freely (:data:`FREE_KEYS`: how it is executed, logged and
checkpointed, and what the data decides), and so may a larger ``train.max_steps`` (what ``--max-steps`` does; it is
recorded). A ``train.dtype`` of "auto" matches the checkpoint's concrete dtype (a resumed run keeps it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError
from smallinit.core.io import read_jsonl
from smallinit.runs.rundir import DATA_DECIDED, IGNORED_IN_COMPARISON, _flat, _with_defaults

CHANGES_FILE = "config_changes.jsonl"
FREE_KEYS: tuple[str, ...] = (
    *IGNORED_IN_COMPARISON,
    *DATA_DECIDED,
    "train.parallel",
    "train.log_every",
    "train.eval_every",
    "train.ckpt_every",
    "train.ckpt_steps",
    "train.progress_seconds",
)
"""Keys a resume may change without naming them: they never change what the run learns."""


def _flat_config(config: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in _flat(_with_defaults(config)).items():
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def config_changes(checkpoint_cfg: dict[str, Any], config: dict[str, Any]) -> dict[str, list[Any]]:
    """``{dotted key: [checkpoint's value, config's value]}`` for the keys a resume must not change silently:
    :data:`FREE_KEYS` left out, a larger ``train.max_steps`` kept (recorded, never refused: see
    :func:`unnamed`), a ``train.dtype`` of "auto" matching any dtype."""
    a, b = _flat_config(checkpoint_cfg), _flat_config(config)
    out = {}
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if k in FREE_KEYS or va == vb or (k == "train.dtype" and "auto" in (va, vb)):
            continue
        out[k] = [va, vb]
    return out


def unnamed(changes: dict[str, list[Any]]) -> list[str]:
    """The keys of ``changes`` that must be named to be allowed (all but a larger ``train.max_steps``)."""
    out = []
    for k, (old, new) in changes.items():
        if k == "train.max_steps" and isinstance(old, int) and isinstance(new, int) and new > old:
            continue
        out.append(k)
    return out


def recorded(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``config_changes.jsonl`` (oldest first; lines that are not records skipped)."""
    path = Path(run_dir) / CHANGES_FILE
    return [r for r in read_jsonl(path) if isinstance(r.get("changes"), dict)] if path.is_file() else []


def _already(records: list[dict[str, Any]], step: int, key: str, new: Any) -> bool:
    """Whether a record for the checkpoint at ``step`` changed ``key`` to ``new``."""
    for r in records:
        pair = r["changes"].get(key)
        if r.get("step") == step and isinstance(pair, list) and pair and pair[-1] == new:
            return True
    return False


def pending(run_dir: str | os.PathLike, ckpt: Path, checkpoint_cfg: dict[str, Any], config: dict[str, Any]):
    """The changes from ``checkpoint_cfg`` (the config copy of ``ckpt``) to ``config`` not recorded yet for that
    checkpoint, as ``{key: [there, here]}``."""
    step = int(ckpt.name[5:])
    records = recorded(run_dir)
    return {k: v for k, v in config_changes(checkpoint_cfg, config).items() if not _already(records, step, k, v[1])}


def record_change(run_dir: str | os.PathLike, step: int, changes: dict[str, list[Any]], by: str) -> None:
    """Append one record of ``changes`` (from the checkpoint at ``step`` on) to the run's ``config_changes.jsonl``."""
    from smallinit.runs.checkpoint import ckpt_dir_name

    rec = {
        "step": step,
        "checkpoint": ckpt_dir_name(step),
        "by": by,
        "changes": changes,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with open(Path(run_dir) / CHANGES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


def format_changes(changes: dict[str, list[Any]]) -> str:
    """``optim.lr 0.003 → 0.3, train.dtype fp32 → bf16``."""
    return ", ".join(f"{k} {old!r} → {new!r}" for k, (old, new) in changes.items())


def check_allow_names(allow: list[str]) -> list[str]:
    """The dotted keys of ``--allow-change`` (comma-separated, repeatable), each a key of the run config."""
    from smallinit.config import RunConfig

    known = set(_flat_config(RunConfig().to_dict()))
    names = [n.strip() for item in allow for n in item.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"--allow-change: unknown config key(s) {', '.join(bad)} (keys look like optim.lr)")
    return names


def check_resume(
    run_dir: str | os.PathLike, ckpt: Path, checkpoint_cfg: dict[str, Any], config: dict[str, Any], allow: list[str]
) -> dict[str, list[Any]]:
    """The changes a resume from ``ckpt`` makes (``checkpoint_cfg`` → ``config``) that are not yet recorded for it.
    ConfigError listing the keys when any of them is neither named in ``allow`` nor recorded before."""
    changes = pending(run_dir, ckpt, checkpoint_cfg, config)
    refused = [k for k in unnamed(changes) if k not in allow]
    if refused:
        listed = ", ".join(f"{k} ({changes[k][1]!r} here, {changes[k][0]!r} there)" for k in refused)
        raise ConfigError(
            f"{Path(run_dir) / 'config.yaml'} differs from the config of checkpoint {ckpt.name} in {listed}; restore "
            f"it (cp {ckpt / 'config.yaml'} {Path(run_dir) / 'config.yaml'}) or resume with --allow-change "
            f"{','.join(refused)} to train on with the change (recorded in the run)"
        )
    return changes
