"""docs/definitions.md is sections 1–2 of the team's design notes, copied verbatim for clones of the repository."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT.parent / "shared" / "DESIGN.md"


def sections_1_and_2(text: str) -> str:
    start = text.index("## 1. What the paper says")
    return text[start : text.index("## 3. ", start)].rstrip()


def test_the_definitions_are_the_design_notes_sections_verbatim():
    if not NOTES.is_file():
        pytest.skip("../shared/DESIGN.md not beside this clone")
    assert sections_1_and_2((ROOT / "docs" / "definitions.md").read_text() + "\n## 3. ") == sections_1_and_2(
        NOTES.read_text()
    )
