"""The comparison table on arrays of per-token log-probs: count, mean Δ_sym and mean ℓ_B − ℓ_A with bootstrap
95% intervals, overall, per difficulty bin and per source (``compare_token_scores``, DESIGN.md §2)."""

from __future__ import annotations

from typing import Any

import numpy as np

from smallinit.analysis.compare.bins import _to_numpy, bin_names, delta_sym_from_logp, difficulty_bins, quantile_bins
from smallinit.analysis.compare.bootstrap import CI_LEVEL, _bootstrap_mean_intervals


def _summary(
    dsym: np.ndarray,
    gain: np.ndarray,
    la: np.ndarray,
    lb: np.ndarray,
    n_boot: int,
    seed: int,
    clusters: np.ndarray | None = None,
) -> dict:
    """count, means and paired-bootstrap intervals of Δ_sym and ℓ_B − ℓ_A for one group of tokens."""
    n = int(dsym.size)
    if n == 0:
        return {
            "count": 0,
            "delta_sym": {"mean": None, "ci95": None},
            "loss_gain": {"mean": None, "ci95": None},
            "loss_a": None,
            "loss_b": None,
        }
    ci = _bootstrap_mean_intervals(
        np.stack([dsym, gain], axis=1), n_boot, np.random.default_rng(seed), CI_LEVEL, clusters
    )
    return {
        "count": n,
        "delta_sym": {"mean": float(dsym.mean()), "ci95": [float(ci[0, 0]), float(ci[0, 1])]},
        "loss_gain": {"mean": float(gain.mean()), "ci95": [float(ci[1, 0]), float(ci[1, 1])]},
        "loss_a": float(la.mean()),
        "loss_b": float(lb.mean()),
    }


def _per_bin(
    bins: np.ndarray,
    edges: np.ndarray,
    dsym: np.ndarray,
    gain: np.ndarray,
    la: np.ndarray,
    lb: np.ndarray,
    n_boot: int,
    seed: int,
    clusters: np.ndarray | None = None,
) -> list[dict]:
    names = bin_names(len(edges) - 1)
    out = []
    for k, name in enumerate(names):
        m = bins == k
        row = {"bin": k, "name": name, "difficulty": [float(edges[k]), float(edges[k + 1])]}
        row.update(
            _summary(dsym[m], gain[m], la[m], lb[m], n_boot, seed + 1 + k, None if clusters is None else clusters[m])
        )
        out.append(row)
    return out


def _primary_bins(
    loss_a: np.ndarray, loss_b: np.ndarray, reference_logp: Any, n_bins: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """(bin_index, edges, how) of the primary difficulty bins: quantiles of the reference model's loss when
    ``reference_logp`` is given, else of (ℓ_A + ℓ_B)/2."""
    if reference_logp is not None:
        ref = -_to_numpy(reference_logp, "reference_logp")
        if ref.shape != loss_a.shape:
            raise ValueError(f"reference_logp has {ref.size} entries for {loss_a.size} tokens")
        bins, edges = quantile_bins(ref, n_bins)
        how = "reference model's loss, quantile bins"
    else:
        bins, edges = difficulty_bins(loss_a, loss_b, n_bins)
        how = "(loss_a + loss_b) / 2, quantile bins"
    return bins, edges, how


def _by_source(
    sources: Any,
    bins: np.ndarray,
    edges: np.ndarray,
    dsym: np.ndarray,
    gain: np.ndarray,
    loss_a: np.ndarray,
    loss_b: np.ndarray,
    n_boot: int,
    seed: int,
    win: np.ndarray | None,
) -> dict[str, Any]:
    """The ``by_source`` section: overall and per-bin statistics of each source, with the global bin edges (so a
    bin means the same difficulty range in every source) and a bootstrap stream of its own (seed + 1000 (j + 1))."""
    src = np.asarray(sources).reshape(-1)
    if src.size != dsym.size:
        raise ValueError(f"sources has {src.size} entries for {dsym.size} tokens")
    src = src.astype(str)
    by_source: dict[str, Any] = {}
    for j, name in enumerate(np.unique(src).tolist()):
        m = src == name
        s_seed = seed + 1000 * (j + 1)
        by_source[name] = {
            "overall": _summary(
                dsym[m], gain[m], loss_a[m], loss_b[m], n_boot, s_seed, None if win is None else win[m]
            ),
            "bins": _per_bin(
                bins[m], edges, dsym[m], gain[m], loss_a[m], loss_b[m], n_boot, s_seed, None if win is None else win[m]
            ),
        }
    return by_source


def compare_token_scores(
    logp_a: Any,
    logp_b: Any,
    n_bins: int = 5,
    sources: Any = None,
    seed: int = 0,
    n_boot: int = 1000,
    reference_logp: Any = None,
    windows: Any = None,
) -> dict:
    """Token-level comparison of variant A and baseline B from per-token log-probs (DESIGN.md §2).

    ``reference_logp`` (log p under a third model that is neither A nor B, e.g. a second baseline seed): the
    primary bins are then quantiles of the reference's loss ℓ_ref, which is independent of A's and B's own noise
    — binning by (ℓ_A + ℓ_B)/2 correlates the bin with ℓ_B − ℓ_A whenever one model's per-token losses are noisier
    — and the (ℓ_A + ℓ_B)/2 bins stay as a secondary table ``bins_mean_difficulty``. ``windows`` (the window each
    token was scored in): every interval is a bootstrap over windows, not over tokens.

    Args:
        logp_a, logp_b: log p of the true next token at the same positions, under A and B.
        n_bins: number of difficulty quantile bins (difficulty = (ℓ_A + ℓ_B)/2, ℓ = −log p).
        sources: optional array of source names (e.g. language), one per token; adds a
            ``by_source`` section computed with the global bin edges, so that a bin means the same
            difficulty range in every source.
        seed: seed of the bootstrap (each group gets its own derived, fixed stream).
        n_boot: bootstrap resamples.

    Returns a JSON-serialisable dict::

        {"n_tokens", "n_bins", "ci_level", "n_boot", "seed", "edges",
         "overall": {"count", "delta_sym": {"mean", "ci95"}, "loss_gain": {"mean", "ci95"},
                     "loss_a", "loss_b"},
         "bins": [{"bin", "name", "difficulty": [lo, hi], <same fields as overall>}, ...],
         "by_source": {name: {"overall": ..., "bins": [...]}}            # only with sources}

    where loss_gain = ℓ_B − ℓ_A (> 0: A has lower loss) and Δ_sym > 0 means A gives the true token
    more probability. Empty groups have count 0 and None for every statistic.
    """
    la_lp = _to_numpy(logp_a, "logp_a")
    lb_lp = _to_numpy(logp_b, "logp_b")
    if la_lp.shape != lb_lp.shape:
        raise ValueError(f"logp_a and logp_b differ in length: {la_lp.size} vs {lb_lp.size}")
    if (la_lp > 0).any() or (lb_lp > 0).any():
        raise ValueError("log-probabilities must be <= 0")
    loss_a, loss_b = -la_lp, -lb_lp
    if not (np.isfinite(loss_a).all() and np.isfinite(loss_b).all()):
        raise ValueError("log-probabilities must be finite (a model gave the true token probability 0)")
    dsym = delta_sym_from_logp(la_lp, lb_lp)
    gain = loss_b - loss_a
    win = None
    if windows is not None:
        win = np.asarray(windows).reshape(-1)
        if win.size != dsym.size:
            raise ValueError(f"windows has {win.size} entries for {dsym.size} tokens")
    bins, edges, how = _primary_bins(loss_a, loss_b, reference_logp, n_bins)

    result: dict[str, Any] = {
        "n_tokens": int(dsym.size),
        "n_bins": int(n_bins),
        "ci_level": CI_LEVEL,
        "n_boot": int(n_boot),
        "seed": int(seed),
        "difficulty": how,
        "bootstrap_unit": "window" if win is not None else "token",
        "edges": [float(e) for e in edges],
        "overall": _summary(dsym, gain, loss_a, loss_b, n_boot, seed, win),
        "bins": _per_bin(bins, edges, dsym, gain, loss_a, loss_b, n_boot, seed, win),
    }
    if reference_logp is not None:
        b2, e2 = difficulty_bins(loss_a, loss_b, n_bins)
        result["bins_mean_difficulty"] = _per_bin(b2, e2, dsym, gain, loss_a, loss_b, n_boot, seed, win)
        result["bins_mean_difficulty_caveat"] = (
            "binned by (ℓ_A + ℓ_B)/2: this correlates the bin with ℓ_B − ℓ_A whenever one model's per-token losses "
            "are noisier, so a trend across these bins can appear between models of equal mean loss"
        )
    if sources is not None:
        result["by_source"] = _by_source(sources, bins, edges, dsym, gain, loss_a, loss_b, n_boot, seed, win)
    return result
