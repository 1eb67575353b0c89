"""One job engine (issue 33, point 2): crossover trunks, branches and tuning runs are jobs of the JobRunner — a branch
starts as soon as its own trunk is done, failures get failed.json, an interruption stops the batch — and no worker
outlives the process that started it: SIGINT, SIGTERM or SIGKILL to a crossover leaves no process behind, and the
same command resumes and completes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_overrides

# ---- the scheduler: dependencies, blocked jobs, failures, interruptions (fake processes, no training) -------------


class FakeProc:
    """A job process that ends after ``polls`` looks (0: done, writing its summary; else its exit status)."""

    def __init__(self, job, polls: int, rc: int = 0):
        self.job, self.polls, self.rc, self.signals = job, polls, rc, []

    def poll(self):
        if self.signals:
            return 128 + self.signals[0]
        self.polls -= 1
        if self.polls > 0:
            return None
        if self.rc == 0:
            self.job.run_dir.mkdir(parents=True, exist_ok=True)
            (self.job.run_dir / "summary.json").write_text(json.dumps({"completed": True, "step": 10**9}))
        return self.rc

    def send_signal(self, sig):
        self.signals.append(int(sig))

    def kill(self):
        self.signals.append(int(signal.SIGKILL))

    def wait(self, timeout=None):
        return self.poll()


def _jobs(tmp_path):
    from smallinit.config import RunConfig
    from smallinit.experiments.crossover_runs import crossover_job

    def job(kind, arm, name, trunk=None):
        return crossover_job(
            kind, arm, 0, tmp_path / "runs" / arm / "seed0" / name, RunConfig(), trunk, 1 if trunk else 0
        )

    tA, tB = job("trunk", "a", "trunk"), job("trunk", "b", "trunk")
    return tA, tB, job("branch", "a", "D1", tA), job("branch", "b", "D1", tB), job("branch", "b", "D2", tB)


def _runner(jobs, durations, rcs=None, parallel=2):
    from smallinit.experiments.runner import JobRunner

    started: list[str] = []
    logs: list[str] = []
    r = JobRunner(jobs, parallel, log=logs.append, title="crossover")
    r.poll_seconds = 0.0

    def launch(job, resume):
        started.append(job.name)
        return FakeProc(job, durations[job.name], (rcs or {}).get(job.name, 0))

    r._launch = launch
    return r, started, logs


def test_a_branch_starts_when_its_own_trunk_is_done_while_the_other_trunk_trains(tmp_path):
    """Two slots, trunk a long and trunk b short: b's branches take the free slot at once (never idle while a's
    branch waits), a's branch starts when a is done; every job ends done."""
    tA, tB, bA, bB1, bB2 = jobs = _jobs(tmp_path)
    r, started, _ = _runner(jobs, {tA.name: 8, tB.name: 2, bA.name: 1, bB1.name: 2, bB2.name: 2})
    res = r.run()
    assert started[:2] == [tA.name, tB.name]
    assert started.index(bB1.name) < started.index(bA.name)  # b's branch did not wait for trunk a
    assert started.index(bB2.name) < started.index(bA.name)
    assert all(x.state == "done" for x in res.values())
    assert bA.after == (tA.name,) and bA.name == "a/seed0/D1" and bA.log_path == tA.run_dir.parent / "jobs" / "D1.log"


def test_a_failed_trunk_blocks_its_branches_only_and_gets_failed_json(tmp_path):
    tA, tB, bA, bB1, bB2 = jobs = _jobs(tmp_path)
    r, started, logs = _runner(jobs, {j.name: 1 for j in jobs}, rcs={tA.name: 2})
    tA.log_path.parent.mkdir(parents=True)
    tA.log_path.write_text("error: the data folder is gone\n")
    res = r.run()
    assert bA.name not in started and res[bA.name].state == "blocked" and "a seed 0 trunk" in res[bA.name].error
    assert res[bB1.name].state == res[bB2.name].state == "done"
    failed = json.loads((tA.run_dir / "failed.json").read_text())
    assert failed["error"] == "the data folder is gone" and failed["rc"] == 2
    assert any(" blocked a seed 0 D1 " in line for line in logs)
    assert not bA.run_dir.exists()  # a blocked job writes nothing


def test_an_interrupted_job_stops_the_runner_and_sigterms_the_running_ones(tmp_path):
    from smallinit.core.errors import Interrupted

    tA, tB, bA, bB1, bB2 = jobs = _jobs(tmp_path)
    r, started, _ = _runner(jobs, {tA.name: 50, tB.name: 1, bA.name: 1, bB1.name: 1, bB2.name: 1}, {tB.name: 143})
    procs = {}
    launch = r._launch
    r._launch = lambda job, resume: procs.setdefault(job.name, launch(job, resume))
    with pytest.raises(Interrupted, match="rerun the same command to resume") as e:
        r.run()
    assert e.value.signum == signal.SIGTERM
    assert started == [tA.name, tB.name]  # nothing started after the interruption
    assert procs[tA.name].signals == [signal.SIGTERM]  # the running trunk was asked to checkpoint, then waited for
    assert not (tB.run_dir / "failed.json").exists()


def test_a_job_file_carries_the_branch_and_the_typed_config(tmp_path):
    from smallinit.config import RunConfig
    from smallinit.experiments.job import read_job_file, write_job_file

    *_, bB2 = _jobs(tmp_path)
    bB2.config.optim.lr = 0.0123
    back = read_job_file(write_job_file(bB2, tmp_path / "j.json"))
    assert isinstance(back.config, RunConfig) and back.config.optim.lr == 0.0123
    assert back.branch_from == bB2.branch_from and back.task == "train" and back.run_dir == bB2.run_dir
    old = json.loads((tmp_path / "j.json").read_text())
    del old["branch_from"]  # a job file written before branches were jobs
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_job_file(tmp_path / "old.json").branch_from is None


def test_a_job_whose_parent_is_already_gone_stops_itself(tmp_path):
    """The portable fallback of PR_SET_PDEATHSIG: a job process told its parent is a pid that is not its parent (the
    parent died before the job could ask) signals itself at once."""
    code = (
        "import time\n"
        "from smallinit.experiments.job import die_with_parent\n"
        "die_with_parent(1 << 22, every=0.05)\n"
        "time.sleep(60)\n"
    )
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", code], timeout=120)
    assert p.returncode == -signal.SIGTERM and time.time() - t0 < 60


# ---- the process tree of a real crossover ----------------------------------------------------------------------

ARMS = ["base:model.gamma=0.5", "small:model.gamma=1.0"]
TOKENS = 4 * 32 * 400  # trunks of 320 steps: still training when the signal comes


def _command(token_dir: Path, out: Path) -> list[str]:
    big = {"train.eval_every": 10_000, "train.ckpt_every": 10_000, "train.log_every": 10, "train.compile": "false"}
    over = [o for o in tiny_overrides(token_dir, **big) if not o.startswith("train.max_steps=")]  # the crossover's
    sets = [x for o in over for x in ("--set", o)]
    return [sys.executable, "-m", "smallinit", "crossover", *ARMS, "--config", "tiny", *sets, "--tokens", str(TOKENS),
            "--budgets", "1/2,1", "--jobs", "2", "--out", str(out)]  # fmt: skip


def _table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process, from /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            out[int(d.name)] = (int(fields[1]), fields[0])
    return out


def _descendants(pid: int) -> set[int]:
    table, found, frontier = _table(), set(), {pid}
    while frontier:
        frontier = {p for p, (pp, _) in table.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited (its parent has not reaped it yet)


def _workers(pid: int) -> set[int]:
    def is_job(p: int) -> bool:
        try:
            return b"smallinit.experiments.job" in Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            return False

    return {p for p in _descendants(pid) if is_job(p)}


def _wait(cond, seconds: float, what: str):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")


@pytest.mark.slow  # a real crossover, stopped (and rerun): ≈ 25 s per signal on an idle 2-core machine
@pytest.mark.timeout(900)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=["TERM", "KILL", "INT"])
def test_a_stopped_crossover_leaves_no_worker_and_the_same_command_completes_it(token_dir, tmp_path, sig):
    from smallinit.runs.checkpoint import list_checkpoints
    from smallinit.runs.rundir import last_step, run_state

    out = tmp_path / "x"
    trunks = [out / "runs" / arm.split(":")[0] / "seed0" / "trunk" for arm in ARMS]
    log = open(tmp_path / "first.log", "wb")
    proc = subprocess.Popen(
        _command(token_dir, out), stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )
    workers: set[int] = set()
    try:
        _wait(lambda: len(_workers(proc.pid)) == 2 or proc.poll() is not None, 240, "two workers")
        workers = _workers(proc.pid)
        assert len(workers) == 2, (tmp_path / "first.log").read_text()
        _wait(lambda: all(last_step(t) >= 10 for t in trunks), 240, "both trunks to train")  # handlers installed
        os.kill(proc.pid, sig)
        _wait(lambda: not any(_alive(p) for p in workers), 120, "no worker left")
        rc = proc.wait(timeout=120)
    finally:
        log.close()
        for p in [proc.pid, *workers]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)  # never leave a process behind, whatever failed above
        proc.wait()
    text = (tmp_path / "first.log").read_text()
    assert rc == (-signal.SIGKILL if sig == signal.SIGKILL else 128 + sig), text
    for t in trunks:  # each worker checkpointed on its way out (SIGTERM from the runner, or from its dead parent)
        assert run_state(t) == "partial" and list_checkpoints(t), (t, text)
        assert "interrupted: interrupted by SIGTERM" in (t.parent / "jobs" / "trunk.log").read_text()
    if sig == signal.SIGINT:
        return  # the runner treats it as SIGTERM (above); the rerun is the same as after SIGTERM
    again = subprocess.run(_command(token_dir, out), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sum("(resuming from step" in line and " trunk " in line for line in again.stderr.splitlines()) == 2
    result = json.loads((out / "crossover.json").read_text())
    assert all(math.isfinite(v) for arm in result["losses"].values() for row in arm.values() for v in row)
    assert not list(out.glob("runs/*/*/*/failed.json"))
