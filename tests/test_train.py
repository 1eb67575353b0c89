"""The training loop: loss falls, checkpoints, exact resume after SIGKILL, crash-safe writes, guards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_overrides

from smallinit.core.errors import CheckpointError, DivergenceError, RunDirError
from smallinit.runs.checkpoint import list_checkpoints, load_checkpoint, read_checkpoint, verify_checkpoint
from smallinit.train import resume, train


def losses(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[r["step"]] = r["loss"]
    return out


def test_loss_falls_and_run_dir_is_complete(tiny_cfg, tmp_path):
    cfg = tiny_cfg(**{"train.max_steps": 40, "optim.lr": 1e-2, "model.gamma": 0.5, "train.eval_every": 20})
    s = train(cfg, tmp_path / "run")
    ls = losses(tmp_path / "run")
    assert sorted(ls) == list(range(1, 41))
    first, last = sum(ls[i] for i in range(1, 4)) / 3, sum(ls[i] for i in range(38, 41)) / 3
    assert last < first - 0.5, (first, last)
    rd = tmp_path / "run"
    for f in ("config.yaml", "tokenizer.json", "summary.json", "metrics.jsonl"):
        assert (rd / f).is_file(), f
    rec = [json.loads(l) for l in (rd / "metrics.jsonl").read_text().splitlines()]
    for key in ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "gflops_per_s"):
        assert all(key in r for r in rec), key
    assert [r["step"] for r in rec if "val_loss" in r] == [20, 40]
    assert rec[-1]["tokens"] == 40 * 4 * 32
    assert s["completed"] and s["final_val_loss"] == rec[-1]["val_loss"]
    # keep_ckpts=10, ckpt_every=5 → 8 checkpoints, each verifies
    cks = list_checkpoints(rd)
    assert [int(c.name[5:]) for c in cks] == list(range(5, 41, 5))
    for c in cks:
        verify_checkpoint(c)
    model = load_checkpoint(rd)
    assert isinstance(model, torch.nn.Module) and not model.training


def test_keep_ckpts_prunes_old(tiny_cfg, tmp_path):
    train(tiny_cfg(**{"train.max_steps": 15, "train.keep_ckpts": 2}), tmp_path / "r")
    assert [c.name for c in list_checkpoints(tmp_path / "r")] == ["step_00000010", "step_00000015"]


MOE_WITH_BIAS = {
    "model.moe.n_experts": 4,
    "model.moe.top_k": 2,
    "model.moe.d_expert": 32,
    "model.moe.bias_update_rate": 0.01,
}


@pytest.mark.parametrize("extra", [{}, MOE_WITH_BIAS], ids=["dense", "moe-bias"])
def test_resume_in_process_is_bit_identical(tiny_cfg, tmp_path, extra):
    full = tiny_cfg(**{"train.max_steps": 20}, **extra)
    train(full, tmp_path / "full")

    class Crash:
        def on_step_end(self, trainer, step, record):
            if step == 12:  # two steps past the step-10 checkpoint
                raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_cfg(**{"train.max_steps": 20}, **extra), tmp_path / "part", callbacks=[Crash()])
    assert max(losses(tmp_path / "part")) == 11  # the step-12 record was never written
    resume(tmp_path / "part")
    a, b = losses(tmp_path / "full"), losses(tmp_path / "part")
    assert a == b  # every step, exactly
    wa = load_checkpoint(tmp_path / "full").state_dict()
    wb = load_checkpoint(tmp_path / "part").state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    if extra:  # the expert bias moved, and is part of the checkpointed state
        assert any(k.endswith("expert_bias") and wa[k].abs().sum() > 0 for k in wa)


def _train_cmd(out: Path, token_dir: Path, **extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "smallinit",
        "train",
        "--config",
        "tiny",
        "--out",
        str(out),
        *tiny_overrides(token_dir, **extra),
    ]


def test_sigkill_then_resume_matches_uninterrupted(token_dir, tmp_path):
    extra = {"train.max_steps": 30, "train.ckpt_every": 4}
    ref = tmp_path / "ref"
    subprocess.run(_train_cmd(ref, token_dir, **extra), check=True, capture_output=True)
    run = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(run, token_dir, **extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list_checkpoints(run)) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list_checkpoints(run), "no checkpoint before the kill"
    killed_at = max(losses(run)) if (run / "metrics.jsonl").exists() else 0
    assert killed_at < 30
    r = subprocess.run(
        [sys.executable, "-m", "smallinit", "train", "--resume", str(run)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert losses(run) == losses(ref)


def test_crash_mid_checkpoint_keeps_previous(tiny_cfg, tmp_path, monkeypatch):
    import smallinit.runs.checkpoint as ck

    rd = tmp_path / "r"
    train(tiny_cfg(**{"train.max_steps": 10}), rd)
    good = list_checkpoints(rd)[-1]
    real = ck._write_file
    calls = {"n": 0}

    def dying(path, data):
        calls["n"] += 1
        if calls["n"] == 2:  # die after the weights file, while writing the optimizer state
            with open(path, "wb") as f:
                f.write(data[: len(data) // 3])
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(ck, "_write_file", dying)
    with pytest.raises(CheckpointError, match="No space left"):
        resume(rd, max_steps=15)
    monkeypatch.setattr(ck, "_write_file", real)
    assert list_checkpoints(rd)[-1] == good
    verify_checkpoint(good)
    assert not any(p.name.startswith(".tmp") for p in (rd / "checkpoints").iterdir())
    load_checkpoint(rd)


def test_corrupted_checkpoint_detected_and_skipped(tiny_cfg, tmp_path):
    rd = tmp_path / "r"
    train(tiny_cfg(**{"train.max_steps": 10}), rd)
    newest = list_checkpoints(rd)[-1]
    f = newest / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors.*checksum"):
        verify_checkpoint(newest)
    with pytest.warns(UserWarning, match="skipping bad checkpoint"):
        m = load_checkpoint(rd)
    assert m is not None
    assert read_checkpoint(list_checkpoints(rd)[0])["state"]["step"] == 5


def test_divergence_guard_names_step_and_keeps_checkpoints(tiny_cfg, tmp_path):
    class NaNAt:
        def on_loss(self, trainer, step, loss):
            return loss * float("nan") if step == 7 else loss

    rd = tmp_path / "r"
    with pytest.raises(DivergenceError, match="step 8"):
        train(tiny_cfg(**{"train.max_steps": 20}), rd, callbacks=[NaNAt()])
    cks = list_checkpoints(rd)
    assert [c.name for c in cks] == ["step_00000005"]
    w = read_checkpoint(cks[-1])["model"]
    assert all(torch.isfinite(t).all() for t in w.values())


def test_existing_run_dir_and_lock_are_refused(tiny_cfg, tmp_path):
    from smallinit.train.loop import RunLock

    rd = tmp_path / "r"
    train(tiny_cfg(**{"train.max_steps": 5}), rd)
    with pytest.raises(RunDirError, match="already holds a run"):
        train(tiny_cfg(**{"train.max_steps": 5}), rd)
    with RunLock(rd):
        with pytest.raises(RunDirError, match="in use by another process"):
            resume(rd, max_steps=6)


def test_bf16_and_accumulation_run(tiny_cfg, tmp_path):
    a = train(tiny_cfg(**{"train.max_steps": 6, "train.dtype": "bf16"}), tmp_path / "bf16")
    assert a["final_loss"] == a["final_loss"]  # finite
    # accumulation: 2 micro-batches of 2 equal one batch of 4 (same data, same update) up to fp32 rounding
    train(tiny_cfg(**{"train.max_steps": 6, "train.micro_batch_size": 2}), tmp_path / "acc")
    train(tiny_cfg(**{"train.max_steps": 6}), tmp_path / "plain")
    lb, lc = losses(tmp_path / "acc"), losses(tmp_path / "plain")
    assert all(abs(lb[k] - lc[k]) < 1e-4 for k in lc)
