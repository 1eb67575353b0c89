"""Residual flow at initialization vs width and γ, as DESIGN.md §2 defines it: relative to the stream.

For each block i and branch F (attention, MLP) the probe's residual flow mean_t ||F(norm(h_t))|| / ||h_t|| (h the
residual stream the branch reads and is added to), measured by ``smallinit.probes.compute_probes`` — the same hooks
as the training-time probe — on one forward of a freshly initialized Transformer (``tiny`` size: elementwise
gate, tied embeddings, RMSNorm ε --norm-eps; --layers blocks, 64-dim heads, d_ff ≈ 8d/3) over uniformly random
tokens (vocab 4096, batch 4 × 128), averaged over --seeds initializations. For d ∈ {128, …, 1024} and
γ ∈ {0.5, 0.75, 1, 1.25} it fits the log-log slope of the flow vs d, for block 0 and for the mean over blocks,
and prints it beside the paper's d^(1−γ) (flat at γ = 1, growing for γ < 1, shrinking for γ > 1).

The raw branch norm mean_t ||F(norm(h_t))|| (what this benchmark printed before issue 18) is measured by extra
hooks on the same forward and its slope printed as a second table: the ratio's slope is the raw slope minus
the slope of ||h||, and at init ||h|| ≈ √d · d^(−γ) (the embedding's std is d^(−γ)).

    .venv/bin/python benchmarks/residual_flow_init.py [--widths 128 256 512 1024] [--gammas 0.5 0.75 1 1.25]
                                                      [--layers 4] [--seeds 3] [--gate elementwise] [--out x.json]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from smallinit.model import ModelConfig, Transformer
from smallinit.probes import compute_probes


def measure(
    d: int,
    gamma: float,
    layers: int,
    gate: str,
    norm_eps: float,
    seed: int,
    vocab: int = 4096,
    batch: int = 4,
    T: int = 128,
) -> dict[str, list[float]]:
    """Per block: residual flow (ratio) and raw branch norm of the attention and MLP branches at init."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab,
        d_model=d,
        n_layers=layers,
        n_heads=max(1, d // 64),
        d_ff=64 * math.ceil(8 * d / 3 / 64),
        max_seq_len=T,
        gamma=gamma,
        gate=gate,
        norm_eps=norm_eps,
        tie_embeddings=True,
    )
    model = Transformer(cfg)
    idx = torch.randint(0, vocab, (batch, T), generator=torch.Generator().manual_seed(1000 + seed))
    raw: dict[str, list[float]] = {"attn": [0.0] * layers, "mlp": [0.0] * layers}
    hooks = []
    for i, b in enumerate(model.blocks):
        for key, mod in (("attn", b.attn), ("mlp", b.mlp)):

            def hook(m, a, out, i=i, key=key):
                raw[key][i] = float(out.detach().double().norm(dim=-1).mean())

            hooks.append(mod.register_forward_hook(hook))
    try:
        rec = compute_probes(model, idx, weights=False)
    finally:
        for h in hooks:
            h.remove()
    stream = [math.sqrt(d * lay["attn_norm"]["mean_square"]) for lay in rec["layers"]]  # ≈ ||h|| entering block i
    return {
        "attn": [lay["flow_attn"] for lay in rec["layers"]],
        "mlp": [lay["flow_mlp"] for lay in rec["layers"]],
        "raw_attn": raw["attn"],
        "raw_mlp": raw["mlp"],
        "stream": stream,
    }


def slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.25])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gate", default="elementwise", choices=["none", "headwise", "elementwise"])
    ap.add_argument("--norm-eps", type=float, default=1e-12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    res: dict[float, dict[int, dict[str, np.ndarray]]] = {}
    for gamma in args.gammas:
        res[gamma] = {}
        for d in args.widths:
            runs = [measure(d, gamma, args.layers, args.gate, args.norm_eps, s) for s in range(args.seeds)]
            res[gamma][d] = {k: np.mean([r[k] for r in runs], axis=0) for k in runs[0]}

    W = args.widths
    print(
        f"# residual flow ||F(norm(h))||/||h|| at init; {args.layers} blocks, gate {args.gate}, norm ε "
        f"{args.norm_eps:g}, random tokens (4 × 128), mean of {args.seeds} seeds\n"
    )
    print(
        "| γ | branch | "
        + " | ".join(f"d {d}: block 0 / mean" for d in W)
        + " | slope block 0 | slope mean over blocks | paper 1−γ |"
    )
    print("|---|---|" + "---|" * (len(W) + 3))
    for gamma in args.gammas:
        for br in ("attn", "mlp"):
            b0 = [float(res[gamma][d][br][0]) for d in W]
            mean = [float(res[gamma][d][br].mean()) for d in W]
            cells = " | ".join(f"{x:.3g} / {y:.3g}" for x, y in zip(b0, mean))
            print(f"| {gamma:g} | {br} | {cells} | {slope(W, b0):+.2f} | {slope(W, mean):+.2f} | {1 - gamma:+.2f} |")
    print("\nRaw branch norm mean_t ||F(norm(h_t))|| and stream norm ||h|| entering block 0: log-log slopes vs d\n")
    print("| γ | raw attention | raw MLP | stream ||h|| (block 0) | ||h|| predicted √d·d^(−γ) |")
    print("|---|---|---|---|---|")
    for gamma in args.gammas:
        ra = [float(res[gamma][d]["raw_attn"][0]) for d in W]
        rm = [float(res[gamma][d]["raw_mlp"][0]) for d in W]
        st = [float(res[gamma][d]["stream"][0]) for d in W]
        print(f"| {gamma:g} | {slope(W, ra):+.2f} | {slope(W, rm):+.2f} | {slope(W, st):+.2f} | {0.5 - gamma:+.2f} |")
    if args.out:
        from pathlib import Path

        from smallinit.core.io import atomic_write_json

        atomic_write_json(
            Path(args.out),
            {
                "args": vars(args),
                "results": {
                    str(g): {str(d): {k: v.tolist() for k, v in r.items()} for d, r in per.items()}
                    for g, per in res.items()
                },
            },
        )


if __name__ == "__main__":
    main()
