"""Yardstick for benchmarks/throughput.py: a plain nanoGPT-style GPT at the same shape, timed the same way.

The model is nanoGPT's (learned positions, LayerNorm, GELU MLP of 4·d, fused c_attn, SDPA causal attention,
tied embeddings, AdamW) in ~40 lines, so the MFU our model reaches can be read against what a minimal
GPT reaches on the same machine in the same process. MFU = (6N + 12·L·T·d) · tokens/s / matmul peak, with
N = non-embedding parameters + the tied LM head (V·d), as nanoGPT's ``estimate_mfu`` counts it.

    python benchmarks/nanogpt_reference.py [--d 384 --layers 6 --heads 6 --seq 256 --batch 16 --vocab 8192]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from smallinit import ModelConfig, Transformer


class Block(nn.Module):
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
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))

    def flops_per_token(self, seq: int) -> float:
        d, L = self.wte.weight.shape[1], len(self.blocks)
        n = sum(p.numel() for p in self.blocks.parameters()) + self.wte.weight.numel()
        return 6.0 * n + 12.0 * L * seq * d


def matmul_peak(sizes=(512, 1024, 2048), reps: int = 5) -> float:
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


def time_steps(model: nn.Module, vocab: int, seq: int, batch: int, steps: int, fused: bool) -> float:
    """Median seconds of forward + backward + AdamW step (after 2 warm-up steps)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused, foreach=None if fused else True)
    x = torch.randint(0, vocab, (batch, seq))
    y = torch.randint(0, vocab, (batch, seq))
    times = []
    for i in range(steps + 2):
        t = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    peak = matmul_peak()
    print(f"fp32 matmul peak: {peak:.1f} GFLOP/s ({torch.get_num_threads()} threads)")
    tokens = args.batch * args.seq
    rows = []
    gpt = GPT(args.vocab, args.d, args.layers, args.heads, args.seq)
    ours = {gate: Transformer(ModelConfig(vocab_size=args.vocab, d_model=args.d, n_layers=args.layers,
                                          n_heads=args.heads, max_seq_len=args.seq, gate=gate, tie_embeddings=True))
            for gate in ("none", "elementwise")}
    for name, model, fpt in [("nanoGPT (GELU 4d, LayerNorm)", gpt, gpt.flops_per_token(args.seq))] + [
            (f"smallinit gate={g}", m, m.flops_per_token(args.seq)) for g, m in ours.items()]:
        for fused in (False, True):
            s = time_steps(model, args.vocab, args.seq, args.batch, args.steps, fused)
            gf = tokens / s * fpt / 1e9
            rows.append((name, "fused" if fused else "foreach", tokens / s, gf, gf / peak))
            print(f"{name:30s} AdamW {'fused  ' if fused else 'foreach'} {tokens / s:8.0f} tok/s "
                  f"{gf:6.1f} GFLOP/s  MFU {gf / peak:.0%}", flush=True)
    print("\n| model | AdamW | tokens/s | GFLOP/s | MFU |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.1f} | {r[4]:.0%} |")


if __name__ == "__main__":
    main()
