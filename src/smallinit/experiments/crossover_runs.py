"""Running a crossover's jobs (:mod:`smallinit.experiments.crossover`): a trunk, a cooldown branch or a tuning run
of one arm × seed, trained, resumed or branched to completion in a worker process (or in this one).

A branch is laid out by :func:`make_branch` from its trunk's checkpoint and then resumed, so it is an ordinary
resumable run directory; a finished trunk asked for more steps (a larger D) continues at the constant rate. Every
run trains with the training probes when ``probe.every`` > 0 (:func:`smallinit.experiments.job.train_with_probes`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.config import save_config


@dataclass
class Job:
    """A trunk, a branch or a tuning run (``kind``) of one arm × seed (``start`` is the trunk step a branch copies)."""

    kind: str
    arm: str
    seed: int
    run_dir: Path
    config: dict[str, Any]
    trunk_dir: Path | None = None
    start: int = 0


def make_branch(trunk_dir: Path, start: int, config: dict[str, Any], branch_dir: Path) -> None:
    """Lay out ``branch_dir`` as a resumable run at step ``start``: the branch config, the trunk's tokenizer, a copy of
    the trunk's checkpoint at ``start`` and its metrics up to ``start`` — assembled beside and renamed into place."""
    from smallinit.config import config_from_dict
    from smallinit.runs.checkpoint import CKPT_SUBDIR, ckpt_dir_name, verify_checkpoint

    src = trunk_dir / CKPT_SUBDIR / ckpt_dir_name(start)
    verify_checkpoint(src)
    tmp = branch_dir.parent / f".tmp-{branch_dir.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)  # our own leftover from a killed attempt (the name carries our pid)
    tmp.mkdir(parents=True)
    save_config(config_from_dict(config), tmp / "config.yaml")
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


def run_state(run_dir: Path) -> str:
    """:func:`smallinit.runs.rundir.run_state`, with a run that failed earlier counted as resumable ("partial")."""
    from smallinit.runs.rundir import run_state as state

    s = state(run_dir)
    return "partial" if s == "failed" else s


def is_finished(job: Job) -> bool:
    """Its run is done and as long as ``job`` asks: a finished trunk asked for more steps (a larger D) is not."""
    from smallinit.runs.rundir import read_json

    if run_state(job.run_dir) != "done":
        return False
    if job.kind != "trunk":
        return True
    return (read_json(job.run_dir / "summary.json") or {}).get("step", 0) >= job.config["train"]["max_steps"]


def run_job(job: Job) -> tuple[str, str | None]:
    """Train, resume or branch ``job`` to completion in this process; returns (state, error line)."""
    from smallinit.config import config_from_dict
    from smallinit.core.errors import Interrupted, SmallinitError
    from smallinit.experiments.job import resume_with_probes, train_with_probes

    state = run_state(job.run_dir)
    if state == "done" and is_finished(job):
        return "skipped", None
    extend = state == "done"  # a larger D: continue the constant-rate trunk
    job.run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = open(job.run_dir.parent / f"{job.run_dir.name}.log", "a")
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            if job.kind == "branch" and state == "new":
                make_branch(job.trunk_dir, job.start, job.config, job.run_dir)
                state = "partial"
            if extend:  # the trunk's new length and kept steps (all else checked equal by _check_reuse)
                save_config(config_from_dict(job.config), job.run_dir / "config.yaml")
                state = "partial"
            if state == "partial":
                resume_with_probes(job.run_dir)
            else:
                train_with_probes(config_from_dict(job.config), job.run_dir)
        return "done", None
    except Interrupted as e:
        return "interrupted", str(e)
    except SmallinitError as e:
        return "failed", str(e)
    except Exception as e:  # noqa: BLE001 — a crash of one run (a torch.compile cache torn by another process, an
        # out-of-memory) fails that run only: the others go on, a rerun retries it; the traceback is in its log
        import traceback

        traceback.print_exc(file=log)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return "failed", f"{type(e).__name__}: {first} (traceback in {job.run_dir.name}.log)"
    finally:
        log.close()


def batch_threads(jobs: list[Job], workers: int) -> int:
    """torch threads per run for a batch of ``jobs`` trained ``workers`` at a time: usable cores // min(workers, runs
    not yet done), at least 1 (0 = PyTorch's default, all cores, when one run has the machine)."""
    from smallinit.experiments.cost import default_threads

    todo = sum(run_state(j.run_dir) != "done" for j in jobs)
    return default_threads(max(1, min(workers, todo)))


def assign_threads(jobs: list[Job], workers: int, threads: int = 0) -> None:
    """Set ``train.threads`` of every job: ``threads`` when given, else the job's own (a ``--set train.threads=N``),
    else :func:`batch_threads`. ``train.threads`` is not part of a run's identity
    (:data:`smallinit.runs.rundir.IGNORED_IN_COMPARISON`): a resumed run may get another count."""
    per_run = threads or batch_threads(jobs, workers)
    for j in jobs:
        train = j.config.setdefault("train", {})
        if threads or not train.get("threads"):
            train["threads"] = per_run


def execute(
    jobs: list[Job], workers: int, log: Callable[[str], None], threads: int = 0, launcher: Any = None
) -> dict[Path, tuple[str, str | None]]:
    """Run ``jobs`` (``workers`` processes at a time; 1 = in this process) and return {run_dir: (state, error)}.

    A branch whose trunk is among ``jobs`` starts as soon as that trunk has finished (not when every trunk has), so
    no core idles while runs are pending; the pool takes jobs first come, first served, so trunks still go first.
    A branch of a trunk that failed or was cut short is not run (state "blocked").

    Every job trains with ``threads`` torch threads when given (or its config's own ``train.threads``); else with
    :func:`batch_threads`, the cores shared by the runs this batch trains at once — a batch of fewer runs than cores
    (two trunks on 16 cores, the one extra tuning run of an arm whose best rate was at the grid's edge) still uses
    every core (:func:`assign_threads`).

    An interruption stops the whole batch, as in :class:`~smallinit.experiments.runner.JobRunner`: Ctrl-C (SIGINT to
    the process group) or SIGINT/SIGTERM to one worker makes its run checkpoint and report "interrupted"; the jobs
    not yet started are cancelled, the running ones are sent SIGINT (they checkpoint) and waited for, and
    :class:`~smallinit.core.errors.Interrupted` is raised. A rerun resumes every interrupted run.

    ``launcher`` (a :class:`smallinit.experiments.launcher.Launcher`): the same jobs, submitted to a cluster."""
    from smallinit.core.errors import Interrupted

    if launcher is not None:
        return launcher.execute(jobs, log, threads)
    results: dict[Path, tuple[str, str | None]] = {}
    assign_threads(jobs, workers, threads)
    own = {j.run_dir for j in jobs}

    def waits_for(j: Job) -> Path | None:
        return j.trunk_dir if j.kind == "branch" and j.trunk_dir in own else None

    def ready(j: Job) -> bool:
        dep = waits_for(j)
        return dep is None or dep in results

    def report(j: Job, r: tuple[str, str | None]) -> None:
        results[j.run_dir] = r
        extra = f": {r[1]}" if r[1] else ""
        log(f"[crossover] {len(results)}/{len(jobs)} {r[0]} {j.arm} seed {j.seed} {j.run_dir.name}{extra}")
        if r[0] == "interrupted":
            raise Interrupted(
                f"{j.run_dir.name} of {j.arm} seed {j.seed} was interrupted ({r[1]}); rerun the same command to resume",
                signal.SIGINT,
                -1,
                None,
            )

    def start(j: Job) -> bool:
        """False (and the job reported "blocked") when its trunk did not finish."""
        dep = waits_for(j)
        if dep is not None and results[dep][0] not in ("done", "skipped"):
            report(j, ("blocked", f"its trunk {dep.name} did not finish"))
            return False
        return True

    if workers <= 1:
        for j in jobs:  # plan order: a branch's trunk comes before it
            if start(j):
                report(j, run_job(j))
        return results
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from smallinit.experiments.runner import signal_when_parent_dies

    # a worker whose parent dies gets SIGTERM: its run checkpoints and stops instead of training on as an orphan
    pool = ProcessPoolExecutor(
        max_workers=max(1, min(workers, len(jobs))),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=signal_when_parent_dies if sys.platform.startswith("linux") else None,
        initargs=(signal.SIGTERM,),
    )
    futs: dict[Any, Job] = {}
    waiting = list(jobs)
    try:
        while waiting or futs:
            for j in [j for j in waiting if ready(j)]:
                waiting.remove(j)
                if start(j):
                    futs[pool.submit(run_job, j)] = j
            if not futs:
                continue
            finished, _ = wait(futs, return_when=FIRST_COMPLETED)
            for f in finished:
                report(futs.pop(f), f.result())
    except BaseException:
        for fut in futs:
            fut.cancel()
        for proc in list(getattr(pool, "_processes", {}).values()):  # the workers still training: checkpoint, stop
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGINT)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


__all__ = ["Job", "assign_threads", "batch_threads", "execute", "is_finished", "make_branch", "run_job", "run_state"]
