"""Plots of training runs and their probes: PNG files (matplotlib, Agg) and one self-contained ``index.html``.

    html = make_report(["runs/g05", "runs/g10"], "report/")

Runs are overlaid in one colour each and labelled by what differs in their ``config.yaml``
(:func:`run_labels`, via ``smallinit.config.config_diff``). Figures (each written when some run
has the data for it):

- ``loss.png``                 training loss (line) and validation loss (dashed, markers) vs step
- ``srank.png``                stable rank ||W||_F²/||W||_2² vs step, one panel per matrix type
                               (mean over layers; the band spans the layers' min..max)
- ``condensation.png``         condensation index mean_{i≠j}|C_ij| vs step, same panels, with the
                               random-rows reference sqrt(2/(π d_in)) dotted
- ``heatmaps_<matrix>.png``    row-cosine matrices C at the saved (log-spaced) steps, one row per run,
                               rows/columns ordered by projection on the leading singular vector
- ``sink.png``                 attention-sink share per layer vs step, uniform causal baseline dashed
- ``massive_activation.png``   max |h| of the residual stream per layer vs step
- ``saturation.png``           RMSNorm saturation ms/(ms+ε) and ε/ms per norm vs step
- ``flow.png``                 residual flow ||F(norm(h))||/||h|| per layer, at the first and last probe
- ``optim_eps.png``            AdamW ε: mean damping ε/(√v̂+ε) and share of entries with √v̂ < ε vs step,
                               one panel per matrix type (mean over layers; band = min..max)
- ``moe.png``                  router entropy, dead experts, busiest expert's share vs step (MoE runs)
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.errors import RunDirError
from smallinit.core.figures import color as _color
from smallinit.core.figures import margins as _margins
from smallinit.core.figures import panel_grid as _grid
from smallinit.core.figures import pyplot as _plt
from smallinit.core.figures import save_png, write_html
from smallinit.probes.summary import _differing_keys, _fmt, run_labels, summary_numbers
from smallinit.runs.rundir import RunData, config_get, load_run

MAX_HEATMAP_COLUMNS = 10

__all__ = ["RunData", "load_run", "make_report", "run_labels", "summary_numbers"]


# ---- figures ---------------------------------------------------------------------------------------


def _write(fig, path: Path) -> Path:
    return save_png(fig, path, dpi=90, tight=False)


def _save_with_legend(fig, runs: list[RunData], path: Path) -> Path:
    """Save with one legend (a colour per run) under the panels."""
    import textwrap

    from matplotlib.lines import Line2D

    labels = [textwrap.fill(r.label, 110) for r in runs]
    ncol = min(len(runs), 3) if max(len(r.label) for r in runs) <= 40 else 1
    lines = sum(l.count("\n") + 1 for l in labels[::ncol])
    w, h = fig.get_size_inches()
    legend_h = 0.2 * lines + 0.15
    fig.set_size_inches(w, h + legend_h)
    _margins(fig, bottom=0.5 + legend_h)
    handles = [Line2D([], [], color=_color(i), lw=2.5) for i in range(len(runs))]
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.0))
    return _write(fig, path)


def plot_loss(runs: list[RunData], out: Path) -> Path | None:
    if not any(r.metrics for r in runs):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, r in enumerate(runs):
        tr = [(m["step"], m["loss"]) for m in r.metrics if m.get("loss") is not None]
        va = [(m["step"], m["val_loss"]) for m in r.metrics if m.get("val_loss") is not None]
        if tr:
            ax.plot(*zip(*tr), color=_color(i), lw=1.2, label=f"{r.label} (train)")
        if va:
            ax.plot(*zip(*va), color=_color(i), lw=1.5, ls="--", marker="o", ms=4, label=f"{r.label} (val)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Training loss (solid) and validation loss (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _margins(fig, top=0.4, bottom=0.55, left=0.75)
    return _write(fig, out / "loss.png")


def _matrices(rec: dict[str, Any], section: str = "") -> dict[str, Any]:
    """Per-matrix entries of a probe record: ``rec["matrices"]``, or ``rec[section]["matrices"]`` (e.g. "optim_eps")."""
    return (rec.get(section) or {}).get("matrices", {}) if section else rec.get("matrices", {})


def _kinds(runs: list[RunData], section: str = "") -> list[str]:
    from smallinit.probes.training import matrix_kind

    kinds: list[str] = []
    for r in runs:
        for rec in r.probes:
            for name in _matrices(rec, section):
                k = matrix_kind(name)
                if k not in kinds:
                    kinds.append(k)
    return kinds


def _kind_series(run: RunData, kind: str, metric: str, section: str = ""):
    """steps, mean, min, max (over the layers / experts of one matrix kind) of ``metric``, and d_in."""
    from smallinit.probes.training import matrix_kind

    steps, mean, lo, hi, d_in = [], [], [], [], None
    for rec in run.probes:
        vals = []
        for name, m in _matrices(rec, section).items():
            if matrix_kind(name) == kind and m.get(metric) is not None:
                vals.append(m[metric])
                d_in = m.get("d_in", d_in)
        if vals:
            steps.append(rec["step"])
            mean.append(float(np.mean(vals)))
            lo.append(min(vals))
            hi.append(max(vals))
    return steps, mean, lo, hi, d_in


def plot_matrix_metric(runs: list[RunData], out: Path, metric: str) -> Path | None:
    """``srank.png`` (metric "srank"), ``condensation.png`` (metric "cond") or ``optim_eps.png`` (metric
    "damping" of the ``optim_eps`` section: solid = mean damping ε/(√v̂+ε), dashed = share with √v̂ < ε)."""
    section = "optim_eps" if metric == "damping" else ""
    kinds = _kinds(runs, section)
    if not kinds:
        return None
    fig, axes = _grid(len(kinds))
    for ax, kind in zip(axes, kinds):
        refs = set()
        for i, r in enumerate(runs):
            steps, mean, lo, hi, d_in = _kind_series(r, kind, metric, section)
            if not steps:
                continue
            if section:
                ax.plot(*_kind_series(r, kind, "frac_below", section)[:2], color=_color(i), lw=1, ls="--")
            ax.plot(steps, mean, color=_color(i), lw=1.6)
            ax.fill_between(steps, lo, hi, color=_color(i), alpha=0.15, lw=0)
            if metric == "cond" and d_in:
                refs.add(d_in)
        for d_in in refs:
            ax.axhline(math.sqrt(2 / (math.pi * d_in)), color="grey", ls=":", lw=1)
        ax.set_title(kind, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    name, title = {
        "srank": ("srank.png", "stable rank ||W||_F²/||W||_2² (mean over layers, band = min..max)"),
        "cond": ("condensation.png", "condensation index mean|C_ij| (dotted: random rows √(2/πd_in))"),
        "damping": (
            "optim_eps.png",
            "AdamW ε: mean damping ε/(√v̂+ε) (solid; band = min..max over layers), "
            "share of entries with √v̂ < ε (dashed)",
        ),
    }[metric]
    fig.suptitle(title, fontsize=10)
    return _save_with_legend(fig, runs, out / name)


def _heatmap_columns(steps: list[int], k: int = MAX_HEATMAP_COLUMNS) -> list[int]:
    """At most ``k`` of ``steps``: always the first and last, the rest spread evenly in log(step + 1)."""
    steps = sorted(set(steps))
    if len(steps) <= k:
        return steps
    logs = np.log1p(steps)
    targets = np.linspace(logs[0], logs[-1], k)
    chosen = sorted({steps[int(np.argmin(np.abs(logs - t)))] for t in targets})
    return chosen


def plot_heatmaps(runs: list[RunData], out: Path) -> list[Path]:
    """One ``heatmaps_<matrix>.png`` per matrix with saved heatmaps: rows = runs, columns = steps."""
    names: list[str] = []
    for r in runs:
        for per in r.heatmaps.values():
            names += [n for n in per if n not in names]
    paths = []
    for name in names:
        p = heatmap_grid(runs, name, out / f"heatmaps_{name.replace('/', '_')}.png")
        if p is not None:
            paths.append(p)
    return paths


def heatmap_grid(runs: list[RunData], name: str, path: Path, max_cols: int = MAX_HEATMAP_COLUMNS) -> Path | None:
    """Row-cosine heatmaps C of matrix ``name`` (rows/columns ordered by the leading singular vector, so aligned
    rows form blocks): one row of panels per run that saved it, one column per step (at most ``max_cols``,
    log-spaced, :func:`_heatmap_columns`); a grey cell where a run has no heatmap at that step. None when no run
    saved the matrix."""
    import textwrap

    plt = _plt()
    steps = _heatmap_columns([s for r in runs for s, per in r.heatmaps.items() if name in per], max_cols)
    rows = [(i, r) for i, r in enumerate(runs) if any(name in per for per in r.heatmaps.values())]
    if not rows or not steps:
        return None
    labels = [textwrap.fill(r.label or r.name, 24) for _, r in rows]
    label_in = 0.25 + 0.16 * max(l.count("\n") + 1 for l in labels)
    cell = 1.7
    W = label_in + cell * len(steps) + 0.9
    H = 0.8 + cell * len(rows) + 0.1
    fig, axes = plt.subplots(len(rows), len(steps), figsize=(W, H), squeeze=False)
    fig.subplots_adjust(left=label_in / W, right=1 - 0.9 / W, top=1 - 0.8 / H, bottom=0.1 / H, wspace=0.08, hspace=0.08)
    im = None
    for ri, (run_i, r) in enumerate(rows):
        for ci, s in enumerate(steps):
            ax = axes[ri][ci]
            ax.set_xticks([])
            ax.set_yticks([])
            h = r.heatmaps.get(s, {}).get(name)
            if h is None:
                ax.set_facecolor("#eeeeee")
            else:
                C = h["cos"].astype(np.float32)
                order = h.get("order", np.arange(C.shape[0]))
                im = ax.imshow(C[np.ix_(order, order)], cmap="RdBu_r", vmin=-1, vmax=1, interpolation="antialiased")
            if ri == 0:
                ax.set_title(f"step {s}", fontsize=8)
            if ci == 0:
                ax.set_ylabel(labels[ri], fontsize=8, color=_color(run_i))
    if im is not None:
        cax = fig.add_axes((1 - 0.75 / W, 0.1 / H + 0.1 * (1 - 0.9 / H), 0.12 / W, 0.8 * (1 - 0.9 / H)))
        fig.colorbar(im, cax=cax)
        cax.tick_params(labelsize=7)
    fig.suptitle(f"row cosine similarity of {name}\n(rows ordered by the leading singular vector)", fontsize=9)
    return _write(fig, path)


def _n_layers(runs: list[RunData]) -> int:
    return max((len(rec.get("layers", [])) for r in runs for rec in r.probes), default=0)


def _layer_series(run: RunData, layer: int, get) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for rec in run.probes:
        ls = rec.get("layers", [])
        if layer < len(ls):
            v = get(ls[layer])
            if v is not None:
                xs.append(rec["step"])
                ys.append(v)
    return xs, ys


def plot_sink(runs: list[RunData], out: Path) -> Path | None:
    L = _n_layers(runs)
    if not L:
        return None
    fig, axes = _grid(L, ncols=min(L, 4), w=3.4, h=2.6)
    for layer, ax in enumerate(axes):
        base = set()
        top = 0.0
        for i, r in enumerate(runs):
            xs, ys = _layer_series(r, layer, lambda l: l.get("sink"))
            if xs:
                ax.plot(xs, ys, color=_color(i), lw=1.6)
                top = max(top, max(ys))
            base |= {rec.get("uniform_sink") for rec in r.probes if rec.get("uniform_sink") is not None}
        for b in base:
            ax.axhline(b, color="grey", ls="--", lw=1)
            top = max(top, b)
        ax.set_title(f"layer {layer}", fontsize=10)
        ax.set_ylim(0, min(1.0, max(0.05, 1.15 * top)))
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(
        "attention on the first token (mean over heads, queries t≥1); dashed: uniform causal attention", fontsize=10
    )
    return _save_with_legend(fig, runs, out / "sink.png")


def plot_massive(runs: list[RunData], out: Path) -> Path | None:
    L = _n_layers(runs)
    if not L:
        return None
    fig, axes = _grid(L, ncols=min(L, 4), w=3.4, h=2.6)
    for layer, ax in enumerate(axes):
        for i, r in enumerate(runs):
            xs, ys = _layer_series(r, layer, lambda l: l.get("max_act"))
            if xs:
                ax.plot(xs, ys, color=_color(i), lw=1.6)
        ax.set_yscale("log")
        ax.set_title(f"after block {layer}", fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("massive activation: max |h| in the residual stream", fontsize=10)
    return _save_with_legend(fig, runs, out / "massive_activation.png")


def plot_saturation(runs: list[RunData], out: Path) -> Path | None:
    if not any(r.probes for r in runs):
        return None
    plt = _plt()
    norms = ("attn_norm", "mlp_norm", "final_norm")
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.6), squeeze=False)
    for col, norm in enumerate(norms):
        for row, key in enumerate(("saturation", "eps_over_ms")):
            ax = axes[row][col]
            for i, r in enumerate(runs):
                xs, mean, lo, hi = [], [], [], []
                for rec in r.probes:
                    if norm == "final_norm":
                        vals = [rec["final_norm"][key]] if isinstance(rec.get("final_norm"), dict) else []
                    else:
                        vals = [l[norm][key] for l in rec.get("layers", []) if isinstance(l.get(norm), dict)]
                    vals = [v for v in vals if v is not None]
                    if vals:
                        xs.append(rec["step"])
                        mean.append(float(np.mean(vals)))
                        lo.append(min(vals))
                        hi.append(max(vals))
                if xs:
                    ax.plot(xs, mean, color=_color(i), lw=1.6)
                    ax.fill_between(xs, lo, hi, color=_color(i), alpha=0.15, lw=0)
            if key == "saturation":
                ax.set_ylim(0, 1.05)
                ax.axhline(0.5, color="grey", ls=":", lw=1)
                ax.set_title(f"{norm}: ms/(ms+ε)", fontsize=10)
            else:
                ax.set_yscale("log")
                ax.set_title(f"{norm}: ε/ms", fontsize=10)
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
    fig.suptitle(
        "RMSNorm saturation of the norm inputs (mean over layers, band = min..max); ≤ 0.5 means ε dominates",
        fontsize=10,
    )
    return _save_with_legend(fig, runs, out / "saturation.png")


def plot_flow(runs: list[RunData], out: Path) -> Path | None:
    if not any(r.probes for r in runs):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), squeeze=False)
    for ax, key, title in zip(axes[0], ("flow_attn", "flow_mlp"), ("attention branch", "MLP branch")):
        for i, r in enumerate(runs):
            if not r.probes:
                continue
            for rec, ls, mk in ((r.probes[0], "--", "o"), (r.probes[-1], "-", "s")):
                ys = [l.get(key) for l in rec.get("layers", [])]
                pts = [(j, y) for j, y in enumerate(ys) if y is not None and y > 0]
                if pts:
                    ax.plot(*zip(*pts), color=_color(i), ls=ls, marker=mk, ms=4, lw=1.4)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(f"{title}: ||F(norm(h))|| / ||h||", fontsize=10)
        ax.grid(alpha=0.3)
    fig.suptitle("residual flow per layer (dashed ○: first probe, solid □: last probe)", fontsize=10)
    return _save_with_legend(fig, runs, out / "flow.png")


def plot_moe(runs: list[RunData], out: Path) -> Path | None:
    if not any("moe" in rec for r in runs for rec in r.probes):
        return None
    fig, axes = _grid(3, ncols=3, w=3.6, h=2.8)
    for ax, key, title in zip(
        axes,
        ("router_entropy", "dead_experts", "max_expert_fraction"),
        ("router entropy (nats; dotted: ln E)", "dead experts (all layers)", "busiest expert's token share"),
    ):
        for i, r in enumerate(runs):
            pts = [(rec["step"], rec["moe"][key]) for rec in r.probes if key in rec.get("moe", {})]
            if pts:
                ax.plot(*zip(*pts), color=_color(i), lw=1.6)
            if key == "router_entropy":
                for rec in r.probes[-1:]:
                    if "router_entropy_max" in rec.get("moe", {}):
                        ax.axhline(rec["moe"]["router_entropy_max"], color="grey", ls=":", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, runs, out / "moe.png")


# ---- the report ------------------------------------------------------------------------------------


def _num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return html.escape(str(v))


def write_index(out: Path, runs: list[RunData], figures: list[tuple[str, Path]]) -> Path:
    """``index.html``: the runs, their config differences, headline numbers and every figure
    (``<img src>`` relative to ``out``)."""
    keys = _differing_keys([r.config for r in runs])
    e = html.escape
    parts = [
        "<h1>smallinit: training runs and probes</h1>",
        "<h2>Runs</h2><table><tr><th>label</th><th>path</th>"
        + "".join(f"<th>{e(k)}</th>" for k in keys)
        + "<th>steps</th><th>final loss</th><th>final val loss</th></tr>",
    ]
    nums = [summary_numbers(r) for r in runs]
    for i, (r, n) in enumerate(zip(runs, nums)):
        rgb = "#" + "".join(f"{int(255 * c):02x}" for c in _color(i)[:3])
        parts.append(
            f"<tr><td><span class='sw' style='background:{rgb}'></span>{e(r.label)}</td>"
            f"<td>{e(str(r.path))}</td>"
            + "".join(f"<td>{e(_fmt(config_get(r.config, k)))}</td>" for k in keys)
            + f"<td>{_num(n.get('steps'))}</td><td>{_num(n.get('final_loss'))}</td>"
            f"<td>{_num(n.get('final_val_loss'))}</td></tr>"
        )
    parts.append("</table>")
    if any("srank" in n for n in nums):
        parts.append(
            "<h2>Headline numbers</h2><table><tr><th>run</th>"
            "<th>srank blocks.0.attn.q: init</th><th>at 10%</th><th>end</th>"
            "<th>sink (mean over layers): init</th><th>end</th><th>uniform baseline</th>"
            "<th>lowest norm saturation (end)</th><th>max |h| (end)</th></tr>"
        )
        for n in nums:
            s = n.get("srank", {})
            sk = n.get("sink", {})

            def sr(k):
                d = s.get(k) or {}
                return f"{_num(d.get('value'))} <small>(step {_num(d.get('step'))})</small>" if d else "–"

            parts.append(
                f"<tr><td>{e(n['label'])}</td><td>{sr('init')}</td><td>{sr('10%')}</td><td>{sr('end')}</td>"
                f"<td>{_num(sk.get('init'))}</td><td>{_num(sk.get('end'))}</td><td>{_num(sk.get('uniform'))}</td>"
                f"<td>{_num(n.get('min_saturation_end'))}</td><td>{_num(n.get('max_act_end'))}</td></tr>"
            )
        parts.append("</table>")
    for title, path in figures:
        rel = os.path.relpath(path, out)
        parts.append(f"<h2>{e(title)}</h2><img src='{e(rel)}' alt='{e(title)}'>")
    return write_html(out / "index.html", "smallinit runs", parts)


def make_report(run_dirs: list[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Load the runs, label them by their config differences, draw every figure into ``out_dir`` and
    write ``out_dir/index.html`` (returned)."""
    from smallinit.core.outputs import OutputPlan, check_out_dir, staged_dir

    if not run_dirs:
        raise RunDirError("give at least one run directory")
    plan = check_out_dir(out_dir, "plot", inputs=run_dirs, can_continue=True, verb="plot")
    runs = [load_run(d) for d in run_dirs]
    for r, label in zip(runs, run_labels([r.config for r in runs], [r.name for r in runs])):
        r.label = label
    # drawn beside and renamed into place; a previous plot folder is replaced whole (no stale figures left in it)
    with staged_dir(OutputPlan(plan.path, "plot", "replace" if plan.state == "continue" else plan.state)) as out:
        figures: list[tuple[str, Path]] = []

        def add(title: str, p: Path | None) -> None:
            if p is not None:
                figures.append((title, p))

        add("Loss", plot_loss(runs, out))
        add("Stable rank per matrix type", plot_matrix_metric(runs, out, "srank"))
        add("Condensation index per matrix type", plot_matrix_metric(runs, out, "cond"))
        for p in plot_heatmaps(runs, out):
            add(f"Row-cosine heatmaps: {p.stem[len('heatmaps_') :]}", p)
        add("Attention sink per layer", plot_sink(runs, out))
        add("Massive activations per layer", plot_massive(runs, out))
        add("RMSNorm saturation per norm", plot_saturation(runs, out))
        add("Residual flow per layer", plot_flow(runs, out))
        add("Optimizer ε: damping per matrix type", plot_matrix_metric(runs, out, "damping"))
        add("MoE routing", plot_moe(runs, out))
        write_index(out, runs, figures)
    return plan.path / "index.html"
