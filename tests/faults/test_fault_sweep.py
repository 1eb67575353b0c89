"""Fault 5: a sweep killed mid-way and rerun.

The sweep (3 runs, jobs run in-process) trains in a forked child that is SIGKILLed at a seeded moment
inside the second run — during one of its checkpoint file writes. Rerunning the sweep must leave the
finished first run byte-for-byte untouched, continue the interrupted second run from its last complete
checkpoint to exactly the losses and weights of an uninterrupted run, and train the third.
(tests/test_sweep.py covers a kill of the `smallinit sweep` process itself at a time-based moment; this
file adds the kill inside a checkpoint write and checks that the resumed run is exact.)
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
from faultkit import fault_overrides, fault_table, in_child, kill_self, losses, same_weights, weights  # noqa: F401

from smallinit.experiments.sweep import parse_sweep, run_state, run_sweep
from smallinit.runs.checkpoint import list_checkpoints
from smallinit.train import train

STEPS, EVERY = 8, 4
FILES_PER_CKPT = 5
WRITES_PER_RUN = STEPS // EVERY * FILES_PER_CKPT
SEEDS = range(3)


def sweep_spec(token_dir):
    over = fault_overrides(
        token_dir,
        **{"train.max_steps": STEPS, "train.ckpt_every": EVERY, "train.keep_ckpts": 10, "train.eval_every": STEPS},
    )
    return parse_sweep({"base": "tiny", "overrides": over, "grid": {"model.gamma": [0.5, 1.0, 1.5]}})


def tree(d: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``d``: relative path → (sha256, mtime_ns)."""
    return {
        str(p.relative_to(d)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def reference(token_dir, tmp_path_factory):
    """The second run, trained without interruption from the same resolved config."""
    spec = sweep_spec(token_dir)
    rd = tmp_path_factory.mktemp("sweepref") / "run"
    from smallinit.config import config_from_dict

    cfg = config_from_dict(spec.runs[1].config.to_dict())
    cfg.train.progress = False
    train(cfg, rd)
    return {"losses": losses(rd), "weights": weights(rd)}


@pytest.mark.timeout(240)
def test_sweep_killed_in_a_checkpoint_write_then_rerun(token_dir, tmp_path, reference, fault_table):
    spec = sweep_spec(token_dir)
    names = [r.name for r in spec.runs]
    survived = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        n = WRITES_PER_RUN + rng.randrange(WRITES_PER_RUN)  # a write of the second run's checkpoints
        frac = rng.random()
        out = tmp_path / f"sweep{seed}"

        def child():
            import smallinit.runs.checkpoint as ck

            real, count = ck._write_file, [0]

            def write(path, data):
                if count[0] == n:
                    with open(path, "wb") as f:
                        f.write(data[: int(len(data) * frac)])
                    kill_self()
                count[0] += 1
                real(path, data)

            ck._write_file = write
            run_sweep(spec, out, gflops=20, inprocess=True, log=lambda s: None)

        assert in_child(child) == -9
        first, second, third = (out / name for name in names)
        assert [run_state(d) for d in (first, second, third)] == ["done", "partial", "new"]
        complete = (n - WRITES_PER_RUN) // FILES_PER_CKPT * EVERY  # the second run's last complete checkpoint
        assert [int(c.name[5:]) for c in list_checkpoints(second)][-1:] == ([complete] if complete else [])
        before = tree(first)

        logs: list[str] = []
        results = run_sweep(spec, out, gflops=20, inprocess=True, log=logs.append)
        assert [results[k].state for k in names] == ["done"] * 3, logs
        assert results[names[0]].skipped and results[names[1]].resumed and not results[names[2]].skipped
        assert tree(first) == before, "a finished run was touched"
        assert losses(second) == reference["losses"], (seed, n)
        assert same_weights(weights(second), reference["weights"])
        assert not any(p.name.startswith(".tmp") for p in (second / "checkpoints").iterdir())
        assert "1/3 already finished" in "\n".join(logs)
        survived += 1
    fault_table.record(
        "sweep SIGKILLed inside a checkpoint write of its 2nd run, then rerun",
        len(SEEDS),
        survived,
        "none",
        "finished run untouched (bytes and mtimes); interrupted run resumed exactly",
    )
