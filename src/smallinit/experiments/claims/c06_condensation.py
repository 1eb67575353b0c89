"""Claim 6: under γ = 1 weight matrices condense (stable rank ||W||_F²/||W||_2² drops) and then expand again; under
γ = 0.5 much less. Arms at the probe size, ε = 1e-12, no gate: γ = 1 ("small") and γ = 0.5 ("std")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.plots import plot_probe_series, pyplot, save
from smallinit.figures import finish_axes
from smallinit.experiments.claims.rules import INCONCLUSIVE, Verdict, is_finite, combine, paired_effect
from smallinit.experiments.presets import Arm, Preset, arm

ID = 6
CLAIM = "Weights condense (stable rank drops) then expand under γ = 1, not under γ = 0.5."


def arms(p: Preset) -> dict[str, Arm]:
    s = p.probe_size
    return {"small": arm(s, (1.0, 1e-12, "none")), "std": arm(s, (0.5, 1e-12, "none"))}


def trajectory_stats(srank: Sequence[float]) -> dict[str, float]:
    """For one matrix's stable-rank trajectory r(t): drop = 1 − min r / r(0) (condensation) and
    rebound = r(end) / min r − 1 (expansion after the minimum)."""
    r = [x for x in srank if is_finite(x) and x > 0]
    if len(r) < 2:
        return {"drop": math.nan, "rebound": math.nan}
    m = min(r)
    return {"drop": 1 - m / r[0], "rebound": r[-1] / m - 1}


def judge(small: dict[str, Sequence[float]], std: dict[str, Sequence[float]]) -> Verdict:
    """Claim 6. {matrix name: stable rank over probed steps} for γ = 1 (small) and γ = 0.5 (std), same
    architecture. Parts (paired bootstrap over matrices): (a) condensation: drop(γ=1) − drop(γ=0.5) > 0;
    (b) then expansion: rebound(γ=1) − rebound(γ=0.5) > 0."""
    names = [n for n in small if n in std]
    if not names:
        return Verdict(INCONCLUSIVE, notes=["no common matrices with stable-rank trajectories"])
    s = {n: trajectory_stats(small[n]) for n in names}
    t = {n: trajectory_stats(std[n]) for n in names}
    a = paired_effect("(a) stable-rank drop: γ=1 − γ=0.5", [s[n]["drop"] for n in names],
                      [t[n]["drop"] for n in names], "matrices")
    b = paired_effect("(b) rebound after the minimum: γ=1 − γ=0.5", [s[n]["rebound"] for n in names],
                      [t[n]["rebound"] for n in names], "matrices")
    nums = {"drop_gamma1": float(np.nanmean([s[n]["drop"] for n in names])),
            "drop_gamma0.5": float(np.nanmean([t[n]["drop"] for n in names])),
            "rebound_gamma1": float(np.nanmean([s[n]["rebound"] for n in names])),
            "rebound_gamma0.5": float(np.nanmean([t[n]["rebound"] for n in names])), "matrices": len(names)}
    return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)


def srank_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """{block matrix name: its stable rank at each probed step}."""
    out: dict[str, list[float]] = {}
    for rec in records:
        for name, m in (rec.get("matrices") or {}).items():
            if name.startswith("blocks.") and m.get("srank") is not None:
                out.setdefault(name, []).append(float(m["srank"]))
    return out


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    small, std = ctx.roles["small"], ctx.roles["std"]
    ps, pt = ctx.probes(small), ctx.probes(std)
    v = judge(srank_series(ps), srank_series(pt))
    plots = [
        plot_srank(ctx.out, "claim6_srank.png", {"γ=1": ps, "γ=0.5": pt},
                   title="Claim 6: stable rank / its initial value (mean over block matrices)"),
        plot_probe_series(ctx.out, "claim6_condensation.png", {"γ=1": ps, "γ=0.5": pt}, "cond_mean",
                          "condensation index (mean |cos| between rows)", title="Claim 6: condensation index"),
        plot_heatmaps(ctx.out, "claim6_heatmaps.png", {"γ=1": ctx.runs(small), "γ=0.5": ctx.runs(std)}),
    ]
    measured = ("stable rank ||W||_F²/||W||_2² of every block matrix over training (probes), its drop from init to "
                "its minimum (condensation) and its rise from the minimum to the end (expansion), γ = 1 vs γ = 0.5 "
                "(ε = 1e-12, no gate); paired bootstrap over matrices")
    return ctx.result(measured, v, plots=plots, runs=ctx.names(small, std))


def plot_srank(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], title: str = "") -> str | None:
    """Stable rank divided by its value at step 0, averaged over block matrices (thick) and per matrix type
    (thin), vs step."""
    from smallinit.probes.training import matrix_kind

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, recs) in enumerate(groups.items()):
        if not recs:
            continue
        first = {k: v.get("srank") for k, v in (recs[0].get("matrices") or {}).items() if k.startswith("blocks.")}
        steps, mean, kinds = [], [], {}
        for r in recs:
            rel = {k: v["srank"] / first[k] for k, v in (r.get("matrices") or {}).items()
                   if k in first and first[k] and v.get("srank") is not None}
            if not rel:
                continue
            steps.append(r["step"])
            mean.append(float(np.mean(list(rel.values()))))
            for k, v in rel.items():
                kinds.setdefault(matrix_kind(k), {}).setdefault(r["step"], []).append(v)
        if not steps:
            continue
        ax.plot(steps, mean, color=f"C{i}", lw=2.2, label=f"{label} (mean)")
        for kind, by_step in kinds.items():
            ss = sorted(by_step)
            ax.plot(ss, [np.mean(by_step[s]) for s in ss], color=f"C{i}", lw=0.7, alpha=0.45)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    finish_axes(ax, "step", "stable rank / stable rank at init", title + "\n(thin lines: one matrix type each)",
                title_size=9)
    return save(fig, out, name)


def plot_heatmaps(out: Path, name: str, groups: dict[str, list[Path]], max_cols: int = 5) -> str | None:
    """Row-cosine heatmaps of the first saved matrix at log-spaced steps, one row of panels per group's seed-0 run
    (:func:`smallinit.probes.plots.heatmap_grid`)."""
    from smallinit.probes.plots import heatmap_grid
    from smallinit.rundir import load_run

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
