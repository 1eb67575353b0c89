"""Claim 6: under γ = 1 weight matrices condense (stable rank ||W||_F²/||W||_2² drops) and then expand again; under
γ = 0.5 much less. Arms at the probe size, ε = 1e-12, no gate: γ = 1 ("small") and γ = 0.5 ("std").

Rule (:func:`judge`, statistics from :func:`condensation_stats`), per block matrix with stable rank r(t) at the
probed steps:

- reference step t_ref = the first probed step after step 0 (K = that step: condensation is measured *after* the
  first K steps, not from init). Under AdamW the first updates are ≈ lr per entry whatever the init, so with
  σ = 1/d the stable rank of any small-init matrix collapses within a few steps — a drop "from init" is nearly
  guaranteed for γ = 1 and says nothing about training dynamics. Starting at t_ref compares like with like;
- t_mid = the probed step strictly between t_ref and the last step t_end that is nearest the middle of training
  (t_end / 2);
- condensation = log r(t_ref) − log r(t_mid);  expansion = log r(t_end) − log r(t_mid).

The expansion is *signed*: a monotone decreasing trajectory gives expansion < 0 and a flat one ≈ 0, so no
monotone trajectory can pass it (the old "rebound" r_end / r_min − 1 was ≥ 0 by construction and was compared
against a baseline whose rebound was 0 by construction). Parts, each with a bootstrap 95% interval over matrices
(:func:`~smallinit.experiments.claims.rules.paired_effect`, paired by matrix name where two arms are compared):

(a) condensation(γ=1) − condensation(γ=0.5) > 0;
(b) expansion(γ=1) > 0;
(c) expansion(γ=1) − expansion(γ=0.5) > 0 — the null is the same statistic on the other arm.

Supported when all three are, not supported when any is below 0 (rules.combine). The issue also asked for a null
on a resampled probe batch: it does not apply here — stable rank (like the condensation index, mean |cos| between
rows) is a function of the weights alone, so a different probe batch cannot change it; the only noise is across
matrices (and seeds, when a preset runs several).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.plots import plot_probe_series, pyplot, save
from smallinit.figures import finish_axes
from smallinit.rundir import read_probes
from smallinit.experiments.claims.rules import INCONCLUSIVE, Verdict, is_finite, combine, paired_effect
from smallinit.experiments.presets import Arm, Preset, arm

ID = 6
CLAIM = "Weights condense (stable rank drops) then expand under γ = 1, not under γ = 0.5."


CROSSOVER_PAIR = ("paper", "gamma-only")
"""With a crossover that has both arms and probes on, the claim reads their trunks: γ = 1 vs γ = 0.5, both with
ε = 1e-12 and the gate — the pair differs in γ only, and trains D tokens instead of a short run."""


def uses_crossover(p: Preset) -> bool:
    x = p.crossover
    return (x is not None and 1 in p.claims and all(a in x.arms for a in CROSSOVER_PAIR)
            and int(x.overrides.get("probe.every", p.base.get("probe", {}).get("every", 0)) or 0) > 0)


def arms(p: Preset) -> dict[str, Arm]:
    if uses_crossover(p):
        return {}  # the crossover's trunks (claim 1's runs) carry the probe logs
    s = p.probe_size
    return {"small": arm(s, (1.0, 1e-12, "none")), "std": arm(s, (0.5, 1e-12, "none"))}


def trajectory_stats(srank: Sequence[float]) -> dict[str, float]:
    """The OLD statistics, kept for comparison only (not used by :func:`judge`): drop = 1 − min r / r(0) from init
    and rebound = r(end) / min r − 1, which is ≥ 0 for any trajectory (0 for a monotone one)."""
    r = [x for x in srank if is_finite(x) and x > 0]
    if len(r) < 2:
        return {"drop": math.nan, "rebound": math.nan}
    m = min(r)
    return {"drop": 1 - m / r[0], "rebound": r[-1] / m - 1}


def condensation_stats(steps: Sequence[float], srank: Sequence[float]) -> dict[str, float]:
    """One matrix's trajectory r(t) at ``steps`` (aligned; non-finite or non-positive ranks dropped) →
    t_ref = first step > 0, t_end = last step, t_mid = the step in (t_ref, t_end) nearest t_end / 2 (the earlier on a
    tie); condensation = log r(t_ref) − log r(t_mid), expansion = log r(t_end) − log r(t_mid). NaN when fewer than
    three usable steps after step 0."""
    pts = sorted((float(t), float(x)) for t, x in zip(steps, srank) if is_finite(x) and x > 0 and is_finite(t))
    after = [(t, x) for t, x in pts if t > 0]
    nan = {"condensation": math.nan, "expansion": math.nan, "ref_step": math.nan, "mid_step": math.nan,
           "end_step": math.nan}
    if len(after) < 3:
        return nan
    (t_ref, r_ref), (t_end, r_end) = after[0], after[-1]
    inner = after[1:-1]
    t_mid, r_mid = min(inner, key=lambda p: abs(p[0] - t_end / 2))
    return {"condensation": math.log(r_ref) - math.log(r_mid), "expansion": math.log(r_end) - math.log(r_mid),
            "ref_step": t_ref, "mid_step": t_mid, "end_step": t_end}


def judge(small: dict[str, Sequence[float]], std: dict[str, Sequence[float]],
          steps_small: Sequence[float] | None = None, steps_std: Sequence[float] | None = None) -> Verdict:
    """Claim 6. {matrix name: stable rank at each probed step} for γ = 1 (small) and γ = 0.5 (std), same
    architecture; ``steps_*`` = the probed steps the values are aligned with (default 0, 1, 2, …). With
    c = condensation and x = expansion from :func:`condensation_stats` (signed logs, measured after the first probe
    step), the parts (bootstrap 95% over matrices) are (a) c(γ=1) − c(γ=0.5) > 0, (b) x(γ=1) > 0 and
    (c) x(γ=1) − x(γ=0.5) > 0; supported when all are (see the module docstring for why)."""
    names = [n for n in small if n in std]
    if not names:
        return Verdict(INCONCLUSIVE, notes=["no common matrices with stable-rank trajectories"])

    def stats(series: dict[str, Sequence[float]], steps: Sequence[float] | None) -> dict[str, dict[str, float]]:
        return {n: condensation_stats(steps if steps is not None else range(len(series[n])), series[n])
                for n in names}

    s, t = stats(small, steps_small), stats(std, steps_std)
    cs, ct = [s[n]["condensation"] for n in names], [t[n]["condensation"] for n in names]
    xs, xt = [s[n]["expansion"] for n in names], [t[n]["expansion"] for n in names]
    a = paired_effect("(a) condensation log r(ref) − log r(mid): γ=1 − γ=0.5", cs, ct, "matrices")
    b = paired_effect("(b) expansion log r(end) − log r(mid) under γ=1", xs, [0.0] * len(xs), "matrices")
    c = paired_effect("(c) expansion: γ=1 − γ=0.5 (null: the other arm)", xs, xt, "matrices")

    def mean(v: list[float]) -> float | None:
        f = [x for x in v if is_finite(x)]
        return float(np.mean(f)) if f else None

    first = next(iter(s.values()))
    nums = {"condensation_gamma1": mean(cs), "condensation_gamma0.5": mean(ct), "expansion_gamma1": mean(xs),
            "expansion_gamma0.5": mean(xt), "matrices": len(names),
            "steps_gamma1": {k: first[k] for k in ("ref_step", "mid_step", "end_step")}}
    notes = []
    if not any(is_finite(x) for x in xs + xt):
        notes.append("fewer than three probed steps after step 0: condensation and expansion undefined")
    return Verdict(combine([a.verdict, b.verdict, c.verdict]), [a, b, c], nums, notes)


def srank_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """{block matrix name: its stable rank at each probed step}."""
    out: dict[str, list[float]] = {}
    for rec in records:
        for name, m in (rec.get("matrices") or {}).items():
            if name.startswith("blocks.") and m.get("srank") is not None:
                out.setdefault(name, []).append(float(m["srank"]))
    return out


def srank_table(records: list[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]]]:
    """(probed steps, {block matrix name: its stable rank at each of those steps, NaN where a record lacks it})."""
    steps = [float(r.get("step", i)) for i, r in enumerate(records)]
    names = sorted({n for r in records for n, m in (r.get("matrices") or {}).items()
                    if n.startswith("blocks.") and m.get("srank") is not None})
    out = {n: [float(((r.get("matrices") or {}).get(n) or {}).get("srank") or math.nan) for r in records]
           for n in names}
    return steps, out


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    if uses_crossover(ctx.p):
        trunks = [ctx.crossover_trunk(a) for a in CROSSOVER_PAIR]
        if None in trunks:
            return ctx.result("stable rank over the crossover's trunks", None,
                              notes=["the crossover's paper and γ-only trunks did not finish"])
        dirs = {"γ=1": [trunks[0]], "γ=0.5": [trunks[1]]}
        ps, pt = read_probes(trunks[0]), read_probes(trunks[1])
        arms_words = (f"the crossover's trunks, paper (γ = 1) vs γ-only (γ = 0.5), both ε = 1e-12 with the gate, seed 0, "
                      f"constant rate to {ctx.crossover_trunk_tokens():,} tokens")
        runs = [f"crossover/runs/{a}/seed0/trunk" for a in CROSSOVER_PAIR]
    else:
        small, std = ctx.roles["small"], ctx.roles["std"]
        ps, pt = ctx.probes(small), ctx.probes(std)
        dirs = {"γ=1": ctx.runs(small), "γ=0.5": ctx.runs(std)}
        arms_words = "γ = 1 vs γ = 0.5 (ε = 1e-12, no gate)"
        runs = ctx.names(small, std)
    (steps_s, ss), (steps_t, st) = srank_table(ps), srank_table(pt)
    v = judge(ss, st, steps_s, steps_t)
    plots = [
        plot_srank(ctx.out, "claim6_srank.png", {"γ=1": ps, "γ=0.5": pt},
                   title="Claim 6: stable rank / its initial value (mean over block matrices)"),
        plot_probe_series(ctx.out, "claim6_condensation.png", {"γ=1": ps, "γ=0.5": pt}, "cond_mean",
                          "condensation index (mean |cos| between rows)", title="Claim 6: condensation index"),
        plot_heatmaps(ctx.out, "claim6_heatmaps.png", dirs),
    ]
    measured = ("stable rank r = ||W||_F²/||W||_2² of every block matrix over training (probes); condensation = "
                "log r(first probe after step 0) − log r(mid-training), expansion = log r(end) − log r(mid-training) "
                f"(signed: negative for a monotone decrease), {arms_words}; bootstrap over matrices")
    return ctx.result(measured, v, plots=plots, runs=runs)


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
