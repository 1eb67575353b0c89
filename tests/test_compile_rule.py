"""train.compile: true / false / "auto" (the default) and the auto rule; the shared compile cache folder."""

import pytest
import torch

from smallinit.config import config_from_dict, load_config
from smallinit.core.errors import ConfigError
from smallinit.train import compile as C

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_default_is_auto_and_bools_still_load():
    assert load_config("tiny").train.compile == "auto"
    assert load_config("tiny", ["train.compile=true"]).train.compile is True
    assert load_config("tiny", ["train.compile=false"]).train.compile is False
    assert config_from_dict({"train": {"compile": False}}).train.compile is False  # configs saved before "auto"
    for bad in ("maybe", "1", "[auto]"):
        with pytest.raises(ConfigError, match="train.compile"):
            load_config("tiny", [f"train.compile={bad}"])


def test_explicit_setting_wins():
    assert C.resolve_compile(True, CPU, 1) is True
    assert C.resolve_compile(False, CUDA, 10**6) is False


def test_auto_stays_off_for_tests_and_short_runs():
    assert not C.resolve_compile("auto", CPU, 8)  # a test run
    assert not C.resolve_compile("auto", CPU, 500)  # the demo preset's runs
    assert not C.resolve_compile("auto", CPU, C.AUTO_MIN_STEPS_CPU - 1)
    assert not C.resolve_compile("auto", CUDA, C.AUTO_MIN_STEPS_CUDA - 1)
    assert not C.resolve_compile("auto", CPU, 10**6, moe=True)
    assert not C.resolve_compile("auto", torch.device("meta"), 10**6)
    with pytest.raises(ValueError, match="auto"):
        C.resolve_compile("sometimes", CPU, 10**6)


def test_auto_turns_on_for_long_runs(monkeypatch):
    monkeypatch.setattr(C, "cpu_build_blocker", lambda paths=None: None)  # whatever this checkout's path is
    assert C.resolve_compile("auto", CPU, C.AUTO_MIN_STEPS_CPU)
    assert C.resolve_compile("auto", CUDA, C.AUTO_MIN_STEPS_CUDA)


def test_compile_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "given"))
    assert C.compile_cache_dir() == tmp_path / "given"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert C.compile_cache_dir() == tmp_path / "xdg" / "smallinit" / "inductor"


def test_auto_stays_eager_where_a_path_has_a_space():
    """torch under '…/with space/…': inductor's unquoted C++ build fails (seen in CI's clone), so "auto" is eager
    there; an ordinary path is no obstacle."""
    from smallinit.train.compile import cpu_build_blocker

    assert (
        cpu_build_blocker(["/opt/venv/lib/python3.11/site-packages/torch", "/root/.cache/smallinit/inductor"]) is None
    )
    why = cpu_build_blocker(["/tmp/x/with space/smallinit/.venv/lib/python3.11/site-packages/torch", "/tmp/c"])
    assert why and "with space" in why
