"""Percentile-bootstrap intervals of means: over tokens, or over clusters (the windows tokens were scored in)."""

from __future__ import annotations

from typing import Any

import numpy as np

from smallinit.analysis.compare.bins import _to_numpy

CI_LEVEL = 0.95


def _bootstrap_mean_intervals(
    X: np.ndarray, n_boot: int, rng: np.random.Generator, level: float, clusters: np.ndarray | None = None
) -> np.ndarray:
    """Percentile-bootstrap intervals of the column means of X (n, k), paired resampling.

    Every bootstrap replicate draws n rows with replacement (the same rows for every column).
    Replicates are processed in chunks of at most ~2M gathered values, whatever n is.
    With ``clusters`` (one label per row, e.g. the window a token was scored in) a replicate draws C whole
    clusters out of the C present instead, and its mean is Σ chosen cluster sums / Σ chosen cluster sizes:
    tokens of one window share their context and are not independent draws.
    Returns an array (k, 2) of (low, high).
    """
    n, k = X.shape
    alpha = (1.0 - level) / 2.0
    if clusters is not None:
        _, inv = np.unique(np.asarray(clusters).reshape(-1), return_inverse=True)
        sizes = np.bincount(inv).astype(np.float64)
        sums = np.stack([np.bincount(inv, weights=X[:, j]) for j in range(k)], axis=1)  # (C, k)
        C = sizes.size
        means = np.empty((n_boot, k), dtype=np.float64)
        chunk = max(1, 2_000_000 // max(C, 1))
        for start in range(0, n_boot, chunk):
            stop = min(n_boot, start + chunk)
            pick = rng.integers(0, C, size=(stop - start, C))
            means[start:stop] = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)[:, None]
        lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
        return np.stack([lo, hi], axis=1)
    cols = [np.ascontiguousarray(X[:, j]) for j in range(k)]
    idx_dtype = np.int32 if n < 2**31 else np.int64
    means = np.empty((n_boot, k), dtype=np.float64)
    chunk = max(1, 2_000_000 // max(n, 1))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=idx_dtype)
        for j, col in enumerate(cols):
            means[start:stop, j] = np.take(col, idx).sum(axis=1) / n
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return np.stack([lo, hi], axis=1)


def bootstrap_ci(values: Any, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the mean of ``values``.

    ``n_boot`` resamples of size n with replacement (numpy Generator seeded with ``seed``); the
    interval is the (1−level)/2 and (1+level)/2 quantiles of the resampled means.
    """
    v = _to_numpy(values, "values")
    if v.size == 0:
        raise ValueError("bootstrap interval of an empty sample")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    lo, hi = _bootstrap_mean_intervals(v[:, None], n_boot, np.random.default_rng(seed), level)[0]
    return float(lo), float(hi)
