"""Running a plan's jobs on a cluster through submitit: what ``--launcher slurm`` changes, and only that.

The plan, and what to do with each job, are the local path's: the one
:class:`~smallinit.experiments.runner.JobRunner` runs every :class:`~smallinit.experiments.job.Job` of ``sweep``,
``reproduce`` and ``crossover`` (crossover's :class:`~smallinit.experiments.crossover_runs.CrossoverJob` s too), and
with a :class:`Launcher` it submits them instead of starting processes. The runner decides (the same functions as
locally): a finished run is skipped, a partial one resumes, a failed one (``failed.json``) is not run again unless
``--retry-failed``, a job waits for its ``after``, a job that ended with an error gets ``failed.json`` (its ``error:``
line and log tail, written by this process from the job's log). The launcher only submits (the jobs that can start
together as one SLURM job array) and waits. A submitted job calls the library function the local runner's worker calls
(:func:`smallinit.experiments.job.main` on the job's file, through :func:`~.cluster_jobs.run_job_file`), never the
command line; its job fails when its run did not finish.

* Order: a crossover branch waits for its trunk (``--dependency=afterok:TRUNK`` while the trunk is in flight; with
  submitit's LocalExecutor, which has no dependencies, the branch is submitted when its trunk is done); a branch of a
  trunk that did not finish is "blocked" (its queued job cancelled). The phases (tuning runs, the runs, reproduce's
  extra seeds, its analysis) follow one another as locally: this process waits.
* Rerunning the same command skips finished runs, resumes interrupted ones from their checkpoints, leaves failed ones
  alone unless ``--retry-failed`` (as locally), and waits for jobs of an earlier submission still pending or running
  instead of submitting them twice.
* Time limits: a job gets SIGTERM :data:`STOP_SECONDS` before its limit, its run checkpoints and stops, and (SLURM)
  it is submitted again at once to resume there — while each job moves its run on and none was cancelled (scancel).
  A run stopped otherwise (killed, cancelled) is "interrupted" and a rerun resumes it; unlike locally, the other jobs
  in flight go on (they are the cluster's, not this process's children).

``OUT/cluster/jobs.json`` lists every submission (run folder, job id; written beside and renamed); submitit's
scripts, pickles and each job's output are in ``OUT/cluster/logs/``; each run's own log is where the local runner
keeps it (``RUN/../jobs/RUN.log``). ``smallinit status OUT`` reads them (:mod:`smallinit.experiments.cluster_status`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, RunDirError
from smallinit.core.io import atomic_write_json
from smallinit.experiments.cluster_jobs import Submitted, checkpoint_step, exit_status_of, last_line, run_job_file
from smallinit.experiments.cluster_status import ACTIVE, CLUSTER_DIR, latest_jobs, local_alive, read_jobs, sacct_states

EXECUTORS = ("slurm", "local")
STOP_SECONDS = 300
"""``#SBATCH --signal=TERM@300``: a run gets SIGTERM 5 minutes before its job's time limit, writes its checkpoint
and stops (time for a 1.5B model's optimizer state on a shared filesystem)."""
DEFAULT_MINUTES = 24 * 60
OWN_SBATCH = {
    "partition": "--partition",
    "time": "--time",
    "account": "--account",
    "qos": "--qos",
    "cpus-per-task": "--cpus-per-job",
    "gpus-per-node": "--gpus-per-job",
    "job-name": "",
    "array": "",
    "dependency": "",
    "output": "",
    "error": "",
    "signal": "",
    "open-mode": "",
}
"""``#SBATCH`` keys the launcher writes itself: given to ``--sbatch`` they are refused (naming the option to use)."""
HEARTBEAT_SECONDS = 1800


@dataclass
class ClusterOptions:
    """How each job is submitted: the ``--launcher slurm`` options of ``reproduce``, ``crossover`` and ``sweep``."""

    executor: str = "slurm"
    """``slurm`` (sbatch job arrays), or ``local``: submitit's LocalExecutor (real processes on this machine, all at
    once, no dependencies; for tests)."""
    partition: str | None = None
    time: int = DEFAULT_MINUTES
    """Time limit of each job in minutes; a run that needs longer stops at a checkpoint (rerun to continue)."""
    gpus_per_job: int = 0
    cpus_per_job: int | None = None
    """CPU cores per job (``--cpus-per-task``), also each run's torch threads; None: the partition's default."""
    account: str | None = None
    qos: str | None = None
    sbatch: dict[str, Any] = field(default_factory=dict)
    """Further ``#SBATCH --KEY=VALUE`` lines (True: ``--KEY`` alone), e.g. {"constraint": "h100"}."""
    max_running: int | None = None
    """At most this many jobs of one array run at a time (``--array=…%N``; ``--jobs``); None: no limit of ours."""
    poll_seconds: float | None = None
    """How often this process looks at its jobs (None: every 30 s on SLURM, 0.5 s locally)."""

    def validate(self) -> None:
        """ConfigError naming the first bad value."""
        if self.executor not in EXECUTORS:
            raise ConfigError(f"the executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        for flag, v, low in (
            ("--time", self.time, 1),
            ("--gpus-per-job", self.gpus_per_job, 0),
            ("--cpus-per-job", self.cpus_per_job, 1),
            ("--jobs", self.max_running, 1),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
                what = "minutes" if flag == "--time" else "a count"
                raise ConfigError(f"{flag} must be a whole number ({what}) >= {low}, got {v!r}")
        for flag, v in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos)):
            if v is not None and not re.fullmatch(r"[\w.,:+-]+", v):
                raise ConfigError(f"{flag}: {v!r} is not a SLURM name")
        for k, v in self.sbatch.items():
            check_sbatch_key(k)
            if v is not True and "\n" in str(v):
                raise ConfigError(f"--sbatch {k}: a value on one line, got {v!r}")


def check_sbatch_key(key: str) -> None:
    """ConfigError when ``key`` is not an sbatch option name or is one the launcher writes itself."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
        raise ConfigError(f"--sbatch: {key!r} is not an sbatch option name (write e.g. constraint=h100 or mem=200G)")
    if key in OWN_SBATCH:
        use = OWN_SBATCH[key]
        raise ConfigError(f"--sbatch {key}: " + (f"use {use}" if use else "the launcher sets it for each job"))


def parse_sbatch(items: list[str]) -> dict[str, Any]:
    """``["constraint=h100", "--mem=200G", "exclusive"]`` → {"constraint": "h100", "mem": "200G", "exclusive": True}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if sep and not value.strip():
            raise ConfigError(f"--sbatch {item!r}: no value after '=' (write KEY=VALUE, or KEY alone for a flag)")
        check_sbatch_key(key)
        out[key] = value.strip() if sep else True
    return out


def check_available(executor: str = "slurm") -> None:
    """ConfigError naming what this machine lacks to submit: the submitit package, or (SLURM) sbatch/srun."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--launcher slurm needs the submitit package, which is not installed: "
            "pip install 'smallinit[slurm]' (or pip install submitit)"
        ) from None
    missing = [c for c in ("sbatch", "srun") if executor == "slurm" and shutil.which(c) is None]
    if missing:
        raise ConfigError(
            f"--launcher slurm: {' and '.join(missing)} not found on PATH; run this where SLURM jobs are "
            "submitted (a login node)"
        )


Item = tuple[str, Any, Callable[..., Any], tuple]
"""One submission: (key in jobs.json, the run folder or None, the function, its arguments)."""


class Launcher:
    """Submits jobs with ``options`` and waits for them, recording each submission in ``OUT/cluster/jobs.json``: the
    backend of a :class:`~smallinit.experiments.runner.JobRunner` made with ``launcher=`` (:meth:`submit_jobs`,
    :meth:`wait`, :meth:`exit_status`, :meth:`again`, :meth:`cancel`), and :meth:`call` for one function (reproduce's
    analysis). Checks the options and this machine when made, before any work."""

    def __init__(self, options: ClusterOptions, out: str | os.PathLike, log: Callable[[str], None] | None = None):
        options.validate()
        check_available(options.executor)
        self.options = options
        self.out = Path(out)
        self.log = log or (lambda s: print(s, flush=True))
        self.slurm = options.executor == "slurm"
        """SLURM: a job may be queued behind one in flight, and a run stopped by its time limit is submitted again;
        the LocalExecutor has neither (a branch is submitted when its trunk is done; a killed run waits for a rerun)."""
        self.poll = options.poll_seconds if options.poll_seconds is not None else (30.0 if self.slurm else 0.5)
        self._over: set[str] = set()
        """Job ids this process saw end or cancelled (sacct may lag): never waited for again."""

    @property
    def folder(self) -> Path:
        """submitit's folder: the sbatch scripts, the pickled calls and results, each job's output."""
        return self.out / CLUSTER_DIR / "logs"

    def key(self, run_dir: Path) -> str:
        return os.path.relpath(run_dir, self.out)

    # -- submitting
    def _executor(self, what: str, dependency: str | None):
        import submitit

        o = self.options
        if not self.slurm:
            ex = submitit.LocalExecutor(folder=self.folder)
            ex.update_parameters(timeout_min=o.time, gpus_per_node=o.gpus_per_job)
            return ex
        ex = submitit.SlurmExecutor(folder=self.folder)
        extra = {"signal": f"TERM@{STOP_SECONDS}", **o.sbatch}
        if dependency:
            extra["kill-on-invalid-dep"] = "yes"  # a trunk that did not finish: its branches leave the queue
        params: dict[str, Any] = {
            "job_name": f"smallinit-{what}",
            "time": o.time,
            "stderr_to_stdout": True,
            "additional_parameters": extra,
            "partition": o.partition,
            "account": o.account,
            "qos": o.qos,
            "dependency": dependency,
            "cpus_per_task": o.cpus_per_job,
            "gpus_per_node": o.gpus_per_job or None,
            "array_parallelism": o.max_running,
            "setup": [f"export OMP_NUM_THREADS={o.cpus_per_job}"] if o.cpus_per_job else None,
        }
        ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
        return ex

    def _attach(self, record: dict[str, Any]) -> Submitted:
        """A job of an earlier submission, still pending or running, as if submitted now."""
        if record["executor"] == "local":
            from submitit.local.local import LocalJob as JobClass
        else:
            from submitit.slurm.slurm import SlurmJob as JobClass
        run = self.out / record["run"] if record.get("run") else None
        return Submitted(record, JobClass(folder=self.folder, job_id=str(record["job_id"])), checkpoint_step(run))

    def _alive(self, records: list[dict[str, Any]]) -> set[str]:
        """The job ids among ``records`` (of this executor, not seen over here) that have not ended."""
        mine = [
            str(r["job_id"])
            for r in records
            if r.get("executor") == self.options.executor and str(r["job_id"]) not in self._over
        ]
        if not self.slurm:
            return {j for j in mine if local_alive(j)}
        return {j for j, s in sacct_states(mine).items() if s in ACTIVE}

    def submit(
        self, items: list[Item], what: str, dependency: str | None = None, log: Callable[[str], None] | None = None
    ) -> list[Submitted]:
        """Submit ``items`` as one job array (``dependency``: e.g. "afterok:123_0") and record them; an item whose last
        submission is still pending or running is waited for instead. Returns one :class:`Submitted` per item."""
        log = log or self.log
        records = read_jobs(self.out)
        latest = latest_jobs(records)
        alive = self._alive([latest[k] for k, *_ in items if k in latest])
        out = {k: self._attach(latest[k]) for k, *_ in items if k in latest and str(latest[k]["job_id"]) in alive}
        if out:
            log(
                f"[cluster] {len(out)} {what} job(s) of an earlier submission still pending or running: waiting for "
                "them"
            )
        new = [it for it in items if it[0] not in out]
        if new:
            self.folder.mkdir(parents=True, exist_ok=True)
            ex = self._executor(what, dependency)
            steps = [checkpoint_step(run) for _, run, _, _ in new]
            try:
                with ex.batch():
                    jobs = [ex.submit(fn, *args) for _, _, fn, args in new]
            except Exception as e:  # noqa: BLE001 - sbatch's refusal (a bad partition, time or option) as one line
                raise RunDirError(
                    f"the cluster refused the {what} jobs: {last_line(str(e)) or type(e).__name__}"
                ) from None
            now = time.time()
            fresh = [
                {
                    "key": k,
                    "run": self.key(run) if run is not None else None,
                    "what": what,
                    "job_id": str(j.job_id),
                    "executor": self.options.executor,
                    "dependency": dependency,
                    "submitted": now,
                }
                for (k, run, _, _), j in zip(new, jobs)
            ]
            atomic_write_json(self.out / CLUSTER_DIR / "jobs.json", {"jobs": records + fresh})
            for r, j, step in zip(fresh, jobs, steps):
                out[r["key"]] = Submitted(r, j, step)
            log(
                f"[cluster] submitted {len(new)} {what} job(s) as {fresh[0]['job_id'].split('_')[0]}"
                f"{' (array)' if len(new) > 1 else ''}{f' after {dependency[8:]}' if dependency else ''}"
            )
        return [out[k] for k, *_ in items]

    def cancel(self, s: Submitted) -> None:
        self._over.add(s.job_id)
        s.cancel()

    def wait(self, flying: list[Submitted], log: Callable[[str], None] | None = None) -> list[Submitted]:
        """Block until at least one of ``flying`` has ended; those that have. Ctrl-C stops waiting, not the jobs."""
        log = log or self.log
        last = time.time()
        try:
            while True:
                ended = [s for s in flying if s.done()]
                if ended:
                    self._over.update(s.job_id for s in ended)
                    return ended
                if time.time() - last > HEARTBEAT_SECONDS:
                    last = time.time()
                    log(f"[cluster] {len(flying)} job(s) in flight (smallinit status {self.out} shows each)")
                time.sleep(self.poll)
        except KeyboardInterrupt:
            log(
                f"[cluster] stopped waiting; the {len(flying)} job(s) in flight go on: rerun the same command to wait "
                "for them and continue"
            )
            raise

    def again(self, s: Submitted, run_dir: Path, log: Callable[[str], None]) -> bool:
        """Whether a run whose job ended before the run did is submitted again at once (SLURM): when the job was not
        cancelled (scancel) and the run checkpointed past where it started (a time limit, a preemption)."""
        if not self.slurm or s.state() == "CANCELLED" or checkpoint_step(run_dir) <= s.start_step:
            return False
        log(
            f"[cluster] {self.key(run_dir)} stopped at step {checkpoint_step(run_dir)} before its end (job {s.job_id}):"
            " submitted again, it resumes there"
        )
        return True

    def _threads(self, config: Any) -> None:
        """A run's torch threads = --cpus-per-job when given (else as planned)."""
        if self.options.cpus_per_job:
            getattr(config, "train", config).threads = self.options.cpus_per_job

    # -- the two kinds of work
    def submit_jobs(
        self, jobs: list[Any], dependency: str | None = None, log: Callable[[str], None] | None = None
    ) -> list[Submitted]:
        """Submit :class:`~smallinit.experiments.job.Job` s as one array (``dependency``: e.g. "afterok:12_0:12_1"),
        each running :func:`run_job_file` on its job file; one :class:`Submitted` per job. Which jobs, when, and what
        their endings mean is :class:`~smallinit.experiments.runner.JobRunner`'s."""
        from smallinit.experiments.job import write_job_file

        items: list[Item] = []
        for j in jobs:
            self._threads(j.config)
            f = write_job_file(j, j.log_path.with_suffix(".json"))
            items.append((self.key(j.run_dir), j.run_dir, run_job_file, (str(f), str(j.log_path))))
        what = "+".join(sorted({getattr(j, "kind", j.task) for j in jobs}))  # a crossover's: trunk, branch, tune
        return self.submit(items, what, dependency, log) if jobs else []

    def exit_status(self, s: Submitted, job: Any) -> int:
        """The exit status of ``job``'s ended job ``s``, as the local runner's subprocess would give it: main's (0
        done, 2 error, 128 + the signal when stopped); 1 for a crash outside it; −9 (interrupted: a rerun resumes it)
        for a job that ended without a result — killed, cancelled, out of time. What went wrong outside main is
        appended to the job's log as its ``error:`` line (the runner keeps it in ``failed.json``)."""
        kind, value = s.outcome()
        if kind == "result":
            return int(value)
        rc = exit_status_of(value) if kind == "error" else None
        if rc is not None:
            return rc
        why = last_line(value) if kind == "error" else f"its job {s.job_id} ended without a result ({value})"
        with open(job.log_path, "a") as f:
            f.write(f"error: {why}; the job's output: {s.output}\n")
        return 1 if kind == "error" or value == "FAILED" else -9

    def call(self, fn: Callable[..., Any], *args: Any, name: str, log: Callable[[str], None] | None = None) -> Any:
        """``fn(*args)`` as one job (reproduce's analysis, which loads models: it runs where the runs ran); what it
        returns, or RunDirError with the job's last error line and where its output is."""
        (s,) = self.submit([(name, None, fn, args)], name, log=log)
        self.wait([s], log)
        kind, value = s.outcome()
        if kind == "result":
            return value
        why = last_line(value) if kind == "error" else f"it ended without a result ({value})"
        raise RunDirError(f"the {name} job {s.job_id} failed: {why}; its output: {s.output}")


__all__ = ["ClusterOptions", "DEFAULT_MINUTES", "Launcher", "STOP_SECONDS", "check_available", "parse_sbatch"]
