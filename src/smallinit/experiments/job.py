"""Jobs are library calls: a :class:`Job` names a task of :data:`TASKS` and carries its typed config.

    task "train"   smallinit.train.train(RunConfig, run_dir) with the training probes when probe.every > 0;
                   a partial run directory is continued by smallinit.train.resume(run_dir) instead
    task "anchor"  smallinit.experiments.anchor.train_anchor(AnchorConfig, run_dir) (restarted when partial)

:func:`run_job` calls the task in this process; the subprocess entry ``python -m smallinit.experiments.job
JOBFILE [--resume]`` reads a job file (:func:`write_job_file`: the task, the run directory and the config as
plain data) back into the same typed config and calls :func:`run_job`. No command line is parsed on the way and
the command-line interface is never imported: a γ set in a preset reaches ``gamma_init`` as
``RunConfig.model.gamma`` (or ``AnchorConfig.gamma``) all along.

A failed task prints ``error: MESSAGE`` (the job runner keeps the last such line in ``failed.json``) and exits
with 2; an interrupted one exits with 130.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.core.io import atomic_write_json


def train_with_probes(config, run_dir: Path) -> dict[str, Any]:
    """:func:`smallinit.train.train` with a :class:`~smallinit.probes.training.TrainingProbe` when probe.every > 0."""
    from smallinit.train import train

    callbacks = []
    if config.probe.every:
        from smallinit.probes.training import TrainingProbe

        callbacks.append(TrainingProbe(config.probe))
    return train(config, run_dir, callbacks=callbacks)


def resume_with_probes(run_dir: Path) -> dict[str, Any]:
    """Continue the partial run in ``run_dir`` (its own config), with the training probes when probe.every > 0."""
    from smallinit.train import Trainer

    trainer = Trainer(None, run_dir, resume=True)
    if trainer.cfg.probe.every:
        from smallinit.probes.training import TrainingProbe

        trainer.callbacks.append(TrainingProbe(trainer.cfg.probe))
    return trainer.run()


def _anchor(config, run_dir: Path) -> dict[str, Any]:
    from smallinit.experiments.anchor import train_anchor

    return train_anchor(config, run_dir, log=lambda s: print(s, flush=True))


def _train_config(d: dict[str, Any]):
    from smallinit.config import config_from_dict

    return config_from_dict(d)


def _anchor_config(d: dict[str, Any]):
    from smallinit.experiments.anchor import AnchorConfig

    return AnchorConfig.from_dict(d)


@dataclass(frozen=True)
class Task:
    """A library function a job can name: ``run(config, run_dir)``, how a partial run continues
    (``resume(run_dir)``, or None: start over) and how a job file's plain data becomes the typed config."""

    run: Callable[[Any, Path], Any]
    resume: Callable[[Path], Any] | None
    config_from_dict: Callable[[dict[str, Any]], Any]


TASKS: dict[str, Task] = {
    "train": Task(train_with_probes, resume_with_probes, _train_config),
    "anchor": Task(_anchor, None, _anchor_config),
}


@dataclass
class Job:
    """One unit of work for :class:`~smallinit.experiments.runner.JobRunner`: ``task`` (a key of :data:`TASKS`)
    applied to the typed ``config``, filling ``run_dir``.

    ``est_seconds`` is the planned cost; ``total_steps`` lets the runner read progress from metrics.jsonl;
    ``check_config`` compares the config with an existing ``run_dir/config.yaml`` before anything runs.
    """

    name: str
    run_dir: Path
    task: str
    config: Any
    est_seconds: float = 0.0
    total_steps: int = 0
    label: str = ""
    check_config: bool = True

    @property
    def log_path(self) -> Path:
        """Where the runner keeps the job's output: ``run_dir/../jobs/NAME.log`` (the job file beside it)."""
        return self.run_dir.parent / "jobs" / f"{self.name}.log"

    @property
    def resumable(self) -> bool:
        return TASKS[self.task].resume is not None

    @property
    def expected_config(self) -> dict[str, Any] | None:
        """The config a finished run directory of this job must hold (train jobs), as plain data."""
        return self.config.to_dict() if self.task == "train" and self.check_config else None


def run_job(job: Job, resume: bool = False) -> Any:
    """Call the job's task in this process (``resume``: continue the partial run in ``run_dir``); the task works
    on a copy of the config, so the job's own stays as planned."""
    task = TASKS[job.task]
    if resume and task.resume is not None:
        return task.resume(job.run_dir)
    return task.run(copy.deepcopy(job.config), job.run_dir)


def write_job_file(job: Job, path: str | os.PathLike) -> Path:
    """The job as plain data (``task``, ``run_dir``, ``name``, ``config``) in a JSON file, for the subprocess."""
    atomic_write_json(
        path, {"task": job.task, "name": job.name, "run_dir": str(job.run_dir), "config": job.config.to_dict()}
    )
    return Path(path)


def read_job_file(path: str | os.PathLike) -> Job:
    """A :class:`Job` back from :func:`write_job_file` (its config typed again and validated)."""
    from smallinit.core.errors import ConfigError

    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a job file ({e})") from None
    if not isinstance(d, dict) or d.get("task") not in TASKS:
        raise ConfigError(f"{path}: not a job file (task must be one of {', '.join(TASKS)})")
    task = TASKS[d["task"]]
    return Job(str(d.get("name", "")), Path(d["run_dir"]), d["task"], task.config_from_dict(d["config"]))


def main(argv: list[str] | None = None) -> int:
    """``python -m smallinit.experiments.job JOBFILE [--resume]``: run one job; 0 done, 2 error, 128 + the signal
    when interrupted (130 SIGINT, 143 SIGTERM: the run checkpointed; the runner resumes it, never calls it failed)."""
    from smallinit.core.errors import Interrupted, SmallinitError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print("usage: python -m smallinit.experiments.job JOBFILE [--resume]", file=sys.stderr)
        return 2
    try:
        job = read_job_file(argv[0])
        print(f"{job.task} {job.name} → {job.run_dir}{' (resume)' if '--resume' in argv[1:] else ''}", flush=True)
        run_job(job, resume="--resume" in argv[1:])
    except Interrupted as e:  # a SmallinitError too: caught first, or the runner would record a failure
        print(f"interrupted: {e}", file=sys.stderr)
        return 128 + int(e.signum)
    except SmallinitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"done: {job.name}", flush=True)
    return 0


__all__ = [
    "Job",
    "TASKS",
    "Task",
    "main",
    "read_job_file",
    "resume_with_probes",
    "run_job",
    "train_with_probes",
    "write_job_file",
]

if __name__ == "__main__":
    sys.exit(main())
