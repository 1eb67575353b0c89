"""A crossover's runs (:mod:`smallinit.experiments.crossover`) as jobs of the one
:class:`~smallinit.experiments.runner.JobRunner`: a trunk, a cooldown branch or a tuning run of one arm × seed, with
its typed :class:`~smallinit.config.RunConfig` from the plan to the worker (the job file serializes it once).

A trunk is task "trunk" (a finished trunk asked for more steps, a larger D, is continued at the constant rate); a
branch is task "train" laid out from its trunk's checkpoint (``branch_from``) and waiting for that trunk only
(``after``): it starts as soon as its own trunk is done, not when every trunk is. A tuning run is task "train". The
runner's policy holds for all of them: failures get ``failed.json`` and are not retried unless asked, logs are in
``runs/ARM/seedS/jobs/RUN.log`` (``runs/ARM/tune/jobs/``), an interruption stops the batch, and no worker outlives
the process that started it. With ``--launcher slurm`` the same runner submits them as cluster jobs (a branch
queued behind its trunk), under the same policy. Every run trains with the training probes when ``probe.every`` > 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.experiments.job import Job, make_branch

TITLE = "crossover"


@dataclass
class CrossoverJob(Job):
    """A :class:`~smallinit.experiments.job.Job` that is a trunk, a branch or a tuning run (``kind``) of one arm ×
    seed; a branch's ``branch_from`` is (its trunk's run directory, the trunk step it copies)."""

    kind: str = "trunk"
    arm: str = ""
    seed: int = 0

    @property
    def trunk_dir(self) -> Path | None:
        return Path(self.branch_from[0]) if self.branch_from is not None else None

    @property
    def start(self) -> int:
        return int(self.branch_from[1]) if self.branch_from is not None else 0


def crossover_job(
    kind: str,
    arm: str,
    seed: int,
    run_dir: Path,
    config: Any,
    trunk: CrossoverJob | None = None,
    start: int = 0,
    tuning: bool = False,
) -> CrossoverJob:
    """The job of one run: named by its path under ``runs/`` (``ARM/seedS/D1280``, ``ARM/tune/lr0.003/trunk``: unique
    in a crossover), labelled for the log (``ARM seed S RUN``, ``ARM tune lr0.003 RUN``), a branch waiting for
    ``trunk`` and starting from its step ``start``; ``tuning``: a trunk or branch of a tuning run at D."""
    parts = run_dir.parts
    below = len(parts) - 1 - parts[::-1].index("runs") if "runs" in parts else len(parts) - 4
    name = "/".join(parts[below + 1 :])
    if kind == "tune":
        label = f"{arm} tune {run_dir.name}"
    elif tuning:
        label = f"{arm} tune {run_dir.parent.name} {run_dir.name}"
    else:
        label = f"{arm} seed {seed} {run_dir.name}"
    return CrossoverJob(
        name,
        run_dir,
        "trunk" if kind == "trunk" else "train",
        config,
        total_steps=int(config.train.max_steps),
        label=label,
        check_config=False,  # the crossover compares the runs it reuses itself (crossover_checks.check_reuse)
        after=(trunk.name,) if trunk is not None else (),
        branch_from=(trunk.run_dir, int(start)) if trunk is not None else None,
        kind=kind,
        arm=arm,
        seed=seed,
    )


def run_job(job: CrossoverJob) -> tuple[str, str | None]:
    """Train, resume or branch ``job`` to completion in this process, its output appended to its log; returns
    (state, error line): "skipped" when it was finished. One run by hand (tests, a notebook): a run that failed
    before is retried, and nothing is written on failure — :func:`execute` is the policy (the runner's)."""
    from smallinit.core.errors import Interrupted, SmallinitError
    from smallinit.experiments.job import crash_line
    from smallinit.experiments.job import run_job as run_here

    state = job.state()
    if state == "done":
        return "skipped", None
    if state == "failed":
        (job.run_dir / "failed.json").unlink()
        state = job.state()
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"\n$ {job.task} {job.name}{' --resume' if state == 'partial' else ''} (in-process)", flush=True)
        try:
            run_here(job, resume=state == "partial")
            return "done", None
        except Interrupted as e:
            return "interrupted", str(e)
        except SmallinitError as e:
            print(f"error: {e}", flush=True)
            return "failed", str(e)
        except Exception as e:  # noqa: BLE001 - a crash fails this run only; the traceback is in its log
            return "failed", f"{crash_line(e)} (traceback in {job.log_path})"


def batch_threads(jobs: list[CrossoverJob], workers: int) -> int:
    """torch threads per run for a batch of ``jobs`` trained ``workers`` at a time: usable cores // min(workers, runs
    not yet done), at least 1 (0 = PyTorch's default, all cores, when one run has the machine)."""
    from smallinit.experiments.cost import default_threads

    todo = sum(j.state() != "done" for j in jobs)
    return default_threads(max(1, min(workers, todo)))


def assign_threads(jobs: list[CrossoverJob], workers: int, threads: int = 0) -> None:
    """Set ``train.threads`` of every job: ``threads`` when given, else the job's own (a ``--set train.threads=N``),
    else :func:`batch_threads`. ``train.threads`` is not part of a run's identity
    (:data:`smallinit.runs.rundir.IGNORED_IN_COMPARISON`): a resumed run may get another count."""
    per_run = threads or batch_threads(jobs, workers)
    for j in jobs:
        if threads or not j.config.train.threads:
            j.config.train.threads = per_run


def plan_seconds(jobs: list[CrossoverJob], gflops: float | None) -> None:
    """Each job's planned seconds at ``gflops`` GFLOP/s (a branch trains from its start step only); none without."""
    from smallinit.experiments.cost import model_cost

    for j in jobs:
        if gflops:
            steps = j.config.train.max_steps
            j.est_seconds = model_cost(j.config)["flops"] * (steps - j.start) / max(1, steps) / (gflops * 1e9)


def execute(
    jobs: list[CrossoverJob],
    workers: int,
    log: Callable[[str], None],
    threads: int = 0,
    launcher: Any = None,
    *,
    retry_failed: bool = False,
    gflops: float | None = None,
    inprocess: bool | None = None,
) -> dict[Path, tuple[str, str | None]]:
    """Run ``jobs`` with a :class:`~smallinit.experiments.runner.JobRunner` (``workers`` processes at a time; in this
    process, one after another, when ``workers`` is 1 or ``inprocess``) and return {run_dir: (state, error)}: "done",
    "skipped" (finished before), "failed" (now or earlier and not retried), "blocked" (its trunk did not finish).

    A branch starts as soon as its own trunk is done (``after``); the runner takes jobs in order, so trunks go first.
    Every job trains with ``threads`` torch threads when given (or its config's own ``train.threads``); else with
    :func:`batch_threads`, the cores shared by the runs this batch trains at once — a batch of fewer runs than cores
    (two trunks on 16 cores, the one extra tuning run of an arm whose best rate was at the grid's edge) still uses
    every core (:func:`assign_threads`).

    An interruption (Ctrl-C, SIGINT/SIGTERM to this process or to one worker) stops the whole batch: the running
    runs checkpoint, :class:`~smallinit.core.errors.Interrupted` is raised, and a rerun resumes them.

    ``launcher`` (a :class:`smallinit.experiments.launcher.Launcher`): the same jobs and runner, as cluster jobs
    (each run with ``threads``, else ``--cpus-per-job``, else as here); runs that stopped before their end there
    (an interruption stops nothing on a cluster) raise RunDirError once nothing is in flight: a rerun resumes them."""
    from smallinit.core.errors import RunDirError
    from smallinit.experiments.runner import JobRunner

    cpus = (launcher.options.cpus_per_job or 0) if launcher is not None else 0
    assign_threads(jobs, workers if launcher is None else 1, threads or cpus)
    plan_seconds(jobs, gflops)
    here = (workers <= 1 if inprocess is None else inprocess) and launcher is None
    results = JobRunner(
        jobs, workers, inprocess=here, retry_failed=retry_failed, log=log, title=TITLE, launcher=launcher
    ).run()
    out: dict[Path, tuple[str, str | None]] = {}
    for j in jobs:
        r = results[j.name]
        out[j.run_dir] = ("skipped" if r.skipped and r.state == "done" else r.state, r.error)
    stopped = [p for p, r in out.items() if r[0] == "interrupted"]
    if stopped and launcher is not None:
        raise RunDirError(
            f"{len(stopped)} run(s) stopped before their end (first: {stopped[0]}: {out[stopped[0]][1]}); rerun the "
            "same command to resume them"
        )
    return out


__all__ = [
    "CrossoverJob",
    "assign_threads",
    "batch_threads",
    "crossover_job",
    "execute",
    "make_branch",
    "plan_seconds",
    "run_job",
]
