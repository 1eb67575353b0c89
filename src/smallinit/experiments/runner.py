"""Running jobs: sequentially or several at a time, skipping finished runs, resuming partial ones, with a
progress display (which job of how many, estimated time left). A :class:`~smallinit.experiments.job.Job` is a
library call; here it runs in a subprocess (``python -m smallinit.experiments.job``) or in this process.

One policy for every job (sweep, reproduce, crossover trunks, branches and tuning runs):

* a finished run is skipped; a partial one resumes; a run that exited with an error gets ``failed.json`` (its last
  ``error:`` line and log tail) and is not run again unless ``retry_failed``;
* a job waits for the jobs it names in ``after`` and starts as soon as they are done (no slot idles while a job
  can run); when one of them did not finish it is "blocked" (nothing written);
* an interrupted job (a signal: its run checkpointed) stops the runner: nothing more starts, the running jobs get
  SIGTERM (they checkpoint) and are waited for, and :class:`~smallinit.core.errors.Interrupted` is raised — as is
  SIGINT/SIGTERM to the runner itself; a rerun resumes every interrupted run;
* a job process dies with the runner (``--parent``: :func:`~smallinit.experiments.job.die_with_parent`), even when
  the runner is SIGKILLed: it checkpoints and exits, never an orphan; a rerun first waits for such a run's lock;
* with a ``launcher`` (``--launcher slurm``) the jobs are cluster jobs, under the same policy (the launcher only
  submits and waits); there an interrupted job stops nothing: the others are the cluster's, not this process's.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smallinit.core.errors import ConfigError, Interrupted, RunDirError
from smallinit.core.io import atomic_write_json
from smallinit.experiments.cost import fmt_seconds, wall_seconds
from smallinit.experiments.job import Job, crash_line, run_job, signal_when_parent_dies, write_job_file
from smallinit.experiments.runner_cluster import ClusterLoop
from smallinit.runs.doctor import lock_holder
from smallinit.runs.rundir import config_mismatch, last_step, read_config, read_json

STOP_SECONDS = 300.0
"""How long a stopping runner waits for its running jobs' interrupt checkpoints before it kills them."""
LOCK_WAIT_SECONDS = 60.0
"""How long a job waits for its run directory's lock held by another process (a job of a killed runner writing its
interrupt checkpoint) before it starts anyway (and is refused by the lock: "interrupted", never "failed")."""
SAME_STOP_SECONDS = 2.0


def _time(what: str, seconds: float) -> str:
    """`` · what 3m05s``, or nothing when there is no estimate (a job planned without a throughput)."""
    return f" · {what} {fmt_seconds(seconds)}" if math.isfinite(seconds) else ""


@dataclass
class JobResult:
    name: str
    state: str  # done | failed | interrupted | blocked
    seconds: float = 0.0
    resumed: bool = False
    skipped: bool = False
    rc: int | None = None
    error: str | None = None


def _log_tail(job: Job, n: int = 15) -> list[str]:
    try:
        return job.log_path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def _held_by_another(job) -> bool:
    """The job's run was refused because another process holds its lock (its log's last error says so)."""
    err = next((l for l in reversed(_log_tail(job)) if l.startswith("error: ")), "")
    return "is in use by another process" in err


class StopSignals:
    """SIGINT/SIGTERM to the runner (main thread only), noted and acted on at the loop's next turn (never raised in
    the middle of starting a process); a second signal more than :data:`SAME_STOP_SECONDS` after the first
    (Ctrl-C twice) kills the jobs instead of waiting for their checkpoints."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.again = False
        self._first = 0.0
        self._old: dict[int, Any] = {}

    def _handler(self, signum, frame) -> None:
        if self.signum is None:
            self.signum, self._first = signum, time.monotonic()
        elif time.monotonic() - self._first > SAME_STOP_SECONDS:
            self.again = True

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)


class JobRunner(ClusterLoop):
    """Run jobs sequentially or ``parallel`` at a time, skipping finished ones, resuming partial ones, with a
    progress display (which job of how many, estimated time left); the policy is the module's.

    Each job runs as ``python -m smallinit.experiments.job JOBFILE --parent=PID`` with its output in a log beside
    the job file (``run_dir/../jobs/RUN.json`` and ``RUN.log``: nothing is put into the run directory before the
    task creates it); ``inprocess=True`` calls :func:`~smallinit.experiments.job.run_job` in this process instead.
    Jobs start in their order, each as soon as a slot is free and the jobs it waits for (``after``) are done. The
    estimate of time left is the planned cost of the remaining work scaled by (actual / planned) of the jobs
    finished so far, scheduled ``parallel`` at a time in order (:func:`~smallinit.experiments.cost.wall_seconds`),
    plus ``later_seconds`` (the wall-clock planned after this runner, scaled alike); not shown while a job has no
    planned cost.

    ``launcher`` (a :class:`smallinit.experiments.launcher.Launcher`): the jobs are submitted to a cluster instead,
    each as soon as its ``after`` are done or (SLURM) in flight, and reported as each ends
    (:class:`~smallinit.experiments.runner_cluster.ClusterLoop`).
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
        stop_seconds: float = STOP_SECONDS,
    ):
        if parallel < 1:
            raise ConfigError(f"--jobs must be >= 1, got {parallel}")
        for what, key in (("a name", lambda j: j.name), ("a run directory", lambda j: j.log_path)):
            if len({key(j) for j in jobs}) != len(jobs):
                raise ConfigError(f"two jobs share {what}")
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
        self.stop_seconds = stop_seconds
        self.poll_seconds = 0.5  # how often running jobs are looked at
        self.results: dict[str, JobResult] = {}
        self._by_name = {j.name: j for j in jobs}
        self._ratio_num = 0.0  # actual seconds of jobs run from scratch
        self._ratio_den = 0.0  # their planned seconds

    # -- estimates
    def _factor(self) -> float:
        return self._ratio_num / self._ratio_den if self._ratio_den > 0 else 1.0

    def _progress(self, job: Job) -> float:
        return min(1.0, last_step(job.run_dir) / job.total_steps) if job.total_steps > 0 else 0.0

    def eta(self, pending: list[Job], running: dict[str, tuple[Job, Any, float]]) -> float:
        if any(j.est_seconds <= 0 for j in [*pending, *(v[0] for v in running.values())]):
            return math.nan  # a job without a planned cost: no estimate ("?")
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

    def _wait_for_lock(self, job: Job) -> None:
        """A run still locked by another process (a job of a killed runner writing its checkpoint): wait for it."""
        holder = lock_holder(job.run_dir)
        if holder is None:
            return
        self.log(f"[{self.title}] {job.label or job.name}: waiting for pid {holder} to release {job.run_dir}")
        deadline = time.time() + LOCK_WAIT_SECONDS
        while lock_holder(job.run_dir) is not None and time.time() < deadline:
            time.sleep(0.2)

    # -- execution
    def _launch(self, job: Job, resume: bool):
        if self.inprocess:
            return None
        self._wait_for_lock(job)
        job_file = write_job_file(job, job.log_path.with_suffix(".json"))
        argv = [sys.executable, "-m", "smallinit.experiments.job", str(job_file)] + (["--resume"] if resume else [])
        logf = open(job.log_path, "ab")
        logf.write(f"\n$ {' '.join(argv[1:])}\n".encode())
        logf.flush()
        proc = subprocess.Popen(
            [*argv, f"--parent={os.getpid()}"],  # it dies with this process (job.die_with_parent)
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
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
            except Interrupted as e:  # a SmallinitError too: the run checkpointed, it is resumed, never failed
                print(f"interrupted: {e}", file=buf)
                rc = 128 + int(e.signum)
            except SmallinitError as e:
                print(f"error: {e}", file=buf)
                rc = 2
            except Exception as e:  # noqa: BLE001 - reported like a failed subprocess: traceback, error line
                print(f"error: {crash_line(e)}", file=buf)
                rc = 1
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log_path, "a") as f:
            f.write(f"\n$ {job.task} {job.name}{' --resume' if resume else ''} (in-process)\n{buf.getvalue()}")
        return rc

    def _finish(self, job: Job, rc: int, started: float, resumed: bool) -> JobResult:
        secs = time.time() - started
        tail = _log_tail(job)
        said = next((l for l in reversed(tail) if l.startswith(("error: ", "interrupted: "))), None)
        if rc == 0 and job.state() == "done":
            res = JobResult(job.name, "done", secs, resumed, rc=rc)
            if not resumed and job.est_seconds > 0:
                self._ratio_num += secs
                self._ratio_den += job.est_seconds
        elif rc is not None and (rc < 0 or rc >= 128):
            why = said.split(": ", 1)[1] if said else f"stopped by signal {abs(rc) if rc < 0 else rc - 128}"
            res = JobResult(job.name, "interrupted", secs, resumed, rc=rc, error=why)
        elif _held_by_another(job):  # refused by the run's lock: never recorded as failed
            res = JobResult(job.name, "interrupted", secs, resumed, rc=rc, error=said and said[len("error: ") :])
        else:
            err = next((l[len("error: ") :] for l in reversed(tail) if l.startswith("error: ")), None)
            err = err or f"exit status {rc}"
            atomic_write_json(
                job.run_dir / "failed.json",
                {"rc": rc, "error": err, "log": str(job.log_path), "log_tail": "\n".join(tail), "time": time.time()},
            )
            res = JobResult(job.name, "failed", secs, resumed, rc=rc, error=err)
        self.results[job.name] = res
        if self.on_finish:
            self.on_finish(job, res)
        return res

    def _ready(self, pending: list[Job]) -> Job | None:
        """The first pending job whose dependencies (of this runner) have all ended."""
        for j in pending:
            if all(d in self.results for d in j.after if d in self._by_name):
                return j
        return None

    def _blocker(self, job: Job) -> str | None:
        """Why ``job`` cannot run: a job it waits for ended without finishing (None: none did)."""
        for d in job.after:
            r = self.results.get(d)
            if d in self._by_name and r is not None and r.state != "done":
                return f"it waits for {self._by_name[d].label or d}, which {r.state}"
        return None

    def _stop(self, running: dict[str, tuple[Job, Any, float, bool]], stop: StopSignals) -> None:
        """SIGTERM to every running job (its run checkpoints at its next step and exits), then wait for them, at
        most ``stop_seconds`` (or until a second Ctrl-C); what is left is killed."""
        live = [proc for _, proc, _, _ in running.values() if proc is not None and proc.poll() is None]
        for proc in live:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        if live:
            self.log(f"[{self.title}] stopping: waiting for {len(live)} running job(s) to write their checkpoints")
        deadline = time.time() + self.stop_seconds
        try:
            while any(p.poll() is None for p in live) and time.time() < deadline and not stop.again:
                time.sleep(0.1)
        finally:
            for proc in live:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def run(self) -> dict[str, JobResult]:
        n = self.total or len(self.jobs)
        index = {j.name: self.index_offset + i + 1 for i, j in enumerate(self.jobs)}
        pending: list[Job] = []
        for j in self.jobs:
            self._check_config(j)
            st = j.state()
            if st == "done":
                self.results[j.name] = JobResult(j.name, "done", skipped=True)
            elif st == "failed" and not self.retry_failed:
                err = (read_json(j.run_dir / "failed.json") or {}).get("error")
                self.results[j.name] = JobResult(j.name, "failed", skipped=True, error=err)
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
                f"[{self.title}] {len(pending)} to run, {self.parallel} at a time"
                + (f"; planned ≈ {fmt_seconds(eta)}" if math.isfinite(eta := self.eta(pending, {})) else "")
            )
        running: dict[str, tuple[Job, Any, float, bool]] = {}
        stop = StopSignals()
        try:
            with stop if not self.inprocess else contextlib.nullcontext():
                self._loop(pending, running, index, n, stop)
        except BaseException:
            self._stop(running, stop)
            raise
        return self.results

    def _loop(self, pending, running, index, n, stop: StopSignals) -> None:
        last_status = time.time()
        while pending or running:
            if stop.signum is not None:
                name = signal.Signals(stop.signum).name
                raise Interrupted(
                    f"{self.title} stopped by {name}; rerun the same command to resume", stop.signum, -1, None
                )
            while len(running) < self.parallel and (job := self._ready(pending)) is not None:
                pending.remove(job)
                if (blocked := self._blocker(job)) is not None:
                    self._block(job, blocked, index, n, pending, running)
                    continue
                resume = job.state() == "partial" and job.resumable
                where = f" (resuming from step {last_step(job.run_dir)})" if resume else ""
                self.log(
                    f"[{self.title}] {index[job.name]}/{n} start {job.label or job.name}{where}"
                    + _time("planned", job.est_seconds * self._factor() if job.est_seconds > 0 else math.nan)
                    + _time("ETA", self.eta(pending + [job], {k: v[:3] for k, v in running.items()}))
                )
                t0 = time.time()
                if self.inprocess:
                    rc = self._run_inprocess(job, resume)
                    self._ended(self._finish(job, rc, t0, resume), index, n, pending, running)
                else:
                    running[job.name] = (job, self._launch(job, resume), t0, resume)
            for name in list(running):
                job, proc, t0, resume = running[name]
                rc = proc.poll()
                if rc is not None:
                    del running[name]
                    self._ended(self._finish(job, rc, t0, resume), index, n, pending, running)
            if not running and pending and self._ready(pending) is None:  # never expected: a dependency cycle
                self._never_ran(pending, index, n)
            if running:
                time.sleep(self.poll_seconds)
                if time.time() - last_status >= self.status_every:
                    last_status = time.time()
                    parts = [
                        f"{j.label or j.name} step {last_step(j.run_dir)}/{j.total_steps}"
                        for j, _, _, _ in running.values()
                    ]
                    done = sum(1 for r in self.results.values() if r.state == "done")
                    self.log(
                        f"[{self.title}] running: {'; '.join(parts)} · {done}/{n} done"
                        + _time("ETA", self.eta(pending, {k: v[:3] for k, v in running.items()}))
                    )

    def _never_ran(self, pending: list[Job], index, n) -> None:
        for job in list(pending):
            pending.remove(job)
            self._block(job, "its dependencies never ran", index, n, pending, {})

    def _block(self, job: Job, why: str, index, n, pending, running) -> None:
        """Record ``job`` as blocked (it never ran: ``why``) and report it."""
        self.results[job.name] = JobResult(job.name, "blocked", error=why)
        self._report(self.results[job.name], index, n, pending, running)

    def _ended(self, res: JobResult, index, n, pending, running) -> None:
        """Report a job that ended; an interruption (not a refusal by the run's lock) stops the runner."""
        self._report(res, index, n, pending, running)
        job = self._by_name[res.name]
        if res.state == "interrupted" and res.rc is not None and (res.rc < 0 or res.rc >= 128):
            signum = -res.rc if res.rc < 0 else res.rc - 128
            raise Interrupted(
                f"{job.label or job.name} was interrupted ({res.error}); rerun the same command to resume",
                signum if signum in (signal.SIGINT, signal.SIGTERM) else signal.SIGINT,
                -1,
                None,
            )

    def _report(self, res: JobResult, index, n, pending, running) -> None:
        extra = ""
        job = self._by_name[res.name]
        if res.state == "done":
            s = read_json(job.run_dir / "summary.json") or {}
            if s.get("final_val_loss") is not None:
                extra = f" · val_loss {s['final_val_loss']:.4f}"
            if s.get("heldout_acc") is not None:
                extra += f" · held-out acc {s['heldout_acc']:.3f}"
        elif res.error:
            extra = f" · {res.error}"
        eta = self.eta(pending, {k: v[:3] for k, v in running.items()})
        self.log(
            f"[{self.title}] {index[res.name]}/{n} {res.state} {job.label or job.name} in "
            f"{fmt_seconds(res.seconds)}{extra}{_time('ETA', eta)}"
        )


__all__ = ["JobResult", "JobRunner", "StopSignals", "lock_holder", "signal_when_parent_dies"]
