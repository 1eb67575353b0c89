"""Resolving a device name: the one place that decides between CUDA and the CPU.

    resolve_device("auto")  -> cuda:LOCAL_RANK when CUDA is available, else cpu
    resolve_device("cuda")  -> cuda:LOCAL_RANK (LOCAL_RANK from torchrun, default 0); ConfigError without CUDA
    resolve_device("cuda:1"), resolve_device("cpu"), resolve_device("mps") -> as given

With ``fallback=True`` a CUDA request on a machine without CUDA warns and gives the CPU instead of failing
(for adapters called by other tools, e.g. lm-eval).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from smallinit.core.errors import ConfigError


def resolve_device(name: Any = "auto", *, fallback: bool = False, what: str = "device"):
    """The :class:`torch.device` for ``name`` (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a torch.device,
    or None/"" = auto); see the module docstring."""
    import torch

    name = str(name) if name else "auto"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        if fallback:
            warnings.warn(f"{what} {name!r} requested but CUDA is not available; using cpu", stacklevel=2)
            return torch.device("cpu")
        raise ConfigError(f"{what}={name} but no CUDA device is available")
    if name == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{what}={name!r}: not a device (auto, cpu, cuda, cuda:N, mps, ...)") from None


__all__ = ["resolve_device"]
