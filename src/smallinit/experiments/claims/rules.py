"""The shared rule machinery that turns measured numbers into verdicts (each claim's own rule, ``judge``, lives
in its module beside this one). Verdicts are computed, never written by hand.

The one rule behind every verdict (:func:`effect_verdict`): an **effect** is a signed number oriented so
that > 0 means "as the paper says" (e.g. baseline loss − variant loss), with an uncertainty **interval**
[lo, hi]:

- **supported**      lo > 0   — the effect exceeds its noise, in the claimed direction;
- **not supported**  hi < 0   — the opposite effect, beyond noise;
- **inconclusive**   otherwise (the interval contains 0: the effect is inside the noise), or when no
  noise estimate exists (one seed and no bootstrap).

Intervals of a loss or accuracy difference between two arms (:func:`lower_is_better_effect`), DESIGN.md §2:

- **k ≥ 2 seeds** in both arms: a 95% **t-interval over the seed-paired differences** (same seed = same batches),
  mean(d) ± t_{k−1, 0.975}·sd(d)/√k (:func:`smallinit.core.stats.paired_t_interval`; with 2 seeds ≈ 4× wider than the
  range over seeds that earlier versions used), widened to the bootstrap half-width when that is larger;
- **one seed**: the bootstrap 95% half-width over *windows* of the token-level gain, and never less than the
  preset's **seed-noise floor** (:func:`seed_noise_floor`, measured once per preset from its multi-seed arms):
  an effect must exceed both evaluation noise and training noise. No floor measured → no interval (inconclusive).

Other effects use a bootstrap 95% interval over their own units (layers, matrices, test examples, as each claim
states), or with seeds a t-interval over seed-paired values (:func:`seed_paired_effect`: seeds are paired by their
number, never by their position in a list, so a lost seed drops its pair instead of shifting the others). A
difference of two independent effects has h = sqrt(h1² + h2²). A claim with several parts (:func:`combine`) is
supported when every part is, not supported when any part is not supported, "inconclusive — not reached at this
budget" when a part is that and none is not supported, and inconclusive otherwise.

**The declared budget** (DESIGN.md §2; :func:`at_budget`): a loss comparison from runs below ``Preset.enough``
tokens per non-embedding parameter is "inconclusive — not reached at this budget" (:data:`NOT_REACHED`) whatever
its interval: a short run never says *not supported* (nor *supported*) for a loss claim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from smallinit.analysis.crossing import (
    INCONCLUSIVE,
    NOT_REACHED,
    NOT_SUPPORTED,
    SUPPORTED,
)  # one spelling of each verdict

NOT_RUN = "not run in this preset"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_REACHED, NOT_RUN)

RULE = (
    "supported when the effect's 95% interval lies entirely above 0; not supported when entirely below 0; "
    "inconclusive otherwise. Loss differences: a t-interval over seed-paired differences with ≥ 2 seeds (paired by "
    "seed number); with one seed, the bootstrap over windows widened to the preset's seed-noise floor (Student's "
    "t at the floor's degrees of freedom), and inconclusive when the preset measured no floor (one seed says "
    "nothing about training noise). A loss comparison from runs below the declared budget (tokens per "
    "non-embedding parameter) is 'inconclusive — not reached at this budget', never 'not supported'."
)


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


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def effect_verdict(e: Effect) -> str:
    """The rule (module docstring): lo > 0 → supported; hi < 0 → not supported; else inconclusive
    (also when the value or an end of the interval is missing; an end may be ±inf)."""
    if not (is_finite(e.value) and _number(e.lo) and _number(e.hi)):
        return INCONCLUSIVE
    if e.lo > 0:
        return SUPPORTED
    if e.hi < 0:
        return NOT_SUPPORTED
    return INCONCLUSIVE


def combine(verdicts: Sequence[str]) -> str:
    """A multi-part claim: all parts supported → supported; any part not supported → not supported; else
    "inconclusive — not reached at this budget" when a part is that (a loss part below the declared budget);
    else inconclusive."""
    vs = list(verdicts)
    if not vs:
        return INCONCLUSIVE
    if any(v == NOT_SUPPORTED for v in vs):
        return NOT_SUPPORTED
    if all(v == SUPPORTED for v in vs):
        return SUPPORTED
    if any(v == NOT_REACHED for v in vs):
        return NOT_REACHED
    return INCONCLUSIVE


def seed_spread(*arms: Sequence[float]) -> float | None:
    """Spread over seeds: the largest (max − min) over the arms that have ≥ 2 seeds; None if none has."""
    spreads = [max(a) - min(a) for a in arms if len([x for x in a if is_finite(x)]) >= 2]
    return max(spreads) if spreads else None


def noise_half_width(seed_hw: float | None, boot_hw: float | None) -> tuple[float | None, str]:
    """h = max of the available estimates, and a note saying which were used."""
    parts, hs = [], []
    if is_finite(seed_hw):
        hs.append(float(seed_hw))
        parts.append(f"seed spread {seed_hw:.3g}")
    if is_finite(boot_hw):
        hs.append(float(boot_hw))
        parts.append(f"bootstrap 95% ±{boot_hw:.3g}")
    if not hs:
        return None, "no noise estimate (one seed, no bootstrap)"
    return max(hs), "; ".join(parts)


def interval_effect(label: str, value: float | None, half_width: float | None, noise: str = "") -> Effect:
    """value ± half_width (no interval when either is missing)."""
    if not (is_finite(value) and is_finite(half_width)):
        return Effect(label, value if is_finite(value) else None, None, None, noise or "no noise estimate")
    return Effect(label, float(value), float(value) - float(half_width), float(value) + float(half_width), noise)


def half_width(e: Effect) -> float | None:
    if is_finite(e.lo) and is_finite(e.hi):
        return (e.hi - e.lo) / 2
    return None


def difference(label: str, e1: Effect, e2: Effect) -> Effect:
    """e1 − e2, half-width sqrt(h1² + h2²) (independent noise)."""
    if not (is_finite(e1.value) and is_finite(e2.value)):
        return Effect(label, None, noise="missing numbers")
    h1, h2 = half_width(e1), half_width(e2)
    h = math.sqrt(h1**2 + h2**2) if h1 is not None and h2 is not None else None
    return interval_effect(label, e1.value - e2.value, h, "combined: sqrt(h1² + h2²)")


def seed_noise_floor(groups: Sequence[Sequence[float]], level: float = 0.95) -> float | None:
    """The seed-noise floor of a one-seed comparison: t_{df, (1+level)/2}·√2·s, s = the pooled standard deviation
    over seeds, s² = Σ_g Σ_i (x_gi − mean_g)² / df with df = Σ_g (k_g − 1), over every group (one arm's final
    losses at its seeds) with k_g ≥ 2 — the 95% half-width of a difference between two arms trained with one seed
    each. The quantile is Student's t at the floor's real degrees of freedom (DESIGN.md §2: also for noise floors
    estimated from few seeds), not z = 1.96: from df = 2, t = 4.30. None without such a group."""
    from smallinit.core.stats import t_quantile

    ss, df = 0.0, 0
    for g in groups:
        x = [float(v) for v in g if is_finite(v)]
        if len(x) >= 2:
            ss += float(np.sum((np.asarray(x) - np.mean(x)) ** 2))
            df += len(x) - 1
    if df == 0:
        return None
    return t_quantile(df, level) * math.sqrt(2.0) * math.sqrt(ss / df)


def seed_pairs(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[list[int], list[float], list[float]]:
    """(seeds, a values, b values) over the seeds present and finite in both mappings {seed: value}, in seed order:
    pairs are made by seed number, so a lost seed drops its own pair and shifts no other."""
    seeds = sorted(s for s in set(a) & set(b) if is_finite(a[s]) and is_finite(b[s]))
    return seeds, [float(a[s]) for s in seeds], [float(b[s]) for s in seeds]


def seed_paired_effect(
    label: str, claimed: Mapping[int, float], other: Mapping[int, float], min_seeds: int = 2
) -> Effect:
    """mean over seeds of d_s = claimed_s − other_s with the 95% t-interval mean(d) ± t_{k−1}·sd(d)/√k over the k
    seeds present in both (:func:`seed_pairs`, :func:`smallinit.core.stats.paired_t_interval`). Fewer than
    ``min_seeds`` pairs: the value without an interval (inconclusive), and a noise text that says so."""
    from smallinit.core.stats import paired_t_interval

    seeds, x, y = seed_pairs(claimed, other)
    d = [u - v for u, v in zip(x, y)]
    if not d:
        return Effect(label, None, noise="no seed present in both arms")
    if len(d) < max(2, min_seeds):
        return Effect(label, float(np.mean(d)), noise=f"{len(d)} seed pair(s): a verdict needs ≥ {max(2, min_seeds)}")
    t = paired_t_interval(d)
    return Effect(
        label,
        t.value,
        t.lo,
        t.hi,
        f"95% t-interval over {len(d)} seed-paired differences (seeds {', '.join(map(str, seeds))})",
    )


def at_budget(v: Verdict, tokens_per_param: float | None, enough: float | None, what: str = "the runs") -> Verdict:
    """A loss claim's verdict at the declared budget (DESIGN.md §2, "The declared budget"): when ``enough`` (K, tokens
    per non-embedding parameter, ``Preset.enough``) is given and ``tokens_per_param`` (the smallest over the runs
    compared) is below (1 − :data:`smallinit.analysis.crossing.DECLARED_TOLERANCE`)·K, the verdict becomes
    :data:`NOT_REACHED` whatever the interval says (the effects stay, and a note says what they would read); with K
    given and the runs' tokens per parameter unknown, a supported / not supported verdict becomes inconclusive.
    The numbers gain ``budget_tokens_per_param`` and ``declared_tokens_per_param``. ``enough`` None: no budget
    declared, the verdict unchanged."""
    from smallinit.analysis.crossing import DECLARED_TOLERANCE

    if enough is None:
        return v
    nums = {**v.numbers, "budget_tokens_per_param": tokens_per_param, "declared_tokens_per_param": enough}
    if not is_finite(tokens_per_param):
        if v.verdict in (SUPPORTED, NOT_SUPPORTED):
            return Verdict(
                INCONCLUSIVE,
                v.effects,
                nums,
                v.notes
                + [
                    f"the tokens per parameter of {what} are unknown, so the declared budget ({enough:g}) cannot be "
                    f"checked (would read '{v.verdict}')"
                ],
            )
        return Verdict(v.verdict, v.effects, nums, v.notes)
    if tokens_per_param < (1.0 - DECLARED_TOLERANCE) * enough:
        return Verdict(
            NOT_REACHED,
            v.effects,
            nums,
            v.notes
            + [
                f"{what} train {tokens_per_param:.3g} tokens per non-embedding parameter, below the declared budget of "
                f"{enough:g}: a loss comparison this short says nothing about the claim (it would read '{v.verdict}')"
            ],
        )
    return Verdict(v.verdict, v.effects, nums, v.notes)


def lower_is_better_effect(
    label: str, variant: Sequence[float], baseline: Sequence[float], boot_hw: float | None = None
) -> Effect:
    """Effect of a variant on a lower-is-better metric (a loss): mean(baseline) − mean(variant) (> 0: the
    variant is better). ``variant[i]`` and ``baseline[i]`` are seed i. With ≥ 2 seed pairs: the 95% t-interval
    of the seed-paired differences baseline_i − variant_i, widened to ``boot_hw`` when that is larger; with one
    seed: ± ``boot_hw`` (the caller folds the preset's seed-noise floor into it, see ClaimContext.loss_hw)."""
    from smallinit.core.stats import paired_t_interval

    v = [x for x in variant if is_finite(x)]
    b = [x for x in baseline if is_finite(x)]
    if not v or not b:
        return Effect(label, None, noise="a run is missing or diverged")
    value = float(np.mean(b) - np.mean(v))
    k = min(len(v), len(b))
    if k >= 2:
        t = paired_t_interval([b[i] - v[i] for i in range(k)])
        half = (t.hi - t.lo) / 2
        note = f"95% t-interval over {k} seed-paired differences (±{half:.3g})"
        if is_finite(boot_hw) and boot_hw > half:
            half, note = float(boot_hw), note + f", widened to the bootstrap ±{boot_hw:.3g}"
        return interval_effect(label, value, half, note)
    if not is_finite(boot_hw):
        return Effect(label, value, noise="one seed and no noise estimate")
    return interval_effect(
        label,
        value,
        boot_hw,
        f"one seed: ±{boot_hw:.3g} (bootstrap over windows and the preset's seed-noise floor, the larger)",
    )


def higher_is_better_effect(
    label: str, variant: Sequence[float], baseline: Sequence[float], boot_hw: float | None = None
) -> Effect:
    """mean(variant) − mean(baseline) for a higher-is-better metric (accuracy), noise as above."""
    e = lower_is_better_effect(
        label, [-x for x in variant if is_finite(x)], [-x for x in baseline if is_finite(x)], boot_hw
    )
    return e


def bootstrap_mean_ci(
    values: Sequence[float], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``."""
    x = np.asarray([v for v in values if is_finite(v)], dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def paired_effect(
    label: str, claimed: Sequence[float], other: Sequence[float], units: str, n_boot: int = 2000, seed: int = 0
) -> Effect:
    """mean over units of (claimed_i − other_i) with a percentile bootstrap 95% interval over the units
    (layers, matrices, norms ...), i.e. "consistently larger across units"."""
    d = [a - b for a, b in zip(claimed, other) if is_finite(a) and is_finite(b)]
    if len(d) < 2:
        return Effect(label, float(d[0]) if d else None, noise=f"fewer than 2 {units}: no bootstrap")
    lo, hi = bootstrap_mean_ci(d, n_boot, seed)
    return Effect(label, float(np.mean(d)), lo, hi, f"bootstrap 95% over {len(d)} {units}")


def proportion_gap_ci(
    correct_a: Sequence[int], correct_b: Sequence[int], n_boot: int = 2000, seed: int = 0
) -> float | None:
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


@dataclass
class Verdict:
    """A claim's verdict, the effects it follows from, the numbers behind them and notes."""

    verdict: str
    effects: list[Effect] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


__all__ = [
    "Effect",
    "INCONCLUSIVE",
    "NOT_REACHED",
    "NOT_RUN",
    "NOT_SUPPORTED",
    "RULE",
    "SUPPORTED",
    "VERDICTS",
    "Verdict",
    "at_budget",
    "bootstrap_mean_ci",
    "combine",
    "difference",
    "effect_verdict",
    "half_width",
    "higher_is_better_effect",
    "interval_effect",
    "is_finite",
    "lower_is_better_effect",
    "noise_half_width",
    "paired_effect",
    "proportion_gap_ci",
    "seed_noise_floor",
    "seed_paired_effect",
    "seed_pairs",
    "seed_spread",
]
