"""Probe metrics: pure functions on tensors (DESIGN.md §2).

Every function here takes tensors and returns plain Python numbers (or a tensor where a matrix
is the answer). None of them touches a model, registers a hook or changes its inputs; the
training-time probe and the ``smallinit probe`` verb call them on weights and on activations
captured from outside the model.

Definitions (this project's, see DESIGN.md §2):

- stable rank            srank(W) = ||W||_F^2 / ||W||_2^2
- row cosine             C_ij = <w_i, w_j> / (|w_i| |w_j|)           (rows = output neurons)
- condensation index     mean |C_ij| over i != j
- attention sink         mean over batch, heads, queries t >= 1 of attn[..., t, 0]
- massive activation     max |h|
- RMSNorm saturation     s = ms / (ms + eps), ms = mean(h^2) over the last dim, averaged over tokens
- residual flow          ||F(norm(h))|| / ||h|| over the last dim, averaged over tokens
- optimizer-ε damping    per matrix, with sqrt(v̂) = sqrt(exp_avg_sq / (1 - β2^t)) from the AdamW state:
                         mean [sqrt(v̂) < ε] and mean ε / (sqrt(v̂) + ε)
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "stable_rank",
    "row_cosine",
    "condensation_index",
    "order_rows_for_heatmap",
    "attention_sink",
    "uniform_sink_baseline",
    "max_activation",
    "rmsnorm_saturation",
    "residual_flow",
    "optimizer_eps_damping",
]

_DEFAULT_POWER_ITERS = 100
_POWER_TOL = 1e-7


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """``x`` detached, in float32 (kept in float64 when it already is float64)."""
    x = x.detach()
    return x if x.dtype == torch.float64 else x.float()


def _as_matrix(W: torch.Tensor, name: str = "W") -> torch.Tensor:
    if W.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(W.shape)}")
    if W.shape[0] == 0 or W.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(W.shape)})")
    return _as_float(W)


def _top_singular_value_sq(W: torch.Tensor, iters: int, tol: float = _POWER_TOL) -> float:
    """||W||_2^2 by power iteration on the smaller Gram matrix (W^T W or W W^T).

    The start vector is drawn from a generator seeded with 0, so the result is deterministic.
    The Rayleigh quotient ||W v||^2 (|v| = 1) is a lower bound of ||W||_2^2 that increases with
    every iteration; its error shrinks like (s_2/s_1)^(4k) after k iterations.
    """
    M = W if W.shape[0] >= W.shape[1] else W.T  # iterate in the smaller dimension
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(M.shape[1], generator=gen, dtype=M.dtype).to(M.device)
    v = v / v.norm()
    lam = 0.0
    for _ in range(max(1, iters)):
        u = M @ v
        lam_new = float(u.square().sum())  # Rayleigh quotient v^T (M^T M) v
        w = M.T @ u
        n = w.norm()
        if n == 0:  # v in the null space (only possible for W = 0 or exact bad luck)
            return lam_new
        v = w / n
        if lam_new > 0 and abs(lam_new - lam) <= tol * lam_new:
            return lam_new
        lam = lam_new
    return float((M @ v).square().sum())


def stable_rank(W: torch.Tensor, exact: bool = True, iters: int = _DEFAULT_POWER_ITERS) -> float:
    """Stable rank srank(W) = ||W||_F^2 / ||W||_2^2 (DESIGN.md §2).

    Equals 1 for a rank-one matrix and at most rank(W) (n for an n x n orthogonal matrix).

    Args:
        W: a 2-D weight matrix (any float dtype; computed in float32, or float64 if W is float64).
        exact: True -> ||W||_2 from ``torch.linalg.svdvals``. False -> ||W||_2 by power iteration
            on the Gram matrix, ``iters`` iterations at most (stopping early once the estimate
            changes by less than 1e-7 relatively), from a fixed (seeded) start vector. With a
            spectral gap (trained or condensed weights) it agrees with the exact value to well
            under 1%; it can only over-estimate srank, since power iteration under-estimates
            ||W||_2.
        iters: maximum power iterations (exact=False only).

    Returns:
        srank as a float; 0.0 for the zero matrix (no rank).
    """
    W = _as_matrix(W)
    fro_sq = float(W.square().sum())
    if fro_sq == 0.0:
        return 0.0
    if exact:
        top_sq = float(torch.linalg.svdvals(W)[0]) ** 2
    else:
        top_sq = _top_singular_value_sq(W, iters)
    return fro_sq / top_sq


def row_cosine(W: torch.Tensor) -> torch.Tensor:
    """Row cosine-similarity matrix C_ij = <w_i, w_j> / (|w_i| |w_j|) (DESIGN.md §2).

    Rows of W are output neurons (``nn.Linear.weight`` is (out, in)), so C is (out, out).
    A zero row has cosine 0 with every row, itself included. Computed in float32 (float64 if
    W is float64); the result lives on W's device. C has out^2 entries: for a (V, d) embedding
    or head, pass a subset of rows (e.g. ``W[:1024]``) rather than the whole matrix.
    """
    W = _as_matrix(W)
    norms = W.norm(dim=1, keepdim=True)
    Wn = torch.where(norms > 0, W / norms.clamp_min(torch.finfo(W.dtype).tiny), torch.zeros_like(W))
    return (Wn @ Wn.T).clamp_(-1.0, 1.0)


def condensation_index(W: torch.Tensor, max_rows: int | None = 1024, seed: int = 0) -> float:
    """Condensation index: mean |C_ij| over i != j of the row cosine matrix (DESIGN.md §2).

    About sqrt(2 / (pi d_in)) for independent random rows, 1 when all rows are (anti-)aligned.

    Args:
        W: (out, in) matrix with out >= 2.
        max_rows: when out > max_rows, the index is computed on ``max_rows`` rows drawn without
            replacement by a generator seeded with ``seed`` (the same rows every call for the
            same shape), which keeps the cost O(max_rows^2 * in) for embeddings and heads.
            None = always use every row.
        seed: seed of that row subsample.
    """
    W = _as_matrix(W)
    n = W.shape[0]
    if n < 2:
        raise ValueError(f"condensation index needs at least 2 rows, got {n}")
    if max_rows is not None and n > max_rows:
        if max_rows < 2:
            raise ValueError(f"max_rows must be >= 2, got {max_rows}")
        gen = torch.Generator().manual_seed(seed)
        idx = torch.randperm(n, generator=gen)[:max_rows].to(W.device)
        W = W.index_select(0, idx)
        n = max_rows
    A = row_cosine(W).abs_()
    off_diag_sum = float(A.sum(dtype=torch.float64)) - float(A.diagonal().sum(dtype=torch.float64))
    return off_diag_sum / (n * (n - 1))


def order_rows_for_heatmap(M: torch.Tensor, method: str = "svd") -> torch.Tensor:
    """A row permutation that makes blocks of aligned rows visible in a row-cosine heatmap.

    Works on either the weight W (out, in) or its cosine matrix C (out, out): in both cases the
    rows of M are treated as vectors and the same permutation is meant for C's rows and columns
    (``C[order][:, order]``).

    Methods:
        "svd" (default): rows are normalised to unit length and sorted by their projection on
            the leading right singular vector v_1 of the normalised matrix, score_i = <w_i/|w_i|, v_1>.
            Rows aligned with the dominant direction gather at one end, anti-aligned rows at the
            other, unrelated rows in the middle. Deterministic up to the sign of v_1, which is
            fixed so that the scores sum to a non-negative number.
        "hierarchical": leaf order of an average-linkage clustering on cosine distance
            (scipy), with optimal leaf ordering; separates several orthogonal blocks, costs
            O(out^2) memory.

    Returns:
        LongTensor of shape (out,) on the CPU, a permutation of range(out).
    """
    M = _as_matrix(M, "M").cpu()
    norms = M.norm(dim=1, keepdim=True)
    Mn = torch.where(norms > 0, M / norms.clamp_min(torch.finfo(M.dtype).tiny), torch.zeros_like(M))
    if method == "svd":
        if M.shape[0] == 1:
            return torch.zeros(1, dtype=torch.long)
        _, _, Vh = torch.linalg.svd(Mn, full_matrices=False)
        score = Mn @ Vh[0]
        if float(score.sum()) < 0:
            score = -score
        return torch.argsort(score, stable=True)
    if method == "hierarchical":
        if M.shape[0] < 3:
            return torch.arange(M.shape[0])
        from scipy.cluster.hierarchy import leaves_list, linkage, optimal_leaf_ordering
        from scipy.spatial.distance import pdist

        X = Mn.double().numpy()
        # zero rows have undefined cosine distance; give them distance 1 (orthogonal) to all
        dist = np.nan_to_num(pdist(X, metric="cosine"), nan=1.0).clip(0.0, 2.0)
        Z = optimal_leaf_ordering(linkage(dist, method="average"), dist)
        return torch.from_numpy(leaves_list(Z).astype(np.int64))
    raise ValueError(f"unknown heatmap ordering method {method!r} (use 'svd' or 'hierarchical')")


def attention_sink(attn: torch.Tensor) -> float:
    """Attention-sink share: mean over batch, heads and query positions t >= 1 of attn[..., t, 0].

    DESIGN.md §2. ``attn`` holds post-softmax attention weights of one layer, shape
    (B, H, T, T) (any number of leading dims is accepted; all are averaged), query on the
    second-to-last axis, key on the last. Query 0 can attend only to itself and is excluded.
    Compare with ``uniform_sink_baseline(T)``.
    """
    if attn.ndim < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention weights must end in a square (T, T) pair of axes, got {tuple(attn.shape)}")
    T = attn.shape[-1]
    if T < 2:
        raise ValueError("attention sink needs at least 2 positions (query 0 is excluded)")
    return float(attn.detach()[..., 1:, 0].double().mean())


def uniform_sink_baseline(T: int) -> float:
    """The sink share of uniform causal attention over T positions, computed exactly.

    Query t spreads 1/(t+1) on each of positions 0..t, so the share on position 0, averaged over
    t = 1..T-1, is (1/(T-1)) * sum_{t=1}^{T-1} 1/(t+1) = (H_T - 1)/(T - 1), H_T the T-th harmonic
    number; about (ln T)/T for large T (DESIGN.md §2).
    """
    T = int(T)
    if T < 2:
        raise ValueError(f"uniform sink baseline needs T >= 2, got {T}")
    k = np.arange(T, 1, -1, dtype=np.float64)  # sum small terms first
    return float(np.sum(1.0 / k) / (T - 1))


def max_activation(h: torch.Tensor) -> float:
    """Largest absolute entry max |h| of a hidden state ("massive activation", DESIGN.md §2)."""
    if h.numel() == 0:
        raise ValueError("max_activation of an empty tensor")
    return float(h.detach().abs().max())


def _wide_float(x: torch.Tensor) -> torch.Tensor:
    """float64 where the device supports it (CPU, CUDA), else float32 (e.g. MPS)."""
    return x.detach().to(torch.float32 if x.device.type == "mps" else torch.float64)


def rmsnorm_saturation(h: torch.Tensor, eps: float) -> dict[str, float]:
    """RMSNorm saturation of an RMSNorm input h (DESIGN.md §2).

    ms = mean(h^2) over the last dim, one value per token; then, averaged over tokens:

    - ``saturation``  = mean of ms / (ms + eps)   (1 = healthy, <= 0.5 = eps dominates)
    - ``eps_over_ms`` = mean of eps / ms           (inf if some token is exactly zero)
    - ``mean_square`` = mean of ms

    Computed in float64 (float32 on devices without float64), so that ms ~ 1e-12 neither
    underflows nor loses precision whatever the dtype of h.
    """
    if h.numel() == 0:
        raise ValueError("rmsnorm_saturation of an empty tensor")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    ms = _wide_float(h).square().mean(dim=-1).reshape(-1)
    sat = ms / (ms + eps)
    sat = torch.where(ms + eps > 0, sat, torch.ones_like(sat))  # h = 0 and eps = 0: 0/0 -> 1 (no eps effect)
    eps_over_ms = torch.where(ms > 0, eps / ms.clamp_min(torch.finfo(ms.dtype).tiny), torch.full_like(ms, math.inf))
    if eps == 0:
        eps_over_ms = torch.zeros_like(ms)
    return {"saturation": float(sat.mean()), "eps_over_ms": float(eps_over_ms.mean()), "mean_square": float(ms.mean())}


def residual_flow(branch_out: torch.Tensor, h: torch.Tensor) -> float:
    """Residual flow: mean over tokens of ||F|| / ||h||, norms over the last dim (DESIGN.md §2).

    ``branch_out`` is a residual branch's output F(norm(h)) (attention or MLP) and ``h`` the
    residual stream it is added to, same shape (..., d). A token with h = 0 contributes
    ||F|| / tiny (a huge number): the ratio is meant for live residual streams.
    """
    if branch_out.shape != h.shape:
        raise ValueError(f"branch output {tuple(branch_out.shape)} and residual {tuple(h.shape)} differ in shape")
    if h.numel() == 0:
        raise ValueError("residual_flow of an empty tensor")
    f_norm = _wide_float(branch_out).norm(dim=-1)
    h_norm = _wide_float(h).norm(dim=-1)
    return float((f_norm / h_norm.clamp_min(torch.finfo(h_norm.dtype).tiny)).mean())


def optimizer_eps_damping(exp_avg_sq: torch.Tensor, step: float, beta2: float, eps: float) -> dict[str, float]:
    """How much Adam's ε damps the updates of one weight matrix (DESIGN.md §2, "Optimizer ε").

    AdamW's update is m̂ / (sqrt(v̂) + ε) with the bias-corrected second moment
    v̂ = exp_avg_sq / (1 - β2^t) (t = the optimizer's step count). Compared with the undamped m̂ / sqrt(v̂),
    ε shrinks an entry's update by the factor sqrt(v̂) / (sqrt(v̂) + ε), i.e. it removes the share
    ε / (sqrt(v̂) + ε). Over the entries of ``exp_avg_sq`` (any shape, e.g. a view of a matrix):

    - ``frac_below`` = mean of [sqrt(v̂) < ε]           (entries whose gradient scale is under ε)
    - ``damping``    = mean of ε / (sqrt(v̂) + ε)        (0 = ε irrelevant, 1 = update fully suppressed;
                                                           an entry with v̂ = 0 counts 1 — it gets no update;
                                                           with ε = 0 nothing is damped: 0)
    - ``frac_zero``  = mean of [v̂ = 0]                  (entries that never had a gradient, e.g. embedding
                                                           rows of tokens not yet seen: damping 1 by the formula,
                                                           but ε is not what stops them)
    - ``median_sqrt_v`` = median of sqrt(v̂)

    After one step sqrt(v̂) = |g| exactly (v_1 = (1 - β2) g²): the first-step gradient. Computed in float64
    (float32 on devices without it), so v̂ ~ 1e-32 neither underflows nor loses precision.
    """
    if exp_avg_sq.numel() == 0:
        raise ValueError("optimizer_eps_damping of an empty tensor")
    if not step >= 1:
        raise ValueError(f"the optimizer step count must be >= 1 (no second moment before the first step), got {step}")
    if not 0 <= beta2 < 1:
        raise ValueError(f"beta2 must be in [0, 1), got {beta2}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    v = _wide_float(exp_avg_sq)
    sqrt_v = (v / (1.0 - beta2 ** float(step))).clamp_min(0).sqrt().reshape(-1)
    denom = sqrt_v + eps
    damping = torch.where(denom > 0, eps / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.zeros_like(denom))
    return {
        "frac_below": float((sqrt_v < eps).to(sqrt_v.dtype).mean()),
        "damping": float(damping.mean()),
        "frac_zero": float((sqrt_v == 0).to(sqrt_v.dtype).mean()),
        "median_sqrt_v": float(sqrt_v.median()),
    }
