"""Jobs are library calls: a :class:`Job` names a task of :data:`TASKS` and carries its typed config.

    task "train"   smallinit.train.train(RunConfig, run_dir) with the training probes when probe.every > 0;
                   a partial run directory is continued by smallinit.train.resume(run_dir) instead
    task "trunk"   a crossover's trunk: "train", and a finished trunk asked for more steps (a larger D) is
                   continued with its new length (its state is "partial" until it reaches train.max_steps)
    task "anchor"  smallinit.experiments.anchor.train_anchor(AnchorConfig, run_dir) (restarted when partial)

A job with ``branch_from = (RUN, STEP)`` (a crossover's cooldown branch) starts as a copy of RUN's checkpoint at
STEP (:func:`make_branch`) and is then resumed: an ordinary resumable run directory. ``after`` names the jobs of the
same :class:`~smallinit.experiments.runner.JobRunner` it waits for.

:func:`run_job` calls the task in this process; the subprocess entry ``python -m smallinit.experiments.job
JOBFILE [--resume] [--parent=PID]`` reads a job file (:func:`write_job_file`: the task, the run directory and the
config as plain data, serialized once) back into the same typed config and calls :func:`run_job`. No command line
is parsed on the way and the command-line interface is never imported: a γ set in a preset reaches ``gamma_init``
as ``RunConfig.model.gamma`` (or ``AnchorConfig.gamma``) all along. With ``--parent`` the job dies with that
process (:func:`die_with_parent`): SIGTERM when it is gone, so the run checkpoints and stops, never an orphan.

A failed task prints ``error: MESSAGE`` (the job runner keeps the last such line in ``failed.json``) and exits
with 2; an interrupted one exits with 128 + the signal (130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.core.io import atomic_write_json


def train_with_probes(config, run_dir: Path) -> dict[str, Any]:
    """:func:`smallinit.train.train` with a :class:`~smallinit.probes.training.TrainingProbe` when probe.every > 0."""
    from smallinit.probes.training import probe_callbacks
    from smallinit.train import train

    return train(config, run_dir, callbacks=probe_callbacks(config.probe))


def resume_with_probes(run_dir: Path) -> dict[str, Any]:
    """Continue the partial run in ``run_dir`` (its own config), with the training probes when probe.every > 0."""
    from smallinit.probes.training import attach
    from smallinit.train import Trainer

    trainer = Trainer(None, run_dir, resume=True)
    attach(trainer)
    return trainer.run()


def _resume_train(config, run_dir: Path) -> dict[str, Any]:
    return resume_with_probes(run_dir)


def extend_or_resume(config, run_dir: Path) -> dict[str, Any]:
    """A crossover trunk: continue the partial run, or a finished one asked for more steps (a larger D) with its new
    length and kept steps (the crossover checked every other setting equal) — at the constant rate."""
    from smallinit.config import read_config_file, save_config
    from smallinit.runs.checkpoint import latest_good_checkpoint
    from smallinit.runs.config_changes import pending, record_change
    from smallinit.runs.rundir import run_state

    if run_state(run_dir) == "done":
        save_config(config, run_dir / "config.yaml")
        ckpt = latest_good_checkpoint(run_dir)  # the change is the plan's: recorded, so that the resume accepts it
        changes = pending(run_dir, ckpt, read_config_file(ckpt / "config.yaml"), config.to_dict()) if ckpt else {}
        if changes:
            record_change(run_dir, int(ckpt.name[5:]), changes, "crossover: trunk extended by its plan")
    return resume_with_probes(run_dir)


def _trunk_state(job: Job, state: str) -> str:
    """A finished trunk shorter than the job asks (a larger D) is "partial": it is continued, not skipped."""
    from smallinit.runs.rundir import read_json

    if state == "done" and (read_json(job.run_dir / "summary.json") or {}).get("step", 0) < job.config.train.max_steps:
        return "partial"
    return state


def make_branch(trunk_dir: Path, start: int, config: Any, branch_dir: Path) -> None:
    """Lay out ``branch_dir`` as a resumable run at step ``start``: the branch config (a RunConfig or its plain
    data), the trunk's tokenizer, a copy of the trunk's checkpoint at ``start`` and its metrics up to ``start`` —
    assembled beside and renamed into place (over an empty folder: what a retried failure leaves). How the branch
    config differs from the checkpoint's copy is recorded (``config_changes.jsonl``: the resume accepts it)."""
    from smallinit.config import config_from_dict, read_config_file, save_config
    from smallinit.runs.checkpoint import CKPT_SUBDIR, ckpt_dir_name, verify_checkpoint
    from smallinit.runs.config_changes import config_changes, record_change

    trunk_dir, branch_dir = Path(trunk_dir), Path(branch_dir)
    src = trunk_dir / CKPT_SUBDIR / ckpt_dir_name(start)
    verify_checkpoint(src)
    for old in branch_dir.parent.glob(f".tmp-{branch_dir.name}-*"):  # what a killed attempt left (one job per branch)
        shutil.rmtree(old, ignore_errors=True)
    tmp = branch_dir.parent / f".tmp-{branch_dir.name}-{os.getpid()}"
    tmp.mkdir(parents=True)
    config = config_from_dict(config) if isinstance(config, dict) else config
    save_config(config, tmp / "config.yaml")
    changes = config_changes(read_config_file(src / "config.yaml"), config.to_dict())
    if changes:
        record_change(tmp, start, changes, f"branch of {trunk_dir} at step {start}")
    if (trunk_dir / "tokenizer.json").is_file():
        shutil.copy2(trunk_dir / "tokenizer.json", tmp / "tokenizer.json")
    shutil.copytree(src, tmp / CKPT_SUBDIR / src.name)
    lines = []
    if (trunk_dir / "metrics.jsonl").is_file():
        for line in (trunk_dir / "metrics.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                if json.loads(line)["step"] <= start:
                    lines.append(line + "\n")
    (tmp / "metrics.jsonl").write_text("".join(lines))
    os.replace(tmp, branch_dir)


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
    (``resume(config, run_dir)``, or None: start over), how a job file's plain data becomes the typed config, and
    (``state``, optional) how the job reads its run directory's state (:func:`smallinit.runs.rundir.run_state`'s
    word in, the job's out)."""

    run: Callable[[Any, Path], Any]
    resume: Callable[[Any, Path], Any] | None
    config_from_dict: Callable[[dict[str, Any]], Any]
    state: Callable[[Job, str], str] | None = None


TASKS: dict[str, Task] = {
    "train": Task(train_with_probes, _resume_train, _train_config),
    "trunk": Task(train_with_probes, extend_or_resume, _train_config, _trunk_state),
    "anchor": Task(_anchor, None, _anchor_config),
}


@dataclass
class Job:
    """One unit of work for :class:`~smallinit.experiments.runner.JobRunner`: ``task`` (a key of :data:`TASKS`)
    applied to the typed ``config``, filling ``run_dir``.

    ``est_seconds`` is the planned cost; ``total_steps`` lets the runner read progress from metrics.jsonl;
    ``check_config`` compares the config with an existing ``run_dir/config.yaml`` before anything runs; ``after``
    names the jobs (of the same runner) that must be done before this one starts; ``branch_from`` = (run directory,
    step): a new run starts as a copy of that run's checkpoint (:func:`make_branch`), then resumes.
    """

    name: str
    run_dir: Path
    task: str
    config: Any
    est_seconds: float = 0.0
    total_steps: int = 0
    label: str = ""
    check_config: bool = True
    after: tuple[str, ...] = ()
    branch_from: tuple[Path, int] | None = None

    @property
    def log_path(self) -> Path:
        """Where the runner keeps the job's output: ``run_dir/../jobs/RUN.log`` (the job file beside it, RUN the run
        directory's name)."""
        return self.run_dir.parent / "jobs" / f"{self.run_dir.name}.log"

    @property
    def resumable(self) -> bool:
        return TASKS[self.task].resume is not None

    def state(self) -> str:
        """done | failed | partial | new, as the task reads its run directory (a short trunk is "partial")."""
        from smallinit.runs.rundir import run_state

        s = run_state(self.run_dir)
        how = TASKS[self.task].state
        return how(self, s) if how is not None else s

    @property
    def expected_config(self) -> dict[str, Any] | None:
        """The config a finished run directory of this job must hold (train jobs), as plain data."""
        return self.config.to_dict() if self.task == "train" and self.check_config else None


def run_job(job: Job, resume: bool = False) -> Any:
    """Call the job's task in this process (``resume``: continue the partial run in ``run_dir``; a new branch is
    laid out from its trunk first, then resumed); the task works on a copy of the config, so the job's own stays
    as planned."""
    from smallinit.runs.rundir import run_state

    task = TASKS[job.task]
    if job.branch_from is not None and not resume and run_state(job.run_dir) == "new":
        trunk, start = job.branch_from
        make_branch(Path(trunk), int(start), job.config, job.run_dir)
        resume = True
    if resume and task.resume is not None:
        return task.resume(copy.deepcopy(job.config), job.run_dir)
    return task.run(copy.deepcopy(job.config), job.run_dir)


def write_job_file(job: Job, path: str | os.PathLike) -> Path:
    """The job as plain data (``task``, ``run_dir``, ``name``, ``config``; ``branch_from`` when set) in a JSON
    file, for the subprocess: the one place its typed config is serialized."""
    d = {"task": job.task, "name": job.name, "run_dir": str(job.run_dir), "config": job.config.to_dict()}
    if job.branch_from is not None:
        d["branch_from"] = [str(job.branch_from[0]), int(job.branch_from[1])]
    atomic_write_json(path, d)
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
    src = d.get("branch_from")
    return Job(
        str(d.get("name", "")),
        Path(d["run_dir"]),
        d["task"],
        task.config_from_dict(d["config"]),
        branch_from=(Path(src[0]), int(src[1])) if src else None,
    )


def signal_when_parent_dies(signum: int = signal.SIGTERM) -> bool:
    """Receive ``signum`` when the parent dies (Linux ``PR_SET_PDEATHSIG``; False where there is none). SIGTERM
    lets a training run checkpoint and stop."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(1, int(signum), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int, signum: int = signal.SIGTERM, every: float = 1.0, grace: float = 300.0) -> None:
    """In a job process started by ``parent``: get ``signum`` when the parent is gone (``PR_SET_PDEATHSIG``, and
    everywhere a thread polling ``os.getppid()``; both at once: a parent gone before this call is seen here).
    SIGTERM makes a training run checkpoint at its next step and exit 143; a process still there ``grace``
    seconds after the signal exits at once (a checkpoint is written beside and renamed: never half of one)."""
    signal_when_parent_dies(signum)

    def gone() -> bool:
        return os.getppid() != parent

    def watch() -> None:
        while not gone():
            time.sleep(every)
        os.kill(os.getpid(), signum)
        time.sleep(grace)
        os._exit(128 + int(signum))

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m smallinit.experiments.job JOBFILE [--resume] [--parent=PID]``: run one job; 0 done, 1 crash, 2
    error, 128 + the signal when interrupted (130 SIGINT, 143 SIGTERM: the run checkpointed; the runner resumes it,
    never calls it failed). ``--parent``: die with that process (:func:`die_with_parent`)."""
    from smallinit.core.errors import Interrupted, SmallinitError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print("usage: python -m smallinit.experiments.job JOBFILE [--resume] [--parent=PID]", file=sys.stderr)
        return 2
    parent = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--parent=")), None)
    if parent is not None:
        die_with_parent(int(parent))
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
    except Exception as e:  # a crash (a torn compile cache, out of memory): its traceback, then one error line
        print(f"error: {crash_line(e)}", file=sys.stderr)
        return 1
    print(f"done: {job.name}", flush=True)
    return 0


def crash_line(e: BaseException) -> str:
    """The traceback of ``e`` on stderr, and the one line that names it (``Type: first line``) for ``failed.json``."""
    import traceback

    traceback.print_exc(file=sys.stderr)
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


__all__ = [
    "Job",
    "TASKS",
    "Task",
    "crash_line",
    "die_with_parent",
    "extend_or_resume",
    "main",
    "make_branch",
    "read_job_file",
    "resume_with_probes",
    "run_job",
    "signal_when_parent_dies",
    "train_with_probes",
    "write_job_file",
]

if __name__ == "__main__":
    sys.exit(main())
