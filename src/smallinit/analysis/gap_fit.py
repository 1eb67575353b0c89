"""The gap fit of a crossover: G(D) = c − a·D^(−b) on the largest budgets, and what it can say about a crossing
(DESIGN.md §2, "Closing and the crossing budget"; used by :func:`smallinit.analysis.crossing.analyse_crossover`).

G(D) = L_baseline(D) − L_variant(D) is fitted to the seed-mean gap on the largest ≥ 4 budgets; the asymptote c gets an
interval joining a per-seed bootstrap and the fit's own profile interval. D* = (a/c)^(1/b) is reported only when that
interval excludes 0 (c < 0: predicted never to cross); otherwise "these budgets cannot tell".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

GAP_FIT_BUDGETS = 4
"""The gap fit G(D) = c − a·D^(−b) uses the largest this-many budgets up to the judged one (3 parameters: ≥ 1 left)."""
GAP_FIT_SEEDS = 3
"""A crossing (or its absence) is predicted only from ≥ this many seeds: a bootstrap over 2 seeds has 3 distinct
draws, too few to carry the training noise (on the `cpu` report's 2-seed data it gave c > 0 by a hair)."""
B_RANGE = (0.02, 5.0)
"""The exponent b of the gap fit is searched in this range."""


@dataclass(frozen=True)
class GapFit:
    """G(D) = c − a·D^(−b) fitted on the largest budgets, and what it can say about a crossing.

    status: "crosses" (c's interval above 0 and the fit behind at small D: D* = (a/c)^(1/b)), "ahead throughout"
    (c's interval above 0 and a ≤ 0), "never crosses" (c's interval below 0), "cannot tell" (c's interval holds 0),
    or "no fit" (fewer than 4 budgets with a gap)."""

    status: str
    budgets: list[float]
    c: float | None = None
    a: float | None = None
    b: float | None = None
    rms: float | None = None
    c_lo: float | None = None
    c_hi: float | None = None
    D_star: float | None = None
    D_lo: float | None = None
    D_hi: float | None = None
    """None with a D*: no finite upper end (some plausible fits never cross)."""
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gap_lsq(D: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(c, a, SSE), one per exponent in ``b``, of the least-squares fits g ≈ c − a·D^(−b) at fixed b (linear in c
    and a: the normal equations of a straight line in x = (D / D_max)^(−b))."""
    x = (D[None, :] / D[-1]) ** (-np.asarray(b, dtype=np.float64)[:, None])
    xm, gm = x.mean(axis=1, keepdims=True), g.mean()
    sxx = ((x - xm) ** 2).sum(axis=1)
    slope = ((x - xm) * (g - gm)).sum(axis=1) / np.where(sxx > 0, sxx, np.inf)
    c = gm - slope * xm[:, 0]
    r = c[:, None] + slope[:, None] * x - g
    return c, -slope * float(D[-1]) ** np.asarray(b, dtype=np.float64), (r * r).sum(axis=1)


def _gap_profile(
    D: np.ndarray, g: np.ndarray, level: float = 0.95
) -> tuple[tuple[float, float, float, float], list[tuple[float, float, float]]]:
    """The least-squares fit (c, a, b, SSE) over b ∈ :data:`B_RANGE` (a log grid, refined around its minimum), and
    every grid fit (c, a, b) whose SSE passes the profile F test SSE ≤ SSE_min·(1 + F_{level}(1, n − 3)/(n − 3)):
    the fits the data cannot tell from the best one (Bates & Watts' profile interval, with the noise estimated from
    the misfit — so a smooth curve of another shape does not look certain)."""
    from scipy.stats import f as f_dist

    grid = np.geomspace(*B_RANGE, 400)
    c, a, sse = _gap_lsq(D, g, grid)
    k = int(np.argmin(sse))
    fine = np.geomspace(grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)], 200)
    fc, fa, fs = _gap_lsq(D, g, fine)
    m = int(np.argmin(fs))
    best = (float(fc[m]), float(fa[m]), float(fine[m]), float(fs[m]))
    n = D.size
    limit = best[3] * (1.0 + _F_CACHE.setdefault((level, n), float(f_dist.ppf(level, 1, n - 3))) / (n - 3))
    ok = np.nonzero(sse <= limit)[0]
    return best, [(float(c[i]), float(a[i]), float(grid[i])) for i in ok] + [best[:3]]


_F_CACHE: dict[tuple[float, int], float] = {}


def _d_star(c: float, a: float, b: float) -> float:
    """Where c − a·D^(−b) = 0: D* = (a/c)^(1/b) (c > 0, a > 0); +∞ when c ≤ 0; 0 when a ≤ 0 (ahead throughout)."""
    if c <= 0:
        return math.inf
    if a <= 0:
        return 0.0
    return float((a / c) ** (1.0 / b))


def fit_gap_curve(
    D: Sequence[float],
    base: dict[int, list],
    var: dict[int, list],
    seeds: Sequence[int],
    upto: int | None = None,
    n_fit: int = GAP_FIT_BUDGETS,
    n_boot: int = 300,
    seed: int = 0,
    level: float = 0.95,
) -> GapFit:
    """G(D) = c − a·D^(−b) on the largest ``n_fit`` budgets up to index ``upto`` (default: the last), fitted to the
    seed-mean gap. The interval of c joins (its hull) the per-seed bootstrap (k seeds drawn with replacement, paired
    across arms, refitted: the 2.5–97.5% percentiles) and the profile interval of the point fit (:func:`_gap_profile`):
    seeds bring the training noise, the profile the uncertainty of extrapolating a 3-parameter curve. D* and its
    interval likewise, only when c's interval excludes 0. Seeds lost at some budget are left out of the fit (the
    verdict names them)."""
    Dv = np.asarray(D, dtype=np.float64)
    j = Dv.size - 1 if upto is None else upto
    # the seeds with a gap at every budget up to j (a seed not run, or lost, is left out rather than every budget)
    seeds = [s for s in seeds if all(None not in (base[s][i], var[s][i]) for i in range(j + 1))] or list(seeds)
    usable = [i for i in range(j + 1) if all(None not in (base[s][i], var[s][i]) for s in seeds)]
    idx = usable[-n_fit:]
    if len(idx) < n_fit or n_fit < 4:
        return GapFit("no fit", [float(Dv[i]) for i in idx], method=f"needs {max(4, n_fit)} budgets with a gap")
    Df = Dv[idx]

    def mean_gap(pick: Sequence[int]) -> np.ndarray:
        return np.array([np.mean([base[s][i] - var[s][i] for s in pick]) for i in idx], dtype=np.float64)

    (c, a, b, sse), plausible = _gap_profile(Df, mean_gap(seeds), level)
    cs = [x[0] for x in plausible]
    ds = [_d_star(*x) for x in plausible]
    c_lo, c_hi = min(cs), max(cs)
    d_lo, d_hi = min(ds), max(ds)
    rng = np.random.default_rng(seed)
    k = len(seeds)
    if k >= 2:
        bc, bd = [], []
        for _ in range(n_boot):
            pick = [seeds[i] for i in rng.integers(0, k, size=k)]
            (bc_, ba_, bb_, _), _ = _gap_profile(Df, mean_gap(pick), level)
            bc.append(bc_)
            bd.append(_d_star(bc_, ba_, bb_))
        q = lambda v, p: float(np.quantile(np.asarray(v), p, method="inverted_cdf"))  # noqa: E731
        c_lo, c_hi = min(c_lo, q(bc, 0.025)), max(c_hi, q(bc, 0.975))
        d_lo, d_hi = min(d_lo, q(bd, 0.025)), max(d_hi, q(bd, 0.975))
    method = (
        f"G = c − a·D^(−b) on the largest {len(idx)} budgets; c's interval: per-seed bootstrap ({k} seeds) ∪ "
        f"profile F-test over b"
        if k >= 2
        else f"G = c − a·D^(−b) on {len(idx)} budgets; profile F-test only (one seed)"
    )
    common = dict(
        budgets=[float(x) for x in Df],
        c=c,
        a=a,
        b=b,
        rms=math.sqrt(sse / len(idx)),
        c_lo=c_lo,
        c_hi=c_hi,
        method=method,
    )
    if k < GAP_FIT_SEEDS:
        common["method"] += f"; fewer than {GAP_FIT_SEEDS} seeds: no prediction either way"
        return GapFit("cannot tell", **common)
    if c_hi < 0:
        return GapFit("never crosses", **common)
    if c_lo <= 0:
        return GapFit("cannot tell", **common)
    if a <= 0:
        return GapFit("ahead throughout", **common)
    return GapFit("crosses", **common, D_star=_d_star(c, a, b), D_lo=d_lo, D_hi=d_hi if math.isfinite(d_hi) else None)


def describe_gap_fit(f: GapFit, n_params: float | None = None) -> str:
    """The gap fit in words: a predicted crossing with its interval, a predicted absence, or that it cannot tell."""
    per = lambda d: f" ({d / n_params:.3g} tokens/param)" if n_params else ""  # noqa: E731
    civ = f"asymptote c = {f.c:+.4f} [{f.c_lo:+.4f}, {f.c_hi:+.4f}]" if f.c is not None else ""
    if f.status == "no fit":
        return f"no gap fit ({f.method})"
    if f.status == "cannot tell":
        why = "fewer than 3 seeds" if "fewer than" in f.method else "which holds 0"
        return f"these budgets cannot tell whether the curves cross (gap fit: {civ}, {why})"
    if f.status == "never crosses":
        return f"the gap fit predicts the curves never cross ({civ} < 0)"
    if f.status == "ahead throughout":
        return f"the gap fit has the variant ahead throughout ({civ} > 0)"
    hi = f"{f.D_hi:.3g}{per(f.D_hi)}" if f.D_hi is not None else "∞"
    return (
        f"the gap fit predicts a crossing at D* ≈ {f.D_star:.3g} tokens{per(f.D_star)} [{f.D_lo:.3g}, {hi}] ({civ} > 0)"
    )
