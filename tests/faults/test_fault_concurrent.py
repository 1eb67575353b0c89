"""Fault 7: two `train` processes pointed at the same RUN_DIR.

Process A trains (paused mid-run so that the others surely overlap it). Meanwhile
``smallinit train --resume RUN_DIR`` (B1), ``smallinit train --out RUN_DIR`` with another config (B2) and
the Python API (B3) all refuse with one clear error; then A finishes and its run is exactly the
undisturbed run — same config.yaml, same losses, same weights, no duplicate log lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import fault_overrides, fault_table, losses, same_weights, start_child, weights  # noqa: F401

from smallinit.core.errors import RunDirError
from smallinit.train import load_config, resume, train


class PauseAt:
    """Stop at ``step`` until the file ``go`` appears (announcing the pause with ``paused``)."""

    def __init__(self, step: int, paused: Path, go: Path):
        self.step, self.paused, self.go = step, paused, go

    def on_step_end(self, trainer, step, record):
        if step == self.step:
            tmp = self.paused.with_suffix(".tmp")  # rename: the waiter never sees an empty file
            tmp.write_text(str(os.getpid()))
            os.replace(tmp, self.paused)
            deadline = time.time() + 150
            while not self.go.exists():
                if time.time() > deadline:
                    raise TimeoutError("never released")
                time.sleep(0.02)


@pytest.mark.timeout(240)
def test_second_process_on_same_run_dir_refuses(token_dir, tmp_path, fault_table):
    ref, rd = tmp_path / "ref", tmp_path / "run"
    train(load_config("tiny", fault_overrides(token_dir)), ref)
    paused, go = tmp_path / "paused", tmp_path / "go"

    def a():
        train(load_config("tiny", fault_overrides(token_dir)), rd, callbacks=[PauseAt(6, paused, go)])

    proc_a = start_child(a)
    try:
        deadline = time.time() + 120
        while not paused.exists() and time.time() < deadline and proc_a.is_alive():
            time.sleep(0.02)
        assert paused.exists(), "A never reached its pause"
        a_pid = int(paused.read_text())
        config_before = (rd / "config.yaml").read_bytes()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cli = [sys.executable, "-m", "smallinit", "train"]
        b1 = subprocess.Popen(
            [*cli, "--resume", str(rd)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        b2 = subprocess.Popen(
            [*cli, "--config", "tiny", "--out", str(rd), *fault_overrides(token_dir, **{"optim.lr": 0.5})],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        out1, out2 = b1.communicate(timeout=120), b2.communicate(timeout=120)
        with pytest.raises(RunDirError, match="in use by another process"):
            resume(rd)
    finally:
        go.write_text("go")
        proc_a.join(200)
    assert proc_a.exitcode == 0, "A did not finish cleanly"
    assert b1.returncode == 2 and out1[1].strip().splitlines() == [
        f"error: {rd} is in use by another process (pid {a_pid}); wait for it or choose another directory"
    ], out1
    assert b2.returncode == 2 and out2[1].strip().splitlines() == [
        f"error: {rd} already holds a run; use `smallinit train --resume {rd}` or a new --out"
    ], out2
    # A's run is untouched by the refused ones
    assert (rd / "config.yaml").read_bytes() == config_before
    assert len((rd / "metrics.jsonl").read_text().splitlines()) == len(losses(ref))
    assert losses(rd) == losses(ref) and same_weights(weights(rd), weights(ref))
    fault_table.record(
        "second `train` on a running RUN_DIR (CLI --resume, CLI --out, API)",
        3,
        3,
        "none (first run bit-identical to an undisturbed one)",
        "lock on RUN_DIR/.lock",
    )
