"""The training process's allocator settings (smallinit.train.host), checked by their effect: a freed 64 MiB
buffer is reused by the next allocation instead of being page-faulted in afresh."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from smallinit.train.host import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "on" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(6):  # a step's buffer, allocated, written and freed six times; the last four counted
    if step == 2:
        before = faults()
    x = torch.ones(16 * 2**20)  # 64 MiB = 16,384 pages, every page written
    del x
print(applied, faults() - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_a_freed_step_buffer_is_reused_instead_of_faulted_in_again():
    def run(mode: str, env_extra: dict | None = None) -> tuple[bool, int]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "SMALLINIT_MALLOC"))}
        env.update(env_extra or {})
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                             env=env).stdout.split()
        return out[0] == "True", int(out[1])

    # the heap settles within a step or two (a block freed below a small allocation is reused once the next one
    # fits it): at most one of the four counted buffers is new memory
    applied, faults = run("on")
    assert applied and faults < 20_000
    applied, faults = run("off")
    assert not applied and faults > 60_000    # glibc's default: a fresh mmap each time, every page faulted in again
    applied, faults = run("on", {"SMALLINIT_MALLOC": "default"})
    assert not applied and faults > 60_000    # the opt-out


def test_an_unknown_malloc_mode_is_one_clear_error(monkeypatch):
    from smallinit.errors import ConfigError
    from smallinit.train.host import keep_freed_memory

    monkeypatch.setenv("SMALLINIT_MALLOC", "off")
    with pytest.raises(ConfigError, match="SMALLINIT_MALLOC='off': use 'keep'"):
        keep_freed_memory()
