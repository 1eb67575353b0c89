"""The paper's claims and the rules that turn measured numbers into verdicts. Verdicts are computed here,
never written by hand.

The one rule behind every verdict (:func:`effect_verdict`): an **effect** is a signed number oriented so
that > 0 means "as the paper says" (e.g. baseline loss − variant loss), with an uncertainty **interval**
[lo, hi]:

- **supported**      lo > 0   — the effect exceeds its noise, in the claimed direction;
- **not supported**  hi < 0   — the opposite effect, beyond noise;
- **inconclusive**   otherwise (the interval contains 0: the effect is inside the noise), or when no
  noise estimate exists (one seed and no bootstrap).

Intervals (:func:`noise_half_width`): half-width h = the largest of the available noise estimates —
the **spread over seeds** (max − min across seeds, the larger of the two arms; needs ≥ 2 seeds in an arm)
and a **bootstrap 95% interval** (its half-width; paired over token positions, layers, matrices or test
examples, as each claim states). Interval = [effect − h, effect + h]. A difference of two independent
effects has h = sqrt(h1² + h2²). A claim with several parts (:func:`combine`) is supported when every
part is, not supported when any part is not supported, and inconclusive otherwise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_RUN = "not run in this preset"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_RUN)

CLAIMS: dict[int, str] = {
    1: "γ = 1 with ε = 1e-12 and the gate gives lower validation loss than the standard γ = 0.5, ε = 1e-5, no gate.",
    2: "Without the two fixes the advantage of γ = 1 shrinks as the model grows; with them it does not.",
    3: "ε = 1e-5 saturates RMSNorm under γ = 1 and costs loss; ε = 1e-12 restores both.",
    4: "Small init raises the first-token attention share; the gate brings it down.",
    5: "Across γ ∈ {0.25 … 1.5}, loss is best near γ = 1 and worse above it.",
    6: "Weights condense (stable rank drops) then expand under γ = 1, not under γ = 0.5.",
    7: "Token-level gains concentrate in the moderate-to-very-hard difficulty bins.",
    8: "The paper's setting is worth more effective model size than the baseline (paper: ~44%).",
    9: "Held-out anchor-pair accuracy (reasoning vs memorization) is higher under γ = 1 than γ = 0.5.",
    10: "The MoE variant shows claim 1 too.",
}

RULE = ("supported when the effect's interval lies entirely above 0; not supported when entirely below 0; "
        "inconclusive otherwise. Interval = effect ± max(spread over seeds, bootstrap 95% half-width).")


@dataclass
class Effect:
    """A signed effect (> 0 = the claimed direction) with its interval and how the noise was estimated."""

    label: str
    value: float | None
    lo: float | None = None
    hi: float | None = None
    noise: str = ""

    @property
    def verdict(self) -> str:
        return effect_verdict(self)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def effect_verdict(e: Effect) -> str:
    """The rule (module docstring): lo > 0 → supported; hi < 0 → not supported; else inconclusive
    (also when the value or an end of the interval is missing; an end may be ±inf)."""
    if not (_finite(e.value) and _number(e.lo) and _number(e.hi)):
        return INCONCLUSIVE
    if e.lo > 0:
        return SUPPORTED
    if e.hi < 0:
        return NOT_SUPPORTED
    return INCONCLUSIVE


def combine(verdicts: Sequence[str]) -> str:
    """A multi-part claim: all parts supported → supported; any part not supported → not supported; else
    inconclusive."""
    vs = list(verdicts)
    if not vs:
        return INCONCLUSIVE
    if any(v == NOT_SUPPORTED for v in vs):
        return NOT_SUPPORTED
    if all(v == SUPPORTED for v in vs):
        return SUPPORTED
    return INCONCLUSIVE


def seed_spread(*arms: Sequence[float]) -> float | None:
    """Spread over seeds: the largest (max − min) over the arms that have ≥ 2 seeds; None if none has."""
    spreads = [max(a) - min(a) for a in arms if len([x for x in a if _finite(x)]) >= 2]
    return max(spreads) if spreads else None


def noise_half_width(seed_hw: float | None, boot_hw: float | None) -> tuple[float | None, str]:
    """h = max of the available estimates, and a note saying which were used."""
    parts, hs = [], []
    if _finite(seed_hw):
        hs.append(float(seed_hw))
        parts.append(f"seed spread {seed_hw:.3g}")
    if _finite(boot_hw):
        hs.append(float(boot_hw))
        parts.append(f"bootstrap 95% ±{boot_hw:.3g}")
    if not hs:
        return None, "no noise estimate (one seed, no bootstrap)"
    return max(hs), "; ".join(parts)


def interval_effect(label: str, value: float | None, half_width: float | None, noise: str = "") -> Effect:
    """value ± half_width (no interval when either is missing)."""
    if not (_finite(value) and _finite(half_width)):
        return Effect(label, value if _finite(value) else None, None, None, noise or "no noise estimate")
    return Effect(label, float(value), float(value) - float(half_width), float(value) + float(half_width), noise)


def half_width(e: Effect) -> float | None:
    if _finite(e.lo) and _finite(e.hi):
        return (e.hi - e.lo) / 2
    return None


def difference(label: str, e1: Effect, e2: Effect) -> Effect:
    """e1 − e2, half-width sqrt(h1² + h2²) (independent noise)."""
    if not (_finite(e1.value) and _finite(e2.value)):
        return Effect(label, None, noise="missing numbers")
    h1, h2 = half_width(e1), half_width(e2)
    h = math.sqrt(h1 ** 2 + h2 ** 2) if h1 is not None and h2 is not None else None
    return interval_effect(label, e1.value - e2.value, h, "combined: sqrt(h1² + h2²)")


def lower_is_better_effect(label: str, variant: Sequence[float], baseline: Sequence[float],
                           boot_hw: float | None = None) -> Effect:
    """Effect of a variant on a lower-is-better metric (a loss): mean(baseline) − mean(variant) (> 0: the
    variant is better), interval from the spread over seeds and/or a bootstrap half-width."""
    v = [x for x in variant if _finite(x)]
    b = [x for x in baseline if _finite(x)]
    if not v or not b:
        return Effect(label, None, noise="a run is missing or diverged")
    h, note = noise_half_width(seed_spread(v, b), boot_hw)
    return interval_effect(label, float(np.mean(b) - np.mean(v)), h, note)


def higher_is_better_effect(label: str, variant: Sequence[float], baseline: Sequence[float],
                            boot_hw: float | None = None) -> Effect:
    """mean(variant) − mean(baseline) for a higher-is-better metric (accuracy), noise as above."""
    e = lower_is_better_effect(label, [-x for x in variant if _finite(x)], [-x for x in baseline if _finite(x)], boot_hw)
    return e


def bootstrap_mean_ci(values: Sequence[float], n_boot: int = 2000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``."""
    x = np.asarray([v for v in values if _finite(v)], dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def paired_effect(label: str, claimed: Sequence[float], other: Sequence[float], units: str,
                  n_boot: int = 2000, seed: int = 0) -> Effect:
    """mean over units of (claimed_i − other_i) with a percentile bootstrap 95% interval over the units
    (layers, matrices, norms ...), i.e. "consistently larger across units"."""
    d = [a - b for a, b in zip(claimed, other) if _finite(a) and _finite(b)]
    if len(d) < 2:
        return Effect(label, float(d[0]) if d else None, noise=f"fewer than 2 {units}: no bootstrap")
    lo, hi = bootstrap_mean_ci(d, n_boot, seed)
    return Effect(label, float(np.mean(d)), lo, hi, f"bootstrap 95% over {len(d)} {units}")


def proportion_gap_ci(correct_a: Sequence[int], correct_b: Sequence[int], n_boot: int = 2000,
                      seed: int = 0) -> float | None:
    """Half-width of a bootstrap 95% interval of mean(a) − mean(b), examples resampled within each arm."""
    a = np.asarray(correct_a, dtype=np.float64)
    b = np.asarray(correct_b, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        return None
    rng = np.random.default_rng(seed)
    ma = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(1)
    mb = b[rng.integers(0, b.size, size=(n_boot, b.size))].mean(1)
    lo, hi = np.quantile(ma - mb, [0.025, 0.975])
    return float((hi - lo) / 2)


# ---- claim by claim: numbers in, effects and a verdict out ---------------------------------------

@dataclass
class Verdict:
    verdict: str
    effects: list[Effect] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def judge_lower_loss(variant: Sequence[float], baseline: Sequence[float], boot_hw: float | None,
                     label: str = "val loss: baseline − variant") -> Verdict:
    """Claims 1 and 10: the variant's final val loss is lower than the baseline's."""
    e = lower_is_better_effect(label, variant, baseline, boot_hw)
    return Verdict(e.verdict, [e], {"variant": list(variant), "baseline": list(baseline)})


def judge_shrinking_advantage(adv_nofix: dict[float, Effect], adv_fix: dict[float, Effect]) -> Verdict:
    """Claim 2. adv_*[N] = the advantage of γ = 1 over γ = 0.5 (loss(γ=0.5) − loss(γ=1)) at size N, without
    and with the two fixes. Parts: (a) without fixes the advantage shrinks from the smallest to the largest
    size: A_nofix(N_min) − A_nofix(N_max) > 0; (b) the fixes remove the shrinkage:
    [A_fix(N_max) − A_fix(N_min)] − [A_nofix(N_max) − A_nofix(N_min)] > 0."""
    sizes = sorted(set(adv_nofix) & set(adv_fix))
    if len(sizes) < 2:
        return Verdict(INCONCLUSIVE, notes=["needs at least two model sizes"])
    lo, hi = sizes[0], sizes[-1]
    shrink = difference("(a) without fixes: A(smallest) − A(largest)", adv_nofix[lo], adv_nofix[hi])
    trend_fix = difference("(info) with fixes: A(largest) − A(smallest)", adv_fix[hi], adv_fix[lo])
    trend_nofix = difference("without fixes: A(largest) − A(smallest)", adv_nofix[hi], adv_nofix[lo])
    removed = difference("(b) trend with fixes − trend without", trend_fix, trend_nofix)
    v = combine([shrink.verdict, removed.verdict])
    nums = {"sizes": sizes, "advantage_nofix": {str(n): adv_nofix[n].value for n in sizes},
            "advantage_fix": {str(n): adv_fix[n].value for n in sizes}}
    return Verdict(v, [shrink, removed, trend_fix], nums)


def judge_saturation(sat_eps_large: Sequence[float], sat_eps_small: Sequence[float], loss_effect: Effect) -> Verdict:
    """Claim 3. sat_* = RMSNorm saturation per norm (averaged over training), same norms in the same order,
    under γ = 1 with ε = 1e-5 (large) and ε = 1e-12 (small). Parts: (a) saturation is higher with ε = 1e-12,
    paired bootstrap over norms; (b) loss_effect = loss(ε=1e-5) − loss(ε=1e-12) > 0."""
    sat = paired_effect("(a) saturation(ε=1e-12) − saturation(ε=1e-5)", sat_eps_small, sat_eps_large, "norms")
    loss_effect = Effect("(b) " + loss_effect.label, loss_effect.value, loss_effect.lo, loss_effect.hi, loss_effect.noise)
    nums = {"saturation_eps_1e-5_mean": float(np.mean(sat_eps_large)) if len(sat_eps_large) else None,
            "saturation_eps_1e-5_min": float(np.min(sat_eps_large)) if len(sat_eps_large) else None,
            "saturation_eps_1e-12_mean": float(np.mean(sat_eps_small)) if len(sat_eps_small) else None}
    return Verdict(combine([sat.verdict, loss_effect.verdict]), [sat, loss_effect], nums)


def judge_sink(sink_std: Sequence[float], sink_small: Sequence[float], sink_small_gate: Sequence[float]) -> Verdict:
    """Claim 4. Per-layer first-token attention shares of three runs: γ = 0.5 no gate, γ = 1 no gate, γ = 1
    with the gate. Parts (paired bootstrap over layers): (a) small init raises it: γ=1 − γ=0.5 (no gate);
    (b) the gate lowers it: γ=1 no gate − γ=1 gate."""
    raise_ = paired_effect("(a) sink share: γ=1 − γ=0.5 (no gate)", sink_small, sink_std, "layers")
    gate = paired_effect("(b) sink share: no gate − gate (γ=1)", sink_small, sink_small_gate, "layers")
    nums = {"sink_gamma0.5": float(np.mean(sink_std)), "sink_gamma1": float(np.mean(sink_small)),
            "sink_gamma1_gate": float(np.mean(sink_small_gate))}
    return Verdict(combine([raise_.verdict, gate.verdict]), [raise_, gate], nums)


def judge_gamma_sweep(losses: dict[float, Sequence[float]], hw_near: float | None = None,
                      hw_above: float | None = None, near: tuple[float, float] = (0.75, 1.25)) -> Verdict:
    """Claim 5. losses[γ] = final val losses (seeds) per γ. Parts: (a) best near 1: the best γ outside
    [0.75, 1.25] has higher loss than the best γ inside; (b) worse above 1: loss(γ_max) − loss(γ=1) > 0."""
    mean = {g: float(np.mean([x for x in v if _finite(x)])) if any(_finite(x) for x in v) else math.inf
            for g, v in losses.items()}
    inside = {g: l for g, l in mean.items() if near[0] <= g <= near[1]}
    outside = {g: l for g, l in mean.items() if not near[0] <= g <= near[1]}
    if not inside or not outside or 1.0 not in mean:
        return Verdict(INCONCLUSIVE, notes=["the sweep must include γ = 1 and values on both sides"])
    g_in, g_out = min(inside, key=inside.get), min(outside, key=outside.get)
    # a diverged run (inf loss) is as bad as it gets: the effect is then the finite gap to the worst finite loss
    finite = [l for l in mean.values() if math.isfinite(l)]
    cap = max(finite) if finite else 0.0

    def v(g):
        return mean[g] if math.isfinite(mean[g]) else cap

    a = lower_is_better_effect(f"(a) best outside [{near[0]}, {near[1]}] (γ={g_out:g}) − best inside (γ={g_in:g})",
                               [v(g_in)], [v(g_out)], hw_near)
    g_max = max(mean)
    b = lower_is_better_effect(f"(b) loss(γ={g_max:g}) − loss(γ=1)", [v(1.0)], [v(g_max)], hw_above)
    if seed_spread(*losses.values()) is not None:
        sp = seed_spread(*losses.values())
        a = interval_effect(a.label, a.value, max(sp, half_width(a) or 0), a.noise + f"; seed spread {sp:.3g}")
        b = interval_effect(b.label, b.value, max(sp, half_width(b) or 0), b.noise + f"; seed spread {sp:.3g}")
    nums = {"loss_by_gamma": {f"{g:g}": (mean[g] if math.isfinite(mean[g]) else None) for g in sorted(mean)},
            "best_gamma": min(mean, key=mean.get)}
    return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)


def trajectory_stats(srank: Sequence[float]) -> dict[str, float]:
    """For one matrix's stable-rank trajectory r(t): drop = 1 − min r / r(0) (condensation) and
    rebound = r(end) / min r − 1 (expansion after the minimum)."""
    r = [x for x in srank if _finite(x) and x > 0]
    if len(r) < 2:
        return {"drop": math.nan, "rebound": math.nan}
    m = min(r)
    return {"drop": 1 - m / r[0], "rebound": r[-1] / m - 1}


def judge_condensation(small: dict[str, Sequence[float]], std: dict[str, Sequence[float]]) -> Verdict:
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


def judge_token_bins(bins: list[dict[str, Any]]) -> Verdict:
    """Claim 7. ``bins`` from compare (easy → extreme), each with ``delta_sym`` {"mean", "ci95"}. With M the
    mean Δ_sym over the inner bins (moderate … very hard), parts: (a) M − Δ_sym(easy) > 0 and (b)
    M − Δ_sym(extreme) > 0; half-widths from the per-bin bootstrap intervals, sqrt of summed squares."""
    if len(bins) < 3:
        return Verdict(INCONCLUSIVE, notes=["needs at least 3 difficulty bins"])

    def eff(b):
        d = b.get("delta_sym") or {}
        m, ci = d.get("mean"), d.get("ci95")
        hw = (ci[1] - ci[0]) / 2 if ci and all(_finite(x) for x in ci) else None
        return interval_effect(b.get("name", str(b.get("bin"))), m, hw, "bootstrap 95% over tokens")

    effs = [eff(b) for b in bins]
    inner = effs[1:-1]
    hws = [half_width(e) for e in inner]
    if any(e.value is None for e in effs) or any(h is None for h in hws):
        return Verdict(INCONCLUSIVE, notes=["a bin has no tokens or no interval"])
    M = interval_effect("inner bins (mean Δ_sym)", float(np.mean([e.value for e in inner])),
                        math.sqrt(sum(h * h for h in hws)) / len(inner), "bootstrap 95%, combined")
    a = difference("(a) Δ_sym: inner bins − easy", M, effs[0])
    b = difference("(b) Δ_sym: inner bins − extreme", M, effs[-1])
    nums = {"delta_sym_by_bin": {e.label: e.value for e in effs}}
    return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)


def judge_effective_size(baseline: Sequence[tuple[float, float]], variant: Sequence[tuple[float, float, float | None]],
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
        if hw is not None and _finite(hw):
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


def judge_reasoning(acc_small: Sequence[float], acc_std: Sequence[float],
                    correct_small: Sequence[int] | None = None, correct_std: Sequence[int] | None = None) -> Verdict:
    """Claim 9. Held-out-pair accuracy per seed under γ = 1 and γ = 0.5; effect = mean difference, noise =
    max(seed spread, bootstrap over test examples of the first seeds' per-example correctness)."""
    hw = proportion_gap_ci(correct_small, correct_std) if correct_small is not None and correct_std is not None else None
    e = higher_is_better_effect("held-out accuracy: γ=1 − γ=0.5", acc_small, acc_std, hw)
    return Verdict(e.verdict, [e], {"heldout_acc_gamma1": list(acc_small), "heldout_acc_gamma0.5": list(acc_std)})


__all__ = ["CLAIMS", "Effect", "INCONCLUSIVE", "NOT_RUN", "NOT_SUPPORTED", "RULE", "SUPPORTED", "VERDICTS", "Verdict",
           "bootstrap_mean_ci", "combine", "difference", "effect_verdict", "half_width", "higher_is_better_effect",
           "interval_effect", "judge_condensation", "judge_effective_size", "judge_gamma_sweep", "judge_lower_loss",
           "judge_reasoning", "judge_saturation", "judge_shrinking_advantage", "judge_sink", "judge_token_bins",
           "lower_is_better_effect", "noise_half_width", "paired_effect", "proportion_gap_ci", "seed_spread",
           "trajectory_stats"]
