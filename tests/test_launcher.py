"""The cluster launcher (issue 32, item 1): a plan's jobs through submitit — its LocalExecutor (real processes) for
runs, a fake ``sbatch`` on PATH for the SLURM scripts — with the local path's numbers, skip and resume rules, and
``smallinit status``."""

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
    logs.clear()  # the same command again: every run finished, nothing submitted
    run_crossover(_spec(token_dir), out, log=logs.append, n_boot=20, launcher=_local_launcher(out, logs.append))
    assert len(read_jobs(out)) == 8 and sum(" skipped " in line for line in logs) == 8


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
        *(x for o in _overrides(token_dir) for x in ("--set", o)),
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
