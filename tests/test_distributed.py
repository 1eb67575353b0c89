"""Distributed training on PyTorch's own engine (issue 8): torchrun + gloo on CPU, 2 processes.

- DDP and FSDP2 with 2 ranks give the loss of one process (same global batch, same seed) at every step;
- a checkpoint written by a 2-process run resumes in one process with the uninterrupted run's losses;
- FSDP with training probes on (rank 0 probes, every rank gathers) finishes without deadlock;
- a bad launch (batch not divisible by the world size, no rendezvous variables) ends with one `error:` line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_overrides

import smallinit
from smallinit.runs.checkpoint import list_checkpoints, read_checkpoint
from smallinit.train import load_config, resume, train

STEPS, CKPT = 6, 3
TOL = 1e-5  # fp32, different reduction order across ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus any inherited torchrun variables, single-threaded."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")
    }
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **extra)
    return env


def torchrun(out: Path, token_dir: Path, nproc: int = 2, **extra) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "smallinit",
        "train",
        "--config",
        "tiny",
        "--out",
        str(out),
        *tiny_overrides(token_dir, **extra),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=240)


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


RUN = {"train.max_steps": STEPS, "train.ckpt_every": CKPT, "train.eval_every": STEPS}


@pytest.fixture(scope="module")
def reference(token_dir, tmp_path_factory) -> dict[int, float]:
    """Losses of one process on the same global batch (4) and seed."""
    rd = tmp_path_factory.mktemp("ref") / "run"
    train(load_config("tiny", tiny_overrides(token_dir, **RUN)), rd)
    return losses(rd)


def resume_in_one_process(run_dir: Path, tmp_path: Path) -> dict[int, float]:
    """Drop the final checkpoint of a finished distributed run and resume its step-CKPT checkpoint here."""
    rd = tmp_path / f"{run_dir.name}-resumed"
    shutil.copytree(run_dir, rd)
    shutil.rmtree(rd / "checkpoints" / f"step_{STEPS:08d}")
    (rd / "summary.json").unlink()
    state = read_checkpoint(list_checkpoints(rd)[-1])["state"]
    assert state["step"] == CKPT and state["world_size"] == 2
    seen = {}

    class Start:
        def on_train_start(self, trainer):
            seen["step"], seen["world"], seen["parallel"] = (
                trainer.step,
                trainer.dist.world_size,
                trainer.cfg.train.parallel,
            )

    resume(rd, callbacks=[Start()])
    assert seen == {"step": CKPT, "world": 1, "parallel": "none"}
    return losses(rd)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_match_one_process_and_resume_in_one(parallel, reference, token_dir, tmp_path):
    extra = dict(RUN)
    if parallel == "fsdp":  # probes on: rank 0 computes, every rank joins the full-weights gather
        extra.update({"probe.every": 2, "probe.batch_size": 2, "probe.heatmaps": "[]"})
    rd = tmp_path / parallel
    r = torchrun(rd, token_dir, **extra, **{"train.parallel": parallel})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("done: step 6") == 1, r.stdout  # rank 0 alone reports
    got = losses(rd)
    assert sorted(got) == sorted(reference) == list(range(1, STEPS + 1))
    for s in reference:
        assert abs(got[s] - reference[s]) < TOL, (s, got[s], reference[s])
    # saved once (rank 0), full state dict, every CKPT steps
    assert [int(c.name[5:]) for c in list_checkpoints(rd)] == [CKPT, STEPS]
    assert not any(p.name.startswith(".tmp") for p in (rd / "checkpoints").iterdir())
    if parallel == "fsdp":
        probes = [json.loads(l) for l in (rd / "probes.jsonl").read_text().splitlines()]
        assert [p["step"] for p in probes] == [0, 1, 2, 4, 6]  # step 1: the early probes below every=2
        assert all(len(p["layers"]) == 2 and p["matrices"] for p in probes)
    # the 2-process checkpoint at step CKPT resumes in one process; the later steps are the single run's
    again = resume_in_one_process(rd, tmp_path)
    assert sorted(again) == list(range(1, STEPS + 1))
    for s in range(CKPT + 1, STEPS + 1):
        assert abs(again[s] - reference[s]) < TOL, (s, again[s], reference[s])


@pytest.fixture(scope="module")
def bad_batch_launch(token_dir, tmp_path_factory):
    rd = tmp_path_factory.mktemp("bad") / "run"
    return rd, torchrun(rd, token_dir, **{"train.batch_size": 3, "train.parallel": "ddp"})


def frames_in_our_code(stderr: str) -> list[str]:
    """Traceback frames (`File "…"` lines) whose file lies inside the smallinit package.

    Matched on the package's own folder, not on the text "smallinit/": a checkout at …/smallinit/ puts that text
    in the interpreter's path, which torchrun prints in its own report (issue 32, part 3)."""
    pkg = Path(smallinit.__file__).resolve().parent
    return [f for f in re.findall(r'File "([^"]+)"', stderr) if Path(f).resolve().is_relative_to(pkg)]


MSG = "error: train.batch_size=3 must be divisible by world_size=2 × micro_batch_size=1"


@pytest.mark.timeout(240)
def test_bad_launch_batch_not_divisible_by_world_size(bad_batch_launch):
    rd, r = bad_batch_launch
    assert r.returncode != 0  # torchrun itself exits 1 when a worker fails
    assert MSG in r.stderr
    assert "exitcode  : 2" in r.stderr  # the worker's own status, as torchrun reports it
    assert not frames_in_our_code(r.stderr), r.stderr[-3000:]  # no traceback through our code
    assert not (rd / "checkpoints").exists() and not (rd / "metrics.jsonl").exists()


@pytest.mark.timeout(240)
def test_bad_launch_error_printed_once(bad_batch_launch):
    _, r = bad_batch_launch
    out = r.stderr + r.stdout
    assert out.count("error: ") == 1 and MSG + "\n" in out, out[:500]


@pytest.mark.timeout(120)
def test_bad_launch_missing_rendezvous_variables(token_dir, tmp_path):
    """train.parallel=ddp without torchrun: one line naming the missing variables, exit 2."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "smallinit",
            "train",
            "--config",
            "tiny",
            "--out",
            str(tmp_path / "x"),
            *tiny_overrides(token_dir),
            "train.parallel=fsdp",
        ],
        capture_output=True,
        text=True,
        env=clean_env(WORLD_SIZE="2"),
        timeout=100,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: train.parallel=fsdp needs a torchrun launch"), r.stderr
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert var in lines[0]
    assert "WORLD_SIZE," not in lines[0]  # it was set: only the missing ones are named
    assert not (tmp_path / "x").exists()


def test_frames_in_our_code_ignores_a_checkout_named_smallinit():
    """A clone at …/with space/smallinit/ puts "smallinit/" in the interpreter's path (torchrun's report prints it):
    only a frame inside the package counts (the old text check failed every test from such a checkout)."""
    pkg = Path(smallinit.__file__).resolve().parent
    report = (
        'Traceback (most recent call last):\n  File "/tmp/with space/smallinit/.venv/bin/torchrun", line 8\n'
        "  error_file: <N/A>\n  smallinit FAILED\n  cmd: /tmp/with space/smallinit/.venv/bin/python -m smallinit\n"
    )
    assert "smallinit/" in report and frames_in_our_code(report) == []
    ours = report + f'  File "{pkg / "train" / "loop.py"}", line 3, in train\n'
    assert frames_in_our_code(ours) == [str(pkg / "train" / "loop.py")]
