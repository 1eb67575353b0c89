"""Loading a checkpoint never executes code from it.

A hostile checkpoint — a pickle with a malicious ``__reduce__`` in optim.pt, or a Python-object tag in
config.yaml — behind a manifest whose checksums match (so only the loader stands in the way) is
refused with a CheckpointError naming the file, and the payload never runs. A static check keeps
every deserializer in the library on its safe setting.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from faultkit import fault_overrides, fault_table  # noqa: F401

import smallinit
from smallinit.core.errors import CheckpointError
from smallinit.runs.checkpoint import list_checkpoints, load_checkpoint, read_checkpoint
from smallinit.train import load_config, resume, train


class Payload:
    """Unpickling this would run ``touch <marker>``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(ckpt: Path, name: str, data: bytes) -> None:
    """Replace one file and re-sign the manifest, as an attacker shipping a whole checkpoint would."""
    (ckpt / name).write_bytes(data)
    m = json.loads((ckpt / "manifest.json").read_text())
    m["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (ckpt / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def run(token_dir, tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("u") / "run"
    train(load_config("tiny", fault_overrides(token_dir, **{"train.max_steps": 8, "train.eval_every": 8})), rd)
    return rd


@pytest.mark.timeout(120)
def test_malicious_pickle_in_optim_is_refused(run, tmp_path, fault_table):
    rd = tmp_path / "run"
    shutil.copytree(run, rd)
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    real = torch.load(list_checkpoints(rd)[-1] / "optim.pt", weights_only=True)
    torch.save({**real, "optimizer": Payload(marker)}, buf)
    trials = 0
    for ckpt in list_checkpoints(rd):  # every checkpoint poisoned: no fallback can hide the refusal
        plant(ckpt, "optim.pt", buf.getvalue())
    newest = list_checkpoints(rd)[-1]
    # (a complete run resumes without loading anything: extend it so the checkpoint is read)
    for load in (lambda: read_checkpoint(newest), lambda: load_checkpoint(rd), lambda: resume(rd, max_steps=9)):
        with pytest.raises(CheckpointError, match=rf"{newest}/optim.pt: refused: .*could run code"):
            load()
        trials += 1
        assert not marker.exists(), "the payload ran"
    fault_table.record(
        "malicious pickle (__reduce__) in optim.pt, manifest re-signed",
        trials,
        trials,
        "none (payload never ran)",
        "CheckpointError: refused",
    )


@pytest.mark.timeout(60)
def test_python_tag_in_config_is_refused(run, tmp_path):
    rd = tmp_path / "run"
    shutil.copytree(run, rd)
    marker = tmp_path / "pwned"
    newest = list_checkpoints(rd)[-1]
    plant(newest, "config.yaml", f"model: !!python/object/apply:os.system ['touch {marker}']\n".encode())
    with pytest.raises(CheckpointError, match=rf"{newest}/config.yaml: unreadable \(ConstructorError"):
        load_checkpoint(newest)
    assert not marker.exists()


def test_library_uses_only_safe_deserializers():
    """Every torch.load passes weights_only=True; no pickle/marshal/unsafe YAML; np.load never allows pickles."""
    src = Path(smallinit.__file__).parent
    problems = []
    for f in sorted(src.rglob("*.py")):
        text = f.read_text()
        for m in re.finditer(r"torch\.load\(([^)]*)\)", text):
            if "weights_only=True" not in m.group(1):
                problems.append(f"{f}: {m.group(0)}")
        for pat in (
            r"\bpickle\.loads?\(",
            r"\bmarshal\.loads?\(",
            r"yaml\.(unsafe_)?load\(",
            r"yaml\.Loader\b",
            r"allow_pickle\s*=\s*True",
            r"weights_only\s*=\s*False",
        ):
            problems += [f"{f}: {m.group(0)}" for m in re.finditer(pat, text)]
    assert not problems, problems
