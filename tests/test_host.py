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
        out = subprocess.run(
            [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env
        ).stdout.split()
        return out[0] == "True", int(out[1])

    # the heap settles within a step or two (a block freed below a small allocation is reused once the next one
    # fits it): at most one of the four counted buffers is new memory
    applied, faults = run("on")
    assert applied and faults < 20_000
    applied, faults = run("off")
    assert not applied and faults > 60_000  # glibc's default: a fresh mmap each time, every page faulted in again
    applied, faults = run("on", {"SMALLINIT_MALLOC": "default"})
    assert not applied and faults > 60_000  # the opt-out


def test_an_unknown_malloc_mode_is_one_clear_error(monkeypatch):
    from smallinit.core.errors import ConfigError
    from smallinit.train.host import keep_freed_memory

    monkeypatch.setenv("SMALLINIT_MALLOC", "off")
    with pytest.raises(ConfigError, match="SMALLINIT_MALLOC='off': use 'keep'"):
        keep_freed_memory()


FLUSH_PROBE = """
import sys, torch
torch.set_num_threads(2)
if sys.argv[1] == "pool-first":
    torch.mul(torch.ones(1 << 20), 2.0)  # a parallel op before the setting: the workers exist already
from smallinit.train.host import denormals_flushed, flush_denormals
print(flush_denormals(), denormals_flushed(), torch.tensor([1e-30]).mul(1e-10).item())
"""


def test_denormals_flush_to_zero_on_every_thread_and_the_opt_out_keeps_them():
    def run(mode: str, env_extra: dict | None = None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "SMALLINIT_DENORMALS"}
        env.update(env_extra or {})
        return subprocess.run(
            [sys.executable, "-c", FLUSH_PROBE, mode], capture_output=True, text=True, check=True, env=env
        ).stdout.split()

    on, everywhere, value = run("fresh")
    assert (on, everywhere, float(value)) == ("True", "True", 0.0)
    on, everywhere, value = run("fresh", {"SMALLINIT_DENORMALS": "keep"})
    assert (on, everywhere) == ("False", "False") and 0 < float(value) < 1.2e-38  # IEEE subnormal kept
    # workers made before the call keep gradual underflow: reported, not claimed
    on, everywhere, value = run("pool-first")
    assert (on, everywhere, float(value)) == ("False", "False", 0.0)


def test_a_training_process_flushes_denormals_on_all_its_threads(tiny_cfg, tmp_path):
    """The Trainer sets the mode before its first parallel op, so a two-thread run flushes on both threads while it
    trains."""
    code = f"""
import sys
from smallinit.train import load_config, train
from smallinit.train.host import denormals_flushed
cfg = load_config("tiny", sys.argv[1:])
seen = []
class Spy:
    def on_step_end(self, trainer, step, record):
        seen.append(denormals_flushed())
train(cfg, {str(tmp_path / "run")!r}, callbacks=[Spy()])
print(all(seen) and len(seen) == 2)
"""
    from conftest import tiny_overrides

    data = tiny_cfg().data.path
    out = subprocess.run(
        [sys.executable, "-c", code, *tiny_overrides(data, **{"train.threads": 2, "train.max_steps": 2})],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "SMALLINIT_DENORMALS"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "True"


def test_an_unknown_denormal_mode_is_one_clear_error(monkeypatch):
    from smallinit.core.errors import ConfigError
    from smallinit.train.host import flush_denormals

    monkeypatch.setenv("SMALLINIT_DENORMALS", "off")
    with pytest.raises(ConfigError, match="SMALLINIT_DENORMALS='off': use 'flush'"):
        flush_denormals()


def test_training_in_process_gives_the_caller_back_its_ieee_subnormals(tiny_cfg, tmp_path):
    """A run (or the planner's calibration) inside a longer-lived process — a notebook, this test session — flushes
    while it trains and leaves the calling thread as it found it (hypothesis, for one, refuses to run otherwise)."""
    from smallinit.experiments.cost import measure_gflops
    from smallinit.train import train
    from smallinit.train.host import thread_flushes_denormals

    assert not thread_flushes_denormals()
    seen = []

    class Spy:
        def on_step_end(self, trainer, step, record):
            seen.append(thread_flushes_denormals())

    train(tiny_cfg(**{"train.max_steps": 2}), tmp_path / "run", callbacks=[Spy()])
    assert seen == [True, True] and not thread_flushes_denormals()
    measure_gflops(steps=1, threads=1)
    assert not thread_flushes_denormals()
