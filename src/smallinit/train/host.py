"""The training process's CPU settings: glibc keeps freed blocks for the next step, and denormal floats flush to zero.

:func:`prepare_cpu_process` applies both for a CPU training run (the Trainer, the anchor task, the planner's
calibration); :func:`restore_cpu_process` gives the calling thread its float mode back when the run ends.

**Freed memory.** A CPU training step allocates and frees the same large buffers every step (activations, gradients,
the loss's logit chunks). glibc serves a block above its mmap threshold with a fresh ``mmap`` and returns it on
``free``; the threshold rises with freed blocks but never above 32 MiB, and the top of the heap is trimmed back to
the OS past twice that. Either way the next step page-faults the memory in again (zero-filled, 4 KiB at a time):
7,000–13,000 minor faults per step at the reproduction's shape (d 128 × 4, bytes). With both thresholds raised the
step reuses its memory (≈ 600 faults) and ran 3% faster at that shape and at d 128 × 4 with vocab 8192
(benchmarks/RESULTS.md, fifth pass). PyTorch's CPU tuning guide gets the same from jemalloc or tcmalloc preloaded.

**Denormals.** After a couple of hundred steps on English text, a small-init model's (γ = 1, ε = 1e-12) CPU flash-
attention backward meets values in float32's subnormal range (|x| < 2⁻¹²⁶ ≈ 1.2e-38; attention weights far below
their row's maximum, presumably), and Intel CPUs compute on subnormal operands through a microcode assist. At the
reproduction's shape (d 128 × 4, bytes, one thread, a Xeon with AVX-512/AMX) its steps went from 341 ms at step 100
to 504–614 ms from step 200 on (the attention backward alone 43 → 226 ms), and ran at 310–344 ms with flush-to-zero;
the γ = 0.5, ε = 1e-5 baseline stayed at 292–302 ms, and on Python source neither slowed (`benchmarks/denormals.py`,
RESULTS.md sixth pass). That was the benchmark's recipe (AdamW defaults, constant lr); two Trainer runs of 400 and
900 steps with the project's recipe did not slow down with or without the flush, so here it is insurance that costs
nothing measurable. (A model with large logits, e.g. a tied head left at PyTorch's N(0, 1) embedding init, gets the
same slowdown in the LM head.) ``torch.set_flush_denormal(True)`` (SSE's FTZ/DAZ) makes such values zero: results
change only below 1.2e-38 (float32) or 2.2e-308 (float64).
"""

from __future__ import annotations

import ctypes
import os
import platform

import torch

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 * 2**20
"""Blocks up to 256 MiB come from the heap (and are reused) instead of a fresh mmap each time."""
TRIM_THRESHOLD = 1 << 30
"""Free memory at the top of the heap is handed back to the OS only beyond 1 GiB."""

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """``mallopt(M_MMAP_THRESHOLD, 256 MiB)`` and ``mallopt(M_TRIM_THRESHOLD, 1 GiB)`` once per process, on Linux
    with glibc (elsewhere, or with ``SMALLINIT_MALLOC=default`` in the environment, nothing; ``keep`` or unset: on).
    Returns whether the settings are in effect. The cost: the process keeps its peak heap between steps (which the
    next step needs again) instead of returning it to the OS."""
    global _applied
    mode = os.environ.get("SMALLINIT_MALLOC", "keep")
    if mode not in ("keep", "default"):
        from smallinit.core.errors import ConfigError

        raise ConfigError(
            f"SMALLINIT_MALLOC={mode!r}: use 'keep' (reuse freed memory, the default) or 'default' "
            "(glibc's own thresholds)"
        )
    if _applied is None:
        _applied = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and mode == "keep":
            try:
                libc = ctypes.CDLL("libc.so.6")
                _applied = bool(
                    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                )
            except (OSError, AttributeError):
                _applied = False
    return _applied


def flush_denormals() -> bool:
    """``torch.set_flush_denormal(True)``: subnormal inputs and results of CPU float ops become ±0. With
    ``SMALLINIT_DENORMALS=keep`` in the environment, nothing (``flush`` or unset: on).

    The mode is a register of each thread, set on the calling one; threads created after it inherit it, but the
    intra-op workers of a process that has already run a parallel op keep theirs. So call it first thing in a
    training process (the Trainer does, before it builds the model). Returns whether flushing is in effect on
    every intra-op thread, checked by its effect on a product split across them (False where a worker was made
    earlier, with ``keep``, or on a CPU without SSE3)."""
    mode = os.environ.get("SMALLINIT_DENORMALS", "flush")
    if mode not in ("flush", "keep"):
        from smallinit.core.errors import ConfigError

        raise ConfigError(
            f"SMALLINIT_DENORMALS={mode!r}: use 'flush' (subnormal floats become 0, the default) or "
            "'keep' (IEEE gradual underflow)"
        )
    if mode == "keep" or not torch.set_flush_denormal(True):
        return False
    return denormals_flushed()


def denormals_flushed() -> bool:
    """Whether 1e-30 × 1e-10 (a float32 subnormal) comes out 0 in every part of an elementwise product large enough
    to be split across all of this process's intra-op threads."""
    n = max(1, torch.get_num_threads()) * (1 << 16)
    return not bool(torch.mul(torch.full((n,), 1e-30), 1e-10).count_nonzero())


def thread_flushes_denormals() -> bool:
    """Whether the calling thread flushes subnormals now: 1e-30 × 1e-10 (one element: computed on this thread)
    comes out 0."""
    return torch.tensor([1e-30]).mul(1e-10).item() == 0.0


def prepare_cpu_process() -> dict[str, bool]:
    """The CPU training process's settings: :func:`keep_freed_memory` and :func:`flush_denormals`. Returns which
    are in effect, ``{"keep_freed_memory": …, "flush_denormals": …, "flushed_before": …}`` — the last for
    :func:`restore_cpu_process`."""
    before = thread_flushes_denormals()
    return {"keep_freed_memory": keep_freed_memory(), "flush_denormals": flush_denormals(), "flushed_before": before}


def restore_cpu_process(settings: dict[str, bool] | None) -> None:
    """Put the calling thread's denormal mode back as :func:`prepare_cpu_process` found it, for callers that train
    inside a longer-lived process (a notebook, a test session: hypothesis, numpy and the rest expect IEEE
    subnormals). Intra-op worker threads created during training keep flushing (their mode is not reachable from
    here; it touches only values below 1.2e-38); the allocator setting stays."""
    if settings is not None and not settings.get("flushed_before", False):
        torch.set_flush_denormal(False)


__all__ = [
    "denormals_flushed",
    "flush_denormals",
    "keep_freed_memory",
    "prepare_cpu_process",
    "restore_cpu_process",
    "thread_flushes_denormals",
]
