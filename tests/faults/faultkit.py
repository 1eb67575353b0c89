"""Shared helpers of the fault-injection suite (tests/faults/).

Not a conftest: a second ``conftest.py`` would shadow tests/conftest.py under the module name
``conftest`` (prepend import mode), so the fault tests import this module instead.

- :func:`fault_overrides` — the tiny run every fault test uses (a few seconds on one core);
- :func:`losses`, :func:`weights` — what "the same run" means: every logged loss and every final weight;
- :func:`in_child`, :func:`start_child` — run a function in a forked child (torch is already imported, so it starts in
  milliseconds) and return its exit code; the child can SIGKILL itself at a precise moment;
- :func:`fault_table` — a fixture recording one row (fault, trials, survived, data lost) per fault;
  the table is printed at the end of the session and written to ``$SMALLINIT_FAULT_TABLE`` (JSON)
  when that variable is set.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import tiny_overrides

# A run long enough for several checkpoints, pruning and an evaluation, short enough for 10 trials.
RUN = {"train.max_steps": 16, "train.ckpt_every": 4, "train.keep_ckpts": 2, "train.eval_every": 8}


def fault_overrides(token_dir: Path, **extra: Any) -> list[str]:
    return tiny_overrides(token_dir, **{**RUN, **extra})


def losses(run_dir: Path) -> dict[int, float]:
    """{step: loss} from metrics.jsonl (a torn line fails loudly: the suite expects none after resume)."""
    return {r["step"]: r["loss"] for r in map(json.loads, (Path(run_dir) / "metrics.jsonl").read_text().splitlines())}


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from smallinit.runs.checkpoint import load_checkpoint

    return load_checkpoint(run_dir).state_dict()


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def kill_self() -> None:
    """SIGKILL this process now: nothing after this line runs, no handler, no flush."""
    os.kill(os.getpid(), signal.SIGKILL)


def _child(fn: Callable[[], None]) -> None:
    try:
        fn()
    except BaseException:  # noqa: BLE001 - the exit code tells the parent; the traceback goes to captured stderr
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    os._exit(0)


def start_child(fn: Callable[[], None]) -> multiprocessing.Process:
    """``fn`` running in a forked process (exit code 0 on return, 3 on an exception)."""
    p = multiprocessing.get_context("fork").Process(target=_child, args=(fn,))
    p.start()
    return p


def in_child(
    fn: Callable[[], None], timeout: float = 120.0, kill_when: Callable[[], bool] | None = None, delay: float = 0.0
) -> int:
    """Run ``fn`` in a forked process; returns its exit code (-9 when SIGKILLed). With ``kill_when``, the
    parent SIGKILLs the child ``delay`` seconds after ``kill_when()`` first holds (polled every 10 ms)."""
    import time

    p = start_child(fn)
    deadline = time.time() + timeout
    if kill_when is not None:
        while p.is_alive() and time.time() < deadline and not kill_when():
            time.sleep(0.01)
        time.sleep(delay)
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
    p.join(max(0.0, deadline - time.time()))
    if p.is_alive():
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        raise TimeoutError(f"child did not finish in {timeout}s")
    return p.exitcode


# ---- the results table -----------------------------------------------------------------------------


class _Table:
    """pytest plugin: one row per fault, printed in the terminal summary."""

    name = "smallinit-fault-table"

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, fault: str, trials: int, survived: int, data_lost: str, notes: str = "") -> None:
        self.rows.append(
            {"fault": fault, "trials": trials, "survived": survived, "data_lost": data_lost, "notes": notes}
        )

    def markdown(self) -> str:
        lines = ["| fault | trials | survived | data lost | notes |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['fault']} | {r['trials']} | {r['survived']} | {r['data_lost']} | {r['notes']} |")
        return "\n".join(lines)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.rows:
            return
        terminalreporter.section("fault-injection results")
        terminalreporter.write_line(self.markdown())
        path = os.environ.get("SMALLINIT_FAULT_TABLE")
        if path:
            Path(path).write_text(json.dumps(self.rows, indent=2) + "\n")


@pytest.fixture
def fault_table(request) -> _Table:
    pm = request.config.pluginmanager
    table = pm.get_plugin(_Table.name)
    if table is None:
        table = _Table()
        pm.register(table, _Table.name)
    return table


__all__ = [
    "RUN",
    "fault_overrides",
    "fault_table",
    "in_child",
    "kill_self",
    "losses",
    "same_weights",
    "start_child",
    "weights",
]
