"""Where things live: the repository's shared data folder (optional) and packaged configs."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def shared_data_dir() -> Path | None:
    """The benchmark/corpus folder ``../shared/data`` beside the checkout, or ``$SMALLINIT_DATA``.

    Returns None when neither exists (tests that need it then skip).
    """
    env = os.environ.get("SMALLINIT_DATA")
    candidates = [Path(env)] if env else []
    candidates += [Path.cwd() / ".." / "shared" / "data", PACKAGE_DIR.parents[2] / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None
