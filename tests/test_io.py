"""Atomic writes: content, no temporary left behind, and the permissions an ordinary open() would give."""

from __future__ import annotations

import json
import os
import stat

import pytest

from smallinit.commands.evaluate import write_json_atomic
from smallinit.core.io import atomic_write_json, atomic_write_text, umask


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_atomic_files_get_umask_permissions_not_mkstemp_0600(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert umask() == mask
        atomic_write_text(tmp_path / "a.txt", "hello")
        write_json_atomic(tmp_path / "b.json", {"x": float("nan"), "y": "中文"})
        plain = tmp_path / "c.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    want = stat.S_IMODE(plain.stat().st_mode)
    assert want == 0o666 & ~mask
    for name in ("a.txt", "b.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == want
    assert (tmp_path / "a.txt").read_text() == "hello"
    assert json.loads((tmp_path / "b.json").read_text(encoding="utf-8")) == {"x": None, "y": "中文"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "c.txt"]  # no temporaries left


def test_atomic_write_replaces_whole_file(tmp_path):
    atomic_write_json(tmp_path / "s.json", {"a": list(range(1000))})
    atomic_write_json(tmp_path / "s.json", {"a": 1})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": 1}
