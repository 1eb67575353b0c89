"""``smallinit compare RUN_A RUN_B --out DIR``: where does variant A gain over baseline B, token by token?

Both models score the same held-out validation positions (``smallinit.compare.score_models``);
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
import io
import math
from pathlib import Path
from typing import Any

HELP = "token-level comparison of two runs (variant A vs baseline B): Δ_sym and loss gap by token difficulty"

SCATTER_POINTS = 20_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="variant: run directory or checkpoint directory")
    p.add_argument("run_b", metavar="RUN_B", help="baseline: run directory or checkpoint directory")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="prepared data directory whose val split is scored (default: run B's data.path)")
    p.add_argument("--tokens", type=int, default=65_536,
                   help="target positions to score, rounded up to whole windows (default 65536)")
    p.add_argument("--bins", type=int, default=5, help="difficulty quantile bins (default 5)")
    p.add_argument("--by-source", action="store_true", help="also split every statistic by val source (language)")
    p.add_argument("--seq-len", type=int, default=None, help="window length (default: run B's data.seq_len)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    p.add_argument("--bos", choices=("auto", "on", "off"), default="auto",
                   help="start windows with BOS (default: as the runs trained; they must agree)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and scatter-subsample seed")
    p.add_argument("--top", type=int, default=10, help="contexts listed per side in contexts.md (default 10)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


# ---- formatting ------------------------------------------------------------------------------------

def _ci(stat: dict, fmt: str = "+.4f") -> str:
    if stat["mean"] is None:
        return "–"
    lo, hi = stat["ci95"]
    return f"{stat['mean']:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def bins_table(res: dict) -> str:
    """Markdown table of one result block ({"overall", "bins"}) with the difficulty edges."""
    lines = [
        "| bin | difficulty (nats) | tokens | mean Δ_sym [95% CI] | mean ℓ_B − ℓ_A [95% CI] | ℓ_A | ℓ_B |",
        "|---|---|---:|---|---|---:|---:|",
    ]

    def row(name: str, diff: str, r: dict) -> str:
        la = "–" if r["loss_a"] is None else f"{r['loss_a']:.3f}"
        lb = "–" if r["loss_b"] is None else f"{r['loss_b']:.3f}"
        return f"| {name} | {diff} | {r['count']} | {_ci(r['delta_sym'])} | {_ci(r['loss_gain'])} | {la} | {lb} |"

    for b in res["bins"]:
        lo, hi = b["difficulty"]
        lines.append(row(b["name"], f"{lo:.2f}–{hi:.2f}", b))
    lines.append(row("**all**", "", res["overall"]))
    return "\n".join(lines)


def _md_cell(text: str, limit: int = 120) -> str:
    t = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "ˋ").replace("\r", "").replace("\n", "↵")
    t = t.replace("\t", "→")
    if len(t) > limit:
        t = "…" + t[-limit:]
    return t


def contexts_markdown(top: dict, setup: dict) -> str:
    """Two markdown tables: top gains and top losses of A against B, with the decoded context."""
    out = [
        "# Where A gains and loses most",
        "",
        f"A = `{setup['run_a']['path']}` (step {setup['run_a']['step']}), "
        f"B = `{setup['run_b']['path']}` (step {setup['run_b']['step']}); data `{setup['data']}` (val), "
        f"seq_len {setup['seq_len']}. Ranked by ℓ_B − ℓ_A (nats). The context is what precedes the target "
        "in its window (↵ = newline); the target token is in **bold**.",
    ]
    for side, title in (("gains", "A gains most"), ("losses", "A loses most")):
        out += ["", f"## {title}", "",
                "| # | context → **target** | p_A | p_B | ℓ_B − ℓ_A | Δ_sym | source | position |",
                "|---:|---|---:|---:|---:|---:|---|---:|"]
        for i, e in enumerate(top[side], 1):
            tgt = _md_cell(e["target"], 40) or "∅"
            out.append(
                f"| {i} | {_md_cell(e['context'])} → **{tgt}** | {e['p_a']:.3g} | {e['p_b']:.3g} | "
                f"{e['loss_gain']:+.3f} | {e['delta_sym']:+.3f} | {e['source']} | {e['position']} |"
            )
    return "\n".join(out) + "\n"


# ---- plots -------------------------------------------------------------------------------------------

def _save_png(fig: Any, path: Path) -> None:
    from smallinit.io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def plot_delta_by_bin(res: dict, path: Path) -> None:
    """Bar chart of mean Δ_sym per difficulty bin with 95% intervals (grouped by source when present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = [("all", res)] + [(name, r) for name, r in (res.get("by_source") or {}).items()]
    names = [b["name"] for b in res["bins"]]
    x = np.arange(len(names))
    width = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(names) + 1), 4.0))
    for g, (label, r) in enumerate(groups):
        means = np.array([np.nan if b["delta_sym"]["mean"] is None else b["delta_sym"]["mean"] for b in r["bins"]])
        lo = np.array([np.nan if b["delta_sym"]["ci95"] is None else b["delta_sym"]["ci95"][0] for b in r["bins"]])
        hi = np.array([np.nan if b["delta_sym"]["ci95"] is None else b["delta_sym"]["ci95"][1] for b in r["bins"]])
        err = np.nan_to_num(np.stack([means - lo, hi - means]), nan=0.0)
        ax.bar(x + (g - (len(groups) - 1) / 2) * width, np.nan_to_num(means), width, yerr=err, capsize=3,
               label=f"{label} (n={r['overall']['count']})")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{n}\n{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}" for n, b in zip(names, res["bins"])])
    ax.set_xlabel("token difficulty (ℓ_A + ℓ_B)/2, quantile bins (nats)")
    ax.set_ylabel("mean Δ_sym = (p_A − p_B)/(p_A + p_B)")
    ax.set_title("A vs B by token difficulty (95% bootstrap intervals; > 0: A better)")
    if len(groups) > 1:
        ax.legend(fontsize=8)
    _save_png(fig, path)
    plt.close(fig)


def plot_scatter(loss_a: Any, loss_b: Any, path: Path, seed: int = 0, max_points: int = SCATTER_POINTS) -> int:
    """Scatter of ℓ_A (y) against ℓ_B (x) on a random subsample; returns the number of points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    la, lb = np.asarray(loss_a), np.asarray(loss_b)
    idx = np.arange(la.size)
    if la.size > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(la.size, max_points, replace=False))
    fig, ax = plt.subplots(figsize=(5.0, 5.0))
    ax.scatter(lb[idx], la[idx], s=2, alpha=0.25, linewidths=0, rasterized=True)
    top = float(max(la.max(), lb.max())) * 1.02 if la.size else 1.0
    ax.plot([0, top], [0, top], color="black", lw=0.8)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("ℓ_B (baseline loss, nats)")
    ax.set_ylabel("ℓ_A (variant loss, nats)")
    ax.set_title(f"per-token loss ({idx.size:,} of {la.size:,} tokens; below diagonal: A better)", fontsize=9)
    _save_png(fig, path)
    plt.close(fig)
    return int(idx.size)


# ---- the verb ----------------------------------------------------------------------------------------

from smallinit.io import json_safe as _finite  # noqa: E402  (shared helper)


def run(args: argparse.Namespace) -> int:
    import json

    from smallinit.compare import score_models, summarize_scores, top_contexts
    from smallinit.data import TokenData
    from smallinit.errors import ConfigError
    from smallinit.io import atomic_write_json, atomic_write_text

    if args.bins < 1:
        raise ConfigError(f"--bins must be >= 1, got {args.bins}")
    if args.tokens < 1:
        raise ConfigError(f"--tokens must be >= 1, got {args.tokens}")
    if args.n_boot < 1:
        raise ConfigError(f"--n-boot must be >= 1, got {args.n_boot}")
    out = Path(args.out)
    bos = {"auto": None, "on": True, "off": False}[args.bos]
    scores = score_models(args.run_a, args.run_b, data_dir=args.data, tokens=args.tokens, seq_len=args.seq_len,
                          batch_size=args.batch_size, bos=bos, device=args.device)
    res = summarize_scores(scores, n_bins=args.bins, by_source=args.by_source, seed=args.seed, n_boot=args.n_boot)
    td = TokenData(scores.info["data"])
    top = top_contexts(scores, td.val, td.tokenizer, k=args.top, bos_text="⟨BOS⟩")
    res["top_contexts"] = top
    out.mkdir(parents=True, exist_ok=True)
    res["files"] = {"delta_by_bin": "delta_by_bin.png", "scatter": "scatter.png", "contexts": "contexts.md"}

    atomic_write_text(out / "contexts.md", contexts_markdown(top, res["setup"]))
    plot_delta_by_bin(res, out / "delta_by_bin.png")
    res["scatter_points"] = plot_scatter(-scores.logp_a, -scores.logp_b, out / "scatter.png", seed=args.seed)
    json.dumps(_finite(res), allow_nan=False)  # fail before writing if anything is not serialisable
    atomic_write_json(out / "compare.json", _finite(res))

    s = res["setup"]
    print(f"A = {s['run_a']['path']} (step {s['run_a']['step']})  vs  B = {s['run_b']['path']} (step {s['run_b']['step']})")
    if s["config_diff"]:
        print("config differences (A vs B): " + ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in s["config_diff"].items()))
    print(f"{res['n_tokens']:,} tokens of {s['data']} (val, {s['n_windows']} windows of {s['seq_len']}"
          f"{', BOS' if s['bos'] else ''}); Δ_sym > 0 and ℓ_B − ℓ_A > 0 mean A is better\n")
    print(bins_table(res))
    for name, r in (res.get("by_source") or {}).items():
        print(f"\nsource {name}:\n")
        print(bins_table(r))
    print(f"\nwrote {out / 'compare.json'}, delta_by_bin.png, scatter.png, contexts.md")
    return 0
