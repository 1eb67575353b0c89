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


def test_sweep_and_crossover_dry_runs_use_one_job_per_core(four_cores, tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: tiny\ngrid:\n  model.gamma: [0.5, 1.0, 1.5, 2.0, 2.5]\n")
    assert cli(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--dry-run", "--gflops", "1"]) == 0
    assert "4 at a time" in capsys.readouterr().out
    sweep.write_text("base: tiny\ngrid:\n  model.gamma: [0.5, 1.0]\n")  # 2 runs on 4 cores: 2 jobs
    assert cli(["sweep", str(sweep), "--out", str(tmp_path / "sw2"), "--dry-run", "--gflops", "1"]) == 0
    assert "2 at a time" in capsys.readouterr().out
    assert cli(["crossover", "a:model.gamma=0.5", "b:model.gamma=1.0", "--config", "tiny", "--tokens", "4M",
                "--seeds", "2", "--out", str(tmp_path / "x"), "--dry-run"]) == 0
    assert "1 thread(s), 4 at a time" in capsys.readouterr().out  # 2 arms × 2 seeds
    assert cli(["crossover", "a:model.gamma=0.5", "b:model.gamma=1.0", "--config", "tiny", "--tokens", "4M",
                "--out", str(tmp_path / "x1"), "--dry-run"]) == 0
    assert "2 thread(s), 2 at a time" in capsys.readouterr().out  # 2 trunks on 4 cores
