"""`smallinit doctor RUN_DIR` on a healthy run and on runs damaged in each way it checks; following its
advice brings a damaged run back to health."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faultkit import fault_overrides, fault_table  # noqa: F401

from smallinit.cli import main
from smallinit.runs.doctor import check_run
from smallinit.train import load_config, resume, train
from smallinit.train.loop import RunLock


@pytest.fixture(scope="module")
def healthy(token_dir, tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("doc") / "run"
    extra = {"probe.every": 8, "probe.batch_size": 2, "probe.heatmaps": "[]"}
    from smallinit.probes.training import TrainingProbe

    cfg = load_config("tiny", fault_overrides(token_dir, **extra))
    train(cfg, rd, callbacks=[TrainingProbe(cfg.probe)])
    return rd


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_healthy_run(healthy, capsys):
    rep = check_run(healthy)
    assert rep.healthy and rep.active_pid is None, rep.format()
    assert main(["doctor", str(healthy)]) == 0
    out = capsys.readouterr().out
    assert "2 checkpoints verified (SHA-256): step 12, 16" in out
    assert "metrics.jsonl: 16 records, steps 1..16, strictly increasing, no gaps" in out
    assert "probes.jsonl: 6 records, steps 0..16" in out  # 0, the early 1, 2, 5, then every 8: 8, 16
    assert "run complete: step 16" in out and out.rstrip().endswith("healthy")
    assert main(["doctor", str(healthy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["healthy"] is True


def flip(f: Path) -> None:
    b = bytearray(f.read_bytes())
    b[len(b) // 3] ^= 0x10
    f.write_bytes(bytes(b))


def corrupt_newest(rd):
    flip(rd / "checkpoints/step_00000016/model.safetensors")
    return (
        "checkpoint step_00000016 is corrupted: ",
        "model.safetensors: checksum mismatch",
        f"delete it (rm -r {rd}/checkpoints/step_00000016); resume will use step_00000012",
    )


def corrupt_older(rd):
    flip(rd / "checkpoints/step_00000012/optim.pt")
    return ("checkpoint step_00000012 is corrupted: ", "optim.pt: checksum mismatch", "resume uses step_00000016")


def leftover_tmp(rd):
    shutil.copytree(rd / "checkpoints/step_00000016", rd / "checkpoints/.tmp-step_00000020-4242")
    return (".tmp-step_00000020-4242: partial checkpoint left by a killed process", "rm -r")


def no_manifest(rd):
    (rd / "checkpoints/step_00000012/manifest.json").unlink()
    return ("step_00000012: incomplete checkpoint (no manifest", "delete it: rm -r")


def torn_metrics(rd):
    with open(rd / "metrics.jsonl", "a") as f:
        f.write('{"step": 17, "loss": 3.1')
    return ("metrics.jsonl line 17 does not parse (torn last line", "`smallinit train --resume` drops it")


def gap_in_metrics(rd):
    lines = (rd / "metrics.jsonl").read_text().splitlines()
    del lines[6:8]  # steps 7 and 8
    (rd / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return ("metrics.jsonl misses 2 logged step(s) (log_every 1): 7, 8",)


def repeated_metrics(rd):
    lines = (rd / "metrics.jsonl").read_text().splitlines()
    (rd / "metrics.jsonl").write_text("\n".join(lines[:10] + lines[8:]) + "\n")
    return ("metrics.jsonl line 11: step 9 after step 10 (steps must increase",)


def torn_probes(rd):
    with open(rd / "probes.jsonl", "a") as f:
        f.write('{"step": 20, "lay')
    return ("probes.jsonl line 7 does not parse (torn last line)",)


def bad_config(rd):
    (rd / "config.yaml").write_text("model: {gamma: [unclosed\n")
    return ("config.yaml does not load: ", f"cp {rd}/checkpoints/step_00000016/config.yaml {rd}/config.yaml")


def interrupted(rd):
    (rd / "summary.json").unlink()
    shutil.rmtree(rd / "checkpoints/step_00000016")
    return (
        "run is incomplete: stopped after step 16 (no summary.json)",
        f"smallinit train --resume {rd}  (continues from step_00000012; steps 13..16 will be recomputed)",
    )


def sweep_failed(rd):
    (rd / "summary.json").unlink()
    (rd / "failed.json").write_text(json.dumps({"rc": 2, "error": "data.path: no such directory"}))
    return ("the sweep recorded this run as failed: data.path: no such directory", "--retry-failed")


DAMAGES = [
    corrupt_newest,
    corrupt_older,
    leftover_tmp,
    no_manifest,
    torn_metrics,
    gap_in_metrics,
    repeated_metrics,
    torn_probes,
    bad_config,
    interrupted,
    sweep_failed,
]


@pytest.mark.timeout(120)
def test_each_damage_is_found_with_a_fix(healthy, tmp_path, capsys, fault_table):
    found = 0
    for damage in DAMAGES:
        rd = copy(healthy, tmp_path / damage.__name__)
        expected = damage(rd)
        rep = check_run(rd)
        text = rep.format()
        assert not rep.healthy, (damage.__name__, text)
        assert len(rep.problems) == 1, (damage.__name__, text)  # exactly the damage done, nothing else
        for piece in expected:
            assert piece in text, (damage.__name__, piece, text)
        assert main(["doctor", str(rd)]) == 1
        assert "1 problem found" in capsys.readouterr().out
        found += 1
    fault_table.record(
        f"`smallinit doctor` on damaged runs ({len(DAMAGES)} kinds of damage)",
        len(DAMAGES),
        found,
        "n/a",
        "each found, with its fix",
    )


@pytest.mark.timeout(120)
def test_following_the_advice_heals_the_run(healthy, tmp_path):
    rd = copy(healthy, tmp_path / "heal")
    corrupt_newest(rd)
    torn_metrics(rd)
    (rd / "summary.json").unlink()
    rep = check_run(rd)
    assert len(rep.problems) == 3, rep.format()
    shutil.rmtree(rd / "checkpoints/step_00000016")  # "delete it"
    resume(rd)  # "smallinit train --resume"
    rep = check_run(rd)
    assert rep.healthy, rep.format()


@pytest.mark.timeout(60)
def test_live_run_and_non_run_dirs(healthy, tmp_path, capsys):
    rd = copy(healthy, tmp_path / "live")
    (rd / "summary.json").unlink()
    shutil.copytree(rd / "checkpoints/step_00000016", rd / "checkpoints/.tmp-step_00000020-99")
    import os

    with RunLock(rd):
        rep = check_run(rd)
        assert rep.active_pid == os.getpid()
        assert rep.healthy, rep.format()  # a run in progress: its files in flux are not problems
        text = rep.format()
        assert f"a process (pid {os.getpid()}) holds" in text and "training in progress" in text
        assert "a checkpoint being written now" in text
    assert main(["doctor", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["doctor", str(tmp_path / "empty")]) == 2
    assert "not a run directory" in capsys.readouterr().err
