"""Claim 8: the paper's setting is worth more effective model size than the baseline (the paper: about +44%).
Arms: baseline and paper setting at every size of the preset's ``scaling_sizes`` (≥ 3).

Rule (:func:`judge`). L(N) = E + A·N^(−α) is fitted to the baseline; the paper setting at the largest size N with
loss L_v is worth N_eff = (A / (L_v − E))^(1/α), gain = N_eff / N − 1, with an interval from L_v ± its half-width.
The gain decides (supported: interval above 0; not supported: below 0) only when the figure is an
*interpolation* of a fit that was checked; the decisive figure is that of the largest variant size whose figure
is not extrapolated (a gain > 0 at the largest baseline size always puts N_eff beyond the fitted range). The
verdict is **inconclusive**, whatever the interval, when

- every figure is extrapolated: L_v outside the baseline's fitted loss range, or N_eff outside the fitted size
  range — the law is then trusted where no baseline point constrains it; or
- the fit goes through exactly 3 sizes: three parameters through three points interpolate them exactly, so the
  functional form is never checked (≥ 4 sizes are needed for a verdict).

The verdict's notes say which. (The ``cpu`` report once said "not supported" from a gain of −0.958 that was an
extrapolation of a 3-point fit.) The table still shows every size's figure, marked "extrapolated" where it is.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_ci_pair
from smallinit.experiments.claims.rules import INCONCLUSIVE, Effect, Verdict, is_finite
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm
from smallinit.figures import plot_scaling
from smallinit.rundir import collect_run

ID = 8
CLAIM = "The paper's setting is worth more effective model size than the baseline (paper: ~44%)."


def arms(p: Preset) -> dict[str, Arm]:
    roles = {}
    for z in p.scaling_sizes:
        roles[f"{z}/baseline"] = arm(z, BASELINE)
        roles[f"{z}/paper"] = arm(z, PAPER)
    return roles


MIN_SIZES_FOR_VERDICT = 4
"""A fit through exactly 3 sizes interpolates them (3 parameters): it gives a figure but never a verdict."""


def judge(baseline: Sequence[tuple[float, float]], variant: Sequence[tuple[float, float, float | None]],
          paper_gain: float = 0.44) -> Verdict:
    """Claim 8. baseline = [(N, L)] (≥ 3 sizes), variant = [(N, L, loss half-width)]. Fit L(N) = E + A·N^(−α)
    to the baseline; for each variant, gain = N_eff/N − 1 with N_eff = (A / (L − E))^(1/α) and interval from
    L ± half-width. The effect is the gain (> 0: the paper's setting is worth more parameters) at the largest
    variant size whose figure is not extrapolated (L inside the fitted loss range and N_eff inside the fitted size
    range). Inconclusive (never supported / not supported), with a note saying why, when every figure is
    extrapolated or undefined, or the fit has fewer than :data:`MIN_SIZES_FOR_VERDICT` distinct sizes (3 sizes:
    the fit interpolates, its form is unchecked)."""
    from smallinit.scaling import ScalingError, effective_size, fit_scaling_law

    try:
        fit = fit_scaling_law([n for n, _ in baseline], [l for _, l in baseline])
    except ScalingError as e:
        return Verdict(INCONCLUSIVE, notes=[str(e)])
    l_lo, l_hi = fit.L_range
    rows, notes = [], []
    for n, l, hw in sorted(variant):
        es = effective_size(fit, n, l)
        loss_outside = not (l_lo <= l <= l_hi)
        row = {"N": n, "loss": l, "N_eff": es.N_eff, "gain": es.gain,
               "extrapolated": bool(es.extrapolated or loss_outside)}
        if hw is not None and is_finite(hw):
            lo_es = effective_size(fit, n, l + hw)  # worse loss → smaller gain
            hi_es = effective_size(fit, n, l - hw)
            row["gain_interval"] = [lo_es.gain, hi_es.gain]
        rows.append(row)
        if es.gain is None or es.extrapolated:
            notes.append(f"N={n:.3g}: {es.note}")
        if loss_outside:
            notes.append(f"N={n:.3g}: variant loss {l:.4g} lies outside the baseline's fitted loss range "
                         f"[{l_lo:.4g}, {l_hi:.4g}] (extrapolated)")
    nums: dict[str, Any] = {"fit": fit.to_dict(), "variants": rows, "paper_gain": paper_gain}
    if not rows:
        return Verdict(INCONCLUSIVE, [], nums, notes + ["no paper-setting runs"])
    # the decisive figure: the largest size whose figure is an interpolation (a gain > 0 at the largest baseline
    # size always has N_eff beyond the fitted range, so the largest size alone could never support the claim)
    inside = [r for r in rows if r["gain"] is not None and not r["extrapolated"]]
    row = inside[-1] if inside else rows[-1]
    label = f"effective-size gain N_eff/N − 1 at N={row['N']:.3g}"
    gi = row.get("gain_interval")
    if row["gain"] is None:
        e = Effect(label, None, noise="undefined")
    elif gi is None:
        e = Effect(label, row["gain"], noise="no noise estimate")
    else:  # the upper end is undefined (+inf) when L − half-width is at or below the fitted E
        e = Effect(label, row["gain"], gi[0], gi[1] if gi[1] is not None else math.inf,
                   "from the loss interval (bootstrap 95%)")
    why = []
    if not inside:
        shown = f"{row['gain']:+.3g}" if row["gain"] is not None else "undefined"
        why.append(f"every figure is extrapolated or undefined (at the largest size the gain {shown} is read off the "
                   "law outside the range it was fitted on)")
    else:
        nums["decisive_N"] = row["N"]
        if row is not rows[-1]:
            notes.append(f"the figure at the largest size is extrapolated: the verdict uses N={row['N']:.3g}, the "
                         "largest size whose N_eff and loss lie inside the fitted range")
    if fit.n_sizes < MIN_SIZES_FOR_VERDICT:
        why.append(f"the fit goes through {fit.n_sizes} sizes, and 3 parameters through 3 points interpolate them, so "
                   f"the law's form is unchecked (a verdict needs ≥ {MIN_SIZES_FOR_VERDICT} sizes)")
    if why:
        would = f" (the gain {row['gain']:+.3g} would read '{e.verdict}')" if row["gain"] is not None else ""
        notes.append(f"inconclusive{would}: " + "; ".join(why))
        interval = f" {fmt_ci_pair(gi, pct=True)}" if gi else ""
        return Verdict(INCONCLUSIVE, [Effect(label, e.value, noise=f"no verdict: {'; '.join(why)}; interval{interval}"
                                             if gi else f"no verdict: {'; '.join(why)}")], nums, notes)
    return Verdict(e.verdict, [e], nums, notes)


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    roles = ctx.roles
    base_pts, var_pts, rows = [], [], []
    for z in ctx.p.scaling_sizes:
        b, p = roles[f"{z}/baseline"], roles[f"{z}/paper"]
        nb = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(b)]
        np_ = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(p)]
        lb, lp = ctx.losses(b), ctx.losses(p)
        if lb and nb and nb[0]:
            base_pts.append((float(nb[0]), float(np.mean(lb))))
        if lp and np_ and np_[0]:
            var_pts.append((float(np_[0]), float(np.mean(lp)), ctx.loss_hw(p, b)))
        rows.append([z, f"{(nb[0] or 0) / 1e6:.2f}M" if nb else "", fmt(lb), fmt(lp)])
    v = judge(base_pts, var_pts)
    gains = {r["N"]: r["gain"] for r in v.numbers.get("variants") or []}
    plot = plot_scaling(ctx.out / "claim8_scaling.png", base_pts,
                        {"paper setting": [(n, l, gains.get(n)) for n, l, _ in var_pts]}, v.numbers.get("fit"),
                        title="Claim 8: scaling fit of the baseline, paper setting beside it (labels: gain)")
    tables = [{"title": "final validation loss by size", "columns": ["size", "non-emb params", "baseline", "paper"],
               "rows": rows}]
    if v.numbers.get("variants"):
        tables.append({"title": f"effective size of the paper setting (paper reports +{v.numbers['paper_gain']:.0%})",
                       "columns": ["N", "loss", "N_eff", "gain", "gain interval", "extrapolated"],
                       "rows": [[f"{r['N'] / 1e6:.2f}M", f"{r['loss']:.4f}",
                                 f"{r['N_eff'] / 1e6:.2f}M" if r["N_eff"] else "undefined",
                                 f"{r['gain']:+.0%}" if r["gain"] is not None else "undefined",
                                 fmt_ci_pair(r.get("gain_interval"), pct=True), "yes" if r["extrapolated"] else "no"]
                                for r in v.numbers["variants"]]})
    measured = ("L(N) = E + A·N^(−α) fitted to the baseline's final val losses over the sizes (N = non-embedding "
                "parameters); effective size N_eff of the paper setting at each size and gain = N_eff/N − 1")
    return ctx.result(measured, v, plots=[plot.name if plot else None], tables=tables,
                      runs=ctx.names(*roles.values()))
