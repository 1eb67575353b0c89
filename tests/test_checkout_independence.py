"""Tests do not depend on what the checkout holds (issue #46 item 3): `make demo` prepares data/stdlib and writes
out/demo, and `make test` after it must pass as on a fresh clone."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_runs_outside_the_checkout():
    """The autouse fixture in conftest.py: the working directory is an empty folder outside the repository, so a
    relative default such as data.path=data/stdlib never finds the checkout's data."""
    cwd = Path(os.getcwd()).resolve()
    assert ROOT != cwd and ROOT not in cwd.parents
    assert not any(cwd.iterdir())


def test_a_default_data_path_finds_nothing_even_when_the_checkout_has_data(tmp_path):
    """The case that failed after `make demo`: a crossover into a foreign folder with the default data path. With
    data/stdlib present in the checkout it used to train 12 jobs; here it is refused before any work whatever the
    checkout holds."""
    from smallinit.cli import main as cli

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    rc = cli(["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1M", "--out", str(busy)])
    assert (
        rc == 2
        and (busy / "notes.txt").read_text() == "mine"
        and sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    )
