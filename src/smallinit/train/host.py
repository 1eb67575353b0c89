"""The training process's allocator: glibc keeps freed blocks for the next step instead of handing them back.

A CPU training step allocates and frees the same large buffers every step (activations, gradients, the loss's
logit chunks). glibc serves a block above its mmap threshold with a fresh ``mmap`` and returns it on ``free``; the
threshold rises with freed blocks but never above 32 MiB, and the top of the heap is trimmed back to the OS past
twice that. Either way the next step page-faults the memory in again (zero-filled, 4 KiB at a time): 7,000–13,000
minor faults per step at the reproduction's shape (d 128 × 4, bytes). With both thresholds raised the step reuses its
memory (≈ 600 faults) and ran 3% faster at that shape and at d 128 × 4 with vocab 8192 (benchmarks/RESULTS.md, fifth
pass). PyTorch's CPU tuning guide gets the same from jemalloc or tcmalloc preloaded.
"""

from __future__ import annotations

import ctypes
import os
import platform

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
        from smallinit.errors import ConfigError

        raise ConfigError(f"SMALLINIT_MALLOC={mode!r}: use 'keep' (reuse freed memory, the default) or 'default' "
                          "(glibc's own thresholds)")
    if _applied is None:
        _applied = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and mode == "keep":
            try:
                libc = ctypes.CDLL("libc.so.6")
                _applied = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
            except (OSError, AttributeError):
                _applied = False
    return _applied


__all__ = ["keep_freed_memory"]
