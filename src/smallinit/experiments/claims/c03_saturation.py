"""Claim 3: under γ = 1, ε = 1e-5 saturates RMSNorm (the normalization is ε-dominated) and costs loss; ε = 1e-12
restores both. Arms at the main size, elementwise gate both: ε = 1e-5 ("eps_large") and ε = 1e-12 ("eps_small").

Rule (:func:`judge`). Saturation s = ms/(ms + ε) of a norm's input (DESIGN.md §2); s ≤ 0.5 means ε ≥ ms: the norm
is **ε-dominated**. Per run, s_min(t) = the lowest saturation over all norms at probed step t, and S = its
**time average** over training, Σ_t w_t·s_min(t) / Σ_t w_t with trapezoid weights w_t over the probed steps (so the
log-spaced early probes do not outweigh the rest of the run). Parts:

(a) ε = 1e-5 saturates: 0.5 − S(ε=1e-5) > 0 — a threshold the data can fail (the old part (a) compared
    ms/(ms + 1e-12) with ms/(ms + 1e-5), which is larger for every ms > 0: it passed by construction). Interval:
    k ≥ 2 seeds, a 95% t-interval over the seeds' values; one seed, a bootstrap over the probed steps (time-weighted),
    which holds the within-run variation only — a note says so;
(b) it costs loss: loss(ε=1e-5) − loss(ε=1e-12) > 0, seed-paired
    (:func:`~smallinit.experiments.claims.rules.lower_is_better_effect`), and judged at the declared budget: from
    runs below ``Preset.enough`` tokens per non-embedding parameter this part is "inconclusive — not reached at this
    budget" (:func:`~smallinit.experiments.claims.rules.at_budget`).

**By the share of the horizon** (a preset with ``saturation_share`` q, e.g. ``cpu-0.1b``: arms B = γ 1, ε 1e-5 and
C = γ 1, ε 1e-12, both without the gate): part (a) is H − q > 0, H = the time-weighted share of the probed steps at
which s_min ≤ 0.5 (:func:`dominated_share`, the same trapezoid weights), with the same intervals. The step at which
s_min first exceeds 0.5 (:func:`first_healthy_step`: ε-dominated until then) and C's share are reported beside it.

The claim is supported when both parts are (rules.combine). S(ε = 1e-12) is reported beside them, not judged: it is
≈ 1 whenever ms ≫ 1e-12, by construction.

**Where part (a) can show** (:func:`can_show_saturation`): under γ = 1 the hidden state starts with mean square
≈ d^(−2γ) = 1/d² (the embedding's std is d^(−γ)), so ε = 1e-5 can dominate a norm only where 1/d² ≲ ε, i.e.
d ≳ ε^(−1/2) ≈ 316. At a narrower width part (a) reads "inconclusive — not reached" with that reason (the `cpu`
preset's d 256 read *not supported* there: a width that cannot show the claim decided it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from smallinit.experiments.claims.context import ClaimContext, fmt
from smallinit.experiments.claims.plots import plot_probe_series
from smallinit.experiments.claims.rules import (
    NOT_REACHED,
    Effect,
    Verdict,
    at_budget,
    combine,
    interval_effect,
    is_finite,
    lower_is_better_effect,
    seed_pairs,
)
from smallinit.experiments.presets import EARLY_ARMS, PAPER, Arm, Preset, arm
from smallinit.runs.rundir import summarize_probe_record

ID = 3
CLAIM = "ε = 1e-5 saturates RMSNorm under γ = 1 and costs loss; ε = 1e-12 restores both."

THRESHOLD = 0.5
"""A norm is ε-dominated when its saturation ms/(ms + ε) ≤ this (ε ≥ ms)."""

Series = tuple[Sequence[float], Sequence[float]]
"""(probed steps, the lowest saturation over all norms at each)."""


EPS_LARGE = 1e-5


def can_show_saturation(width: int | None, eps: float = EPS_LARGE, gamma: float = 1.0) -> tuple[bool, str]:
    """Whether a model of width d can show part (a): its init mean square d^(−2γ) is at most ε (True with no
    width given), and the words why not."""
    if not width:
        return True, ""
    ms = float(width) ** (-2 * gamma)
    if ms <= eps:
        return True, ""
    return False, (
        f"at d = {width} the γ = {gamma:g} hidden mean square at init (≈ d^(−2γ) = {ms:.3g}) is above ε = {eps:g}, "
        f"so ε cannot dominate the norm: part (a) shows only at d ≳ {eps ** (-0.5 / gamma):.0f}"
    )


def preset_width(size: Mapping[str, Any]) -> int | None:
    """d_model of a preset's size entry: its ``model.d_model``, else that of the size its ``model.preset`` names."""
    if "model.d_model" in size:
        return int(size["model.d_model"])
    if "model.preset" in size:
        from smallinit.model.config import SIZES

        return int(SIZES[size["model.preset"]]["d_model"]) if size["model.preset"] in SIZES else None
    return None


def arms(p: Preset) -> dict[str, Arm]:
    if p.early_arms:
        return {"eps_large": arm(p.main_size, EARLY_ARMS["B"]), "eps_small": arm(p.main_size, EARLY_ARMS["C"])}
    return {"eps_large": arm(p.main_size, (1.0, 1e-5, "elementwise")), "eps_small": arm(p.main_size, PAPER)}


def min_saturation_series(records: list[dict[str, Any]]) -> Series:
    """(steps, lowest saturation over every norm at that step) of one run's probe records."""
    pts = [(float(r["step"]), summarize_probe_record(r).get("saturation_min")) for r in records if "step" in r]
    pts = [(t, v) for t, v in pts if is_finite(v)]
    return [t for t, _ in pts], [float(v) for _, v in pts]


def time_weights(steps: Sequence[float]) -> np.ndarray:
    """Trapezoid weights of the probed steps: w_i = (t_{i+1} − t_{i−1}) / 2 (half intervals at the ends); equal
    weights when the steps span no time."""
    t = np.asarray(steps, dtype=np.float64)
    if t.size < 2 or t[-1] <= t[0]:
        return np.ones(t.size)
    w = np.zeros(t.size)
    d = np.diff(t)
    w[:-1] += d / 2
    w[1:] += d / 2
    return w


def time_mean(series: Series) -> float:
    """The time average of a series over training (:func:`time_weights`); NaN when empty."""
    steps, vals = series
    if not len(vals):
        return math.nan
    w = time_weights(steps)
    return float(np.sum(w * np.asarray(vals)) / np.sum(w))


def dominated_share(series: Series, threshold: float = THRESHOLD) -> float:
    """H = Σ_t w_t·[s_min(t) ≤ threshold] / Σ_t w_t: the time-weighted share of the probed steps at which the norms
    are ε-dominated (:func:`time_weights`); NaN when empty."""
    steps, vals = series
    return time_mean((steps, [1.0 if v <= threshold else 0.0 for v in vals]))


def first_healthy_step(series: Series, threshold: float = THRESHOLD) -> float | None:
    """The first probed step at which the lowest saturation exceeds ``threshold`` (ε-dominated until then); None
    when it never does."""
    return next((float(t) for t, v in zip(*series) if v > threshold), None)


def _boot_time_mean(series: Series, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of the time average, probed steps resampled with probability ∝ their weight."""
    steps, vals = series
    v = np.asarray(vals, dtype=np.float64)
    w = time_weights(steps)
    rng = np.random.default_rng(seed)
    idx = rng.choice(v.size, size=(n_boot, v.size), p=w / w.sum())
    means = v[idx].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _as_seeds(x: Mapping[int, Series] | Series) -> dict[int, Series]:
    return dict(x) if isinstance(x, Mapping) else {0: x}


def judge(
    sat_eps_large: Mapping[int, Series] | Series,
    sat_eps_small: Mapping[int, Series] | Series,
    loss_effect: Effect,
    tokens_per_param: float | None = None,
    enough: float | None = None,
    threshold: float = THRESHOLD,
    width: int | None = None,
    share: float | None = None,
) -> Verdict:
    """Claim 3. ``sat_*`` = {seed: (steps, lowest saturation over the norms at each probed step)} (or one such pair)
    under γ = 1 with ε = 1e-5 (large) and ε = 1e-12 (small); ``loss_effect`` = loss(ε=1e-5) − loss(ε=1e-12) with its
    interval; ``tokens_per_param`` / ``enough`` = the runs' budget and the declared one (None: not checked). Parts
    (a) 0.5 − S(ε=1e-5) > 0 (or, with ``share`` q, H(ε=1e-5) − q > 0) and (b) the loss effect at the declared
    budget, as in the module docstring."""
    large = {s: v for s, v in _as_seeds(sat_eps_large).items() if len(v[1])}
    small = {s: v for s, v in _as_seeds(sat_eps_small).items() if len(v[1])}
    S = {s: time_mean(v) for s, v in large.items()}
    if share is None:  # ε-dominated on average: threshold − S
        label = f"(a) ε-dominated: {threshold:g} − time-averaged lowest saturation (ε=1e-5)"
        per_seed = {s: threshold - x for s, x in S.items()}
        boot = large
        flip = True
    else:  # ε-dominated for more than the declared share of the horizon: H − q
        label = f"(a) ε-dominated share of the horizon (lowest saturation ≤ {threshold:g}, ε=1e-5) − {share:g}"
        per_seed = {s: dominated_share(v, threshold) - share for s, v in large.items()}
        boot = {s: (v[0], [1.0 if x <= threshold else 0.0 for x in v[1]]) for s, v in large.items()}
        flip = False
    a, notes = _part_a(label, per_seed, boot, threshold if flip else share, flip)
    shows, why = can_show_saturation(width)
    verdict_a = a.verdict
    if not shows:
        verdict_a = NOT_REACHED
        notes.append(f"part (a) not reached: {why} (it would read '{a.verdict}')")
    b = Effect("(b) " + loss_effect.label, loss_effect.value, loss_effect.lo, loss_effect.hi, loss_effect.noise)
    vb = at_budget(Verdict(b.verdict, [b]), tokens_per_param, enough, "the runs")
    notes += vb.notes
    nums = {
        "saturation_eps_1e-5_time_mean": float(np.mean(list(S.values()))) if S else None,
        "saturation_eps_1e-12_time_mean": (float(np.mean([time_mean(v) for v in small.values()])) if small else None),
        "threshold": threshold,
        "dominated_share_eps_1e-5": _mean_of(dominated_share(v, threshold) for v in large.values()),
        "dominated_share_eps_1e-12": _mean_of(dominated_share(v, threshold) for v in small.values()),
        "first_healthy_step_eps_1e-5": {s: first_healthy_step(v, threshold) for s, v in large.items()},
        "declared_share": share,
        "loss_part": vb.verdict,
        **{k: vb.numbers[k] for k in ("budget_tokens_per_param", "declared_tokens_per_param") if k in vb.numbers},
    }
    nums["part_a"] = verdict_a
    return Verdict(combine([verdict_a, vb.verdict]), [a, b], nums, notes)


def _mean_of(xs) -> float | None:
    v = [x for x in xs if is_finite(x)]
    return float(np.mean(v)) if v else None


def _part_a(
    label: str, per_seed: dict[int, float], series: dict[int, Series], offset: float, flip: bool
) -> tuple[Effect, list[str]]:
    """Part (a) from its per-seed values: k ≥ 2 seeds, the 95% t-interval over them; one seed, the time-weighted
    bootstrap of its ``series`` mapped to the effect (offset − m when ``flip``, else m − offset)."""
    if not per_seed:
        return Effect(label, None, noise="no saturation probes"), []
    if len(per_seed) >= 2:
        from smallinit.core.stats import t_quantile

        d = np.array(list(per_seed.values()))
        half = t_quantile(len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
        return interval_effect(label, float(d.mean()), half, f"95% t-interval over {len(d)} seeds"), []
    ((s0, value),) = per_seed.items()
    lo, hi = _boot_time_mean(series[s0])
    lo, hi = (offset - hi, offset - lo) if flip else (lo - offset, hi - offset)
    noise = "one seed: bootstrap over probed steps (time-weighted; within-run variation only)"
    note = "one seed of the ε = 1e-5 arm: part (a)'s interval holds the variation over training only, not over seeds"
    return Effect(label, value, lo, hi, noise), [note]


def _seed_row(series: Series | None) -> list[str]:
    """[time average, ε-dominated share, first step above 0.5] of one run's series ("—" where absent)."""
    if series is None or not len(series[1]):
        return ["—", "—", "—"]
    first = first_healthy_step(series)
    return [fmt(time_mean(series)), fmt(dominated_share(series)), "never" if first is None else f"{first:g}"]


def norm_saturations(records: list[dict[str, Any]]) -> dict[str, float]:
    """{norm name: its saturation time-averaged over training} (the per-norm table): the same trapezoid weights as
    the rule's :func:`time_mean`, so the log-spaced early probes do not outweigh the rest of the run."""
    acc: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, step: Any, sat: Any) -> None:
        if is_finite(step) and is_finite(sat):
            steps, vals = acc.setdefault(name, ([], []))
            steps.append(float(step))
            vals.append(float(sat))

    for rec in records:
        for l in rec.get("layers") or []:
            for n in ("attn_norm", "mlp_norm"):
                add(f"{l.get('layer')}.{n}", rec.get("step"), (l.get(n) or {}).get("saturation"))
        add("final_norm", rec.get("step"), (rec.get("final_norm") or {}).get("saturation"))
    return {k: time_mean(v) for k, v in acc.items()}


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    big, small = ctx.roles["eps_large"], ctx.roles["eps_small"]
    sat_big = {s: min_saturation_series(r) for s, r in ctx.probes_by_seed(big).items()}
    sat_small = {s: min_saturation_series(r) for s, r in ctx.probes_by_seed(small).items()}
    _, l_small, l_big = seed_pairs(ctx.losses_by_seed(small), ctx.losses_by_seed(big))
    loss = lower_is_better_effect("val loss: ε=1e-5 − ε=1e-12 (γ=1)", l_small, l_big, ctx.loss_hw(small, big))
    width = preset_width(ctx.p.sizes.get(big.size, {}))
    share = ctx.p.saturation_share
    v = judge(sat_big, sat_small, loss, ctx.budget(big, small), ctx.p.enough, width=width, share=share)
    pb, ps = ctx.probes(big), ctx.probes(small)
    sb, ss = norm_saturations(pb), norm_saturations(ps)
    names = [n for n in sb if n in ss]
    plot = plot_probe_series(
        ctx.out,
        "claim3_saturation.png",
        {"ε=1e-5": pb, "ε=1e-12": ps},
        "saturation_min",
        "lowest RMSNorm saturation",
        title="Claim 3: RMSNorm saturation (γ = 1)",
    )
    tables = [
        {
            "title": "RMSNorm saturation ms/(ms+ε) per norm, time-averaged over training (seed 0)",
            "columns": ["norm", "ε = 1e-5", "ε = 1e-12"],
            "rows": [[n, f"{sb[n]:.3f}", f"{ss[n]:.3f}"] for n in names],
        },
        {
            "title": "lowest saturation per seed (≤ 0.5: ε-dominated): time average, ε-dominated share of the horizon, "
            "first step above 0.5",
            "columns": ["seed", "ε = 1e-5: mean", "share", "first > 0.5", "ε = 1e-12: mean", "share"],
            "rows": [[s, *_seed_row(sat_big.get(s)), *_seed_row(sat_small.get(s))[:2]] for s in sorted(sat_big)],
        },
    ]
    how = (
        f"its time-weighted share of the horizon at or below the ε-dominated threshold 0.5 against {share:g}"
        if share is not None
        else "time-averaged over training, against the ε-dominated threshold 0.5"
    )
    measured = (
        f"lowest RMSNorm saturation s = ms/(ms+ε) over all norms at each probed step, {how}, and final val loss "
        f"(judged at the declared budget of {ctx.p.enough:g} tokens per parameter), under γ = 1 with ε = 1e-5 vs "
        f"ε = 1e-12 ({'no gate' if big.gate == 'none' else big.gate + ' gate'} both)"
    )
    return ctx.result(measured, v, plots=[plot], tables=tables, runs=ctx.names(big, small))
