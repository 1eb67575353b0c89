"""Residual-branch scale at initialization vs width: ‖F(norm(h))‖ / ‖h‖ for the attention and MLP branches.

The paper: a residual branch's update scales like d^(1−γ) relative to the stream. For unit-RMS h
(‖h‖ = √d) we measure the branch output norm ‖F(norm(h))‖ of block 0 at init, for d ∈ {64, …, 1024}
and γ ∈ {0.5, 1, 1.5}, and fit the log-log slope. Prints a markdown table.

    python benchmarks/residual_flow_init.py
"""

from __future__ import annotations

import math

import torch

from smallinit import ModelConfig, Transformer

WIDTHS = [64, 128, 256, 512, 1024]


def branch_norms(d: int, gamma: float, gate: str, seed: int = 0) -> tuple[float, float]:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=256, d_model=d, n_layers=1, n_heads=max(1, d // 64), d_ff=4 * d, max_seq_len=64,
                      gamma=gamma, gate=gate, norm_eps=1e-12)
    block = Transformer(cfg).blocks[0]
    h = torch.randn(4, 64, d)
    h = h / h.pow(2).mean(-1, keepdim=True).sqrt()  # unit RMS: ‖h‖ = √d
    from smallinit.model.attention import RotaryEmbedding

    cos, sin = RotaryEmbedding(cfg.head_dim, 64, cfg.rope_theta)(64)
    with torch.no_grad():
        a = block.attn(block.attn_norm(h), cos, sin).norm(dim=-1).mean().item()
        m = block.mlp(block.mlp_norm(h)).norm(dim=-1).mean().item()
    return a, m


def slope(xs: list[int], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    print("| γ | gate | attention slope | MLP slope | paper 1−γ |")
    print("|---|---|---|---|---|")
    for gamma in (0.5, 1.0, 1.5):
        for gate in ("none", "elementwise"):
            attn, mlp = zip(*(branch_norms(d, gamma, gate) for d in WIDTHS))
            print(f"| {gamma} | {gate} | {slope(WIDTHS, attn):.3f} | {slope(WIDTHS, mlp):.3f} | {1 - gamma:.2f} |")


if __name__ == "__main__":
    main()
