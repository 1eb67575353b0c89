"""The per-machine cache of ``train.dtype=auto``'s measurements (:mod:`smallinit.train.precision`): ``dtype.json`` in
``$SMALLINIT_CACHE``, else ``$XDG_CACHE_HOME/smallinit``, else ``~/.cache/smallinit``, read and written under an
exclusive lock and replaced atomically. An entry records the step times, when and under what load it was measured
(:func:`load_per_core`): one measured on a busy machine is measured again once the machine is quieter."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

CACHE_FILE = "dtype.json"
LOADED = 0.5
"""A measurement taken at more than this 1-minute load average per core (beyond the measuring process) counts as
taken under load."""


def load_per_core() -> float:
    """The 1-minute load average per core (0 where the system does not say; ``SMALLINIT_LOAD_PER_CORE`` replaces it,
    as the tests do so that no test depends on this machine's load)."""
    env = os.environ.get("SMALLINIT_LOAD_PER_CORE")
    if env:
        return float(env)
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except (OSError, AttributeError):
        return 0.0


def cache_dir() -> Path:
    """``$SMALLINIT_CACHE``, else ``$XDG_CACHE_HOME/smallinit``, else ``~/.cache/smallinit``."""
    env = os.environ.get("SMALLINIT_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "smallinit"


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def read_cache(path: Path) -> dict[str, Any]:
    """The cache's entries (empty when the file is missing or unreadable: a damaged cache is measured again)."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


@contextlib.contextmanager
def locked(path: Path | None):
    """An exclusive flock on ``path.lock`` (nothing when ``path`` is None or the folder cannot be made)."""
    if path is None:
        yield
        return
    fd = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def write_cache_entry(path: Path, key: str, entry: dict[str, Any]) -> bool:
    """Add ``entry`` under ``key`` (re-reading the file first), atomically; False when it cannot be written (a
    read-only home: the run goes on, the next one measures again)."""
    from smallinit.core.io import atomic_write_json

    try:
        d = read_cache(path)
        d[key] = entry
        atomic_write_json(path, d)
        return True
    except OSError:
        return False


__all__ = [
    "CACHE_FILE",
    "LOADED",
    "cache_dir",
    "cache_path",
    "load_per_core",
    "locked",
    "read_cache",
    "write_cache_entry",
]
