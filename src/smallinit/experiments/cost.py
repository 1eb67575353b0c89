"""What runs cost: parameters and training FLOPs of a config, this machine's measured throughput, and the
threads per job when several share the cores."""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smallinit.runs.rundir import read_json


def fmt_seconds(s: float | None) -> str:
    """12s, 3m05s, 1h02m."""
    if s is None or not math.isfinite(s):
        return "?"
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_jobs(runs: int | None = None) -> int:
    """Runs at a time when none is asked for: one per usable core, each with one torch thread, on the CPU — but no
    more than ``runs`` (the runs that can train at once), so that on a machine with more cores than runs each
    run gets cores // jobs threads; 1 when CUDA is available (one device, one run).

    The best layout of the cores measured for many small runs (``benchmarks/layout_bench.py``, d 128 × 4 layers,
    bytes, idle 2-core machine, 2026-12-01): 2 processes × 1 thread 16,309 tokens/s in total, 1 process × 2 threads
    14,280, two or four arms batched in one process (vmap) 13,966 / 13,115 (benchmarks/RESULTS.md)."""
    from smallinit.core.device import resolve_device

    if resolve_device("auto").type == "cuda":
        return 1
    return max(1, min(usable_cores(), runs or usable_cores()))


def default_threads(parallel: int) -> int:
    """torch threads per job when ``parallel`` jobs share this machine's cores (0 = PyTorch default)."""
    if parallel <= 1:
        return 0
    return max(1, usable_cores() // parallel)


def check_gflops(gflops: float | None) -> None:
    """An assumed training throughput (``--gflops``) must be a finite number > 0 (None: measured here)."""
    from smallinit.core.errors import ConfigError

    if gflops is not None and not 0 < gflops < math.inf:
        raise ConfigError(f"--gflops must be a finite number > 0, got {gflops}")


def wall_seconds(seconds: Sequence[float], workers: int, started: Sequence[float] = ()) -> float:
    """Wall-clock of one batch of runs trained ``workers`` at a time, each run in order starting when a worker is
    free (the runners' queue): the makespan of list scheduling, max over workers of the summed times of its runs.
    ``seconds``: each run's time; ``started``: the time left of runs already running (each holds a worker).
    The old estimate, sum ÷ workers, missed that 3 equal runs on 2 workers take 2 rounds, not 1.5."""
    free = sorted(started)[: max(1, workers)]
    free += [0.0] * (max(1, workers) - len(free))
    for s in seconds:
        k = free.index(min(free))
        free[k] += s
    return max(free)


def sharing_speedup(runs: int, workers: int) -> float:
    """How much faster each run trains when a batch of ``runs`` < ``workers`` shares the cores (usable_cores //
    runs torch threads instead of usable_cores // workers, :func:`default_threads`), taking threads to scale
    perfectly — optimistic: 2 threads ran 1.72× one at the reproduction's shape (benchmarks/RESULTS.md). 1 when
    runs ≥ workers."""
    if runs <= 0 or runs >= workers:
        return 1.0
    # more runs than cores (--jobs 4 on 2 cores): each still has one thread, never 0 (a ZeroDivisionError)
    return max(1, usable_cores() // max(1, runs)) / max(1, default_threads(workers) or usable_cores())


def _plain(config: Any) -> dict[str, Any]:
    return config.to_dict() if hasattr(config, "to_dict") else config


def model_cost(config: Any) -> dict[str, float]:
    """Parameters and training FLOPs of a resolved run config (a RunConfig or its plain dict; the model is built
    on the meta device without initialization, so even paper-sized models cost nothing): ``params``,
    ``non_embedding_params``, ``active_params``, ``flops_per_token`` (6N + 12·L·T·d, see
    Transformer.flops_per_token), ``tokens`` = steps·B·T and ``flops`` = flops_per_token·tokens plus the forward
    passes of the evaluations (flops_per_token/3 per evaluated token)."""
    config = _plain(config)
    m = dict(config["model"])
    meta = read_json(Path(str(config["data"].get("path", ""))) / "meta.json")
    if meta and meta.get("vocab_size"):
        m["vocab_size"] = int(meta["vocab_size"])  # the data decides the vocabulary, as in training
    T = int(config["data"]["seq_len"])
    m["max_seq_len"] = max(int(m.get("max_seq_len", 0)), T)
    params, non_emb, active, fpt = _model_numbers(json.dumps(m, sort_keys=True), T)
    tr = config["train"]
    steps, B = int(tr["max_steps"]), int(tr["batch_size"])
    tokens = steps * B * T
    n_evals = steps // int(tr["eval_every"]) + 1
    eval_tokens = n_evals * (int(config["data"]["val_batches"]) + int(config["data"].get("tune_batches", 0))) * B * T
    return {
        "params": params,
        "non_embedding_params": non_emb,
        "active_params": active,
        "flops_per_token": fpt,
        "tokens": tokens,
        "flops": fpt * tokens + fpt / 3 * eval_tokens,
    }


def meta_model(mc):
    """A Transformer on the meta device, not initialized (no memory, no init work)."""
    import torch

    from smallinit.model import Transformer

    with torch.device("meta"):
        return Transformer(mc, init=False)


@functools.lru_cache(maxsize=256)
def _model_numbers(model_json: str, seq_len: int) -> tuple[int, int, int, float]:
    from smallinit.model import ModelConfig

    model = meta_model(ModelConfig.from_dict(json.loads(model_json)))
    return (
        model.num_params(),
        model.num_params(non_embedding=True),
        model.num_params(active=True),
        model.flops_per_token(seq_len),
    )


def _timed_steps(step, steps: int) -> float:
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


class Throughput(float):
    """A GFLOP/s figure (an ordinary float to every caller) that also says which dtype it was measured in
    (``.dtype``: "fp32" or "bf16") and why (``.reason``, :class:`smallinit.train.precision.Decision`'s words)."""

    dtype: str = "fp32"
    reason: str = ""

    def __new__(cls, value: float, dtype: str = "fp32", reason: str = "") -> Throughput:
        obj = super().__new__(cls, value)
        obj.dtype, obj.reason = dtype, reason
        return obj

    def __reduce__(self):
        return (Throughput, (float(self), self.dtype, self.reason))


def measure_gflops(config: Any = None, steps: int = 3, threads: int = 0, dtype: str | None = None) -> Throughput:
    """Training throughput of this machine in GFLOP/s (counted as in ``flops_per_token``), timed on a few
    AdamW steps of the ``config``'s model (default: the ``tiny`` model size) on random tokens — the step the
    Trainer runs on CPU: the model's chunked loss, fused AdamW, and the training process's settings
    (:func:`~smallinit.train.host.prepare_cpu_process`: freed memory kept, denormals flushed — without the flush a
    trained model's steps ran up to ×1.85 slower on an Intel CPU than at init in benchmarks/denormals.py).

    Timed in the dtype the run will train in: ``dtype``, else the config's ``train.dtype``; "auto" is resolved as the
    run resolves it (:func:`smallinit.train.precision.resolve` at the run's micro-batch × seq_len and this call's
    thread count — the same cache entry the run will read, so a dry run's estimate and the runs agree), under bf16
    autocast when that gives bf16. Without a config: float32. The result is a float; ``.dtype`` / ``.reason`` say
    which dtype and why."""
    import torch

    from smallinit.model import ModelConfig, Transformer
    from smallinit.train.host import prepare_cpu_process, restore_cpu_process

    config = _plain(config) if config is not None else None
    if config is None:
        mc = ModelConfig.from_size("tiny", max_seq_len=128)
        T, B, micro = 128, 16, 16
        setting = dtype or "fp32"
    else:
        m = dict(config["model"])
        meta = read_json(Path(str(config["data"].get("path", ""))) / "meta.json")
        if meta and meta.get("vocab_size"):
            m["vocab_size"] = int(meta["vocab_size"])  # the data decides the vocabulary, as in training
        T, B = int(config["data"]["seq_len"]), int(config["train"]["batch_size"])
        m["max_seq_len"] = max(int(m.get("max_seq_len") or 0), T)  # as the Trainer raises it
        mc = ModelConfig.from_dict(m)
        micro = int(config["train"].get("micro_batch_size") or 0) or B
        setting = dtype or str(config["train"].get("dtype", "auto"))
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    settings = None
    try:
        settings = prepare_cpu_process()
        from smallinit.train.precision import resolve

        decision = resolve(setting, mc, micro, T, "cpu")
        torch.manual_seed(0)
        model = Transformer(mc)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        x = torch.randint(0, mc.vocab_size, (B, T))
        bf16 = decision.dtype == "bf16"

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(x, x)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return Throughput(
            model.flops_per_token(T) * B * T / _timed_steps(step, steps) / 1e9, decision.dtype, decision.reason
        )
    finally:
        torch.set_num_threads(old)
        restore_cpu_process(settings)


def measure_anchor_gflops(cfg, threads: int = 0, steps: int = 5) -> float:
    """GFLOP/s of the anchor model's training steps (an AnchorConfig) on this machine, counted like anchor_flops."""
    import torch
    import torch.nn.functional as F

    from smallinit.experiments.anchor import build_model, make_data, train_pairs

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        model = build_model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = make_data(cfg.batch_size, train_pairs(cfg.held_out), cfg, torch.Generator().manual_seed(0))

        def step():
            loss = F.cross_entropy(model(data.tokens)[:, -1, :], data.targets)
            loss.backward()
            opt.step()
            opt.zero_grad()

        return model.flops_per_token(cfg.seq_len) * cfg.batch_size * cfg.seq_len / _timed_steps(step, steps) / 1e9
    finally:
        torch.set_num_threads(old)


__all__ = [
    "Throughput",
    "default_threads",
    "fmt_seconds",
    "measure_anchor_gflops",
    "measure_gflops",
    "meta_model",
    "model_cost",
]
