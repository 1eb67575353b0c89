"""Runs at a time by default: one per usable core (one torch thread each) on the CPU, 1 with CUDA — the layout
benchmarks/layout_bench.py measured best; reproduce, sweep and crossover all take it when --jobs is not given."""

import os

import pytest
import torch

from smallinit.cli import main as cli
from smallinit.experiments import cost
from smallinit.experiments.presets import PRESETS


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_one_job_per_core_on_cpu_one_with_cuda(four_cores, monkeypatch):
    assert cost.usable_cores() == 4
    assert cost.default_jobs() == 4
    assert cost.default_threads(cost.default_jobs()) == 1
    assert cost.default_threads(2) == 2
    assert cost.default_jobs(runs=3) == 3 and cost.default_jobs(runs=9) == 4  # no more jobs than runs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cost.default_jobs() == 1


def test_cpu_presets_take_the_default_and_the_gpu_preset_runs_one_at_a_time():
    for name in ("demo", "cpu", "cpu-long"):
        assert PRESETS[name].jobs is None, name
    assert PRESETS["gpu"].jobs == 1


def test_sweep_and_crossover_dry_runs_use_one_job_per_core(token_dir, four_cores, tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: tiny\ngrid:\n  model.gamma: [0.5, 1.0, 1.5, 2.0, 2.5]\n")
    assert cli(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--dry-run", "--gflops", "1"]) == 0
    assert "4 at a time" in capsys.readouterr().out
    sweep.write_text("base: tiny\ngrid:\n  model.gamma: [0.5, 1.0]\n")  # 2 runs on 4 cores: 2 jobs
    assert cli(["sweep", str(sweep), "--out", str(tmp_path / "sw2"), "--dry-run", "--gflops", "1"]) == 0
    assert "2 at a time" in capsys.readouterr().out
    assert (
        cli(
            [
                "crossover",
                "a:model.gamma=0.5",
                "b:model.gamma=1.0",
                "--config",
                "tiny",
                "--set",
                f"data.path={token_dir}",
                "--tokens",
                "4M",
                "--seeds",
                "2",
                "--out",
                str(tmp_path / "x"),
                "--dry-run",
            ]
        )
        == 0
    )
    assert "1 thread(s), 4 at a time" in capsys.readouterr().out  # 2 arms × 2 seeds
    assert (
        cli(
            [
                "crossover",
                "a:model.gamma=0.5",
                "b:model.gamma=1.0",
                "--config",
                "tiny",
                "--set",
                f"data.path={token_dir}",
                "--tokens",
                "4M",
                "--out",
                str(tmp_path / "x1"),
                "--dry-run",
            ]
        )
        == 0
    )
    assert "2 thread(s), 2 at a time" in capsys.readouterr().out  # 2 trunks on 4 cores


def test_wall_clock_is_the_makespan_of_runs_taken_in_order():
    """Three equal runs on two workers take two rounds (sum ÷ workers said 1.5); runs go to the first free worker
    in order; runs already running hold their workers; a batch of fewer runs than workers shares the cores."""
    assert cost.wall_seconds([100.0, 100.0, 100.0], 2) == 200.0
    assert cost.wall_seconds([100.0, 100.0, 100.0, 100.0], 2) == 200.0
    assert cost.wall_seconds([300.0, 100.0, 100.0, 100.0], 2) == 300.0  # the long run on one worker, three on the other
    assert cost.wall_seconds([100.0, 100.0, 300.0], 2) == 400.0  # in order: the long run starts last
    assert cost.wall_seconds([50.0], 2, started=[120.0, 30.0]) == 120.0  # joins the worker free at 30 s
    assert cost.wall_seconds([], 4) == 0.0 and cost.wall_seconds([7.0], 1) == 7.0


def test_fewer_runs_than_workers_are_counted_faster_by_their_threads(four_cores):
    assert cost.sharing_speedup(4, 4) == 1.0 and cost.sharing_speedup(9, 4) == 1.0
    assert cost.sharing_speedup(2, 4) == 2.0  # 2 threads each instead of 1
    assert cost.sharing_speedup(1, 4) == 4.0
    assert cost.sharing_speedup(3, 4) == 1.0  # 4 // 3 = 1 thread each: no faster
    assert cost.sharing_speedup(1, 2) == 2.0  # 4 threads instead of 2


def test_the_reproduction_plan_is_estimated_by_its_makespan(tmp_path, monkeypatch):
    """The demo preset's phase 1 on two jobs: its runs in order on two workers, not their sum ÷ 2."""
    from smallinit.experiments.plan import make_plan, phase_wall_seconds, plan_wall_seconds
    from smallinit.experiments.presets import get_preset

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    plan = make_plan(get_preset("demo"), tmp_path, tmp_path / "data", 50.0, 40.0, 2)
    est = [j.est_seconds for j in plan.phase1]
    assert len(est) > 2 and all(s > 0 for s in est)
    assert plan_wall_seconds(plan, 2) == pytest.approx(
        cost.wall_seconds(est, 2) + cost.wall_seconds(plan.phase2_estimates, 2)
    )
    assert plan_wall_seconds(plan, 2) > sum(est) / 2  # uneven runs cannot all finish together
    assert phase_wall_seconds([60.0], 2) == 30.0  # one run alone has both cores


def test_the_plan_prints_tokens_per_non_embedding_parameter(tmp_path):
    """The dry run's tok/param is the declared budget's unit (tokens / non-embedding parameters), as the claims'
    tables print it; it used to divide by every parameter (1.87 for a gated d64 run the claims call 2.14)."""
    from smallinit.experiments.plan import describe_plan, make_plan
    from smallinit.experiments.presets import get_preset

    plan = make_plan(get_preset("cpu"), tmp_path, tmp_path / "data", 50.0, 40.0, 2)
    text = describe_plan(plan, 2)
    job = plan.phase1[0]
    c = plan.costs[job.name]
    assert c["non_embedding_params"] < c["params"]
    row = next(line for line in text.splitlines() if line.strip().startswith(job.name + " "))
    assert row.split()[3] == f"{c['tokens'] / c['non_embedding_params']:.2f}"
