"""The verdict of a loss claim at its declared budget (docs/definitions.md §2, "The declared budget").

From the seed-paired gaps d_s = L_baseline,s(D) − L_variant,s(D) at the judged budget: *supported* (the 95%
t-interval above 0), *not supported* (below 0), *smaller than the claimed effect* (holds 0, one-sided 95% upper bound
below the declared δ), *inconclusive*, or *inconclusive — not reached at this budget* (the runs stop short of K·N);
with the power the seeds had to find δ (:func:`power_at`) and the seeds that give 80% (:func:`seeds_for_power`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from smallinit.core.stats import Interval, t_quantile

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_REACHED = "inconclusive — not reached at this budget"
SMALLER = "smaller than the claimed effect"
"""The interval of G holds 0 and its one-sided 95% upper bound lies below the declared effect δ: the paper's
magnitude is excluded at this size and budget (docs/definitions.md §2, "The declared budget")."""
POWER = 0.8
"""Seeds are planned for this power to detect a true gap δ (:func:`seeds_for_power`)."""

DECLARED_TOLERANCE = 0.02
"""A budget counts as the declared one K·N when it is ≥ (1 − this)·K·N (budgets are whole optimizer steps)."""


def seeds_to_resolve(diffs: Sequence[float], level: float = 0.95, most: int = 1000) -> int | None:
    """The smallest number of seeds n whose t-interval would exclude 0 if the seed-paired differences kept their
    mean m and spread s: t_{n−1}·s/√n < |m|. None with < 2 differences, m = 0, or n > ``most``."""

    d = np.asarray([x for x in diffs if x is not None and math.isfinite(x)], dtype=np.float64)
    if d.size < 2 or d.mean() == 0:
        return None
    m, sd = abs(float(d.mean())), float(d.std(ddof=1))
    if sd == 0:
        return 2
    for n in range(2, most + 1):
        if t_quantile(n - 1, level) * sd / math.sqrt(n) < m:
            return n
    return None


def one_sided_upper(diffs: Sequence[float], level: float = 0.95) -> float | None:
    """mean(d) + t_{k−1, level}·sd(d)/√k: the one-sided ``level`` upper bound of the mean seed-paired difference
    (None with < 2 differences)."""
    from scipy.stats import t

    d = np.asarray([x for x in diffs if x is not None and math.isfinite(x)], dtype=np.float64)
    if d.size < 2:
        return None
    return float(d.mean() + t.ppf(level, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))


def power_at(effect: float, sd: float, n: int, level: float = 0.95) -> float:
    """The probability that n seed-paired differences with true mean ``effect`` > 0 and spread ``sd`` give a
    two-sided ``level`` t-interval above 0: P(T > t_{n−1, (1+level)/2}) for T ~ noncentral t(n − 1, effect·√n / sd)."""
    from scipy.stats import nct

    if n < 2:
        return 0.0
    if sd <= 0:
        return 1.0
    return float(nct.sf(t_quantile(n - 1, level), n - 1, effect * math.sqrt(n) / sd))


def seeds_for_power(effect: float, sd: float, power: float = POWER, most: int = 10_000) -> int | None:
    """The smallest n ≥ 2 with :func:`power_at` (effect, sd, n) ≥ ``power``; None past ``most``."""
    n = 2
    while n <= most:
        if power_at(effect, sd, n) >= power:
            return n
        n = n + 1 if n < 200 else int(n * 1.05) + 1
    return None


def judged_budget(D: Sequence[float], declared_tokens: float | None) -> tuple[int, bool]:
    """(index of the budget a loss claim is judged at, whether the declared budget was reached): the smallest budget
    ≥ (1 − :data:`DECLARED_TOLERANCE`)·K·N; the largest budget, unreached, when all are below; the largest budget
    when nothing was declared."""
    if declared_tokens is None:
        return len(D) - 1, True
    for j, d in enumerate(D):
        if d >= (1.0 - DECLARED_TOLERANCE) * declared_tokens:
            return j, True
    return len(D) - 1, False


def loss_claim_verdict(
    gap: Interval,
    n_seeds: int,
    noise_floor: float | None = None,
    reached: bool = True,
    where: str = "the judged budget",
    seeds_needed: int | None = None,
    declared: bool = True,
    effect: float | None = None,
    upper: float | None = None,
    power: float | None = None,
    seeds_for_power: int | None = None,
    lost: Sequence[str] = (),
    of: int | None = None,
    diverged: Sequence[str] = (),
    variant: str = "the variant",
) -> tuple[str, str]:
    """The verdict of a loss claim ("the variant reaches lower loss") at the declared budget (docs/definitions.md
    §2, "The declared budget").

    With ≥ 2 complete seed pairs G has a seed-paired 95% t-interval: **supported** when it lies above 0 (the reason
    says whether it also clears the claimed effect δ), **not supported** when it lies below 0, **smaller than the
    claimed effect** when it holds 0 and the one-sided 95% upper bound ``upper`` lies below δ (``effect``), else
    **inconclusive** (the reason gives the power these seeds had at δ and the seeds that give 80%, or without δ the
    seeds that would resolve the measured mean). With one seed, "above/below" means beyond ± ``noise_floor`` (none:
    inconclusive). **Inconclusive — not reached at this budget** only when ``reached`` is False: a short run never
    says *not supported*. Every lost seed is named (``lost``; ``n_seeds`` complete pairs ``of`` the seeds run); an
    arm in ``diverged`` (a non-finite loss) has failed on that seed: the verdict cannot favour it (a diverged variant
    is never *supported*; a diverged baseline never makes the variant *not supported* or *smaller*).
    """
    g = gap.value
    pairs = f"{n_seeds} complete pairs of {of}" if of is not None and of != n_seeds else f"{n_seeds} seeds"
    lost_text = f"; lost: {'; '.join(lost)}" if lost else ""
    if g is None:
        return INCONCLUSIVE, f"no gap measured at {where}{lost_text}"
    above, below, noise = _sides(gap, n_seeds, noise_floor, pairs)
    smaller = effect is not None and upper is not None and not above and not below and n_seeds >= 2 and upper < effect
    text = f"G = {g:+.4f} nats at {where} ({noise}){lost_text}"
    if not declared:
        text += "; no budget was declared before the runs, so the largest one is judged"
    powered = _power_text(effect, power, seeds_for_power)
    if not reached:
        return NOT_REACHED, f"the largest budget is below the declared one: {text}"
    failed = [a for a in diverged if (a == variant and above) or (a != variant and (below or smaller))]
    if failed:
        return INCONCLUSIVE, (
            f"{' and '.join(failed)} diverged on some seed (counted as that arm's failure, not dropped), so the "
            f"interval over the other seeds cannot decide for it: {text}"
        )
    if above:
        clears = ""
        if effect is not None and gap.lo is not None:
            clears = f"; {'it also clears' if gap.lo > effect else 'its lower bound is below'} δ = {effect:.4f}"
        return SUPPORTED, f"the variant is ahead: {text}{clears}"
    if below:
        return NOT_SUPPORTED, f"the variant is behind: {text}"
    if smaller:
        return SMALLER, (
            f"the interval holds 0 and the one-sided 95% upper bound {upper:+.4f} is below the claimed effect "
            f"δ = {effect:.4f}: the claimed magnitude is excluded here: {text}{powered}"
        )
    if effect is not None and n_seeds >= 2:
        more = (f"; one-sided 95% upper bound {upper:+.4f} ≥ δ = {effect:.4f}" if upper is not None else "") + powered
    elif seeds_needed:
        more = f"; ≈ {seeds_needed} seeds would resolve it if the measured mean were the truth"
    else:
        more = "; no number of seeds would resolve a zero mean gap" if n_seeds >= 2 else ""
    return INCONCLUSIVE, f"the interval holds 0: {text}{more}"


def _sides(gap: Interval, n_seeds: int, noise_floor: float | None, pairs: str) -> tuple[bool, bool, str]:
    """(above 0, below 0, how that was decided): the t-interval with ≥ 2 pairs, else ± the one-seed noise floor."""
    if n_seeds >= 2 and gap.lo is not None and gap.hi is not None:
        return gap.lo > 0, gap.hi < 0, f"95% t-interval [{gap.lo:+.4f}, {gap.hi:+.4f}] over {pairs}"
    if noise_floor is None:
        return False, False, "one seed and no noise floor"
    g = gap.value or 0.0
    return g > noise_floor, g < -noise_floor, f"one seed; noise floor {noise_floor:.4f}"


def _power_text(effect: float | None, power: float | None, seeds_for_power: int | None) -> str:
    """ "; power to find δ = … with these seeds …%, N seeds give 80%" (empty without δ or power)."""
    if effect is None or power is None:
        return ""
    need = f", {seeds_for_power} seeds give {POWER:.0%}" if seeds_for_power else ""
    return f"; power to find δ = {effect:.4f} with these seeds {power:.0%}{need}"


def _judge(
    gap: Interval,
    diffs: list[float],
    n_seeds: int,
    lost: list[str],
    stats: dict[str, Any],
    names: tuple[str, str],
    effect: float | None,
    noise_floor: float | None,
    **where: Any,
) -> tuple[str, str]:
    """:func:`loss_claim_verdict` over the complete pairs ``diffs`` of ``n_seeds``, the lost seeds named and an arm
    with a non-finite loss among them counted as having failed (``where``: reached, where, declared)."""
    return loss_claim_verdict(
        gap,
        len(diffs),
        noise_floor,
        seeds_needed=seeds_to_resolve(diffs),
        effect=effect,
        upper=stats["upper_one_sided"],
        power=stats["power"],
        seeds_for_power=stats["seeds_for_power"],
        lost=lost,
        of=n_seeds,
        diverged=sorted({a for a in names for x in lost if f" {a}: non-finite" in x}),
        variant=names[1],
        **where,
    )


def finite_rows(
    losses: dict[str, dict[int, Sequence[float | None]]],
    arms: Sequence[str],
    seeds: Sequence[int],
    problems: dict[str, dict[int, Sequence[str | None]]] | None,
) -> tuple[list[dict[int, list[float | None]]], dict[str, dict[int, list[str | None]]]]:
    """(per arm in ``arms``: {seed: losses with every non-finite one as None}, ``problems`` with "non-finite" where a
    NaN or ±inf loss had no reason given): a NaN read from a crossover.json is a lost seed, named, never a pair."""
    rows, why = [], {a: {s: list(v) for s, v in ((problems or {}).get(a) or {}).items()} for a in arms}
    for arm in arms:
        per: dict[int, list[float | None]] = {}
        for s in seeds:
            vals = list(losses[arm][s])
            per[s] = [None if v is None or not math.isfinite(v) else v for v in vals]
            for k, v in enumerate(vals):
                if v is not None and per[s][k] is None:
                    reasons = why[arm].setdefault(s, [])
                    reasons += [None] * (len(vals) - len(reasons))
                    reasons[k] = reasons[k] or "non-finite"
        rows.append(per)
    return rows, why


def lost_seeds(
    problems: dict[str, dict[int, Sequence[str | None]]] | None,
    arms: dict[str, dict[int, list]],
    seeds: Sequence[int],
    j: int,
    tokens: float,
) -> list[str]:
    """One phrase per arm × seed without a loss at budget ``j``: "seed 3 paper: non-finite (diverged) at D = …" (the
    reason from ``problems[arm][seed][j]``; "missing" where none is given)."""
    out = []
    for s in seeds:
        for arm, rows in arms.items():
            if rows[s][j] is None:
                said = (problems or {}).get(arm, {}).get(s) or []
                why = (said[j] if j < len(said) else None) or "missing"
                out.append(f"seed {s} {arm}: {why} at D = {tokens:,.0f}")
    return out


def effect_stats(diffs: Sequence[float], effect: float | None) -> dict[str, Any]:
    """The one-sided 95% upper bound of the mean gap, and with a claimed effect δ the power these seeds had to find it
    at their spread and the seeds that give :data:`POWER` (the fields of :class:`CrossoverAnalysis`)."""
    sd = float(np.std(diffs, ddof=1)) if len(diffs) >= 2 else None
    return {
        "upper_one_sided": one_sided_upper(diffs),
        "power": power_at(effect, sd, len(diffs)) if effect and sd is not None else None,
        "seeds_for_power": seeds_for_power(effect, sd) if effect and sd else None,
    }


__all__ = [
    "DECLARED_TOLERANCE",
    "INCONCLUSIVE",
    "NOT_REACHED",
    "NOT_SUPPORTED",
    "POWER",
    "SMALLER",
    "SUPPORTED",
    "effect_stats",
    "finite_rows",
    "judged_budget",
    "lost_seeds",
    "loss_claim_verdict",
    "one_sided_upper",
    "power_at",
    "seeds_for_power",
    "seeds_to_resolve",
]
