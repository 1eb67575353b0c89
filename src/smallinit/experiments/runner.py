"""Running jobs: sequentially or several at a time, skipping finished runs, resuming partial ones, with a
progress display (which job of how many, estimated time left). A :class:`~smallinit.experiments.job.Job` is a
library call; here it runs in a subprocess (``python -m smallinit.experiments.job``) or in this process."""

from __future__ import annotations

import ctypes
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smallinit.core.errors import ConfigError, RunDirError
from smallinit.core.io import atomic_write_json
from smallinit.experiments.cost import fmt_seconds, wall_seconds
from smallinit.experiments.job import Job, run_job, write_job_file
from smallinit.runs.rundir import config_mismatch, last_step, read_config, read_json, run_state


@dataclass
class JobResult:
    name: str
    state: str  # done | failed | interrupted
    seconds: float = 0.0
    resumed: bool = False
    skipped: bool = False
    rc: int | None = None


def signal_when_parent_dies(signum: int = signal.SIGKILL) -> None:  # pragma: no cover - runs in the child
    """In a child process: receive ``signum`` when the parent dies (Linux ``PR_SET_PDEATHSIG``), so a killed sweep
    leaves no orphan training that would hold the run directory's lock (SIGKILL for the runner's subprocesses;
    the crossover's workers ask for SIGTERM, which makes their run checkpoint first)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signum)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _held_by_another(job) -> bool:
    """The job's run was refused because another process holds its lock (its log's last error says so)."""
    try:
        tail = job.log_path.read_text(errors="replace").splitlines()[-15:]
    except OSError:
        return False
    err = next((l for l in reversed(tail) if l.startswith("error: ")), "")
    return "is in use by another process" in err


class JobRunner:
    """Run jobs sequentially or ``parallel`` at a time, skipping finished ones, resuming partial ones, with a
    progress display (which job of how many, estimated time left).

    Each job runs as ``python -m smallinit.experiments.job JOBFILE`` with its output in a log beside the job file
    (``run_dir/../jobs/NAME.json`` and ``NAME.log``: nothing is put into the run directory before the task
    creates it); ``inprocess=True`` calls :func:`~smallinit.experiments.job.run_job` in
    this process instead (tests). The estimate of time left is the planned cost of
    the remaining work scaled by (actual / planned) of the jobs finished so far, scheduled ``parallel`` at a time
    in order (:func:`~smallinit.experiments.cost.wall_seconds`), plus ``later_seconds`` (the wall-clock planned
    after this runner, scaled alike).

    ``launcher`` (a :class:`smallinit.experiments.launcher.Launcher`): the jobs to run are submitted to a cluster
    at once instead, and reported as each ends; what is skipped, resumed, retried or failed stays as here.
    """

    def __init__(
        self,
        jobs: list[Job],
        parallel: int = 1,
        *,
        inprocess: bool = False,
        retry_failed: bool = False,
        log: Callable[[str], None] | None = None,
        status_every: float = 60.0,
        title: str = "sweep",
        on_finish: Callable[[Job, JobResult], None] | None = None,
        index_offset: int = 0,
        total: int | None = None,
        later_seconds: float = 0.0,
        launcher: Any = None,
    ):
        if parallel < 1:
            raise ConfigError(f"--jobs must be >= 1, got {parallel}")
        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            raise ConfigError("two jobs share a name")
        self.jobs = jobs
        self.launcher = launcher
        self.parallel = max(1, len(jobs)) if launcher is not None else 1 if inprocess else parallel
        self.inprocess = inprocess
        self.retry_failed = retry_failed
        self.log = log or (lambda s: print(s, flush=True))
        self.status_every = status_every
        self.title = title
        self.on_finish = on_finish
        self.index_offset = index_offset  # numbering across several runners (phases): job i of total
        self.total = total
        self.later_seconds = later_seconds  # planned cost of work after this runner (for the ETA)
        self.results: dict[str, JobResult] = {}
        self._ratio_num = 0.0  # actual seconds of jobs run from scratch
        self._ratio_den = 0.0  # their planned seconds

    # -- estimates
    def _factor(self) -> float:
        return self._ratio_num / self._ratio_den if self._ratio_den > 0 else 1.0

    def _progress(self, job: Job) -> float:
        if job.total_steps <= 0:
            return 0.0
        return min(1.0, last_step(job.run_dir) / job.total_steps)

    def eta(self, pending: list[Job], running: dict[str, tuple[Job, Any, float]]) -> float:
        f = self._factor()
        if self._ratio_den == 0:  # nothing finished yet: judge the running jobs' pace (actual vs planned)
            live = []
            for j, _, t0 in running.values():
                frac = self._progress(j)
                if frac >= 0.05 and j.est_seconds > 0:
                    live.append((time.time() - t0) / frac / j.est_seconds)
            if live:
                f = sum(live) / len(live)
        started = [j.est_seconds * (1 - self._progress(j)) * f for j, _, _ in running.values()]
        return wall_seconds([j.est_seconds * f for j in pending], self.parallel, started) + self.later_seconds * f

    # -- checks
    def _check_config(self, job: Job) -> None:
        if job.expected_config is None:
            return
        try:
            existing = read_config(job.run_dir)
        except RunDirError:
            return  # no config (a new run) or an unreadable one (the task itself reports it)
        diff = config_mismatch(existing, job.expected_config)
        if diff:
            k, (a, b) = next(iter(diff.items()))
            raise RunDirError(
                f"{job.run_dir} holds a run with another config ({k}: {a!r} there, {b!r} wanted"
                f"{f'; {len(diff) - 1} more' if len(diff) > 1 else ''}); delete it or choose another --out"
            )

    # -- execution
    def _launch(self, job: Job, resume: bool):
        if self.inprocess:
            return None
        job_file = write_job_file(job, job.log_path.with_suffix(".json"))
        argv = [sys.executable, "-m", "smallinit.experiments.job", str(job_file)] + (["--resume"] if resume else [])
        logf = open(job.log_path, "ab")
        logf.write(f"\n$ {' '.join(argv[1:])}\n".encode())
        logf.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=signal_when_parent_dies if sys.platform.startswith("linux") else None,
        )
        logf.close()
        return proc

    def _run_inprocess(self, job: Job, resume: bool) -> int:
        """:func:`run_job` here, its output into the job's log; the exit status a subprocess would have given."""
        from contextlib import redirect_stderr, redirect_stdout

        from smallinit.core.errors import SmallinitError

        buf = io.StringIO()
        with redirect_stdout(buf), redirect_stderr(buf):
            try:
                run_job(job, resume)
                rc = 0
            except SmallinitError as e:
                print(f"error: {e}", file=buf)
                rc = 2
            except Exception as e:  # noqa: BLE001 - reported like a failed subprocess
                print(f"error: {type(e).__name__}: {e}", file=buf)
                rc = 1
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log_path, "a") as f:
            f.write(f"\n$ {job.task} {job.name}{' --resume' if resume else ''} (in-process)\n{buf.getvalue()}")
        return rc

    def _finish(self, job: Job, rc: int, started: float, resumed: bool) -> JobResult:
        secs = time.time() - started
        state = run_state(job.run_dir)
        if rc == 0 and state == "done":
            res = JobResult(job.name, "done", secs, resumed, rc=rc)
            if not resumed and job.est_seconds > 0:
                self._ratio_num += secs
                self._ratio_den += job.est_seconds
        elif rc is not None and (rc < 0 or rc in (130, 143)):
            res = JobResult(job.name, "interrupted", secs, resumed, rc=rc)
        elif _held_by_another(job):  # refused by the run's lock: never recorded as failed
            res = JobResult(job.name, "interrupted", secs, resumed, rc=rc)
        else:
            tail = ""
            try:
                tail = "\n".join(job.log_path.read_text(errors="replace").splitlines()[-15:])
            except OSError:
                pass
            err = next((l[len("error: ") :] for l in reversed(tail.splitlines()) if l.startswith("error: ")), None)
            atomic_write_json(
                job.run_dir / "failed.json",
                {
                    "rc": rc,
                    "error": err or f"exit status {rc}",
                    "log": str(job.log_path),
                    "log_tail": tail,
                    "time": time.time(),
                },
            )
            res = JobResult(job.name, "failed", secs, resumed, rc=rc)
        self.results[job.name] = res
        if self.on_finish:
            self.on_finish(job, res)
        return res

    def run(self) -> dict[str, JobResult]:
        n = self.total or len(self.jobs)
        index = {j.name: self.index_offset + i + 1 for i, j in enumerate(self.jobs)}
        self._by_name = {j.name: j for j in self.jobs}
        pending: list[Job] = []
        for j in self.jobs:
            self._check_config(j)
            st = run_state(j.run_dir)
            if st == "done":
                self.results[j.name] = JobResult(j.name, "done", skipped=True)
            elif st == "failed" and not self.retry_failed:
                self.results[j.name] = JobResult(j.name, "failed", skipped=True)
            else:
                if st == "failed":
                    (j.run_dir / "failed.json").unlink()
                pending.append(j)
        skipped = len(self.jobs) - len(pending)
        if skipped:
            nf = sum(1 for r in self.results.values() if r.state == "failed")
            self.log(
                f"[{self.title}] {skipped}/{len(self.jobs)} already finished ({nf} failed earlier; "
                f"{'retrying' if self.retry_failed else 'not retried'}) — skipped"
            )
        if pending and self.launcher is not None:
            self.log(f"[{self.title}] {len(pending)} to run as cluster jobs")
            return self._run_launched(pending, index, n)
        if pending:
            self.log(
                f"[{self.title}] {len(pending)} to run, {self.parallel} at a time; "
                f"planned ≈ {fmt_seconds(self.eta(pending, {}))}"
            )
        running: dict[str, tuple[Job, Any, float, bool]] = {}
        last_status = time.time()
        try:
            while pending or running:
                while pending and len(running) < self.parallel:
                    job = pending.pop(0)
                    resume = run_state(job.run_dir) == "partial" and job.resumable
                    where = f" (resuming from step {last_step(job.run_dir)})" if resume else ""
                    self.log(
                        f"[{self.title}] {index[job.name]}/{n} start {job.label or job.name}{where} · planned "
                        f"{fmt_seconds(job.est_seconds * self._factor())} · ETA "
                        f"{fmt_seconds(self.eta(pending + [job], {k: v[:3] for k, v in running.items()}))}"
                    )
                    t0 = time.time()
                    if self.inprocess:
                        self._launch(job, resume)
                        rc = self._run_inprocess(job, resume)
                        self._report(self._finish(job, rc, t0, resume), index, n, pending, running)
                    else:
                        running[job.name] = (job, self._launch(job, resume), t0, resume)
                for name in list(running):
                    job, proc, t0, resume = running[name]
                    rc = proc.poll()
                    if rc is not None:
                        del running[name]
                        self._report(self._finish(job, rc, t0, resume), index, n, pending, running)
                if running:
                    time.sleep(0.5)
                    if time.time() - last_status >= self.status_every:
                        last_status = time.time()
                        parts = [
                            f"{j.label or j.name} step {last_step(j.run_dir)}/{j.total_steps}"
                            for j, _, _, _ in running.values()
                        ]
                        done = sum(1 for r in self.results.values() if r.state == "done")
                        self.log(
                            f"[{self.title}] running: {'; '.join(parts)} · {done}/{n} done · ETA "
                            f"{fmt_seconds(self.eta(pending, {k: v[:3] for k, v in running.items()}))}"
                        )
        except BaseException:
            for job, proc, _, _ in running.values():
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            deadline = time.time() + 10
            for job, proc, _, _ in running.values():
                if proc is None:
                    continue
                try:
                    proc.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            raise
        return self.results

    def _run_launched(self, pending: list[Job], index: dict[str, int], n: int) -> dict[str, JobResult]:
        """``pending`` submitted through the launcher, each reported (and classified by :meth:`_finish`) as it ends."""
        t0 = time.time()
        resumed = {j.name: run_state(j.run_dir) == "partial" and j.resumable for j in pending}
        left = list(pending)
        for job, rc in self.launcher.run_jobs(pending, self.log):
            left.remove(job)
            self._report(self._finish(job, rc, t0, resumed[job.name]), index, n, left, {})
        return self.results

    def _report(self, res: JobResult, index, n, pending, running) -> None:
        extra = ""
        job = self._by_name[res.name]
        if res.state == "done":
            s = read_json(job.run_dir / "summary.json") or {}
            if s.get("final_val_loss") is not None:
                extra = f" · val_loss {s['final_val_loss']:.4f}"
            if s.get("heldout_acc") is not None:
                extra += f" · held-out acc {s['heldout_acc']:.3f}"
        elif res.state == "failed":
            f = read_json(job.run_dir / "failed.json") or {}
            extra = f" · {f.get('error')}"
        self.log(
            f"[{self.title}] {index[res.name]}/{n} {res.state} {job.label or job.name} in "
            f"{fmt_seconds(res.seconds)}{extra} · ETA "
            f"{fmt_seconds(self.eta(pending, {k: v[:3] for k, v in running.items()}))}"
        )


__all__ = ["JobResult", "JobRunner"]
