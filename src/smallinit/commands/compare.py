"""``smallinit compare RUN_A RUN_B --out DIR``: where does variant A gain over baseline B, token by token?

A thin layer over :func:`smallinit.analysis.compare.write_comparison`: both models score the same held-out validation
positions;
per token Δ_sym = (p_A − p_B)/(p_A + p_B), difficulty = (ℓ_A + ℓ_B)/2 in quantile bins (DESIGN.md §2).
Writes into DIR:

    compare.json      per-bin and overall count, mean Δ_sym, mean ℓ_B − ℓ_A with bootstrap 95% intervals,
                      the setup (runs, checkpoints, config differences, data) and the top contexts
    delta_by_bin.png  mean Δ_sym per difficulty bin with 95% intervals (one bar per source with --by-source)
    scatter.png       ℓ_A against ℓ_B per token (a random subsample), with the diagonal
    contexts.md       the contexts where A gains most and loses most

and prints the per-bin table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "token-level comparison of two runs (variant A vs baseline B): Δ_sym and loss gap by token difficulty"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="variant: run directory or checkpoint directory")
    p.add_argument("run_b", metavar="RUN_B", help="baseline: run directory or checkpoint directory")
    p.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="prepared data directory whose val split is scored (default: run B's data.path)",
    )
    p.add_argument(
        "--tokens",
        type=int,
        default=65_536,
        help="target positions to score, rounded up to whole windows (default 65536)",
    )
    p.add_argument("--bins", type=int, default=5, help="difficulty quantile bins (default 5)")
    p.add_argument("--by-source", action="store_true", help="also split every statistic by val source (language)")
    p.add_argument("--seq-len", type=int, default=None, help="window length (default: run B's data.seq_len)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    p.add_argument(
        "--bos",
        choices=("auto", "on", "off"),
        default="auto",
        help="start windows with BOS (default: as the runs trained; they must agree)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and scatter-subsample seed")
    p.add_argument("--top", type=int, default=10, help="contexts listed per side in contexts.md (default 10)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


def run(args: argparse.Namespace) -> int:
    from smallinit.analysis.compare import bins_table, write_comparison

    out = Path(args.out)
    bos = {"auto": None, "on": True, "off": False}[args.bos]
    res = write_comparison(
        args.run_a,
        args.run_b,
        out,
        data_dir=args.data,
        tokens=args.tokens,
        n_bins=args.bins,
        by_source=args.by_source,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        bos=bos,
        device=args.device,
        n_boot=args.n_boot,
        seed=args.seed,
        top=args.top,
    )
    s = res["setup"]
    ra, rb = s["run_a"], s["run_b"]
    print(f"A = {ra['path']} (step {ra['step']})  vs  B = {rb['path']} (step {rb['step']})")
    if s["config_diff"]:
        print(
            "config differences (A vs B): "
            + ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in s["config_diff"].items())
        )
    print(
        f"{res['n_tokens']:,} tokens of {s['data']} (val, {s['n_windows']} windows of {s['seq_len']}"
        f"{', BOS' if s['bos'] else ''}); Δ_sym > 0 and ℓ_B − ℓ_A > 0 mean A is better\n"
    )
    print(bins_table(res))
    for name, r in (res.get("by_source") or {}).items():
        print(f"\nsource {name}:\n")
        print(bins_table(r))
    print(f"\nwrote {out / 'compare.json'}, delta_by_bin.png, scatter.png, contexts.md")
    return 0
