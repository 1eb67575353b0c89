"""Fault 3: the disk fills up during a checkpoint write.

``SMALLINIT_FAULT_WRITE_LIMIT=N`` makes ``checkpoint._write_file`` fail with ENOSPC once the process has
written N checkpoint bytes (the bytes up to the limit do reach the file, as on a real full disk).
The limit is placed inside each file of the third checkpoint in turn. Every time: the run stops with
``could not write checkpoint .../step_00000012: No space left on device``, the partial directory is
gone, the two earlier checkpoints verify and load, and a resume (disk freed) ends exactly as the
undisturbed run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from faultkit import fault_overrides, fault_table, losses, same_weights, weights  # noqa: F401

import smallinit.runs.checkpoint as ck
from smallinit.core.errors import CheckpointError
from smallinit.runs.checkpoint import list_checkpoints, load_checkpoint, read_checkpoint, verify_checkpoint
from smallinit.train import load_config, resume, train

KEEP_ALL = {"train.keep_ckpts": 10}
FILES = ["model.safetensors", "optim.pt", "state.json", "config.yaml", "manifest.json"]  # write order


def ckpt_sizes(ckpt: Path) -> dict[str, int]:
    files = json.loads((ckpt / "manifest.json").read_text())["files"]
    return {**{k: v["bytes"] for k, v in files.items()}, "manifest.json": (ckpt / "manifest.json").stat().st_size}


@pytest.fixture(scope="module")
def reference(token_dir, tmp_path_factory):
    rd = tmp_path_factory.mktemp("ref") / "run"
    train(load_config("tiny", fault_overrides(token_dir, **KEEP_ALL)), rd)
    cks = list_checkpoints(rd)
    assert [c.name for c in cks] == ["step_00000004", "step_00000008", "step_00000012", "step_00000016"]
    return {"dir": rd, "losses": losses(rd), "weights": weights(rd), "sizes": [ckpt_sizes(c) for c in cks]}


def limit_inside(reference, target: str) -> int:
    """A byte budget that runs out in the middle of ``target`` while writing the third checkpoint (step 12)."""
    before = sum(sum(s.values()) for s in reference["sizes"][:2])
    third = reference["sizes"][2]
    offset = sum(third[f] for f in FILES[: FILES.index(target)])
    return before + offset + third[target] // 2


def check_stopped_cleanly(rd: Path, reference) -> None:
    assert [c.name for c in list_checkpoints(rd)] == ["step_00000004", "step_00000008"]
    assert sorted(p.name for p in (rd / "checkpoints").iterdir()) == ["step_00000004", "step_00000008"]  # no .tmp
    for c in list_checkpoints(rd):
        verify_checkpoint(c)
    w8 = read_checkpoint(rd / "checkpoints" / "step_00000008")["model"]
    r8 = read_checkpoint(reference["dir"] / "checkpoints" / "step_00000008")["model"]
    assert all(torch.equal(w8[k], r8[k]) for k in r8)
    assert load_checkpoint(rd) is not None


@pytest.mark.timeout(180)
def test_disk_full_in_each_checkpoint_file(reference, token_dir, tmp_path, monkeypatch, fault_table):
    survived = lost = 0
    for target in FILES:
        rd = tmp_path / target
        monkeypatch.setenv("SMALLINIT_FAULT_WRITE_LIMIT", str(limit_inside(reference, target)))
        monkeypatch.setattr(ck._write_file, "written", 0, raising=False)
        with pytest.raises(CheckpointError) as e:
            train(load_config("tiny", fault_overrides(token_dir, **KEEP_ALL)), rd)
        assert str(e.value) == f"could not write checkpoint {rd}/checkpoints/step_00000012: No space left on device"
        check_stopped_cleanly(rd, reference)
        monkeypatch.delenv("SMALLINIT_FAULT_WRITE_LIMIT")  # space freed: resume finishes the run
        resume(rd)
        same = losses(rd) == reference["losses"] and same_weights(weights(rd), reference["weights"])
        lost += not same
        assert same, target
        survived += 1
    fault_table.record(
        "disk full during a checkpoint write (limit inside each of its 5 files)",
        len(FILES),
        survived,
        "none" if lost == 0 else f"{lost} runs differ",
        "previous checkpoints intact; steps since the last one recomputed",
    )


@pytest.mark.timeout(120)
def test_disk_full_from_the_command_line(reference, token_dir, tmp_path):
    rd = tmp_path / "cli"
    env = {
        **os.environ,
        "SMALLINIT_FAULT_WRITE_LIMIT": str(limit_inside(reference, "optim.pt")),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit",
            "train",
            "--config",
            "tiny",
            "--out",
            str(rd),
            *fault_overrides(token_dir, **KEEP_ALL),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )
    assert r.returncode == 2
    assert [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("dtype: ")] == [  # the dtype decision
        f"error: could not write checkpoint {rd}/checkpoints/step_00000012: No space left on device"
    ], r.stderr
    check_stopped_cleanly(rd, reference)
    shutil.rmtree(rd)
