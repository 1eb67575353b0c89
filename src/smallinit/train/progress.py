"""The progress line of a training run on stderr (:class:`Progress`): a tqdm bar on a terminal, plain lines in a log
file."""

from __future__ import annotations

import math
import sys
import time
from typing import Any


class Progress:
    """Training progress on stderr: a tqdm bar on a terminal; otherwise (a log file) a plain line
    ``step S/N (P%) loss L [val V] tok/s R elapsed E eta T`` at the first step, at evaluated steps, at the last
    step and at most every ``seconds`` in between — never carriage returns."""

    def __init__(self, total: int, initial: int, enabled: bool, seconds: float = 30.0, stream=None):
        self.total, self.enabled, self.seconds = total, enabled, seconds
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start_step, self.t0, self.last = initial, time.time(), None
        self.bar = None
        if enabled and self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True, file=self.stream)

    def update(self, step: int, loss: float, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if record:
                self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{record.get('tokens_per_s', 0):.0f}", refresh=False)
            self.bar.update(1)
            return
        now = time.time()
        due = self.last is None or step == self.total or "val_loss" in record or now - self.last >= self.seconds
        if not due:
            return
        self.last = now
        el = now - self.t0
        done = step - self.start_step
        eta = el / done * (self.total - step) if done > 0 else float("nan")
        val = f" val {record['val_loss']:.4f}" if "val_loss" in record else ""
        tps = f" tok/s {record['tokens_per_s']:.0f}" if "tokens_per_s" in record else ""
        print(
            f"step {step}/{self.total} ({100 * step / max(self.total, 1):.0f}%) loss {loss:.4f}{val}{tps} "
            f"elapsed {_hms(el)} eta {_hms(eta)}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
