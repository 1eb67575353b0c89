"""One cluster job, from the job's side: what a submitted job runs on its node (:func:`run_job_file`, for every job
of sweep, reproduce and crossover) and :class:`Submitted`, the handle on a job in flight (done, SLURM state, outcome,
cancel) that :class:`smallinit.experiments.launcher.Launcher` submits and waits for."""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.experiments.cluster_status import local_alive, sacct_states

__all__ = ["RunNotFinished", "Submitted", "checkpoint_step", "exit_status_of", "last_line", "run_job_file"]


class RunNotFinished(Exception):
    """Raised by :func:`run_job_file` for a run that did not finish (``exit status N``): its job fails, so jobs queued
    behind it (``afterok``: a crossover trunk's branches) never start from a run that is not there."""


def run_job_file(job_file: str, log_path: str) -> int:
    """What a submitted job runs on its node: :func:`smallinit.experiments.job.main` on the job's file, resuming a
    partial run (decided here, at start), its output appended to the job's log — as the local runner's subprocess.
    Returns 0 when the run is done; else raises :class:`RunNotFinished` with main's exit status (2 error, 1 crash,
    128 + the signal when stopped), which :func:`exit_status_of` reads back from the job's result."""
    from smallinit.experiments.job import main, read_job_file
    from smallinit.runs.rundir import run_state

    job = read_job_file(job_file)
    resume = run_state(job.run_dir) == "partial" and job.resumable
    where = os.environ.get("SLURM_JOB_ID") or f"pid {os.getpid()}"
    with open(log_path, "a", buffering=1) as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"\n$ cluster job {where}: {job.task} {job.name}{' --resume' if resume else ''}")
        rc = main([job_file, *(["--resume"] if resume else [])])
    if rc != 0:
        raise RunNotFinished(f"exit status {rc}")
    return 0


def exit_status_of(traceback: str) -> int | None:
    """The exit status a :class:`RunNotFinished` in a job's traceback carries (None: the job raised something else)."""
    m = re.search(r"RunNotFinished: exit status (-?\d+)", traceback)
    return int(m.group(1)) if m else None


def checkpoint_step(run_dir: Path | None) -> int:
    """The step of the run's last complete checkpoint (−1: none)."""
    from smallinit.runs.checkpoint import list_checkpoints

    ckpts = list_checkpoints(run_dir) if run_dir is not None else []
    return int(ckpts[-1].name.rsplit("_", 1)[-1]) if ckpts else -1


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(str(text).splitlines()) if line.strip()), "")[:300]


@dataclass(eq=False)
class Submitted:
    """A job in flight: its record in jobs.json, submitit's job object (pickles, output, state) and the step of its
    run's last checkpoint when it was submitted."""

    record: dict[str, Any]
    job: Any
    start_step: int = -1

    @property
    def job_id(self) -> str:
        return str(self.record["job_id"])

    @property
    def output(self) -> Path:
        """The job's stdout (stderr goes there too)."""
        return self.job.paths.stdout

    def done(self) -> bool:
        if self.record["executor"] == "local" and getattr(self.job, "_process", None) is None:
            return not local_alive(self.job_id)  # a local job of an earlier process: by its pid
        return bool(self.job.done())

    def state(self) -> str:
        """SLURM's state of the job ("" where unknown)."""
        return sacct_states([self.job_id]).get(self.job_id, "") if self.record["executor"] == "slurm" else ""

    def outcome(self) -> tuple[str, Any]:
        """("result", what the function returned), ("error", the traceback of what it raised) or ("lost", the SLURM
        state) for a job that ended without a result: killed, cancelled, out of time or memory."""
        from submitit.core.utils import pickle_load

        p = self.job.paths.result_pickle
        state = "" if p.exists() else self.state() or ("UNKNOWN" if self.record["executor"] == "slurm" else "KILLED")
        deadline = time.time() + (15 if state == "COMPLETED" else 0)  # a shared filesystem may show it late
        while not p.exists() and time.time() < deadline:
            time.sleep(1)
        if not p.exists():
            return "lost", state
        kind, value = pickle_load(p)
        return ("result", value) if kind == "success" else ("error", str(value))

    def cancel(self) -> None:
        with contextlib.suppress(Exception):  # scancel missing or the job gone: nothing to stop
            self.job.cancel(check=False)
