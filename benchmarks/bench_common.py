"""Shared pieces of the CPU benchmarks: CPU flags, the same-run fp32 matmul peak, the two shapes of issue #19,
a plain nanoGPT yardstick, and a training step timed the way the Trainer runs it (fused AdamW, clipping)."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from smallinit import ModelConfig, Transformer

# name: (d_model, n_layers, n_heads, d_ff of ours, seq_len, batch, vocab). d128 is the reproduction's shape
# (the `tiny` model size: d_ff 384, tied embeddings; the demo/cpu presets' BPE tokenizer has 8192 tokens).
SHAPES = {
    "d384": (384, 6, 6, 1024, 256, 16, 8192),
    "d128": (128, 4, 4, 384, 256, 16, 8192),
    "d128b": (128, 4, 4, 384, 256, 16, 257),  # the cpu crossover's shape: byte-level vocabulary
}


def cpu_flags() -> str:
    """The SIMD flags that decide matmul speed (avx2 / avx512* / amx*), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    fl = line.split(":", 1)[1].split()
                    keep = [x for x in fl if x.startswith(("avx2", "avx512f", "avx512_bf16", "amx"))]
                    return " ".join(sorted(keep)) or "no avx2"
    except OSError:
        pass
    return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def matmul_peak(sizes=(512, 1024, 2048), reps: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best GFLOP/s of square matmuls n×n @ n×n (2n³ FLOPs) in ``dtype`` (default fp32) at the current thread
    count."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (avx512_bf16 or amx_bf16; without, bf16 matmuls are emulated)."""
    return any(f in cpu_flags().split() for f in ("avx512_bf16", "amx_bf16"))


def bf16_peak() -> float:
    """The same-run bf16 matmul peak; on a CPU without native bf16 only small sizes (the emulation is slow)."""
    return matmul_peak(dtype=torch.bfloat16) if native_bf16() else matmul_peak((256, 512), 2, torch.bfloat16)


def header(threads: int, bf16: bool = False) -> str:
    peaks = f"fp32 matmul peak {matmul_peak():.1f} GFLOP/s" + (f", bf16 {bf16_peak():.1f}" if bf16 else "")
    return (
        f"CPU: {cpu_model()} ({os.cpu_count()} cores), flags: {cpu_flags()}; torch {torch.__version__}; "
        f"{threads} thread(s); load average {load_average()}; same-run {peaks}"
    )


# ---- nanoGPT (the yardstick) ------------------------------------------------------------------------------
class GPTBlock(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    """nanoGPT's model: learned positions, LayerNorm, GELU MLP of 4·d, fused c_attn, SDPA, tied embeddings."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        # nanoGPT's own init (model.py `_init_weights`): N(0, 0.02²) for linears and embeddings, the two output
        # projections of each block N(0, (0.02/√(2L))²), LayerNorm at ones/zeros. PyTorch's defaults instead give
        # the tied head N(0, 1) rows: logits of std ≈ 11 whose softmax gradient is full of float32 denormals —
        # which run the head's two backward products ≈ 40× slower on Intel CPUs (2026-12-01 in RESULTS.md).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))

    def flops_per_token(self, seq: int) -> float:
        """6N + 12·L·T·d with N = block parameters + the tied head V·d (nanoGPT's estimate_mfu count)."""
        d, L = self.wte.weight.shape[1], len(self.blocks)
        n = sum(p.numel() for p in self.blocks.parameters()) + self.wte.weight.numel()
        return 6.0 * n + 12.0 * L * seq * d


def ours_config(shape: str, gate: str, vocab: int | None = None, **kw) -> ModelConfig:
    d, L, H, ff, T, _, V = SHAPES[shape]
    return ModelConfig(
        vocab_size=vocab or V,
        d_model=d,
        n_layers=L,
        n_heads=H,
        d_ff=ff,
        max_seq_len=T,
        gate=gate,
        tie_embeddings=True,
        **kw,
    )


def nanogpt(shape: str, vocab: int | None = None) -> GPT:
    d, L, H, _, T, _, V = SHAPES[shape]
    return GPT(vocab or V, d, L, H, T)


# ---- a training step as the Trainer runs it -------------------------------------------------------------
def make_step(
    model: nn.Module,
    vocab: int,
    seq: int,
    batch: int,
    forward: Callable | None = None,
    loss_fn: Callable | None = None,
    seed: int = 0,
    dtype: str = "fp32",
) -> Callable[[], float]:
    """A closure running forward + cross-entropy + backward + clip_grad_norm_(1.0) + fused AdamW on fixed random
    tokens. ``loss_fn(model, x, y)`` replaces ``cross_entropy(forward(x), y)`` when given. ``dtype="bf16"``: the
    forward and the loss under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (as the Trainer runs bf16; backward,
    clipping and the optimizer outside it, on float32 parameters)."""
    from smallinit.train.loop import param_groups

    groups = param_groups(model, 0.1, False) if isinstance(model, Transformer) else model.parameters()
    opt = torch.optim.AdamW(groups, lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (batch, seq), generator=g)
    y = torch.randint(0, vocab, (batch, seq), generator=g)
    fwd = forward if forward is not None else model

    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype must be fp32 or bf16, got {dtype!r}")
    amp = dtype == "bf16"

    def step() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            if loss_fn is not None:
                loss = loss_fn(fwd, x, y)
            else:
                loss = F.cross_entropy(fwd(x).float().flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def time_alternating(
    steps: dict[str, Callable[[], float]], rounds: int, warmup: int = 2, per_round: int = 1
) -> dict[str, dict[str, float]]:
    """Median seconds per step of each closure, timed in turn (round-robin) so that a change of machine load
    hits every entry alike: ``{"wall": wall-clock s, "cpu": process CPU s}``. On a contended machine the CPU
    time of a one-thread run is the steadier measure of the work (wall time includes waiting for a core)."""
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    wall: dict[str, list[float]] = {k: [] for k in steps}
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for k, fn in steps.items():
            t, c = time.perf_counter(), time.process_time()
            for _ in range(per_round):
                fn()
            wall[k].append((time.perf_counter() - t) / per_round)
            cpu[k].append((time.process_time() - c) / per_round)
    return {k: {"wall": statistics.median(wall[k]), "cpu": statistics.median(cpu[k])} for k in steps}
