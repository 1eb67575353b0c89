"""Loss against training budget, the verdict of a loss claim at a declared budget, and whether the curves cross
(DESIGN.md §2, "Budgets and the crossing", "The declared budget", "Closing and the crossing budget").

For a baseline arm and a variant arm, each trained with the same seeds (same seed = same batches), L_arm,s(D) is
the annealed validation loss at budget D (tokens) of seed s. Then:

- **gap**  G(D) = L_baseline(D) − L_variant(D)  (> 0: the variant is ahead), seed-paired: the k differences
  d_s = L_baseline,s(D) − L_variant,s(D) give a t-interval (:func:`smallinit.core.stats.paired_t_interval`);
- **the verdict** (:func:`loss_claim_verdict`) at the budget declared before the runs, K tokens per non-embedding
  parameter: *supported* when the interval of G lies above 0, *not supported* below 0, *inconclusive* when it
  straddles 0 (with the seeds that would resolve it at the measured spread, :func:`seeds_to_resolve`);
  *inconclusive — not reached at this budget* only when the largest budget is below K·N;
- **closing** (:func:`gap_change`): the seed-paired change G(D) − G(D/4) over a true 4× of budget (the reference
  chosen by ratio, within 10%), "closing" only when its interval lies above 0;
- **the gap fit** (:func:`fit_gap_curve`): G(D) = c − a·D^(−b) on the largest ≥ 4 budgets. The asymptote c has an
  interval that joins a per-seed bootstrap and the fit's own profile interval; D* = (a/c)^(1/b) is reported only
  when that interval excludes 0 (c < 0: predicted never to cross); otherwise "these budgets cannot tell";
- secondary: **per-arm fits** L(D) = E + B·D^(−β) (:func:`smallinit.analysis.scaling.fit_scaling_law`) and where they
  meet (:class:`Crossing`), with a bootstrap over seeds and budgets. They decide nothing: their crossing chases the data
  (a gap that tends to 0 from below and never crosses makes them predict D* ≈ 2× the largest budget every time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from smallinit.analysis.gap_fit import (
    GapFit,
    describe_gap_fit,  # noqa: F401
    fit_gap_curve,
)
from smallinit.analysis.loss_verdict import (  # noqa: F401 - re-exported: the verdict's names
    DECLARED_TOLERANCE,
    INCONCLUSIVE,
    NOT_REACHED,
    NOT_SUPPORTED,
    POWER,
    SMALLER,
    SUPPORTED,
    _judge,
    effect_stats,
    finite_rows,
    judged_budget,
    loss_claim_verdict,
    lost_seeds,
    one_sided_upper,
    power_at,
    seeds_for_power,
    seeds_to_resolve,
)
from smallinit.analysis.scaling import ScalingError, ScalingFit, fit_scaling_law, predict
from smallinit.core.stats import Interval, paired_t_interval

HORIZON = 1000.0
"""The crossing is searched up to HORIZON × the largest measured budget."""
EXTRAPOLATION = 10.0
"""A crossing beyond EXTRAPOLATION × the largest measured budget is flagged as an extrapolation."""
FOUR_FOLD_TOLERANCE = 0.10
"""The reference of "over 4× of budget" is the budget nearest D/4 by ratio, within this relative distance."""


@dataclass(frozen=True)
class Crossing:
    """Where the fitted variant curve overtakes the baseline's for good.

    status: "crosses" (D* inside [D_min, horizon]), "ahead throughout" (the fitted gap is > 0 from the smallest
    budget on; D* ≤ D_min), "no crossing" (the fitted gap is still ≤ 0 at the horizon), or "no fit".
    """

    status: str
    D_star: float | None
    lo: float | None
    hi: float | None
    extrapolated: bool
    horizon: float
    crossing_share: float | None = None
    """Share of bootstrap draws in which the fits cross below the horizon."""
    degenerate: str | None = None
    """Why a fit's D* is not to be trusted: a fitted parameter at its bound (E = 0: the curve falls without floor
    and must meet any curve with E > 0; α at its limits). Such a crossing does not count as predicted."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CrossoverAnalysis:
    baseline: str
    variant: str
    budgets: list[float]
    seeds: list[int]
    losses: dict[str, dict[int, list[float | None]]]
    gap: list[Interval]
    gap_change: Interval
    """G(D_judged) − G(D_ref), D_ref the true-4× reference (:func:`four_fold_reference`), seed-paired: > 0 = rising."""
    fits: dict[str, dict[str, Any] | None]
    """Secondary: the per-arm fits L(D) = E + B·D^(−β)."""
    crossing: Crossing
    """Secondary: where the per-arm fits meet (decides nothing)."""
    verdict: str
    reason: str
    tokens_per_param: list[float] | None = None
    answer: str = ""
    notes: list[str] = field(default_factory=list)
    judged: int = -1
    """Index of the budget the verdict is read at (the declared one; the largest when none was declared)."""
    declared_tokens_per_param: float | None = None
    declared_tokens: float | None = None
    reached: bool = True
    """Whether the largest budget reaches the declared one."""
    gap_change_from: float | None = None
    """The reference budget of ``gap_change`` (≈ D_judged / 4), None when no budget lies there."""
    gap_fit: GapFit | None = None
    effect: float | None = None
    """The claimed effect δ (nats) declared with the budget; None: none declared."""
    upper_one_sided: float | None = None
    """The one-sided 95% upper bound of G at the judged budget: mean + t_{k−1, 0.95}·sd/√k."""
    power: float | None = None
    """The power these seeds had to find a true gap δ at the measured spread (:func:`power_at`)."""
    seeds_for_power: int | None = None
    """The seeds that give :data:`POWER` to find δ at the measured spread (:func:`seeds_for_power`)."""
    complete_pairs: int = 0
    """Seeds with a finite loss in both arms at the judged budget (the k of the verdict)."""
    missing: list[str] = field(default_factory=list)
    """Every seed lost at the judged budget, named: "seed 3 paper: non-finite at D = …"."""

    def __post_init__(self) -> None:
        if self.judged < 0:
            self.judged = len(self.budgets) - 1

    def gap_change_from_index(self) -> int:
        return self.budgets.index(self.gap_change_from) if self.gap_change_from in self.budgets else 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["losses"] = {a: {str(s): v for s, v in per.items()} for a, per in self.losses.items()}
        return d


def _mean_curve(per_seed: dict[int, list[float | None]], seeds: Sequence[int]) -> np.ndarray:
    """The seed mean at each budget; NaN where no seed has a loss (a bootstrap draw of lost seeds only), quietly."""
    import warnings

    rows = np.array([[np.nan if v is None else v for v in per_seed[s]] for s in seeds], dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "Mean of empty slice": the NaN is what is meant
        return np.nanmean(rows, axis=0)


def _fit(D: np.ndarray, L: np.ndarray) -> ScalingFit | None:
    ok = np.isfinite(L)
    try:
        return fit_scaling_law(D[ok], L[ok])
    except ScalingError:
        return None


def degenerate_fit(fits: dict[str, ScalingFit]) -> str | None:
    """The arms whose fit L = E + B·D^(−β) has a parameter at its bound (E = 0, β at its limits), in words; None
    when every fit is interior."""
    from smallinit.analysis.scaling import ALPHA_MAX, ALPHA_MIN

    bad = []
    for arm, f in fits.items():
        if f.E <= 1e-9:
            bad.append(f"{arm}'s fit has E = 0 (at its bound: no loss floor)")
        elif f.alpha <= ALPHA_MIN * 10 or f.alpha >= ALPHA_MAX * 0.999:
            bad.append(f"{arm}'s fit has β = {f.alpha:.3g} (at its bound)")
    return "; ".join(bad) or None


def fitted_crossing(
    fit_baseline: ScalingFit, fit_variant: ScalingFit, d_min: float, d_max: float, horizon: float = HORIZON
) -> tuple[str, float | None]:
    """(status, D*) for two fits: D* = smallest D ≥ d_min from which predict(baseline) − predict(variant) > 0 holds
    up to horizon · d_max (see :class:`Crossing` for the statuses)."""
    from scipy.optimize import brentq

    hi = horizon * d_max
    grid = np.geomspace(d_min, hi, 4000)
    g = predict(fit_baseline, grid) - predict(fit_variant, grid)
    if g[-1] <= 0:
        return "no crossing", None
    if (g > 0).all():
        return "ahead throughout", float(d_min)
    i = int(np.nonzero(g <= 0)[0][-1])  # last grid point where the variant is not ahead
    f = lambda logd: predict(fit_baseline, math.exp(logd)) - predict(fit_variant, math.exp(logd))  # noqa: E731
    root = brentq(f, math.log(grid[i]), math.log(grid[i + 1]), xtol=1e-10)
    return "crosses", float(math.exp(root))


def bootstrap_crossing(
    D: np.ndarray,
    base: dict[int, list],
    var: dict[int, list],
    seeds: Sequence[int],
    n_boot: int = 300,
    seed: int = 0,
    horizon: float = HORIZON,
) -> tuple[np.ndarray, float]:
    """D* over bootstrap draws (seeds paired, budgets with replacement, ≥ 3 distinct); +∞ = no crossing.

    Returns (sorted D* samples, share of draws that cross). Draws whose fits fail are skipped.
    """
    rng = np.random.default_rng(seed)
    k, n = len(seeds), D.size
    out = []
    for _ in range(n_boot):
        pick_s = [seeds[i] for i in rng.integers(0, k, size=k)]
        pick_d = rng.integers(0, n, size=n)
        if np.unique(pick_d).size < 3:
            continue
        Lb, Lv = _mean_curve(base, pick_s)[pick_d], _mean_curve(var, pick_s)[pick_d]
        fb, fv = _fit(D[pick_d], Lb), _fit(D[pick_d], Lv)
        if fb is None or fv is None:
            continue
        status, d_star = fitted_crossing(fb, fv, float(D.min()), float(D.max()), horizon)
        out.append(math.inf if status == "no crossing" else d_star)
    arr = np.sort(np.asarray(out, dtype=np.float64))
    share = float(np.isfinite(arr).mean()) if arr.size else 0.0
    return arr, share


def four_fold_reference(D: Sequence[float], j: int, tol: float = FOUR_FOLD_TOLERANCE) -> int | None:
    """The index i < j whose budget is nearest D_j / 4 by ratio, when |D_i / (D_j / 4) − 1| ≤ ``tol``; else None.
    Budgets are whole steps, so D_j / 4 is rarely measured exactly — but the nearest by ratio is never D_j / 2."""
    if j <= 0:
        return None
    target = D[j] / 4.0
    i = min(range(j), key=lambda k: abs(math.log(D[k] / target)))
    return i if abs(D[i] / target - 1.0) <= tol else None


def gap_change(
    D: Sequence[float], base: dict[int, list], var: dict[int, list], seeds: Sequence[int], j: int
) -> tuple[Interval, int | None]:
    """(G(D_j) − G(D_ref) paired by seed, with its t-interval; ref) for the true-4× reference of
    :func:`four_fold_reference`; an empty interval when no budget lies at D_j / 4. > 0: the gap rose (closing when
    the variant was behind)."""
    i = four_fold_reference(D, j)
    if i is None:
        return Interval(None, None, None, "no budget at a true 4× below", 0), None
    ch = [
        (base[s][j] - var[s][j]) - (base[s][i] - var[s][i])
        for s in seeds
        if None not in (base[s][j], var[s][j], base[s][i], var[s][i])
    ]
    return paired_t_interval(ch), i


def analyse_crossover(
    budgets: Sequence[float],
    losses: dict[str, dict[int, Sequence[float | None]]],
    baseline: str,
    variant: str,
    non_embedding_params: float | None = None,
    n_boot: int = 300,
    noise_floor: float | None = None,
    horizon: float = HORIZON,
    enough_tokens_per_param: float | None = None,
    effect: float | None = None,
    problems: dict[str, dict[int, Sequence[str | None]]] | None = None,
) -> CrossoverAnalysis:
    """The gap, its verdict at the declared budget, closing, the gap fit and the per-arm fits for ``variant``
    against ``baseline`` (module docstring).

    ``losses[arm][seed]`` is the list of annealed validation losses at ``budgets`` (None where missing). Only
    seeds present in both arms are used (pairs). ``enough_tokens_per_param`` is the declared budget K (tokens per
    non-embedding parameter; needs ``non_embedding_params``); None: judged at the largest budget. ``noise_floor``
    (nats) is the seed-noise floor that a one-seed gap must exceed (:func:`loss_claim_verdict`). ``effect`` is the
    claimed effect δ declared with K (the *smaller than the claimed effect* outcome, power and planned seeds).
    ``problems[arm][seed][k]`` says why a loss is None: every seed lost at the judged budget is named in the verdict
    (:func:`lost_seeds`); a non-finite (diverged) one is that arm's failure.
    """
    D, seeds = _budgets_and_seeds(budgets, losses, baseline, variant, non_embedding_params, enough_tokens_per_param)
    (base, var), problems = finite_rows(losses, (baseline, variant), seeds, problems)
    gap = [paired_t_interval(_paired_diffs(base, var, seeds, j)) for j in range(D.size)]
    declared = enough_tokens_per_param * non_embedding_params if enough_tokens_per_param else None
    j, reached = judged_budget(D, declared)
    change, ref = gap_change(D, base, var, seeds, j)
    gap_fit = fit_gap_curve(D, base, var, seeds, upto=j, n_boot=n_boot)
    fb, fv, crossing, notes = _arm_fits(D, base, var, seeds, (baseline, variant), n_boot, horizon)
    fits = {baseline: fb.to_dict() if fb else None, variant: fv.to_dict() if fv else None}
    tpp = [float(d) / non_embedding_params for d in D] if non_embedding_params else None
    where = f"D = {D[j]:,.0f} tokens" + (f" ({tpp[j]:.3g} tokens/param)" if tpp else "")
    where += "" if declared is None else f", declared {enough_tokens_per_param:g} tokens/param"
    diffs = _paired_diffs(base, var, seeds, j)
    lost = lost_seeds(problems, {baseline: base, variant: var}, seeds, j, D[j])
    stats = effect_stats(diffs, effect)
    verdict, reason = _judge(
        gap[j],
        diffs,
        len(seeds),
        lost,
        stats,
        (baseline, variant),
        effect,
        noise_floor,
        reached=reached,
        where=where,
        declared=declared is not None,
    )
    a = CrossoverAnalysis(
        baseline,
        variant,
        [float(d) for d in D],
        seeds,
        {baseline: base, variant: var},
        gap,
        change,
        fits,
        crossing,
        verdict,
        reason,
        tpp,
        notes=notes,
        judged=j,
        declared_tokens_per_param=enough_tokens_per_param,
        declared_tokens=declared,
        reached=reached,
        gap_change_from=float(D[ref]) if ref is not None else None,
        gap_fit=gap_fit,
        effect=effect,
        complete_pairs=len(diffs),
        missing=lost,
        **stats,
    )
    a.answer = one_line_answer(a, non_embedding_params)
    return a


def _budgets_and_seeds(
    budgets: Sequence[float],
    losses: dict[str, dict[int, Sequence[float | None]]],
    baseline: str,
    variant: str,
    non_embedding_params: float | None,
    enough_tokens_per_param: float | None,
) -> tuple[np.ndarray, list[int]]:
    """(the budgets as an array, the seeds both arms have) after checking the arguments of
    :func:`analyse_crossover` (ValueError when they cannot be analysed)."""
    D = np.asarray(budgets, dtype=np.float64)
    if D.ndim != 1 or D.size < 1 or (D <= 0).any() or (np.diff(D) <= 0).any():
        raise ValueError(f"budgets must be increasing positive token counts, got {list(budgets)}")
    for arm in (baseline, variant):
        if arm not in losses:
            raise ValueError(f"no losses for arm {arm!r} (have: {', '.join(losses)})")
    if enough_tokens_per_param is not None and not non_embedding_params:
        raise ValueError("a declared budget in tokens per parameter needs non_embedding_params")
    seeds = sorted(set(losses[baseline]) & set(losses[variant]))
    if not seeds:
        raise ValueError(f"arms {baseline!r} and {variant!r} share no seed: nothing to pair")
    return D, seeds


def _paired_diffs(base: dict[int, list], var: dict[int, list], seeds: Sequence[int], j: int) -> list[float]:
    """L_baseline,s − L_variant,s at budget ``j`` for every seed with both losses."""
    return [base[s][j] - var[s][j] for s in seeds if base[s][j] is not None and var[s][j] is not None]


def _arm_fits(
    D: np.ndarray,
    base: dict[int, list],
    var: dict[int, list],
    seeds: Sequence[int],
    names: tuple[str, str],
    n_boot: int,
    horizon: float,
) -> tuple[ScalingFit | None, ScalingFit | None, Crossing, list[str]]:
    """(baseline fit, variant fit, where they cross, notes): the secondary per-arm fits L(D) = E + B·D^(−β) of the
    seed-mean curves and their crossing with its bootstrap interval ("no fit" when either fit fails)."""
    fb, fv = _fit(D, _mean_curve(base, seeds)), _fit(D, _mean_curve(var, seeds))
    notes: list[str] = []
    if fb is None or fv is None:
        notes.append("L(D) fits need ≥ 3 budgets with losses in both arms")
        return fb, fv, Crossing("no fit", None, None, None, False, horizon * float(D[-1])), notes
    status, d_star = fitted_crossing(fb, fv, float(D[0]), float(D[-1]), horizon)
    samples, share = bootstrap_crossing(D, base, var, seeds, n_boot=n_boot, horizon=horizon)
    lo = hi = None
    if samples.size:
        lo, hi = (float(q) for q in np.quantile(samples, [0.025, 0.975], method="inverted_cdf"))
    extrap = d_star is not None and d_star > EXTRAPOLATION * float(D[-1])
    crossing = Crossing(
        status,
        d_star,
        lo,
        None if hi is None or not math.isfinite(hi) else hi,
        extrap,
        horizon * float(D[-1]),
        share,
        degenerate_fit({names[0]: fb, names[1]: fv}),
    )
    if fb.n_sizes == 3 or fv.n_sizes == 3:
        notes.append("3 budgets: each fit passes through its points (no check of the functional form)")
    return fb, fv, crossing, notes


def describe_crossing(c: Crossing) -> str:
    """The per-arm fits' crossing in words (secondary: it does not decide anything)."""
    if c.status == "no fit":
        return "no L(D) fit"
    if c.status == "no crossing":
        return f"no crossing predicted below {c.horizon:.3g} tokens"
    if c.status == "ahead throughout":
        return "the fitted variant curve is ahead from the smallest budget on"
    lo = f"{c.lo:.3g}" if c.lo is not None and math.isfinite(c.lo) else "?"
    hi = f"{c.hi:.3g}" if c.hi is not None else f"> {c.horizon:.3g} (no crossing)"
    ext = " — an extrapolation beyond 10× the largest budget" if c.extrapolated else ""
    bad = f" — not a prediction: {c.degenerate}" if c.degenerate else ""
    return f"the fits cross at D* ≈ {c.D_star:.3g} tokens [{lo}, {hi}]{ext}{bad}"


def describe_change(a: CrossoverAnalysis) -> str:
    """ "the gap closed by … [lo, hi] from D/4 to D" / "not closing beyond noise" / why it is not measured."""
    ch = a.gap_change
    if ch.value is None or a.gap_change_from is None:
        return "no budget at a true 4× below the judged one: closing not measured"
    d_judged = a.budgets[a.judged]
    span = f"from {a.gap_change_from:.3g} to {d_judged:.3g} tokens ({d_judged / a.gap_change_from:.2f}×)"
    if ch.lo is None:
        return f"the gap changed by {ch.value:+.4f} nats {span} (one seed: no interval)"
    iv = f"{ch.value:+.4f} [{ch.lo:+.4f}, {ch.hi:+.4f}] nats {span}"
    if ch.lo > 0:
        return f"the gap rose by {iv}" + (": closing" if (a.gap[a.gap_change_from_index()].value or 0) < 0 else "")
    return f"not closing beyond noise: the gap changed by {iv}"


def one_line_answer(a: CrossoverAnalysis, n_params: float | None = None) -> str:
    """ "At the declared budget D = … the variant is ahead/behind by … [interval]; closing …; the gap fit …"."""
    j = a.judged
    g = a.gap[j]
    if g.value is None:
        return "no loss measured at the judged budget"
    side = "ahead of" if g.value > 0 else "behind"
    iv = f" [{g.lo:+.4f}, {g.hi:+.4f}]" if g.lo is not None else " (one seed: no interval)"
    tpp = f" ({a.tokens_per_param[j]:.3g} tokens/param)" if a.tokens_per_param else ""
    which = (
        "the declared budget"
        if a.declared_tokens is not None and a.reached
        else ("the largest budget (below the declared one)" if a.declared_tokens is not None else "the largest budget")
    )
    return (
        f"at {which} D = {a.budgets[j]:.3g} tokens{tpp} {a.variant} is {side} {a.baseline} by "
        f"{abs(g.value):.4f} nats{iv}; {describe_change(a)}; {describe_gap_fit(a.gap_fit, n_params)}"
    )
