"""Intervals shared by every verdict (DESIGN.md §2, "Verdict rules").

- :func:`paired_t_interval` — k ≥ 2 seeds: the seed-paired differences d_s (same seed = same batches in both
  arms) give mean(d) ± t_{k−1, 0.975} · sd(d) / √k. With k = 2 this is ≈ 4× wider than "the range over seeds":
  t_{1, 0.975} = 12.71 and sd/√2 = |d_1 − d_2| / 2.
- :func:`cluster_bootstrap_ci` — one seed: resample *windows* (clusters of token positions that share a
  context), never tokens one by one, since tokens of one window are not independent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval and how the interval was made."""

    value: float | None
    lo: float | None
    hi: float | None
    method: str
    n: int

    def excludes_zero(self) -> bool:
        return self.lo is not None and self.hi is not None and (self.lo > 0 or self.hi < 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile t_{df, (1 + level)/2}."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2.0, df))


def paired_t_interval(diffs: Sequence[float], level: float = 0.95) -> Interval:
    """mean(d) ± t_{k−1, (1+level)/2} · sd(d) / √k over k seed-paired differences (sd with k − 1).

    With k < 2 the interval is undefined (lo = hi = None): one seed says nothing about training noise.
    """
    d = np.asarray([x for x in diffs if x is not None and math.isfinite(x)], dtype=np.float64)
    k = int(d.size)
    if k == 0:
        return Interval(None, None, None, "no data", 0)
    mean = float(d.mean())
    if k < 2:
        return Interval(mean, None, None, "one seed: no t-interval", 1)
    half = t_quantile(k - 1, level) * float(d.std(ddof=1)) / math.sqrt(k)
    return Interval(mean, mean - half, mean + half, f"t-interval over {k} seed-paired differences", k)


def welch_t_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """mean(a) − mean(b) ± t_{ν, (1+level)/2} · √(s_a²/n_a + s_b²/n_b), ν the Welch–Satterthwaite degrees of freedom
    (s² with n − 1): two independent samples, e.g. the per-seed gaps of two model widths.

    Needs ≥ 2 values in each sample for an interval (lo = hi = None otherwise)."""
    from scipy.stats import t

    x = np.asarray([v for v in a if v is not None and math.isfinite(v)], dtype=np.float64)
    y = np.asarray([v for v in b if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return Interval(None, None, None, "no data", int(x.size + y.size))
    diff = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return Interval(diff, None, None, "fewer than 2 values in a sample: no Welch interval", int(x.size + y.size))
    va, vb = float(x.var(ddof=1)) / x.size, float(y.var(ddof=1)) / y.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Interval(
            diff, diff, diff, f"Welch t-interval over {x.size} + {y.size} values (no spread)", int(x.size + y.size)
        )
    nu = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    half = float(t.ppf(0.5 + level / 2.0, nu)) * se
    return Interval(
        diff,
        diff - half,
        diff + half,
        f"Welch t-interval over {x.size} + {y.size} values (ν = {nu:.1f})",
        int(x.size + y.size),
    )


def cluster_bootstrap_ci(
    values: Any, clusters: Any, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """Percentile bootstrap of the mean of ``values``, resampling whole clusters (e.g. windows) with replacement.

    Each draw picks C clusters out of the C present, with replacement, and takes the mean over every value of the
    chosen clusters (a cluster drawn twice counts twice) — the mean over tokens, with the windows as the unit.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    c = np.asarray(clusters).reshape(-1)
    if v.size != c.size:
        raise ValueError(f"cluster_bootstrap_ci: {v.size} values but {c.size} cluster labels")
    if v.size == 0:
        return Interval(None, None, None, "no data", 0)
    _, idx = np.unique(c, return_inverse=True)
    sums = np.bincount(idx, weights=v)
    counts = np.bincount(idx).astype(np.float64)
    C = sums.size
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, C, size=(n_boot, C))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return Interval(float(v.mean()), float(lo), float(hi), f"bootstrap over {C} windows ({n_boot} draws)", C)
