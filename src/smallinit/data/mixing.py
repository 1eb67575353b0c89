"""Which pieces of each source go to val and to train, and how often (weighted mixing).

The rule (ours, deterministic from ``seed``):

1. Natural size n_s = tokens of source s (its pieces, ``<|endoftext|>`` included); N = sum_s n_s.
2. Target size t_s = n_s without weights; with weights w, t_s = N * w_s / sum(w)
   (the written total stays N, each source gets its share of it).
3. Val: a random set of whole pieces of s holding about v_s = f * min(t_s, n_s) tokens (f = val fraction;
   at least one piece when f > 0). Val pieces are unique text and never appear in train.
4. Train: the remaining pieces (the pool, p_s tokens) written floor(r) times with r = (t_s - v_s) / p_s,
   then a random subset of the pool holding about (r - floor(r)) * p_s tokens. So a source is
   *repeated* when its weight asks for more than it has, and *subsampled* when it asks for less.

Piece subsets are chosen with ``np.random.default_rng([seed, source_index])`` and written in their
natural order. Token shares then follow the weights up to the granularity of one piece (<= a few
thousand tokens); prepare reports the achieved shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smallinit.core.errors import DataError


@dataclass
class SourcePlan:
    """Piece indices of one source: ``val``; train = ``pool`` x ``full_passes`` then ``partial``."""

    target: float  # t_s, tokens wanted in train + val
    val: np.ndarray
    pool: np.ndarray
    full_passes: int
    partial: np.ndarray

    def train_tokens(self, piece_tokens: np.ndarray) -> int:
        return int(piece_tokens[self.pool].sum()) * self.full_passes + int(piece_tokens[self.partial].sum())


def _closest_prefix(sizes: np.ndarray, target: float) -> int:
    """Number k of leading ``sizes`` whose sum is closest to ``target`` (ties: the larger k)."""
    if target <= 0 or len(sizes) == 0:
        return 0
    csum = np.cumsum(sizes)
    k = int(np.searchsorted(csum, target, side="left"))  # csum[k-1] < target <= csum[k]
    if k >= len(sizes):
        return len(sizes)
    below = csum[k - 1] if k > 0 else 0
    return k if target - below < csum[k] - target else k + 1


def plan_mix(
    piece_tokens: list[np.ndarray], names: list[str], weights: list[float] | None, val_fraction: float, seed: int
) -> list[SourcePlan]:
    """Plan train/val piece selection for every source (see the module docstring for the rule)."""
    natural = np.array([int(t.sum()) for t in piece_tokens], dtype=np.float64)
    total = natural.sum()
    if weights is None:
        targets = natural
    else:
        w = np.asarray(weights, dtype=np.float64)
        targets = total * w / w.sum()
    plans = []
    for s, (tok, name) in enumerate(zip(piece_tokens, names)):
        rng = np.random.default_rng([seed, s])
        n_p = len(tok)
        val = np.zeros(0, dtype=np.int64)
        if val_fraction > 0:
            v_target = val_fraction * min(targets[s], natural[s])
            perm = rng.permutation(n_p)
            k = max(1, _closest_prefix(tok[perm], v_target))
            if k >= n_p:
                raise DataError(
                    f"source {name!r} is too small for a val split: {int(natural[s])} tokens in {n_p} piece(s), "
                    f"val needs {k} piece(s) and train at least one more; give more text or --val-fraction 0"
                )
            val = np.sort(perm[:k])
        pool = np.setdiff1d(np.arange(n_p, dtype=np.int64), val, assume_unique=True)
        pool_tokens = float(tok[pool].sum())
        ratio = max(targets[s] - float(tok[val].sum()), 0.0) / pool_tokens
        full = int(np.floor(ratio + 1e-9))
        rest = (ratio - full) * pool_tokens
        order = rng.permutation(len(pool))
        k = _closest_prefix(tok[pool[order]], rest)
        partial = np.sort(pool[order[:k]])
        plans.append(SourcePlan(float(targets[s]), val, pool, full, partial))
    return plans
