"""The README's commands work in the order a newcomer reads them (issue #46 item 4), checked without training: every
`smallinit …` line of its shell blocks parses with the CLI as it is today (verb, options, config names), every Python
block compiles, every relative link points at a file of the repository, and the set-up comes first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of ``lang``."""
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def shell_commands(block: str) -> list[list[str]]:
    """Each command of a shell block as argv: continuation lines joined, comments dropped."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line))
    return out


def smallinit_commands() -> list[list[str]]:
    cmds = []
    for b in blocks(README.read_text(), "bash"):
        for argv in shell_commands(b):
            if argv and argv[0] == "smallinit":
                cmds.append(argv[1:])
    return cmds


def test_the_set_up_is_on_the_first_screen():
    """The two set-up commands come before any result table (within the first 40 lines)."""
    head = README.read_text().splitlines()[:40]
    assert any("make demo" in line for line in head) and any("make test" in line for line in head)


@pytest.mark.parametrize("argv", smallinit_commands(), ids=lambda a: " ".join(a)[:60])
def test_every_smallinit_command_in_the_readme_parses(argv):
    """The verb exists and its options parse (`[...]` optional parts are dropped); nothing is run."""
    from smallinit.cli import VERBS, build_parser

    argv = [a for a in argv if not (a.startswith("[") or a.endswith("]"))]
    assert argv[0] in VERBS, argv
    parser = build_parser([argv[0]])[1][argv[0]]
    args, extra = parser.parse_known_intermixed_args(argv[1:])
    assert not [x for x in extra if x.startswith("-")], extra


def test_every_python_block_compiles():
    for b in blocks(README.read_text(), "python"):
        compile(b, "README.md", "exec")


def test_every_relative_link_exists():
    links = re.findall(r"\]\(((?!https?:)[^)#\s]+)", README.read_text())
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
