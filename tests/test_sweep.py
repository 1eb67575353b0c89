"""Sweeps: file parsing and naming, and resumption after the sweep process is SIGKILLed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import tiny_overrides

from smallinit.core.errors import ConfigError
from smallinit.experiments.sweep import expand_grid, load_sweep, parse_sweep, run_name, run_state, sanitize_name


def test_grid_is_cartesian_and_runs_are_named_by_differences(token_dir):
    spec = parse_sweep(
        {
            "base": "tiny",
            "overrides": tiny_overrides(token_dir),
            "grid": {"model.gamma": [0.5, 1.0], "model.norm_eps": ["1e-5", 1e-12]},
        }
    )
    assert [r.name for r in spec.runs] == [
        "gamma=0.5,norm_eps=1e-05",
        "gamma=0.5,norm_eps=1e-12",
        "gamma=1,norm_eps=1e-05",
        "gamma=1,norm_eps=1e-12",
    ]
    # values reach the resolved config with their types ("1e-5" parsed as a float)
    assert spec.runs[0].config.model.norm_eps == 1e-5
    assert spec.runs[3].config.model.gamma == 1.0
    assert spec.runs[3].config.data.path == str(token_dir)
    assert spec.keys == ["model.gamma", "model.norm_eps"]
    assert len(expand_grid({"a.b": [1, 2, 3], "c.d": [1, 2]})) == 6


def test_names_disambiguate_shared_last_parts_and_are_file_safe():
    keys = ["model.moe.top_k", "train.top_k"]
    assert run_name({"model.moe.top_k": 1, "train.top_k": 2}, keys) == "model.moe.top_k=1,train.top_k=2"
    assert sanitize_name("a/b c:d") == "a_b_c_d"
    long = sanitize_name("x" * 300)
    assert len(long) <= 120 and long != sanitize_name("x" * 299)


def test_sweep_file_errors_name_the_problem(tmp_path, token_dir):
    with pytest.raises(ConfigError, match="exactly one of grid"):
        parse_sweep({"base": "tiny", "grid": {"model.gamma": [1]}, "runs": [{}]})
    with pytest.raises(ConfigError, match="unknown sweep key 'gird'"):
        parse_sweep({"base": "tiny", "gird": {}})
    with pytest.raises(ConfigError, match="model.gama"):
        parse_sweep({"base": "tiny", "grid": {"model.gama": [1.0]}})
    with pytest.raises(ConfigError, match="both named"):
        parse_sweep({"base": "tiny", "runs": [{"name": "a", "model.gamma": 1.0}, {"name": "a"}]})
    p = tmp_path / "s.yaml"
    p.write_text("base: [tiny, model.gamma=0.5]\nruns:\n  - {name: one, train.max_steps: 3}\n")
    spec = load_sweep(p)
    assert spec.runs[0].name == "one" and spec.runs[0].config.model.gamma == 0.5


def _wait_for(cond, timeout, proc=None, what=""):
    """Poll ``cond`` until true; fail if ``proc`` exits first or the time runs out."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"sweep exited early (rc {proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(240)
def test_killed_sweep_resumes_without_rerunning_finished_runs(tmp_path, token_dir):
    over = tiny_overrides(
        token_dir, **{"train.max_steps": 8, "train.ckpt_every": 4, "train.log_every": 4, "train.eval_every": 100}
    )
    sweep = {
        "base": "tiny",
        "overrides": over,
        "runs": [{"model.gamma": 0.5}, {"model.gamma": 0.75, "train.max_steps": 60}, {"model.gamma": 1.0}],
    }
    sf = tmp_path / "sweep.yaml"
    sf.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "smallinit", "sweep", str(sf), "--out", str(out), "--gflops", "20"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first, second, third = out / "gamma=0.5", out / "gamma=0.75,max_steps=60", out / "gamma=1"

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(lambda: run_state(first) == "done", 120, proc, "the first run to complete")
        _wait_for(
            lambda: any((second / "checkpoints").glob("step_*")) if (second / "checkpoints").is_dir() else False,
            120,
            proc,
            "a checkpoint of the second run",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.5)  # the child training gets SIGKILL through PDEATHSIG
    assert run_state(second) == "partial", "the interrupted run should be resumable"
    assert run_state(third) == "new"
    summary_mtime = (first / "summary.json").stat().st_mtime_ns
    metrics_mtime = (first / "metrics.jsonl").stat().st_mtime_ns

    from smallinit.experiments.sweep import run_sweep

    logs: list[str] = []  # the rerun in this process (its runs are still subprocesses)
    results = run_sweep(load_sweep(sf), out, gflops=20, log=logs.append)
    text = "\n".join(logs)
    assert all(r.state == "done" for r in results.values()), text
    assert results["gamma=0.5"].skipped and not results["gamma=1"].skipped
    assert results["gamma=0.75,max_steps=60"].resumed
    assert "1/3 already finished" in text and "resuming from step" in text
    assert (first / "summary.json").stat().st_mtime_ns == summary_mtime, "a finished run was rerun"
    assert (first / "metrics.jsonl").stat().st_mtime_ns == metrics_mtime
    assert all(run_state(d) == "done" for d in (first, second, third))
    # the resumed run continued from its checkpoint: its log shows a resume, its metrics reach the end
    log = (out / "jobs" / f"{second.name}.log").read_text()
    assert "smallinit.experiments.job" in log and "--resume" in log and "(resume)" in log
    steps = [int(l.split('"step": ')[1].split(",")[0]) for l in (second / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 60 and len(steps) == len(set(steps))

    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["run"] for r in rows] == ["gamma=0.5", "gamma=0.75,max_steps=60", "gamma=1"]
    assert all(r["state"] == "done" and float(r["final_val_loss"]) > 0 for r in rows)
    assert int(rows[1]["tokens"]) == 60 * 4 * 32
    md = (out / "summary.md").read_text()
    assert "gamma=0.75,max_steps=60" in md and "final_val_loss" in md

    # a third invocation has nothing to do
    logs = []
    results = run_sweep(load_sweep(sf), out, gflops=20, log=logs.append)
    assert all(r.skipped and r.state == "done" for r in results.values())
    assert any("3/3 already finished" in l for l in logs)


def test_changed_config_for_an_existing_run_is_refused(tmp_path, token_dir):
    from smallinit.core.errors import RunDirError
    from smallinit.experiments.sweep import run_sweep

    over = tiny_overrides(token_dir, **{"train.max_steps": 2, "train.ckpt_every": 2, "train.eval_every": 2})
    spec = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "r", "model.gamma": 0.5}]})
    logs = []
    run_sweep(spec, tmp_path, gflops=10, inprocess=True, log=logs.append)
    assert run_state(tmp_path / "r") == "done"
    spec2 = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "r", "model.gamma": 1.0}]})
    with pytest.raises(RunDirError, match="model.gamma"):
        run_sweep(spec2, tmp_path, gflops=10, inprocess=True, log=logs.append)


def test_another_sweep_into_a_sweep_folder_is_refused_and_a_grown_grid_continues(tmp_path, token_dir):
    """Another grid in the same folder would drop the first sweep's runs from its summary: refused before any run;
    the same grid with more runs continues."""
    import json

    from smallinit.core.errors import ConfigError
    from smallinit.experiments.sweep import run_sweep

    over = tiny_overrides(token_dir, **{"train.max_steps": 2, "train.ckpt_every": 2, "train.eval_every": 2})
    first = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "a", "model.gamma": 0.5}]})
    run_sweep(first, tmp_path, gflops=10, inprocess=True, log=lambda s: None)
    sweep_json = (tmp_path / "sweep.json").read_text()
    other = parse_sweep({"base": "tiny", "overrides": over, "runs": [{"name": "b", "model.gamma": 1.0}]})
    with pytest.raises(ConfigError, match="holds another sweep .*its runs a are not in"):
        run_sweep(other, tmp_path, gflops=10, inprocess=True, log=lambda s: None)
    assert (tmp_path / "sweep.json").read_text() == sweep_json and not (tmp_path / "b").exists()
    grown = parse_sweep(
        {
            "base": "tiny",
            "overrides": over,
            "runs": [{"name": "a", "model.gamma": 0.5}, {"name": "b", "model.gamma": 1.0}],
        }
    )
    run_sweep(grown, tmp_path, gflops=10, inprocess=True, log=lambda s: None)
    assert [r["name"] for r in json.loads((tmp_path / "sweep.json").read_text())["runs"]] == ["a", "b"]


def test_summary_table_includes_probe_values(tmp_path):
    import json

    from smallinit.experiments.sweep import RunSpec, SweepSpec, write_summary
    from smallinit.runs.rundir import summarize_probe_record

    rec = {
        "step": 10,
        "uniform_sink": 0.1,
        "layers": [
            {
                "layer": 0,
                "sink": 0.2,
                "max_act": 3.0,
                "attn_norm": {"saturation": 0.9},
                "mlp_norm": {"saturation": 0.4},
            },
            {
                "layer": 1,
                "sink": 0.6,
                "max_act": 5.0,
                "attn_norm": {"saturation": 1.0},
                "mlp_norm": {"saturation": None},
            },
        ],
        "final_norm": {"saturation": 0.8},
        "matrices": {
            "blocks.0.attn.q": {"srank": 4.0, "cond": 0.1},
            "blocks.1.mlp.up": {"srank": 2.0, "cond": 0.3},
            "tok_emb": {"srank": 100.0, "cond": 0.9},
        },
    }
    s = summarize_probe_record(rec)
    assert s["sink"] == pytest.approx(0.4) and s["sink_max"] == 0.6 and s["saturation_min"] == 0.4
    assert s["srank_mean"] == 3.0 and s["cond_mean"] == pytest.approx(0.2) and s["max_act"] == 5.0  # tok_emb excluded
    rd = tmp_path / "a"
    rd.mkdir()
    (rd / "summary.json").write_text(
        json.dumps({"completed": True, "final_val_loss": 3.5, "tokens": 100, "wall_time": 2.0})
    )
    (rd / "probes.jsonl").write_text(json.dumps(rec) + "\n")
    spec = SweepSpec({}, [RunSpec("a", {"model.gamma": 1.0}), RunSpec("b", {"model.gamma": 0.5})])
    rows = write_summary(spec, tmp_path)
    assert rows[0]["state"] == "done" and rows[0]["probe_sink"] == pytest.approx(0.4)
    assert rows[1]["state"] == "new"
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["run", "model.gamma", "state"] and "probe_saturation_min" in header


def test_a_field_added_since_a_run_was_written_compares_at_its_default():
    from smallinit.config import load_config
    from smallinit.runs.rundir import config_mismatch

    wanted = load_config("tiny", ["optim.lr=0.002"]).to_dict()
    old = load_config("tiny", ["optim.lr=0.002"]).to_dict()
    del old["model"]["moe"]["bias_update_rate"]  # written before the field existed
    assert config_mismatch(old, wanted) == {}
    old["optim"]["lr"] = 0.003
    assert config_mismatch(old, wanted) == {"optim.lr": (0.003, 0.002)}


def test_an_interrupted_job_exits_128_plus_the_signal_so_the_runner_resumes_it(tmp_path, token_dir, monkeypatch):
    """SIGTERM to one job of a sweep: the run checkpoints and raises Interrupted (a SmallinitError); the job process
    exited 2, the runner wrote failed.json and a rerun skipped the run ("failed earlier; not retried")."""
    import signal

    import smallinit.experiments.job as job_mod
    from smallinit.core.errors import Interrupted
    from smallinit.experiments.sweep import train_job

    spec = parse_sweep({"base": "tiny", "overrides": tiny_overrides(token_dir), "runs": [{"name": "r"}]})
    job = train_job("r", spec.runs[0].config, tmp_path)
    path = job_mod.write_job_file(job, tmp_path / "r.job.json")

    def stopped(j, resume=False):
        raise Interrupted("interrupted by SIGTERM at step 3: checkpoint saved", signal.SIGTERM, 3, None)

    monkeypatch.setattr(job_mod, "run_job", stopped)
    assert job_mod.main([str(path)]) == 128 + signal.SIGTERM


@pytest.mark.parametrize("name", ["summary.csv", "summary.md", "jobs", "failed", "sweep.json", "Summary.CSV"])
def test_run_names_taken_by_the_sweeps_own_files_are_refused_up_front(tmp_path, token_dir, capsys, name):
    """Issue 32 (F): a run named like the sweep's own files (summary.csv, jobs/ …) was accepted and failed late."""
    from smallinit.cli import main

    with pytest.raises(ConfigError, match=f"run name '{name}' is taken by the sweep's own files"):
        parse_sweep({"base": "tiny", "runs": [{"name": name, "model.gamma": 1.0}, {"name": "ok"}]})
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "base": "tiny",
                "overrides": tiny_overrides(token_dir, **{"train.max_steps": 2}),
                "runs": [{"name": "fine"}, {"name": name, "model.gamma": 0.5}],
            }
        )
    )
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "taken by the sweep's own files" in lines[0], err
    assert not out.exists()
