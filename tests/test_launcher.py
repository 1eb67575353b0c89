"""The cluster launcher (issue 32, item 1): a plan's jobs through submitit — its LocalExecutor (real processes) for
runs, a fake ``sbatch`` on PATH for the SLURM scripts — with the local path's numbers, skip and resume rules, and
``smallinit status``; and the one job runner's policy on a cluster (issue 33, item 2: a fake launcher behind the
JobRunner): failed.json, no resubmission without retry_failed, a branch queued behind its trunk."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import tiny_overrides

from smallinit.cli import main as cli

ARMS = {"base": ["model.gamma=0.5"], "small": ["model.gamma=1.0"]}
TOKENS = 4 * 32 * 40  # budgets 10, 20, 40 steps of 4 × 32 tokens


def _overrides(token_dir: Path) -> list[str]:
    return tiny_overrides(token_dir, **{"train.eval_every": 1000, "train.ckpt_every": 1000})


def _spec(token_dir: Path):
    from smallinit.experiments.crossover import CrossoverSpec

    return CrossoverSpec(
        arms=dict(ARMS),
        baseline="base",
        tokens=TOKENS,
        base="tiny",
        overrides=_overrides(token_dir),
        seeds=[0],
        fractions=[0.25, 0.5, 1.0],
    )


def _local_launcher(out: Path, log=None):
    from smallinit.experiments.launcher import ClusterOptions, Launcher

    return Launcher(ClusterOptions(executor="local", poll_seconds=0.2), out, log=log or (lambda s: None))


@pytest.fixture(scope="module")
def both(token_dir, tmp_path_factory):
    """The same crossover (2 arms × 3 budgets) by the local runner, in this process, and through submitit's
    LocalExecutor, one process per run: (local result, cluster result, the cluster OUT, its log lines)."""
    from smallinit.experiments.crossover import run_crossover

    root = tmp_path_factory.mktemp("launcher")
    here = run_crossover(_spec(token_dir), root / "here", log=lambda s: None, n_boot=20)
    out, logs = root / "cluster", []
    there = run_crossover(_spec(token_dir), out, log=logs.append, n_boot=20, launcher=_local_launcher(out, logs.append))
    return here, there, out, logs


@pytest.mark.slow  # 8 real processes, each importing torch (≈ 6 s of CPU apiece)
def test_a_crossover_through_submitit_gives_the_local_runners_numbers_and_a_rerun_skips_it(both, token_dir):
    from smallinit.experiments.cluster_status import read_jobs
    from smallinit.experiments.crossover import run_crossover

    here, there, out, logs = both
    assert all(math.isfinite(v) for arm in here["losses"].values() for row in arm.values() for v in row)
    assert there["losses"] == here["losses"]  # bit for bit: the same function trained each run, elsewhere
    assert there["analyses"] == here["analyses"]
    assert json.loads((out / "crossover.json").read_text())["losses"] == here["losses"]
    jobs = read_jobs(out)
    assert sorted(j["run"] for j in jobs) == sorted(
        f"runs/{a}/seed0/{r}" for a in ARMS for r in ("trunk", "D1280", "D2560", "D5120")
    )
    assert len({j["job_id"] for j in jobs}) == 8 and {j["what"] for j in jobs} == {"trunk", "branch"}
    for j in jobs:  # no dependencies in a LocalExecutor: a branch is submitted once its trunk has finished
        if j["what"] == "branch":
            trunk = out / Path(j["run"]).parent / "trunk" / "summary.json"
            assert j["submitted"] >= trunk.stat().st_mtime
    assert sum(" done " in line for line in logs) == 8
    logs.clear()  # the same command again: every run finished, nothing submitted (the local runner's log line)
    run_crossover(_spec(token_dir), out, log=logs.append, n_boot=20, launcher=_local_launcher(out, logs.append))
    assert len(read_jobs(out)) == 8 and any("8/8 already finished" in line for line in logs), logs


@pytest.mark.slow  # the fixture above
def test_status_shows_each_job_of_a_finished_local_executor_run(both, capsys):
    _, _, out, _ = both
    capsys.readouterr()
    assert cli(["status", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if "runs/" in line]
    assert len(rows) == 8 and all(r[1] == "done" for r in rows), text
    assert text.splitlines()[-1] == "0 pending · 0 running · 8 done · 0 failed"


@pytest.mark.slow  # 2 real processes
def test_a_killed_job_is_resubmitted_by_the_same_command_and_resumes(token_dir, tmp_path):
    from smallinit.experiments.cluster_status import job_states, read_jobs
    from smallinit.experiments.sweep import parse_sweep, run_sweep
    from smallinit.runs.checkpoint import list_checkpoints

    over = tiny_overrides(token_dir, **{"train.max_steps": 60, "train.ckpt_every": 5, "train.eval_every": 1000})
    spec = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "one", "model.gamma": 1.0}]})
    out, run_dir, got = tmp_path / "sweep", tmp_path / "sweep" / "one", {}

    def first() -> None:
        got["first"] = run_sweep(spec, out, 1, gflops=20, log=lambda s: None, launcher=_local_launcher(out))

    t = threading.Thread(target=first)
    t.start()
    deadline = time.time() + 300
    while not (run_dir.is_dir() and list_checkpoints(run_dir)) and time.time() < deadline:
        time.sleep(0.05)
    os.kill(int((run_dir / ".lock").read_text()), signal.SIGKILL)  # the training process, in its job
    t.join(300)
    assert got["first"]["one"].state == "interrupted"
    kept = int(list_checkpoints(run_dir)[-1].name.rsplit("_", 1)[-1])
    assert 5 <= kept < 60 and not (run_dir / "summary.json").exists()
    (status,), _ = job_states(out)
    assert status.state == "failed" and "rerun the command to resume" in status.detail

    again = run_sweep(spec, out, 1, gflops=20, log=lambda s: None, launcher=_local_launcher(out))
    assert again["one"].state == "done" and again["one"].resumed
    jobs = read_jobs(out)
    assert [j["run"] for j in jobs] == ["one", "one"] and jobs[0]["job_id"] != jobs[1]["job_id"]
    assert "--resume" in (out / "jobs" / "one.log").read_text()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 61))  # continued from the checkpoint, not from step 0
    (status,), _ = job_states(out)
    assert status.state == "done" and status.attempts == 2


def test_one_call_as_a_job_returns_its_value_or_one_error_naming_its_output(tmp_path):
    """Reproduce's analysis runs as one job (Launcher.call): its return value comes back; what it raised is a
    RunDirError naming the job's output; status shows both."""
    from smallinit.core.errors import RunDirError
    from smallinit.experiments.cluster_status import job_states

    out = tmp_path / "x"
    launcher = _local_launcher(out)
    pid = launcher.call(os.getpid, name="analysis")
    assert isinstance(pid, int) and pid != os.getpid()  # another process
    with pytest.raises(RunDirError, match=r"the check job \d+ failed: ValueError: invalid literal.*its output: .*log"):
        launcher.call(int, "not a number", name="check")
    assert [(s.key, s.state) for s in job_states(out)[0]] == [("analysis", "done"), ("check", "failed")]


def _fake_slurm(tmp: Path) -> tuple[Path, Path]:
    """A bin folder with sbatch (records the script, prints a job id), sacct (every job in the state written in
    RECORDS/state, TIMEOUT by default), srun, scancel."""
    bin_dir, rec = tmp / "bin", tmp / "sbatch-scripts"
    bin_dir.mkdir()
    rec.mkdir()
    scripts = {
        "sbatch": f'#!/bin/sh\nn=$(cat "{rec}/next" 2>/dev/null || echo 1000)\necho $((n + 1)) > "{rec}/next"\n'
        f'cp "$1" "{rec}/$n.sh"\necho "Submitted batch job $n"\n',
        "sacct": f'#!/bin/sh\ns=$(cat "{rec}/state" 2>/dev/null || echo TIMEOUT)\necho "JobID|State|NodeList"\n'
        'while [ $# -gt 0 ]; do\n  if [ "$1" = "-j" ]; then\n'
        '    echo "$2_[0-99]|$s|n1"; echo "$2|$s|n1"; shift\n  fi\n  shift\ndone\n',
        "srun": "#!/bin/sh\nexit 0\n",
        "scancel": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir, rec


def test_the_sbatch_scripts_of_a_crossover_without_a_cluster(token_dir, tmp_path, monkeypatch, capsys):
    """The CLI's options reach the #SBATCH lines: the trunks as one array, each trunk's branches as one array queued
    behind it (afterok); jobs that end without a result (here all: TIMEOUT) are reported and resumable."""
    from smallinit.experiments.cluster_status import read_jobs

    bin_dir, rec = _fake_slurm(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "x"
    argv = [
        "crossover",
        *(f"{a}:{','.join(o)}" for a, o in ARMS.items()),
        "--config",
        "tiny",
        "--tokens",
        str(TOKENS),
        "--budgets",
        "1/4,1/2,1",
        "--out",
        str(out),
        *(x for o in _overrides(token_dir) if not o.startswith("train.max_steps=") for x in ("--set", o)),
        "--launcher",
        "slurm",
        "--partition",
        "gpu",
        "--time",
        "90",
        "--cpus-per-job",
        "4",
        "--gpus-per-job",
        "1",
        "--account",
        "proj",
        "--qos",
        "high",
        "--sbatch",
        "constraint=h100",
        "--sbatch",
        "exclusive",
    ]
    capsys.readouterr()
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [err.strip().splitlines()[-1]]
    assert "stopped before their end" in err and "rerun the same command" in err
    trunks, *branches = [(rec / f"{n}.sh").read_text() for n in (1000, 1001, 1002)]
    assert not (rec / "1003.sh").exists()
    shared = [
        "#SBATCH --partition=gpu",
        "#SBATCH --time=90",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --constraint=h100",
        "#SBATCH --exclusive",
        "#SBATCH --signal=TERM@300",
        "export OMP_NUM_THREADS=4",
    ]
    for script in (trunks, *branches):
        lines = script.splitlines()
        assert all(s in lines for s in shared), script
        assert f"{shlex.quote(sys.executable)} -u -m submitit.core._submit" in script  # the library, not our CLI
    assert "#SBATCH --array=0-1%2" in trunks and "--dependency" not in trunks
    assert "#SBATCH --job-name=smallinit-trunk" in trunks
    for i, script in enumerate(branches):
        assert "#SBATCH --array=0-2%3" in script and f"#SBATCH --dependency=afterok:1000_{i}" in script
        assert "#SBATCH --kill-on-invalid-dep=yes" in script and "#SBATCH --job-name=smallinit-branch" in script
    jobs = read_jobs(out)
    assert len(jobs) == 8 and {j["job_id"] for j in jobs if j["what"] == "trunk"} == {"1000_0", "1000_1"}
    assert cli(["status", str(out)]) == 0  # states from (the fake) sacct
    text = capsys.readouterr().out
    assert "states from sacct" in text and text.splitlines()[-1] == "0 pending · 0 running · 0 done · 8 failed"


def test_a_run_stopped_by_its_time_limit_is_submitted_again_only_when_it_moved_on(tmp_path, monkeypatch):
    """A job that ended before its run did goes again at once (SLURM) when its run checkpointed past where the job
    started and nobody cancelled it; a killed job with no progress, or a cancelled one, waits for a rerun."""
    from smallinit.experiments.cluster_jobs import Submitted
    from smallinit.experiments.launcher import ClusterOptions, Launcher
    from smallinit.runs.checkpoint import CKPT_SUBDIR, MANIFEST, ckpt_dir_name

    bin_dir, rec = _fake_slurm(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = tmp_path / "x" / "run"
    for step in (5, 10):  # two complete checkpoints (a manifest each)
        (run / CKPT_SUBDIR / ckpt_dir_name(step)).mkdir(parents=True)
        (run / CKPT_SUBDIR / ckpt_dir_name(step) / MANIFEST).write_text("{}")
    slurm = Launcher(ClusterOptions(partition="gpu"), tmp_path / "x")
    job = Submitted({"job_id": "7_0", "executor": "slurm"}, None, start_step=5)
    assert slurm.again(job, run, lambda s: None)  # TIMEOUT, step 10 > 5
    (rec / "state").write_text("CANCELLED\n")
    assert not slurm.again(job, run, lambda s: None)
    (rec / "state").write_text("COMPLETED\n")  # stopped at its own SIGTERM, cleanly
    assert slurm.again(job, run, lambda s: None)
    assert not slurm.again(Submitted(job.record, None, start_step=10), run, lambda s: None)  # no progress
    local = _local_launcher(tmp_path / "x")
    assert not local.again(Submitted({"job_id": "1", "executor": "local"}, None, start_step=5), run, lambda s: None)


@pytest.mark.parametrize(
    "extra,problem",
    [
        (["--launcher", "slurm"], "sbatch and srun not found on PATH"),
        (["--launcher", "slurm", "NO-SUBMITIT"], "needs the submitit package"),
        (["--launcher", "slurm", "FAKE", "--time", "0"], "--time must be a whole number (minutes) >= 1"),
        (["--launcher", "slurm", "FAKE", "--gpus-per-job", "-1"], "--gpus-per-job must be"),
        (["--launcher", "slurm", "FAKE", "--sbatch", "partition=gpu"], "--sbatch partition: use --partition"),
        (["--launcher", "slurm", "FAKE", "--sbatch", "array=0-3"], "the launcher sets it"),
        (["--launcher", "slurm", "FAKE", "--sbatch", "mem="], "no value after '='"),
        (["--launcher", "slurm", "FAKE", "--partition", "gpu a"], "is not a SLURM name"),
        (["--partition", "gpu"], "--partition is an option of cluster jobs: add --launcher slurm"),
        (["--launcher", "pbs"], "invalid choice: 'pbs'"),
        (["--launcher", "slurm", "--time", "1h"], "argument --time: invalid int value"),
    ],
)
def test_cluster_option_errors_are_one_line_before_any_work(extra, problem, tmp_path, monkeypatch, capsys):
    """For crossover, reproduce and sweep alike: one error line naming the problem, exit status 2, no folder made."""
    if "FAKE" in extra or "NO-SUBMITIT" in extra:
        bin_dir, _ = _fake_slurm(tmp_path)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    else:
        monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    if "NO-SUBMITIT" in extra:
        monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` fails as when not installed
    extra = [x for x in extra if x not in ("FAKE", "NO-SUBMITIT")]
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: tiny\ngrid:\n  model.gamma: [0.5, 1.0]\n")
    for verb in (
        ["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1M"],
        ["reproduce", "--preset", "demo"],
        ["sweep", str(sweep)],
    ):
        capsys.readouterr()
        try:
            rc = cli([*verb, "--out", str(tmp_path / "out"), *extra])
        except SystemExit as e:  # argparse's own errors: one line too (cli.Parser)
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), (verb, err)
        assert problem in err and "Traceback" not in err, (verb, err)
        assert not (tmp_path / "out").exists()
    if "--partition" in extra:  # and status of a folder without cluster jobs
        assert cli(["status", str(tmp_path)]) == 2
        assert "has no cluster jobs" in capsys.readouterr().err


# ---- the one job runner on a cluster: the launcher only submits and waits (a fake launcher, no submitit) ------------


class _FakeSubmitted:
    def __init__(self, job_id: str, job):
        self.job_id, self.job = job_id, job


class _FakeLauncher:
    """The backend surface a JobRunner uses (submit_jobs, wait, exit_status, again, cancel): each wait ends the
    earliest submitted job in flight, with the exit status given for its name (0 writes its summary, else an
    ``error:`` line in its log, as main does); ``slurm``: jobs may be queued behind jobs in flight."""

    def __init__(self, rcs=None, slurm=True, again=()):
        self.rcs, self.slurm, self.again_for = dict(rcs or {}), slurm, set(again)
        self.submitted: list[tuple[list[str], str | None]] = []
        self.cancelled: list[str] = []
        self.n = 999

    def submit_jobs(self, jobs, dependency=None, log=None):
        self.submitted.append(([j.name for j in jobs], dependency))
        out = []
        for j in jobs:
            self.n += 1
            out.append(_FakeSubmitted(str(self.n), j))
        return out

    def wait(self, flying, log=None):
        return [min(flying, key=lambda s: int(s.job_id))]

    def exit_status(self, s, job):
        rc = self.rcs.pop(job.name, 0) if job.name in self.again_for else self.rcs.get(job.name, 0)
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        if rc == 0:
            job.run_dir.mkdir(parents=True, exist_ok=True)
            (job.run_dir / "summary.json").write_text(json.dumps({"completed": True, "step": 10**9}))
        elif rc == 2:
            job.log_path.write_text(f"$ cluster job {s.job_id}\nerror: boom in {job.name}\n")
        return rc

    def again(self, s, run_dir, log):
        return s.job.name in self.again_for

    def cancel(self, s):
        self.cancelled.append(s.job_id)


def _crossover_jobs(tmp_path):
    """Trunks a and b, a's branch D1, b's branches D1 and D2 (crossover jobs: a branch waits for its trunk)."""
    from smallinit.config import RunConfig
    from smallinit.experiments.crossover_runs import crossover_job

    def job(kind, arm, name, trunk=None):
        run = tmp_path / "runs" / arm / "seed0" / name
        return crossover_job(kind, arm, 0, run, RunConfig(), trunk, 1 if trunk else 0)

    ta, tb = job("trunk", "a", "trunk"), job("trunk", "b", "trunk")
    return [ta, tb, job("branch", "a", "D1", ta), job("branch", "b", "D1", tb), job("branch", "b", "D2", tb)]


def _run_on(launcher, jobs, retry_failed=False):
    from smallinit.experiments.runner import JobRunner

    logs: list[str] = []
    runner = JobRunner(jobs, 1, log=logs.append, title="crossover", launcher=launcher, retry_failed=retry_failed)
    return {n: r.state for n, r in runner.run().items()}, logs


def test_a_failed_cluster_job_gets_failed_json_and_is_submitted_again_only_with_retry_failed(tmp_path):
    """SLURM-like: the trunks as one array, each trunk's branches queued behind it (afterok); trunk a fails (exit
    status 2): failed.json as locally (its error line, log tail), its queued branch cancelled and blocked. The same
    run again submits nothing (a failed run is not retried, finished ones are skipped, the branch stays blocked);
    with retry_failed the trunk goes again, its branch queued behind the new job."""
    jobs = _crossover_jobs(tmp_path)
    ta, tb, a1, b1, b2 = jobs
    fake = _FakeLauncher({ta.name: 2})
    states, _ = _run_on(fake, jobs)
    assert states == {ta.name: "failed", tb.name: "done", a1.name: "blocked", b1.name: "done", b2.name: "done"}
    assert fake.submitted == [
        ([ta.name, tb.name], None),
        ([a1.name], "afterok:1000"),
        ([b1.name, b2.name], "afterok:1001"),
    ]
    assert fake.cancelled == ["1002"]  # a's branch, queued behind the trunk that failed
    failed = json.loads((ta.run_dir / "failed.json").read_text())
    assert failed["rc"] == 2 and failed["error"] == f"boom in {ta.name}" and failed["log"] == str(ta.log_path)
    assert failed["log_tail"].endswith(f"error: boom in {ta.name}")
    assert not (a1.run_dir / "failed.json").exists()  # blocked: nothing written

    again = _FakeLauncher()
    states, logs = _run_on(again, _crossover_jobs(tmp_path))
    assert again.submitted == [] and states[ta.name] == "failed" and states[a1.name] == "blocked"
    assert any("4/5 already finished (1 failed earlier; not retried)" in line for line in logs), logs
    assert (ta.run_dir / "failed.json").exists()

    retry = _FakeLauncher()
    states, _ = _run_on(retry, _crossover_jobs(tmp_path), retry_failed=True)
    assert retry.submitted == [([ta.name], None), ([a1.name], "afterok:1000")]
    assert set(states.values()) == {"done"} and not (ta.run_dir / "failed.json").exists()


def test_without_dependencies_a_branch_is_submitted_once_its_trunk_is_done(tmp_path):
    """LocalExecutor-like (no afterok): each trunk's branches go as their own array when that trunk is done."""
    jobs = _crossover_jobs(tmp_path)
    ta, tb, a1, b1, b2 = jobs
    fake = _FakeLauncher(slurm=False)
    states, _ = _run_on(fake, jobs)
    assert set(states.values()) == {"done"}
    assert fake.submitted == [([ta.name, tb.name], None), ([a1.name], None), ([b1.name, b2.name], None)]


def test_a_trunk_stopped_by_its_time_limit_goes_again_with_its_branches_queued_behind_the_new_job(tmp_path):
    """A trunk's job ends at its time limit (143) and Launcher.again says go again: the trunk is resubmitted, the
    branches queued behind its old job are taken back and queued behind the new one; nothing is failed."""
    jobs = _crossover_jobs(tmp_path)
    ta, tb, a1, b1, b2 = jobs
    fake = _FakeLauncher({tb.name: 143}, again=[tb.name])
    states, _ = _run_on(fake, jobs)
    assert set(states.values()) == {"done"} and not list(tmp_path.rglob("failed.json"))
    assert fake.submitted[3:] == [([tb.name], None), ([b1.name, b2.name], "afterok:1005")]
    assert sorted(fake.cancelled) == ["1003", "1004"]


@pytest.mark.slow  # 2 real processes
def test_a_failed_job_through_submitit_leaves_failed_json_and_a_rerun_submits_it_only_with_retry_failed(tmp_path):
    """A real LocalExecutor job whose run exits with an error (its corpus is broken: an empty meta.json): its job
    fails (RunNotFinished, exit status 2), failed.json has the run's own error line; the same command submits
    nothing; --retry-failed submits it again."""
    from smallinit.experiments.cluster_status import job_states, read_jobs
    from smallinit.experiments.sweep import parse_sweep, run_sweep

    (tmp_path / "no-corpus").mkdir()
    (tmp_path / "no-corpus" / "meta.json").write_text("{}")
    over = tiny_overrides(tmp_path / "no-corpus")
    spec = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "one", "model.gamma": 1.0}]})
    out = tmp_path / "sweep"

    def sweep(**kw):
        return run_sweep(spec, out, 1, gflops=20, log=lambda s: None, launcher=_local_launcher(out), **kw)["one"]

    first = sweep()
    assert first.state == "failed" and first.rc == 2 and "no-corpus" in first.error
    failed = json.loads((out / "one" / "failed.json").read_text())
    assert failed["rc"] == 2 and failed["error"] == first.error and failed["log"] == str(out / "jobs" / "one.log")
    assert f"error: {first.error}" in failed["log_tail"]
    (status,), _ = job_states(out)
    assert status.state == "failed" and "no-corpus" in status.detail
    again = sweep()
    assert again.state == "failed" and again.skipped and len(read_jobs(out)) == 1
    retried = sweep(retry_failed=True)
    assert retried.state == "failed" and not retried.skipped and len(read_jobs(out)) == 2
