"""Figures and HTML pages: the one place for matplotlib's set-up, saving a PNG, the per-layer panel grid,
the HTML page, and the figures that several commands share.

- :func:`pyplot` — matplotlib with the non-interactive Agg backend (no display needed);
- :func:`save_png` — write a figure atomically (a reader never sees half a PNG) and close it;
- :func:`panel_grid` / :func:`margins` — n panels in rows of ``ncols`` (per layer, per matrix type ...);
- :func:`html_page` / :func:`write_html` — a self-contained HTML page around body fragments;
- :func:`plot_delta_by_bin` — mean Δ_sym per token-difficulty bin (``smallinit compare``, claim 7);
- :func:`plot_scatter` — per-token ℓ_A against ℓ_B (``smallinit compare``);
- :func:`plot_scaling` — the scaling fit L(N) = E + A·N^(−α) with variants beside it (``smallinit scaling``,
  claim 8).
"""

from __future__ import annotations

import html
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smallinit.core.outputs import GENERATOR

DPI = 110


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def color(i: int):
    """The i-th colour of the tab10 cycle (as an RGBA tuple)."""
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def save_png(fig: Any, path: str | os.PathLike, dpi: int = DPI, tight: bool = True) -> Path:
    """Write ``fig`` to ``path`` as a PNG atomically and close it; returns the path."""
    from smallinit.core.io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def panel_grid(n: int, ncols: int = 4, w: float = 3.6, h: float = 2.8):
    """A figure with ``n`` panels in rows of ``ncols`` (unused cells hidden): (fig, list of n axes)."""
    plt = pyplot()
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def margins(
    fig: Any,
    top: float = 0.75,
    bottom: float = 0.5,
    left: float = 0.6,
    right: float = 0.2,
    hspace: float = 0.6,
    wspace: float = 0.3,
) -> None:
    """Fixed margins in inches (cheaper than tight_layout, which costs a full draw per call)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h, hspace=hspace, wspace=wspace
    )


def finish_axes(
    ax: Any,
    xlabel: str,
    ylabel: str,
    title: str = "",
    *,
    title_size: float = 10,
    legend: float | None = 8,
    xscale: str | None = None,
    grid: bool = True,
) -> None:
    """The usual decoration of a one-axes figure: axis labels, title, optional x scale, legend (its font size;
    None: no legend) and a light grid."""
    if xscale:
        ax.set_xscale(xscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    if legend:
        ax.legend(fontsize=legend)
    if grid:
        ax.grid(alpha=0.3)


# ---- the HTML page -------------------------------------------------------------------------------------

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1f2328;line-height:1.45}
h1{border-bottom:1px solid #d0d7de;padding-bottom:.3em}h2{margin-top:2em;border-bottom:1px solid #eaeef2}
table{border-collapse:collapse;margin:.8em 0;font-size:.88em}th,td{border:1px solid #d0d7de;padding:.3em .6em;
text-align:left}th{background:#f6f8fa}tr:nth-child(even) td{background:#fbfcfd}
.verdict{display:inline-block;padding:.15em .6em;border-radius:1em;color:#fff;font-weight:600;font-size:.9em}
.part{display:inline-block;padding:.05em .5em;border:1.5px solid;border-radius:.3em;font-size:.85em;background:none}
.sw{display:inline-block;width:12px;height:12px;margin-right:6px}
img{max-width:100%;border:1px solid #eaeef2;margin:.5em 0}pre{background:#f6f8fa;padding:.8em;overflow-x:auto;
font-size:.8em}figure{margin:.6em 0}figcaption{font-size:.85em;color:#57606a}
small,.verdict{white-space:nowrap}td{vertical-align:top}
table{display:block;max-width:100%;overflow-x:auto}
@media (max-width:640px){body{margin:1em auto}.verdict{white-space:normal}table{font-size:.8em}}
"""


def html_page(title: str, body: Sequence[str], css: str = CSS) -> str:
    """A self-contained HTML page: ``title`` in <title>, the ``body`` fragments (already escaped HTML) in order."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        GENERATOR,
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>",
    ]
    return "\n".join(head + list(body) + ["</body></html>"]) + "\n"


def write_html(path: str | os.PathLike, title: str, body: Sequence[str], css: str = CSS) -> Path:
    """Write :func:`html_page` to ``path`` atomically; returns the path."""
    from smallinit.core.io import atomic_write_text

    atomic_write_text(path, html_page(title, body, css))
    return Path(path)


# ---- shared figures ------------------------------------------------------------------------------------


def difficulty_label(res: dict) -> str:
    """What a comparison's primary bins are quantiles of: the reference model's loss when one was scored (the
    (ℓ_A + ℓ_B)/2 bins are then the secondary ``bins_mean_difficulty``), else (ℓ_A + ℓ_B)/2."""
    if "bins_mean_difficulty" in res:
        return "token difficulty: the reference model's loss ℓ_ref, quantile bins (nats)"
    return "token difficulty (ℓ_A + ℓ_B)/2, quantile bins (nats)"


def plot_delta_by_bin(res: dict[str, Any], path: str | os.PathLike, title: str | None = None) -> Path | None:
    """Bar chart of mean Δ_sym = (p_A − p_B)/(p_A + p_B) per difficulty bin with its 95% interval; one bar per
    source beside the overall one when ``res`` has ``by_source``. ``res`` is a comparison result
    (:func:`smallinit.analysis.compare.summarize_scores`): {"bins": [...], "overall": {...}, optional "by_source"}.
    None (nothing written) when no bin has a mean."""
    import numpy as np

    bins = res.get("bins") or []
    if not any((b.get("delta_sym") or {}).get("mean") is not None for b in bins):
        return None
    plt = pyplot()
    groups = [("all", res)] + [(name, r) for name, r in (res.get("by_source") or {}).items()]
    names = [b["name"] for b in bins]
    x = np.arange(len(names))
    width = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(names) + 1), 4.0))
    for g, (label, r) in enumerate(groups):
        ds = [b.get("delta_sym") or {} for b in r["bins"]]
        means = np.array([np.nan if d.get("mean") is None else d["mean"] for d in ds])
        lo = np.array([np.nan if d.get("ci95") is None else d["ci95"][0] for d in ds])
        hi = np.array([np.nan if d.get("ci95") is None else d["ci95"][1] for d in ds])
        err = np.nan_to_num(np.stack([means - lo, hi - means]), nan=0.0)
        count = (r.get("overall") or {}).get("count")
        ax.bar(
            x + (g - (len(groups) - 1) / 2) * width,
            np.nan_to_num(means),
            width,
            yerr=err,
            capsize=3,
            label=f"{label} (n={count})" if count is not None else label,
        )
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{n}\n{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}" for n, b in zip(names, bins)])
    ax.set_xlabel(difficulty_label(res))
    ax.set_ylabel("mean Δ_sym = (p_A − p_B)/(p_A + p_B)")
    ax.set_title(title or "A vs B by token difficulty (95% bootstrap intervals; > 0: A better)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    if len(groups) > 1:
        ax.legend(fontsize=8)
    return save_png(fig, path)


def plot_scatter(loss_a: Any, loss_b: Any, path: str | os.PathLike, seed: int = 0, max_points: int = 20_000) -> int:
    """Scatter of ℓ_A (y) against ℓ_B (x) on a random subsample of at most ``max_points`` tokens, with the
    diagonal; returns the number of points drawn."""
    import numpy as np

    plt = pyplot()
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
    save_png(fig, path)
    return int(idx.size)


def plot_scaling(
    path: str | os.PathLike,
    baseline: Sequence[tuple[float, float]],
    variants: dict[str, Sequence[tuple[float, float, float | None]]],
    fit: dict[str, Any] | None,
    title: str = "",
    baseline_label: str = "baseline",
) -> Path | None:
    """Baseline points (N, L), the fitted curve L(N) = E + A·N^(−α) and its E, and each variant group's points
    (N, L, gain) labelled with gain = N_eff/N − 1 (log-x). None when there is no baseline point."""
    import numpy as np

    if not baseline:
        return None
    plt = pyplot()
    allN = [n for n, _ in baseline] + [v[0] for vs in variants.values() for v in vs]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    if fit and fit.get("A") is not None:
        grid = np.geomspace(min(allN) / 1.5, max(allN) * 1.5, 200)
        ax.plot(
            grid,
            fit["E"] + fit["A"] * grid ** (-fit["alpha"]),
            color="C0",
            lw=1.2,
            label=f"fit: {fit['E']:.3f} + {fit['A']:.3g}·N^-{fit['alpha']:.3f}",
        )
        ax.axhline(fit["E"], color="C0", lw=0.8, ls=":", label=f"E = {fit['E']:.3f}")
    ax.scatter([n for n, _ in baseline], [l for _, l in baseline], color="C0", zorder=3, label=baseline_label)
    markers = "s^Dv<>PX*"
    for i, (name, vs) in enumerate(variants.items()):
        ax.scatter(
            [v[0] for v in vs],
            [v[1] for v in vs],
            marker=markers[i % len(markers)],
            color=f"C{i + 1}",
            zorder=3,
            label=name,
        )
        for n, l, gain in vs:
            txt = "N_eff undefined" if gain is None else f"{gain:+.0%}"
            ax.annotate(txt, (n, l), textcoords="offset points", xytext=(5, 4), fontsize=7, color=f"C{i + 1}")
    ax.set_xscale("log")
    ax.set_xlabel("N (non-embedding parameters)")
    ax.set_ylabel("final validation loss (nats)")
    ax.set_title(title or "scaling fit on the baseline; labels: gain = N_eff/N − 1", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_png(fig, path)


__all__ = [
    "CSS",
    "DPI",
    "color",
    "difficulty_label",
    "finish_axes",
    "html_page",
    "margins",
    "panel_grid",
    "plot_delta_by_bin",
    "plot_scaling",
    "plot_scatter",
    "pyplot",
    "save_png",
    "write_html",
]
