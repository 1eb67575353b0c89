"""Figures more than one claim draws (validation-loss curves, a summarized probe value over training) and
:func:`save`, which writes a claim figure into the output folder and returns the name the report references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smallinit.core.figures import finish_axes, pyplot, save_png
from smallinit.runs.rundir import read_metrics, summarize_probe_record


def save(fig: Any, out: Path, name: str) -> str:
    """Write ``fig`` to ``OUT/name`` (atomic PNG) and return ``name`` (relative, as the report references it)."""
    save_png(fig, Path(out) / name)
    return name


def plot_loss_curves(out: Path, name: str, groups: dict[str, list[Path]], title: str = "") -> str | None:
    """Validation loss (solid) and training loss (faint) vs tokens, one colour per group, one line per seed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, runs) in enumerate(groups.items()):
        color = f"C{i}"
        for j, rd in enumerate(runs):
            m = read_metrics(rd)
            tr = [(r["tokens"], r["loss"]) for r in m if r.get("loss") is not None]
            va = [(r["tokens"], r["val_loss"]) for r in m if r.get("val_loss") is not None]
            if tr:
                ax.plot(*zip(*tr), color=color, alpha=0.25, lw=0.8)
            if va:
                ax.plot(*zip(*va), color=color, marker="o", ms=3, label=label if j == 0 else None)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    finish_axes(ax, "tokens", "loss (val: markers; train: faint)", title)
    return save(fig, out, name)


def plot_probe_series(
    out: Path, name: str, groups: dict[str, list[dict[str, Any]]], key: str, ylabel: str, title: str = ""
) -> str | None:
    """One summarized probe value (see ``summarize_probe_record``) vs step, one line per run."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    drawn = False
    for i, (label, recs) in enumerate(groups.items()):
        pts = [(r["step"], summarize_probe_record(r).get(key)) for r in recs]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            ax.plot(*zip(*pts), marker=".", label=label, color=f"C{i}")
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    finish_axes(ax, "step", ylabel, title)
    return save(fig, out, name)


__all__ = ["plot_loss_curves", "plot_probe_series", "save"]


def plot_row_cosine_heatmaps(out: Path, name: str, groups: dict[str, list[Path]], max_cols: int = 5) -> str | None:
    """Row-cosine heatmaps of the first saved matrix at log-spaced steps, one row of panels per group's seed-0 run
    (:func:`smallinit.probes.plots.heatmap_grid`)."""
    from smallinit.probes.plots import heatmap_grid
    from smallinit.runs.rundir import load_run

    runs = []
    for label, dirs in groups.items():
        if dirs:
            r = load_run(dirs[0])
            r.label = label
            if r.heatmaps:
                runs.append(r)
    if not runs:
        return None
    matrix = sorted(next(iter(runs[0].heatmaps.values())).keys())[0]
    return name if heatmap_grid(runs, matrix, Path(out) / name, max_cols=max_cols) else None
