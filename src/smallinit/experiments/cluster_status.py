"""What each job of a cluster run (``--launcher slurm``) is doing: pending, running, done or failed.

Read from ``OUT/cluster/jobs.json`` (every submission, written by :mod:`smallinit.experiments.launcher`; the last one
of each run counts): SLURM's own state (``sacct``) while a job is queued or running, or whether a LocalExecutor job's
process is alive; once a job has ended — or where neither can be asked (a machine without SLURM) — the run folder's
own state: done when its summary says so, failed when its job ended without finishing it (a rerun resumes it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.core.errors import RunDirError

CLUSTER_DIR = "cluster"
"""``OUT/cluster/``: ``jobs.json`` and submitit's folder ``logs/`` (scripts, pickles, each job's output)."""
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED")
ACTIVE = (*WAITING, "RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT")
"""SLURM states of a job that has not ended (the first ones: not started)."""
STATES = ("pending", "running", "done", "failed")


def read_jobs(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every submission recorded in ``OUT/cluster/jobs.json``, oldest first ([] when there is none): its ``key`` (the
    run folder relative to OUT, or "analysis"), ``run``, ``what``, ``job_id``, ``executor``, ``dependency``.
    RunDirError naming the file when it exists but is not such a record (not UTF-8 JSON, ``"jobs"`` not a list, an
    entry without its ``key`` or ``job_id``): status would misreport it and a new submission would overwrite it."""
    path = Path(out) / CLUSTER_DIR / "jobs.json"
    if not path.is_file():
        return []
    try:
        d = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise RunDirError(f"{path}: not UTF-8 text (damaged?); the record of the cluster jobs cannot be read") from None
    except ValueError as e:
        raise RunDirError(f"{path}: not valid JSON ({e}); the record of the cluster jobs cannot be read") from None
    except OSError as e:
        raise RunDirError(f"{path}: unreadable ({e.strerror or e})") from None
    jobs = d.get("jobs") if isinstance(d, dict) else None
    if not isinstance(jobs, list):
        raise RunDirError(
            f'{path}: "jobs" must be a list of submissions, got {type(jobs).__name__} (edited or damaged?)'
        )
    for i, r in enumerate(jobs, 1):
        if not isinstance(r, dict) or not isinstance(r.get("key"), str) or r.get("job_id") in (None, ""):
            raise RunDirError(
                f"{path}: submission {i} has no key or job_id (edited or damaged?); status cannot read it"
            )
    return jobs


def latest_jobs(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{key: its last submission, with ``attempts``: how many there were}, in first-submitted order."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        n = out[r["key"]]["attempts"] + 1 if r["key"] in out else 1
        out[r["key"]] = {**r, "attempts": n}
    return out


def sacct_states(job_ids: list[str]) -> dict[str, str]:
    """{job id: SLURM state} from one ``sacct`` call; {} where sacct is missing or fails (no accounting here)."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    from submitit.slurm.slurm import SlurmInfoWatcher

    cmd = ["sacct", "-o", "JobID,State", "--parsable2"]
    for main_id in sorted({j.split("_")[0] for j in job_ids}):
        cmd += ["-j", main_id]
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    info = SlurmInfoWatcher().read_info(text)
    return {j: ((info[j].get("State") or "UNKNOWN").split() or ["UNKNOWN"])[0] for j in job_ids if j in info}


def local_alive(job_id: str) -> bool:
    """Whether a LocalExecutor job (its id: the pid of submitit's controller process) still runs on this machine."""
    try:
        return b"submitit" in Path(f"/proc/{int(job_id)}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False


@dataclass
class JobStatus:
    """One job's line: what it runs (a run folder relative to OUT, or "analysis"), its last job id, its state (one of
    :data:`STATES`), a few words on why, and how many times it was submitted."""

    key: str
    job_id: str
    state: str
    detail: str = ""
    attempts: int = 1


def _progress(run: Path) -> str:
    from smallinit.runs.rundir import last_step, read_config

    try:
        total = int((read_config(run) or {}).get("train", {}).get("max_steps", 0))
    except Exception:  # noqa: BLE001 - no config yet (a new run) or an unreadable one
        total = 0
    step = last_step(run)
    return f"step {step}/{total}" if total else f"step {step}"


def _status(r: dict[str, Any], out: Path, live: str | None) -> JobStatus:
    """One job; ``live``: its SLURM state (RUNNING or ENDED for a local job), None where nobody can say."""
    from submitit.core.utils import JobPaths, pickle_load

    from smallinit.runs.rundir import read_json, run_state

    s = JobStatus(r["key"], str(r["job_id"]), "pending", attempts=r.get("attempts", 1))
    run = out / r["run"] if r.get("run") else None
    if live in WAITING:
        s.detail = live.lower()
        return s
    if live in ACTIVE:
        s.state, s.detail = "running", _progress(run) if run else ""
        return s
    paths = JobPaths(out / CLUSTER_DIR / "logs", job_id=s.job_id, task_id=0)
    ended = live is not None or paths.result_pickle.exists()
    if run is None:  # the analysis: its result says
        if paths.result_pickle.exists():
            ok = pickle_load(paths.result_pickle)[0] == "success"
            s.state, s.detail = ("done", "") if ok else ("failed", f"its output: {paths.stdout}")
        elif ended:
            s.state, s.detail = "failed", f"ended without a result ({live})"
        return s
    state = run_state(run)
    if state == "done":
        s.state = "done"
    elif state == "failed":
        s.state, s.detail = "failed", str((read_json(run / "failed.json") or {}).get("error", ""))[:120]
    elif ended:
        why = "" if live in (None, "COMPLETED", "FAILED", "ENDED") else f"{live}; "  # FAILED: RunNotFinished
        s.state, s.detail = "failed", f"{why}stopped at {_progress(run)} (rerun the command to resume)"
    elif state == "partial":  # nothing to ask: judged from the run folder
        s.state, s.detail = "running", _progress(run)
    return s


def job_states(out: str | os.PathLike) -> tuple[list[JobStatus], str]:
    """(one :class:`JobStatus` per job of ``out``'s cluster run, in submission order; where the states come from).
    RunDirError when ``out`` is not a folder, has no recorded cluster jobs or an unreadable record of them."""
    out = Path(out)
    if not out.is_dir():
        raise RunDirError(f"{out}: no such folder" if not out.exists() else f"{out}: not a folder")
    latest = latest_jobs(read_jobs(out))
    if not latest:
        raise RunDirError(
            f"{out} has no cluster jobs ({out / CLUSTER_DIR / 'jobs.json'} is missing): status shows the "
            "jobs of reproduce, crossover and sweep run with --launcher slurm"
        )
    slurm = [str(r["job_id"]) for r in latest.values() if r.get("executor") == "slurm"]
    live = sacct_states(slurm)
    source = "sacct" if live else "the run folders (no sacct here)" if slurm else "the processes here"
    for r in latest.values():
        if r.get("executor") == "local":
            live[str(r["job_id"])] = "RUNNING" if local_alive(str(r["job_id"])) else "ENDED"
    return [_status(r, out, live.get(str(r["job_id"]))) for r in latest.values()], source


def format_status(out: str | os.PathLike, statuses: list[JobStatus], source: str) -> str:
    """The table ``smallinit status`` prints: one line per job, then the count of each state."""
    w = max([len(s.job_id) for s in statuses] + [6])
    lines = [f"{len(statuses)} job(s) of {out} (states from {source}):", f"  {'job':<{w}}  {'state':<8} run"]
    for s in statuses:
        again = f" [{s.attempts} submissions]" if s.attempts > 1 else ""
        lines.append(f"  {s.job_id:<{w}}  {s.state:<8} {s.key}{again}{f'  ({s.detail})' if s.detail else ''}")
    lines.append(" · ".join(f"{sum(s.state == x for s in statuses)} {x}" for x in STATES))
    return "\n".join(lines)


__all__ = [
    "ACTIVE",
    "CLUSTER_DIR",
    "JobStatus",
    "STATES",
    "WAITING",
    "format_status",
    "job_states",
    "latest_jobs",
    "local_alive",
    "read_jobs",
    "sacct_states",
]
