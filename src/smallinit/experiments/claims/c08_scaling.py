"""Claim 8: the paper's setting is worth more effective model size than the baseline — the paper: about +44%.
Arms: baseline and paper setting at every size of the preset's ``scaling_sizes`` (≥ 3).

Rule (:func:`judge`). L(N) = E + A·N^(−α) is fitted to the baseline; the paper setting at size N with loss L_v is
worth N_eff = (A / (L_v − E))^(1/α), and the figure reported is **gain = N_eff/N − 1**. Its 95% interval comes from a
**bootstrap of the fit** (:func:`gain_bootstrap`): each draw refits the law to the fitted losses plus resampled
residuals (scaled by √(n/(n − 3))) plus each baseline loss's own noise, moves L_v by its own noise (half-widths /
1.96 as standard deviations), and reads the gain off the refitted law (L_v ≤ E: gain +∞); the interval is the
2.5–97.5% percentiles of the draws. Parts, on the decisive figure:

(a) gain > 0: the interval lies above 0;
(b) compared with the paper's +44%: the upper end of the interval − 0.44 (< 0: the gain is reliably *smaller* than
    the paper's, so "about 44%" is not supported even when γ = 1 helps).

The claim is supported when both parts are (rules.combine). The decisive figure is that of the largest variant size
whose figure is not extrapolated (a gain > 0 at the largest baseline size always puts N_eff beyond the fitted
range). The verdict is **inconclusive**, whatever the interval, when

- every figure is extrapolated: L_v outside the baseline's fitted loss range, or N_eff outside the fitted size
  range — the law is then trusted where no baseline point constrains it; or
- the fit goes through exactly 3 sizes: three parameters through three points interpolate them exactly, so the
  functional form is never checked (≥ 4 sizes are needed for a verdict).

And it rests on final losses: from runs below the declared budget (``Preset.enough`` tokens per non-embedding
parameter, the smallest over the sizes) it is "inconclusive — not reached at this budget"
(:func:`~smallinit.experiments.claims.rules.at_budget`). The verdict's notes say which. The table still shows every
size's figure, marked "extrapolated" where it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from smallinit.core.figures import plot_scaling
from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_ci_pair
from smallinit.experiments.claims.rules import INCONCLUSIVE, Effect, Verdict, at_budget, combine, is_finite
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm
from smallinit.runs.rundir import collect_run

ID = 8
CLAIM = "The paper's setting is worth more effective model size than the baseline (paper: ~44%)."
PAPER_GAIN = 0.44
"""The paper's effective-size gain of γ = 1 with both fixes."""


def arms(p: Preset) -> dict[str, Arm]:
    roles = {}
    for z in p.scaling_sizes:
        roles[f"{z}/baseline"] = arm(z, BASELINE)
        roles[f"{z}/paper"] = arm(z, PAPER)
    return roles


MIN_SIZES_FOR_VERDICT = 4
"""A fit through exactly 3 sizes interpolates them (3 parameters): it gives a figure but never a verdict."""


def gain_bootstrap(
    baseline: Sequence[tuple], n: float, loss: float, loss_hw: float | None, n_boot: int = 400, seed: int = 0
) -> tuple[float, float] | None:
    """95% percentile interval of gain = N_eff/N − 1 at size ``n`` and variant loss ``loss`` (half-width
    ``loss_hw``) over ``n_boot`` refits of the baseline law (module docstring); baseline points are (N, L) or
    (N, L, half-width). None when fewer than half of the draws give a fit."""
    from smallinit.analysis.scaling import ScalingError, effective_size, fit_scaling_law, predict

    N = np.asarray([float(b[0]) for b in baseline])
    L = np.asarray([float(b[1]) for b in baseline])
    sd_b = np.asarray([float(b[2]) / 1.96 if len(b) > 2 and is_finite(b[2]) else 0.0 for b in baseline])
    sd_v = float(loss_hw) / 1.96 if is_finite(loss_hw) else 0.0
    fit = fit_scaling_law(N, L)
    fitted = np.asarray(predict(fit, N))
    res = np.asarray(fit.residuals)
    scale = math.sqrt(len(L) / (len(L) - 3)) if len(L) > 3 else 0.0
    rng = np.random.default_rng(seed)
    gains = []
    for _ in range(n_boot):
        Lb = fitted + scale * res[rng.integers(0, len(res), len(res))] + rng.normal(0.0, 1.0, len(L)) * sd_b
        lv = loss + rng.normal(0.0, sd_v)
        try:
            f = fit_scaling_law(N, Lb)
        except ScalingError:
            continue
        g = effective_size(f, n, lv).gain if lv > f.E else math.inf
        gains.append(math.inf if g is None else g)
    if len(gains) < n_boot / 2:
        return None
    q = np.quantile(np.asarray(gains), [0.025, 0.975], method="inverted_cdf")
    return float(q[0]), float(q[1])


def judge(
    baseline: Sequence[tuple],
    variant: Sequence[tuple[float, float, float | None]],
    paper_gain: float = PAPER_GAIN,
    tokens_per_param: float | None = None,
    enough: float | None = None,
    n_boot: int = 400,
) -> Verdict:
    """Claim 8. baseline = [(N, L)] or [(N, L, loss half-width)] (≥ 3 sizes), variant = [(N, L, loss half-width)].
    Fit L(N) = E + A·N^(−α) to the baseline; for each variant, gain = N_eff/N − 1 with N_eff = (A / (L − E))^(1/α)
    and a 95% interval from the fit's bootstrap (:func:`gain_bootstrap`). The parts — (a) gain > 0, (b) the
    interval's upper end ≥ ``paper_gain`` — are read at the largest variant size whose figure is not extrapolated (L
    inside the fitted loss range and N_eff inside the fitted size range). Inconclusive (never supported / not
    supported), with a note saying why, when every figure is extrapolated or undefined, or the fit has fewer than
    :data:`MIN_SIZES_FOR_VERDICT` distinct sizes; "not reached" below the declared budget (``enough``)."""
    return at_budget(_judge(baseline, variant, paper_gain, n_boot), tokens_per_param, enough, "the scaling runs")


def _judge(
    baseline: Sequence[tuple], variant: Sequence[tuple[float, float, float | None]], paper_gain: float, n_boot: int
) -> Verdict:
    """:func:`judge` before the declared budget is applied."""
    from smallinit.analysis.scaling import ScalingError, fit_scaling_law

    try:
        fit = fit_scaling_law([b[0] for b in baseline], [b[1] for b in baseline])
    except ScalingError as e:
        return Verdict(INCONCLUSIVE, notes=[str(e)])
    rows, notes = _variant_rows(fit, baseline, variant, n_boot)
    nums: dict[str, Any] = {"fit": fit.to_dict(), "variants": rows, "paper_gain": paper_gain}
    if not rows:
        return Verdict(INCONCLUSIVE, [], nums, notes + ["no paper-setting runs"])
    # the decisive figure: the largest size whose figure is an interpolation (a gain > 0 at the largest baseline
    # size always has N_eff beyond the fitted range, so the largest size alone could never support the claim)
    inside = [r for r in rows if r["gain"] is not None and not r["extrapolated"]]
    row = inside[-1] if inside else rows[-1]
    gi = row.get("gain_interval")
    e, e44 = _gain_effect(row, n_boot), _paper_effect(gi, paper_gain)
    if gi is not None:
        nums["paper_gain_in_interval"] = bool(gi[0] <= paper_gain <= gi[1])
    if inside:
        nums["decisive_N"] = row["N"]
        if row is not rows[-1]:
            notes.append(
                f"the figure at the largest size is extrapolated: the verdict uses N={row['N']:.3g}, the "
                "largest size whose N_eff and loss lie inside the fitted range"
            )
    why = _why_no_verdict(fit, row, bool(inside))
    verdict = combine([e.verdict, e44.verdict])
    if why:
        would = f" (the gain {row['gain']:+.3g} would read '{verdict}')" if row["gain"] is not None else ""
        notes.append(f"inconclusive{would}: " + "; ".join(why))
        interval = f" {fmt_ci_pair(gi, pct=True)}" if gi else ""
        noise = f"no verdict: {'; '.join(why)}; interval{interval}" if gi else f"no verdict: {'; '.join(why)}"
        return Verdict(INCONCLUSIVE, [Effect(e.label, e.value, noise=noise)], nums, notes)
    if e.verdict == "supported" and e44.verdict == "not supported":
        notes.append(
            f"γ = 1 is worth more parameters here, but reliably less than the paper's +{paper_gain:.0%} "
            f"(interval {fmt_ci_pair(gi, pct=True)})"
        )
    return Verdict(verdict, [e, e44], nums, notes)


def _variant_rows(
    fit, baseline: Sequence[tuple], variant: Sequence[tuple[float, float, float | None]], n_boot: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, notes): each variant size's N_eff and gain off the baseline law, its bootstrap interval, whether it is
    extrapolated (N_eff outside the fitted sizes or the loss outside the fitted losses), smallest size first."""
    from smallinit.analysis.scaling import effective_size

    l_lo, l_hi = fit.L_range
    rows, notes = [], []
    for n, l, hw in sorted(variant):
        es = effective_size(fit, n, l)
        loss_outside = not (l_lo <= l <= l_hi)
        row = {
            "N": n,
            "loss": l,
            "N_eff": es.N_eff,
            "gain": es.gain,
            "extrapolated": bool(es.extrapolated or loss_outside),
        }
        gi = gain_bootstrap(baseline, n, l, hw, n_boot=n_boot)
        if gi is not None and gi[0] < gi[1]:  # a zero-width interval: no noise source at all, no interval
            row["gain_interval"] = list(gi)
        rows.append(row)
        if es.gain is None or es.extrapolated:
            notes.append(f"N={n:.3g}: {es.note}")
        if loss_outside:
            notes.append(
                f"N={n:.3g}: variant loss {l:.4g} lies outside the baseline's fitted loss range "
                f"[{l_lo:.4g}, {l_hi:.4g}] (extrapolated)"
            )
    return rows, notes


def _gain_effect(row: dict[str, Any], n_boot: int) -> Effect:
    """Part (a): the gain at the decisive size with its bootstrap interval (none when undefined or noiseless)."""
    label = f"(a) effective-size gain N_eff/N − 1 at N={row['N']:.3g}"
    gi = row.get("gain_interval")
    if row["gain"] is None:
        return Effect(label, None, noise="undefined")
    if gi is None:
        return Effect(label, row["gain"], noise="no noise estimate")
    # the upper end is +inf when draws put L − noise at or below the fitted E
    return Effect(
        label,
        row["gain"],
        gi[0],
        gi[1],
        f"bootstrap 95% of the fit ({n_boot} refits: residuals, baseline and variant loss noise)",
    )


def _paper_effect(gi: list[float] | None, paper_gain: float) -> Effect:
    """Part (b): the upper end of (a)'s interval − the paper's gain (< 0: reliably below the paper's)."""
    up = gi[1] - paper_gain if gi is not None and gi[1] is not None else None
    return Effect(
        f"(b) upper end of the gain interval − {paper_gain:g} (< 0: reliably below the paper's +{paper_gain:.0%})",
        up,
        up,
        up,
        "the interval of (a)",
    )


def _why_no_verdict(fit, row: dict[str, Any], any_inside: bool) -> list[str]:
    """The reasons the verdict is inconclusive whatever the interval: every figure extrapolated or undefined, and
    a fit through fewer than :data:`MIN_SIZES_FOR_VERDICT` sizes; empty when there is none."""
    why = []
    if not any_inside:
        shown = f"{row['gain']:+.3g}" if row["gain"] is not None else "undefined"
        why.append(
            f"every figure is extrapolated or undefined (at the largest size the gain {shown} is read off the "
            "law outside the range it was fitted on)"
        )
    if fit.n_sizes < MIN_SIZES_FOR_VERDICT:
        why.append(
            f"the fit goes through {fit.n_sizes} sizes, and 3 parameters through 3 points interpolate them, so "
            f"the law's form is unchecked (a verdict needs ≥ {MIN_SIZES_FOR_VERDICT} sizes)"
        )
    return why


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    roles = ctx.roles
    base_pts, var_pts, rows = [], [], []
    for z in ctx.p.scaling_sizes:
        b, p = roles[f"{z}/baseline"], roles[f"{z}/paper"]
        nb = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(b)]
        np_ = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(p)]
        lb, lp = ctx.losses(b), ctx.losses(p)
        if lb and nb and nb[0]:
            # a baseline point's own noise: one run's share of the seed-noise floor (floor/√2), over √k seeds
            hb = ctx.noise_floor / math.sqrt(2 * len(lb)) if is_finite(ctx.noise_floor) else None
            base_pts.append((float(nb[0]), float(np.mean(lb)), hb))
        if lp and np_ and np_[0]:
            var_pts.append((float(np_[0]), float(np.mean(lp)), ctx.loss_hw(p, b)))
        rows.append([z, f"{(nb[0] or 0) / 1e6:.2f}M" if nb else "", fmt(lb), fmt(lp)])
    v = judge(base_pts, var_pts, tokens_per_param=ctx.budget(*roles.values()), enough=ctx.p.enough)
    base_pts = [(n, l) for n, l, _ in base_pts]
    gains = {r["N"]: r["gain"] for r in v.numbers.get("variants") or []}
    plot = plot_scaling(
        ctx.out / "claim8_scaling.png",
        base_pts,
        {"paper setting": [(n, l, gains.get(n)) for n, l, _ in var_pts]},
        v.numbers.get("fit"),
        title="Claim 8: scaling fit of the baseline, paper setting beside it (labels: gain)",
    )
    tables = [
        {
            "title": "final validation loss by size",
            "columns": ["size", "non-emb params", "baseline", "paper"],
            "rows": rows,
        }
    ]
    if v.numbers.get("variants"):
        tables.append(
            {
                "title": f"effective size of the paper setting (paper reports +{v.numbers['paper_gain']:.0%})",
                "columns": ["N", "loss", "N_eff", "gain", "gain interval", "extrapolated"],
                "rows": [
                    [
                        f"{r['N'] / 1e6:.2f}M",
                        f"{r['loss']:.4f}",
                        f"{r['N_eff'] / 1e6:.2f}M" if r["N_eff"] else "undefined",
                        f"{r['gain']:+.0%}" if r["gain"] is not None else "undefined",
                        fmt_ci_pair(r.get("gain_interval"), pct=True),
                        "yes" if r["extrapolated"] else "no",
                    ]
                    for r in v.numbers["variants"]
                ],
            }
        )
    measured = (
        "L(N) = E + A·N^(−α) fitted to the baseline's final val losses over the sizes (N = non-embedding "
        "parameters); effective size N_eff of the paper setting at each size and gain = N_eff/N − 1 with a "
        f"95% interval from the fit's bootstrap, compared with 0 and with the paper's +{PAPER_GAIN:.0%}; judged "
        f"at the declared budget of {ctx.p.enough:g} tokens per parameter"
    )
    return ctx.result(measured, v, plots=[plot.name if plot else None], tables=tables, runs=ctx.names(*roles.values()))
