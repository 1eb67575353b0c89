"""Fault 2: a truncated, bit-flipped or missing checkpoint file.

The damage is detected by the manifest's sizes and SHA-256 on load and reported with the file's name;
resume falls back to the previous checkpoint with a warning and ends exactly where the undamaged run
ends; when no checkpoint is good, resume stops with one clear error and touches nothing.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import fault_overrides, fault_table, losses, same_weights, weights  # noqa: F401

from smallinit.core.errors import CheckpointError
from smallinit.runs.checkpoint import list_checkpoints, load_checkpoint, read_checkpoint, verify_checkpoint
from smallinit.train import load_config, resume, train


def truncate(f: Path, rng: random.Random) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: rng.randrange(len(data))])


def bitflip(f: Path, rng: random.Random) -> None:
    data = bytearray(f.read_bytes())
    i = rng.randrange(len(data))
    data[i] ^= 1 << rng.randrange(8)
    f.write_bytes(bytes(data))


def delete(f: Path, rng: random.Random) -> None:
    f.unlink()


DAMAGE = [
    ("model.safetensors", truncate),
    ("model.safetensors", bitflip),
    ("optim.pt", truncate),
    ("optim.pt", bitflip),
    ("state.json", bitflip),
    ("config.yaml", truncate),
    ("manifest.json", bitflip),
    ("model.safetensors", delete),
]


@pytest.fixture(scope="module")
def base(token_dir, tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("base") / "run"
    train(load_config("tiny", fault_overrides(token_dir)), rd)
    assert [c.name for c in list_checkpoints(rd)] == ["step_00000012", "step_00000016"]
    return rd


@pytest.mark.timeout(180)
def test_damaged_newest_checkpoint_falls_back_to_previous(base, tmp_path, fault_table):
    ref_losses, ref_weights = losses(base), weights(base)
    survived = lost = 0
    for i, (name, damage) in enumerate(DAMAGE):
        rd = tmp_path / f"t{i}"
        shutil.copytree(base, rd)
        newest = list_checkpoints(rd)[-1]
        damage(newest / name, random.Random(i))
        # a flipped bit in the manifest may break its JSON, or a hash/size it records for another file
        named = name if name != "manifest.json" else "(manifest|model|optim|state|config)"
        with pytest.raises(CheckpointError, match=rf"^{newest}/{named}.*: .*(checksum|size|missing|corrupted)"):
            verify_checkpoint(newest)
        with pytest.raises(CheckpointError, match=rf"^{newest}/{named}"):
            read_checkpoint(newest)
        start = {}

        class Start:
            def on_train_start(self, trainer):
                start["step"] = trainer.step

        with pytest.warns(UserWarning, match=rf"skipping bad checkpoint: {newest}/{named}"):
            resume(rd, callbacks=[Start()])
        assert start["step"] == 12, (name, damage.__name__)
        same = losses(rd) == ref_losses and same_weights(weights(rd), ref_weights)
        lost += not same
        assert same, (name, damage.__name__)
        for c in list_checkpoints(rd):  # the damaged one was rewritten whole
            verify_checkpoint(c)
        survived += 1
    fault_table.record(
        "checkpoint file truncated / bit-flipped / deleted (newest of 2)",
        len(DAMAGE),
        survived,
        "none" if lost == 0 else f"{lost} runs differ",
        "fell back to the previous checkpoint",
    )


@pytest.mark.timeout(120)
def test_no_good_checkpoint_stops_clearly(base, tmp_path, fault_table):
    rd = tmp_path / "allbad"
    shutil.copytree(base, rd)
    for c in list_checkpoints(rd):
        bitflip(c / "model.safetensors", random.Random(0))
    before = (rd / "metrics.jsonl").read_bytes()
    with pytest.warns(UserWarning, match="skipping bad checkpoint"):
        with pytest.raises(CheckpointError, match="none of the 2 checkpoint"):
            resume(rd)
    with pytest.warns(UserWarning):
        with pytest.raises(CheckpointError, match="no complete, uncorrupted checkpoint"):
            load_checkpoint(rd)
    assert (rd / "metrics.jsonl").read_bytes() == before  # nothing restarted from scratch, nothing deleted
    assert len(list_checkpoints(rd)) == 2
    # the same from the command line: warnings naming each damaged file, then one error line, exit 2
    r = subprocess.run(
        [sys.executable, "-m", "smallinit", "train", "--resume", str(rd)], capture_output=True, text=True, timeout=100
    )
    assert r.returncode == 2, r.stderr[-2000:]
    err = [l for l in r.stderr.splitlines() if l.startswith("error: ")]
    assert len(err) == 1 and "none of the 2 checkpoint(s) verifies" in err[0], r.stderr
    assert "step_00000016/model.safetensors: checksum mismatch" in r.stderr
    assert "step_00000012/model.safetensors: checksum mismatch" in r.stderr
    assert "Traceback" not in r.stderr
    assert (rd / "metrics.jsonl").read_bytes() == before
    fault_table.record(
        "every checkpoint corrupted",
        1,
        1,
        "none (run left as it was)",
        "resume stops: `error: ... none of the 2 checkpoint(s) verifies`",
    )
