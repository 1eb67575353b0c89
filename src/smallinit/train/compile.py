"""``train.compile``: when ``torch.compile`` pays for itself, and one compile cache shared by every run.

``train.compile = "auto"`` (the default) resolves, per run, to

    compile  ⇔  device is CUDA and max_steps ≥ AUTO_MIN_STEPS_CUDA
             or  device is CPU, the model is dense, d_model ≥ AUTO_MIN_D_CPU and max_steps ≥ AUTO_MIN_STEPS_CPU

The CPU thresholds come from ``benchmarks/compile_bench.py`` (table in benchmarks/RESULTS.md): a run repays the
compile when steps · t_step · (1 − 1/speed-up) exceeds the compile time (cold for the first run of a shape,
cached for the rest). At the reproduction's shape (d 128) compiled steps measured no faster than the eager fast
paths of :mod:`smallinit.model` on this CPU, so no length repays it there; at d 384 the measured speed-up and
compile time set AUTO_MIN_STEPS_CPU. On CUDA, compiled kernels are the norm (2–3× fewer memory passes) and a
compile of these models takes about a minute: a few hundred steps repay it. Tests and short runs (fewer steps than
the thresholds) stay eager. ``true``/``false`` force it either way.

Cache: compiled graphs and kernels go to ``TORCHINDUCTOR_CACHE_DIR``; when unset, a run that compiles points it at
one folder for all runs (``$XDG_CACHE_HOME/smallinit/inductor``, default ``~/.cache/smallinit/inductor``), so
the second and later runs of a sweep or reproduction of the same shape load the compiled code instead of
compiling it again (the cached compile times in RESULTS.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

AUTO_MIN_STEPS_CUDA = 300
AUTO_MIN_D_CPU = 384
AUTO_MIN_STEPS_CPU = 2000


def resolve_compile(setting: bool | str, device: torch.device, d_model: int, max_steps: int, moe: bool = False) -> bool:
    """Whether a run compiles: ``setting`` if it is a bool, else the "auto" rule of the module docstring."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"train.compile must be true, false or 'auto', got {setting!r}")
    if device.type == "cuda":
        return max_steps >= AUTO_MIN_STEPS_CUDA
    if device.type == "cpu":
        return not moe and d_model >= AUTO_MIN_D_CPU and max_steps >= AUTO_MIN_STEPS_CPU
    return False


def compile_cache_dir() -> Path:
    """The inductor cache folder runs share: ``TORCHINDUCTOR_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/smallinit/inductor`` (``~/.cache/smallinit/inductor``)."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "smallinit" / "inductor"


def compile_module(module: torch.nn.Module):
    """``torch.compile(module)`` with the shared cache folder (sets ``TORCHINDUCTOR_CACHE_DIR`` when unset)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compile_cache_dir()))
    return torch.compile(module)
