"""Learning-rate selection: every arm is trained at each learning rate of the preset (seed 0) and keeps the one
with the lowest ``tune_loss`` (validation batches disjoint from those behind the reported ``val_loss``); the
anchor task selects on its in-distribution tune set, never on the held-out pairs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from smallinit.core.figures import finish_axes, pyplot, save_png
from smallinit.runs.rundir import collect_run, read_json, run_state


def select_lr(runs: dict[float, Path], metric: str = "final_tune_loss") -> tuple[float | None, list[dict[str, Any]]]:
    """The learning rate whose run has the lowest ``metric`` (failed or diverged runs excluded; with one
    learning rate that one, if it finished). Returns (lr, table rows)."""
    rows, best, best_v = [], None, math.inf
    for lr, rd in sorted(runs.items()):
        info = collect_run(rd)
        v = info.get(metric) if info.get(metric) is not None else info.get("final_val_loss")
        ok = info["state"] == "done" and v is not None and math.isfinite(v)
        rows.append(
            {
                "lr": lr,
                "state": info["state"] if not info.get("error") else f"failed: {info['error']}",
                "tune_loss": info.get("final_tune_loss"),
                "val_loss": info.get("final_val_loss"),
                "run": rd.name,
            }
        )
        if ok and v < best_v:
            best, best_v = lr, v
    for r in rows:
        r["chosen"] = r["lr"] == best
    return best, rows


def select_anchor_lr(runs: dict[float, Path]) -> tuple[float | None, list[dict[str, Any]]]:
    rows, best, best_v = [], None, math.inf
    for lr, rd in sorted(runs.items()):
        s = read_json(rd / "summary.json") or {}
        v = s.get("final_val_loss")
        ok = bool(s.get("completed")) and v is not None and math.isfinite(v)
        rows.append(
            {"lr": lr, "state": run_state(rd), "tune_loss": v, "heldout_acc": s.get("heldout_acc"), "run": rd.name}
        )
        if ok and v < best_v:
            best, best_v = lr, v
    for r in rows:
        r["chosen"] = r["lr"] == best
    return best, rows


def plot_lr_sweep(out: Path, name: str, lr_tables: dict[str, dict[str, Any]]) -> str | None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for i, (key, t) in enumerate(lr_tables.items()):
        if key.startswith("anchor"):
            continue
        pts = [(r["lr"], r["tune_loss"] if r["tune_loss"] is not None else r["val_loss"]) for r in t["rows"]]
        pts = [(a, b) for a, b in pts if b is not None and math.isfinite(b)]
        if len(pts) < 2:
            continue
        ax.plot(*zip(*pts), marker="o", lw=1, label=key, color=f"C{i % 10}", ls="-" if i < 10 else "--")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    finish_axes(
        ax,
        "peak learning rate",
        "final tune_loss",
        "learning-rate sweep (each arm keeps its minimum)",
        legend=None,
        xscale="log",
    )
    ax.legend(fontsize=6, ncol=2)
    save_png(fig, Path(out) / name)
    return name


__all__ = ["plot_lr_sweep", "select_anchor_lr", "select_lr"]
