"""Graceful interrupts: on SIGINT/SIGTERM the step in progress finishes, a checkpoint is written, and
:class:`~smallinit.core.errors.Interrupted` is raised (``smallinit train`` then exits 130 / 143 with one line).

:func:`stop_signals` installs the handlers around the loop (they set ``trainer._stop_signal``), :func:`should_stop`
is asked at each step boundary (every rank stops at the same step) and :func:`interrupt` saves and raises."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import torch

from smallinit.core.errors import Interrupted
from smallinit.runs.checkpoint import list_checkpoints

SAME_STOP_SECONDS = 2.0
"""A second stop signal this soon after the first is the same request (:func:`stop_signals`)."""


@contextlib.contextmanager
def stop_signals(trainer):
    """SIGINT/SIGTERM set a flag that the loop honours at the next step boundary (checkpoint, then
    :class:`Interrupted`); a second SIGINT interrupts at once — unless it comes within
    :data:`SAME_STOP_SECONDS` of the first: Ctrl-C under a sweep reaches a run twice (the terminal signals the
    whole process group and the runner forwards its own), and that is still one request to stop cleanly.
    Only in the main thread."""
    trainer._stop_signal = None
    first = [0.0]
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if trainer._stop_signal is not None:
            if signum == signal.SIGINT and time.monotonic() - first[0] > SAME_STOP_SECONDS:
                raise KeyboardInterrupt
            return
        trainer._stop_signal = signum
        first[0] = time.monotonic()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def should_stop(trainer) -> bool:
    """Whether a stop signal arrived (on any rank: every rank stops at the same step)."""
    flag = getattr(trainer, "_stop_signal", None) is not None
    if trainer.dist.enabled:  # every rank stops at the same step
        t = torch.tensor([1.0 if flag else 0.0], device=trainer.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        flag = bool(t.item())
    return flag


def interrupt(trainer, streak: int) -> None:
    """Save a checkpoint at this step boundary (unless the loss is above the divergence line: ``streak`` > 0) and
    raise :class:`Interrupted`."""
    signum = getattr(trainer, "_stop_signal", None) or signal.SIGTERM
    ckpts = list_checkpoints(trainer.run_dir)
    saved = ckpts[-1] if ckpts and ckpts[-1].name.endswith(f"{trainer.step:08d}") else None
    if saved is None and streak == 0:
        saved = trainer.save()
    name = signal.Signals(signum).name
    where = (
        f"checkpoint saved at step {trainer.step} ({saved})"
        if saved is not None
        else "no checkpoint written (loss above the divergence line); resume starts from the last one"
    )
    raise Interrupted(
        f"interrupted by {name} at step {trainer.step}: {where}; continue with "
        f"`smallinit train --resume {trainer.run_dir}`",
        int(signum),
        trainer.step,
        str(saved) if saved else None,
    )
