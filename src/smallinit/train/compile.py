"""``train.compile``: when ``torch.compile`` pays for itself, and one compile cache shared by every run.

``train.compile = "auto"`` (the default) resolves, per run, to

    compile  ⇔  device is CUDA and max_steps ≥ AUTO_MIN_STEPS_CUDA (300)
             or  device is CPU, the model is dense and max_steps ≥ AUTO_MIN_STEPS_CPU (1000)

A run repays the compile when steps · t_step · (1 − 1/s) > compile time (s = compiled speed-up). Measured on CPU
(``benchmarks/compile_bench.py``, benchmarks/RESULTS.md): at the reproduction's shape (d 128 × 4, T 256, B 16,
one thread) s = 1.27 over the eager fast paths of :mod:`smallinit.model`, i.e. ≈ 21% of a ≈ 0.3 s step saved
per step; the compile of such a model took 18–33 s on an idle 2-core machine (RESULTS.md of 2026-11-29), so a
cold compile breaks even after ≈ 300–500 steps and a cached one (later runs of a shape) far sooner. 1000 steps
keeps a 2× margin for the cold case. MoE layers stay eager on CPU (their grouped matmul has no compiled CPU
kernel). CUDA: not measured here (no GPU was lent to this task); compiled kernels are the usual choice there and
300 steps is a conservative assumption. Tests, the demo (500 steps) and the cpu preset's runs (240) stay eager.
``true``/``false`` force it either way.

Cache: compiled graphs and kernels go to ``TORCHINDUCTOR_CACHE_DIR``; when unset, a run that compiles points it at
one folder for all runs (``$XDG_CACHE_HOME/smallinit/inductor``, default ``~/.cache/smallinit/inductor``), so
the second and later runs of a sweep or reproduction of the same shape load the compiled code instead of
compiling it again.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

AUTO_MIN_STEPS_CUDA = 300
AUTO_MIN_STEPS_CPU = 1000


def resolve_compile(setting: bool | str, device: torch.device, max_steps: int, moe: bool = False) -> bool:
    """Whether a run compiles: ``setting`` if it is a bool, else the "auto" rule of the module docstring."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"train.compile must be true, false or 'auto', got {setting!r}")
    if device.type == "cuda":
        return max_steps >= AUTO_MIN_STEPS_CUDA
    if device.type == "cpu":
        return not moe and max_steps >= AUTO_MIN_STEPS_CPU and cpu_build_blocker() is None
    return False


def cpu_build_blocker(paths: list[str] | None = None) -> str | None:
    """Why torch.compile's CPU backend cannot build here, or None: inductor passes torch's include and library folders
    and its cache folder to the C++ compiler unquoted, so a torch installed under a path with a space (a checkout in
    ``…/with space/…``) fails with ``ld returned 1 exit status`` (torch 2.13). ``paths`` defaults to torch's own
    folder and :func:`compile_cache_dir`; "auto" stays eager when this says why."""
    if paths is None:
        paths = [str(Path(torch.__file__).resolve().parent), str(compile_cache_dir())]
    bad = [q for q in paths if any(ch.isspace() for ch in q)]
    return f"a path with a space ({bad[0]}): inductor's C++ build does not quote it" if bad else None


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
