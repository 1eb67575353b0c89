"""Experiment trackers beside ``metrics.jsonl``: TensorBoard and Weights & Biases, behind one tiny interface.

The model knows nothing of logging: the trainer opens the selected loggers on rank 0 only (as torchtitan attaches
its trackers from outside the model) and hands every logged record to each::

    train.logger=none          (default) metrics.jsonl only
    train.logger=tensorboard   also RUN_DIR/tb/ (the older switch train.tensorboard=true still does the same,
                               and may be combined with train.logger=wandb)
    train.logger=wandb         also a W&B run: files under RUN_DIR/wandb/, its id kept in RUN_DIR/wandb.json so
                               that ``smallinit train --resume`` continues the same W&B run

A logger receives the numeric values of each record of ``metrics.jsonl`` (``loss``, ``lr``, ``grad_norm``,
``tokens``, ``tokens_per_s``, ``gflops_per_s``, ``val_loss`` / ``tune_loss`` when evaluated, ``aux_loss``,
``wall_time``) at that record's step, and is closed when the loop ends, however it ends.

W&B's mode comes from the environment (``WANDB_MODE=offline`` logs with no network, ``wandb sync`` uploads
later; nothing here forces online). A backend that is not installed is a ConfigError checked before the run
folder exists (:func:`check_available`).
"""

from __future__ import annotations

import json
import os
import secrets
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from smallinit.core.errors import ConfigError

LOGGERS: tuple[str, ...] = ("none", "tensorboard", "wandb")
"""The values ``train.logger`` accepts."""

WANDB_ID_FILE = "wandb.json"
"""``RUN_DIR/wandb.json``: ``{"id": ...}``, the W&B run id a resumed run continues."""

WANDB_INSTALL = "pip install 'smallinit[wandb]'"


@runtime_checkable
class MetricLogger(Protocol):
    """Where logged records go besides ``metrics.jsonl``."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record the numeric values of ``metrics`` (a ``metrics.jsonl`` record; its ``step`` key is skipped) at
        ``step``."""

    def close(self, exit_code: int = 0) -> None:
        """Flush and release; ``exit_code`` 0 when the loop completed, else how it stopped (128 + signal for an
        interruption, 1 for an error)."""


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The values a logger records: every number of a record except its ``step``."""
    return {k: v for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))}


def selected(train_cfg: Any) -> list[str]:
    """The logger names a ``TrainConfig`` asks for ("tensorboard" also by the older ``train.tensorboard``)."""
    names = []
    if train_cfg.tensorboard or train_cfg.logger == "tensorboard":
        names.append("tensorboard")
    if train_cfg.logger == "wandb":
        names.append("wandb")
    return names


def check_available(train_cfg: Any) -> None:
    """Import every selected backend now, before anything is written: ConfigError (one line naming the install
    command) when one is missing."""
    for name in selected(train_cfg):
        if name == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                key = "train.tensorboard=true" if train_cfg.tensorboard else "train.logger=tensorboard"
                raise ConfigError(f"{key} needs the tensorboard package (pip install tensorboard)") from None
        elif name == "wandb":
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise ConfigError(f"train.logger=wandb needs the wandb package: {WANDB_INSTALL}") from None


def open_loggers(cfg: Any, run_dir: str | os.PathLike) -> list[MetricLogger]:
    """The loggers ``cfg.train`` selects, opened on ``run_dir`` (call on rank 0 only)."""
    run_dir = Path(run_dir)
    out: list[MetricLogger] = []
    try:
        for name in selected(cfg.train):
            if name == "tensorboard":
                out.append(TensorBoardLogger(run_dir / "tb"))
            elif name == "wandb":
                t = cfg.train
                out.append(
                    WandbLogger(
                        run_dir,
                        cfg.to_dict(),
                        project=t.wandb_project,
                        name=t.wandb_run_name or None,
                        entity=t.wandb_entity or None,
                    )
                )
    except BaseException:
        close_all(out, 1)
        raise
    return out


def close_all(loggers: list[MetricLogger], exit_code: int = 0) -> None:
    """Close every logger; one that fails to close is reported on stderr, never raised over the run's outcome."""
    for lg in loggers:
        try:
            lg.close(exit_code)
        except Exception as e:  # noqa: BLE001 - a tracker's failure must not hide how the run ended
            print(
                f"warning: closing the {type(lg).__name__} failed: {str(e).splitlines()[0] if str(e) else e!r}",
                file=sys.stderr,
                flush=True,
            )


class TensorBoardLogger:
    """Scalars to ``RUN_DIR/tb/`` (one tag per metric name, at the record's step)."""

    def __init__(self, log_dir: str | os.PathLike):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        for k, v in scalars(metrics).items():
            self.writer.add_scalar(k, v, step)

    def close(self, exit_code: int = 0) -> None:
        self.writer.close()


def wandb_run_id(run_dir: str | os.PathLike) -> str:
    """The run's stable W&B id, from ``RUN_DIR/wandb.json``; a new one is drawn and written when the file is missing
    (or unreadable)."""
    from smallinit.core.io import atomic_write_json

    path = Path(run_dir) / WANDB_ID_FILE
    try:
        rid = json.loads(path.read_text()).get("id")
        if isinstance(rid, str) and rid:
            return rid
    except (OSError, ValueError, AttributeError):
        pass
    alphabet = string.ascii_lowercase + string.digits
    rid = "".join(secrets.choice(alphabet) for _ in range(8))
    atomic_write_json(path, {"id": rid})
    return rid


class WandbLogger:
    """A W&B run in ``RUN_DIR/wandb/``: the run's full config, one ``log`` per record at its step, ``finish`` on
    close. ``resume="allow"`` with the id of ``RUN_DIR/wandb.json``: a resumed training run continues the same W&B
    run. A resumed W&B run already holds the steps up to its last logged one; the records a resumed training run
    logs again from its checkpoint up to there are the same numbers (resume is exact) and are skipped, as W&B's
    steps must increase."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: dict[str, Any],
        project: str = "smallinit",
        name: str | None = None,
        entity: str | None = None,
    ):
        import wandb

        run_dir = Path(run_dir)
        self.id = wandb_run_id(run_dir)
        try:
            self.run = wandb.init(
                project=project,
                entity=entity,
                name=name or run_dir.resolve().name,
                dir=str(run_dir),
                config=config,
                id=self.id,
                resume="allow",
            )
        except Exception as e:  # noqa: BLE001 - no network, no API key, a server refusal: one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"train.logger=wandb: wandb.init failed ({first[:200]}); to log without a network set "
                f"WANDB_MODE=offline (upload later with `wandb sync {run_dir}/wandb/offline-run-*`); "
                f"continue with `smallinit train --resume {run_dir}`"
            ) from None
        # the next W&B step of a resumed (online) run; 0 for a new or offline one
        self.first_step = 0
        if getattr(self.run, "resumed", False):
            try:
                self.first_step = int(self.run.step)
            except Exception:  # noqa: BLE001 - a mode without a step counter: send every record
                pass

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if step < self.first_step:
            return
        self.run.log(scalars(metrics), step=step)

    def close(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


__all__ = [
    "LOGGERS",
    "MetricLogger",
    "TensorBoardLogger",
    "WANDB_ID_FILE",
    "WandbLogger",
    "check_available",
    "close_all",
    "open_loggers",
    "scalars",
    "selected",
    "wandb_run_id",
]
