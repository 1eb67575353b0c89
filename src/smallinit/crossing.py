"""Loss against training budget, and the budget where two settings cross (DESIGN.md §2, "Budgets and the crossing").

For a baseline arm and a variant arm, each trained with the same seeds (same seed = same batches), L_arm,s(D) is
the annealed validation loss at budget D (tokens) of seed s. Then:

- **gap**  G(D) = L_baseline(D) − L_variant(D)  (> 0: the variant is ahead), seed-paired: the k differences
  d_s = L_baseline,s(D) − L_variant,s(D) give a t-interval (:func:`smallinit.stats.paired_t_interval`);
- **fits** L(D) = E + B·D^(−β) per arm on the seed means, by the bounded least squares of
  :func:`smallinit.scaling.fit_scaling_law` (same functional form as L(N));
- **crossing budget** D* = the smallest D from which the fitted gap stays > 0 up to the search horizon
  (``horizon`` × the largest budget): solved on a log grid and refined by Brent's method;
- its **interval** by bootstrap over seeds (paired: one index draw for both arms) and budgets (drawn with
  replacement, ≥ 3 distinct): the 2.5–97.5% percentiles of D*, with "no crossing" counted as +∞;
- **extrapolated** when D* lies beyond 10× the largest measured budget.

:func:`loss_claim_verdict` turns this into the verdict of a loss claim (DESIGN.md §2, "Verdict rules").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from smallinit.scaling import ScalingError, ScalingFit, fit_scaling_law, predict
from smallinit.stats import Interval, paired_t_interval

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_REACHED = "inconclusive — not reached at this budget"

HORIZON = 1000.0
"""The crossing is searched up to HORIZON × the largest measured budget."""
EXTRAPOLATION = 10.0
"""A crossing beyond EXTRAPOLATION × the largest measured budget is flagged as an extrapolation."""


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
    """G(D_max) − G(D_ref) (D_ref = D_max / 4 when measured, else the smallest budget), seed-paired: > 0 = closing."""
    fits: dict[str, dict[str, Any] | None]
    crossing: Crossing
    verdict: str
    reason: str
    tokens_per_param: list[float] | None = None
    answer: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["losses"] = {a: {str(s): v for s, v in per.items()} for a, per in self.losses.items()}
        return d


def _mean_curve(per_seed: dict[int, list[float | None]], seeds: Sequence[int]) -> np.ndarray:
    rows = np.array([[np.nan if v is None else v for v in per_seed[s]] for s in seeds], dtype=np.float64)
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
    from smallinit.scaling import ALPHA_MAX, ALPHA_MIN

    bad = []
    for arm, f in fits.items():
        if f.E <= 1e-9:
            bad.append(f"{arm}'s fit has E = 0 (at its bound: no loss floor)")
        elif f.alpha <= ALPHA_MIN * 10 or f.alpha >= ALPHA_MAX * 0.999:
            bad.append(f"{arm}'s fit has β = {f.alpha:.3g} (at its bound)")
    return "; ".join(bad) or None


def fitted_crossing(fit_baseline: ScalingFit, fit_variant: ScalingFit, d_min: float, d_max: float,
                    horizon: float = HORIZON) -> tuple[str, float | None]:
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


def bootstrap_crossing(D: np.ndarray, base: dict[int, list], var: dict[int, list], seeds: Sequence[int],
                       n_boot: int = 300, seed: int = 0, horizon: float = HORIZON) -> tuple[np.ndarray, float]:
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


def analyse_crossover(budgets: Sequence[float], losses: dict[str, dict[int, Sequence[float | None]]], baseline: str,
                      variant: str, non_embedding_params: float | None = None, n_boot: int = 300,
                      noise_floor: float | None = None, horizon: float = HORIZON) -> CrossoverAnalysis:
    """The gap, fits, crossing and verdict for ``variant`` against ``baseline`` (module docstring).

    ``losses[arm][seed]`` is the list of annealed validation losses at ``budgets`` (None where missing). Only
    seeds present in both arms are used (pairs). ``noise_floor`` (nats) is the seed-noise floor that a one-seed
    gap must exceed (:func:`loss_claim_verdict`).
    """
    D = np.asarray(budgets, dtype=np.float64)
    if D.ndim != 1 or D.size < 1 or (D <= 0).any() or (np.diff(D) <= 0).any():
        raise ValueError(f"budgets must be increasing positive token counts, got {list(budgets)}")
    for arm in (baseline, variant):
        if arm not in losses:
            raise ValueError(f"no losses for arm {arm!r} (have: {', '.join(losses)})")
    seeds = sorted(set(losses[baseline]) & set(losses[variant]))
    if not seeds:
        raise ValueError(f"arms {baseline!r} and {variant!r} share no seed: nothing to pair")
    base = {s: list(losses[baseline][s]) for s in seeds}
    var = {s: list(losses[variant][s]) for s in seeds}

    def diffs(j: int) -> list[float]:
        return [base[s][j] - var[s][j] for s in seeds if base[s][j] is not None and var[s][j] is not None]

    gap = [paired_t_interval(diffs(j)) for j in range(D.size)]
    j_ref = int(np.searchsorted(D, D[-1] / 4.0 - 1e-9)) if D.size > 1 else 0
    change = [(base[s][-1] - var[s][-1]) - (base[s][j_ref] - var[s][j_ref]) for s in seeds
              if None not in (base[s][-1], var[s][-1], base[s][j_ref], var[s][j_ref])]
    gap_change = paired_t_interval(change)

    fb, fv = _fit(D, _mean_curve(base, seeds)), _fit(D, _mean_curve(var, seeds))
    notes: list[str] = []
    if fb is None or fv is None:
        crossing = Crossing("no fit", None, None, None, False, horizon * float(D[-1]))
        notes.append("L(D) fits need ≥ 3 budgets with losses in both arms")
    else:
        status, d_star = fitted_crossing(fb, fv, float(D[0]), float(D[-1]), horizon)
        samples, share = bootstrap_crossing(D, base, var, seeds, n_boot=n_boot, horizon=horizon)
        lo = hi = None
        if samples.size:
            lo, hi = (float(q) for q in np.quantile(samples, [0.025, 0.975], method="inverted_cdf"))
        extrap = d_star is not None and d_star > EXTRAPOLATION * float(D[-1])
        crossing = Crossing(status, d_star, lo, None if hi is None or not math.isfinite(hi) else hi, extrap,
                            horizon * float(D[-1]), share, degenerate_fit({baseline: fb, variant: fv}))
        if fb.n_sizes == 3 or fv.n_sizes == 3:
            notes.append("3 budgets: each fit passes through its points (no check of the functional form)")
    fits = {baseline: fb.to_dict() if fb else None, variant: fv.to_dict() if fv else None}
    verdict, reason = loss_claim_verdict(gap[-1], gap_change, crossing, len(seeds), noise_floor)
    tpp = [float(d) / non_embedding_params for d in D] if non_embedding_params else None
    a = CrossoverAnalysis(baseline, variant, [float(d) for d in D], seeds, {baseline: base, variant: var}, gap,
                          gap_change, fits, crossing, verdict, reason, tpp, notes=notes)
    a.answer = one_line_answer(a)
    return a


def loss_claim_verdict(gap_max: Interval, gap_change: Interval, crossing: Crossing, n_seeds: int,
                       noise_floor: float | None = None) -> tuple[str, str]:
    """The verdict of a loss claim ("the variant reaches lower loss") read from the crossover (DESIGN.md §2).

    With ≥ 2 seeds the gap at the largest budget G(D_max) has a seed-paired t-interval; with one seed "beyond
    noise" means |G(D_max)| > ``noise_floor`` (a preset's measured seed-to-seed spread; none → never beyond noise).

    - **supported**: G(D_max) > 0 beyond noise;
    - **not supported**: G(D_max) < 0 beyond noise, the gap is not closing (its seed-paired change over the last
      4× of budget has mean ≤ 0) and the fits predict no crossing within 10× D_max;
    - **inconclusive — not reached at this budget**: G(D_max) < 0 or within noise while the gap is closing or a
      crossing is predicted (the reason names it);
    - **inconclusive** otherwise.
    """
    g = gap_max.value
    if g is None:
        return INCONCLUSIVE, "no gap measured at the largest budget"
    if n_seeds >= 2:
        ahead, behind = gap_max.lo is not None and gap_max.lo > 0, gap_max.hi is not None and gap_max.hi < 0
        noise = f"95% t-interval [{gap_max.lo:+.4f}, {gap_max.hi:+.4f}] over {n_seeds} seeds"
    else:
        floor = noise_floor
        ahead = floor is not None and g > floor
        behind = floor is not None and g < -floor
        noise = f"one seed; noise floor {floor:.4f}" if floor is not None else "one seed and no noise floor"
    where = f"G(D_max) = {g:+.4f} nats ({noise})"
    if ahead:
        return SUPPORTED, f"the variant is ahead at the largest budget: {where}"
    closing = gap_change.value is not None and gap_change.value > 0
    near = crossing.status == "crosses" and not crossing.extrapolated and not crossing.degenerate
    pred = describe_crossing(crossing)
    if behind and not closing and not near:
        return NOT_SUPPORTED, f"the variant is behind and the gap is not closing: {where}; {pred}"
    if closing or near:
        trend = (f"the gap closed by {gap_change.value:+.4f} nats over the last 4× of budget"
                 if closing else "the gap is not closing")
        return NOT_REACHED, f"{where}; {trend}; {pred}"
    return INCONCLUSIVE, f"{where}; the gap is within noise and not closing; {pred}"


def describe_crossing(c: Crossing) -> str:
    """The crossing in words: where, with its interval, or that none is predicted."""
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


def one_line_answer(a: CrossoverAnalysis) -> str:
    """"At D = … tokens the variant is ahead/behind by … [interval]; the curves cross at ≈ … (…) or do not …"."""
    g = a.gap[-1]
    if g.value is None:
        return "no loss measured at the largest budget"
    side = "ahead of" if g.value > 0 else "behind"
    iv = f" [{g.lo:+.4f}, {g.hi:+.4f}]" if g.lo is not None else " (one seed: no interval)"
    tpp = f" ({a.tokens_per_param[-1]:.3g} tokens/param)" if a.tokens_per_param else ""
    c = a.crossing
    text = f"at D = {a.budgets[-1]:.3g} tokens{tpp} {a.variant} is {side} {a.baseline} by {abs(g.value):.4f} nats{iv}; "
    if c.status == "crosses" and a.tokens_per_param:
        per = c.D_star * a.tokens_per_param[-1] / a.budgets[-1]
        text += describe_crossing(c).replace(" tokens [", f" tokens (≈ {per:.3g} tokens/param) [")
    else:
        text += describe_crossing(c)
    return text
