"""Shared fixtures: a small prepared corpus (from the built-in stdlib source) and a tiny run config."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

# Tests share 2 cores with each other: keep torch single-threaded and deterministic.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# train.dtype=auto must not depend on this machine's bf16: every test sees an AVX2-only CPU (auto → fp32, nothing
# measured) unless it fakes other flags, and no test reads or writes the user's cache (smallinit.train.precision)
os.environ["SMALLINIT_CPU_FLAGS"] = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx fma avx2"
os.environ["SMALLINIT_LOAD_PER_CORE"] = "0"  # and a quiet machine (train.dtype=auto records the load it measured at)
os.environ["SMALLINIT_CACHE"] = tempfile.mkdtemp(prefix="smallinit-test-cache-")
atexit.register(shutil.rmtree, os.environ["SMALLINIT_CACHE"], True)


@pytest.fixture(scope="session")
def token_dir(tmp_path_factory) -> Path:
    """A prepared data dir: ~400 KB of stdlib source, BPE with 512 tokens, 10% validation."""
    from smallinit.data import prepare_corpus

    out = tmp_path_factory.mktemp("data") / "stdlib"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_corpus(
            ["builtin:stdlib"],
            out,
            tokenizer="bpe",
            vocab_size=512,
            val_fraction=0.1,
            progress=False,
            max_bytes=400_000,
        )
    return out


def tiny_overrides(data_dir: Path, **extra) -> list[str]:
    """Overrides that make the `tiny` config train in a second or two per few steps on one core."""
    base = {
        "data.path": str(data_dir),
        "data.seq_len": 32,
        "data.val_batches": 2,
        "model.d_model": 32,
        "model.n_layers": 2,
        "model.n_heads": 2,
        "model.d_ff": 64,
        "model.max_seq_len": 32,
        "train.batch_size": 4,
        "train.max_steps": 20,
        "train.log_every": 1,
        "train.eval_every": 10,
        "train.ckpt_every": 5,
        "train.keep_ckpts": 10,
        "train.progress": False,
        "optim.warmup_steps": 2,
        "train.threads": 1,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@pytest.fixture
def tiny_cfg(token_dir):
    """A factory: tiny_cfg(**overrides) → RunConfig for a fast run on ``token_dir``."""
    from smallinit.train import load_config

    def make(**extra):
        return load_config("tiny", tiny_overrides(token_dir, **extra))

    return make


@pytest.fixture(autouse=True)
def _cwd_outside_the_checkout(tmp_path_factory, monkeypatch):
    """Every test runs in an empty folder of its own: no test may read what this checkout's data/, out/ or runs/ hold
    (after `make demo` the default data.path data/stdlib exists, and a test that expected 'no data' would train).
    Tests that need a repository file name it from ``Path(__file__)``."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
