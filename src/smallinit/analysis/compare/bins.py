"""Δ_sym and difficulty bins on arrays of per-token scores (DESIGN.md §2; numpy, torch tensors accepted).

- Δ_sym = (p_A − p_B) / (p_A + p_B) ∈ [−1, 1]  (antisymmetric: swapping A and B flips the sign)
- difficulty = (ℓ_A + ℓ_B) / 2 (or a reference model's loss), in quantile bins (default 5: easy … extreme)
"""

from __future__ import annotations

from typing import Any

import numpy as np

FIVE_BIN_NAMES = ("easy", "moderate", "hard", "very hard", "extreme")


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """1-D float64 numpy array from an array-like or a torch tensor."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        a = a.reshape(-1)
    if np.isnan(a).any():
        raise ValueError(f"{name} contains NaN")
    return a


def delta_sym_from_logp(logp_a: Any, logp_b: Any) -> np.ndarray:
    """Δ_sym from log-probabilities: tanh((log p_A − log p_B) / 2).

    This is exactly (p_A − p_B) / (p_A + p_B). Proof: write x = log p_A − log p_B, so
    e^x = p_A / p_B. Since tanh(x/2) = (e^(x/2) − e^(−x/2)) / (e^(x/2) + e^(−x/2)) = (e^x − 1)/(e^x + 1),
    tanh(x/2) = (p_A/p_B − 1) / (p_A/p_B + 1) = (p_A − p_B) / (p_A + p_B), multiplying through by p_B > 0.

    Working from log-probs never forms p, so it stays exact when both probabilities underflow
    (log p = −1000 and −1001 give tanh(1/2), not 0/0). Conventions for −inf: one side −inf gives
    ±1 (the other model has all the mass); both −inf gives 0 (no information).
    """
    la = _to_numpy(logp_a, "logp_a")
    lb = _to_numpy(logp_b, "logp_b")
    if la.shape != lb.shape:
        raise ValueError(f"logp_a and logp_b differ in length: {la.size} vs {lb.size}")
    both_inf = np.isneginf(la) & np.isneginf(lb)
    with np.errstate(invalid="ignore"):
        d = np.tanh((la - lb) / 2.0)
    d[both_inf] = 0.0
    return d


def delta_sym(p_a: Any, p_b: Any) -> np.ndarray:
    """Symmetric relative gap Δ_sym = (p_A − p_B) / (p_A + p_B) ∈ [−1, 1] per token (DESIGN.md §2).

    Computed as tanh((log p_A − log p_B)/2) (see ``delta_sym_from_logp``), which is the same
    quantity and stays defined when p_A, p_B are tiny; when both are exactly 0 the result is 0.
    """
    pa = _to_numpy(p_a, "p_a")
    pb = _to_numpy(p_b, "p_b")
    if (pa < 0).any() or (pb < 0).any():
        raise ValueError("probabilities must be >= 0")
    with np.errstate(divide="ignore"):
        return delta_sym_from_logp(np.log(pa), np.log(pb))


def bin_names(n_bins: int) -> list[str]:
    """Names of difficulty bins, easiest first: the five DESIGN.md names for 5 bins, else q1..qN."""
    if n_bins == 5:
        return list(FIVE_BIN_NAMES)
    return [f"q{k + 1}" for k in range(n_bins)]


def difficulty_bins(loss_a: Any, loss_b: Any, n_bins: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bins of token difficulty d = (ℓ_A + ℓ_B)/2 (DESIGN.md §2).

    Edges are the quantiles of d at 0, 1/n_bins, …, 1 (``np.quantile``, linear interpolation).
    Token i goes to bin k when edges[k] <= d_i < edges[k+1] (the last bin includes its upper edge),
    so bins partition all tokens, are ordered by difficulty (every token of bin k is no harder
    than every token of bin k+1), equal difficulties share a bin, and counts are equal up to ties.

    Returns:
        (bin_index, edges): int64 array of bin indices in [0, n_bins), one per token, and the
        n_bins + 1 edges.
    """
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    la = _to_numpy(loss_a, "loss_a")
    lb = _to_numpy(loss_b, "loss_b")
    if la.shape != lb.shape:
        raise ValueError(f"loss_a and loss_b differ in length: {la.size} vs {lb.size}")
    if la.size == 0:
        raise ValueError("no tokens to bin")
    return quantile_bins((la + lb) / 2.0, n_bins)


def quantile_bins(difficulty: Any, n_bins: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bins of any per-token difficulty d (edges = quantiles of d at 0, 1/n, …, 1; bin k holds
    edges[k] <= d < edges[k+1], the last bin its upper edge too). Returns (bin_index, edges)."""
    d = _to_numpy(difficulty, "difficulty")
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    if d.size == 0:
        raise ValueError("no tokens to bin")
    edges = np.quantile(d, np.linspace(0.0, 1.0, int(n_bins) + 1))
    idx = np.searchsorted(edges[1:-1], d, side="right").astype(np.int64)
    return idx, edges
