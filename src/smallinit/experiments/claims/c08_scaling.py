"""Claim 8: the paper's setting is worth more effective model size than the baseline (the paper: about +44%).
Arms: baseline and paper setting at every size of the preset's ``scaling_sizes`` (≥ 3)."""

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


def judge(baseline: Sequence[tuple[float, float]], variant: Sequence[tuple[float, float, float | None]],
                         paper_gain: float = 0.44) -> Verdict:
    """Claim 8. baseline = [(N, L)] (≥ 3 sizes), variant = [(N, L, loss half-width)]. Fit L(N) = E + A·N^(−α)
    to the baseline; for the variant at the largest N, gain = N_eff/N − 1 with interval from L ± half-width.
    The effect is the gain (> 0: the paper's setting is worth more parameters)."""
    from smallinit.scaling import ScalingError, effective_size, fit_scaling_law

    try:
        fit = fit_scaling_law([n for n, _ in baseline], [l for _, l in baseline])
    except ScalingError as e:
        return Verdict(INCONCLUSIVE, notes=[str(e)])
    rows, notes = [], []
    for n, l, hw in sorted(variant):
        es = effective_size(fit, n, l)
        row = {"N": n, "loss": l, "N_eff": es.N_eff, "gain": es.gain, "extrapolated": es.extrapolated}
        if hw is not None and is_finite(hw):
            lo = effective_size(fit, n, l + hw).gain  # worse loss → smaller gain
            hi = effective_size(fit, n, l - hw).gain
            row["gain_interval"] = [lo, hi]
        rows.append(row)
        if es.gain is None or es.extrapolated:
            notes.append(f"N={n:.3g}: {es.note}")
    nums = {"fit": fit.to_dict(), "variants": rows, "paper_gain": paper_gain}
    last = rows[-1]
    if last["gain"] is None:
        # below the fitted E: better than any baseline size — say so plainly, no number
        return Verdict(INCONCLUSIVE, [Effect("effective-size gain at the largest size", None, noise="undefined")],
                       nums, notes)
    gi = last.get("gain_interval")
    if gi is None:
        e = Effect("effective-size gain N_eff/N − 1 at the largest size", last["gain"], noise="no noise estimate")
    else:  # the upper end is undefined (+inf) when L − half-width is at or below the fitted E
        e = Effect("effective-size gain N_eff/N − 1 at the largest size", last["gain"], gi[0],
                   gi[1] if gi[1] is not None else math.inf, "from the loss interval (bootstrap 95%)")
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
