"""Known-answer tests of the pure probe metrics (DESIGN.md §2)."""

from __future__ import annotations

import math

import pytest
import torch

from smallinit.probes import (
    attention_sink,
    condensation_index,
    max_activation,
    optimizer_eps_damping,
    order_rows_for_heatmap,
    residual_flow,
    rmsnorm_saturation,
    row_cosine,
    stable_rank,
    uniform_sink_baseline,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _with_singular_values(s: torch.Tensor, m: int, n: int, seed: int = 0) -> torch.Tensor:
    """An m x n matrix U diag(s) V^T with random orthonormal U, V and the given singular values."""
    g = _gen(seed)
    U, _ = torch.linalg.qr(torch.randn(m, len(s), generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, len(s), generator=g, dtype=torch.float64))
    return U @ torch.diag(s.double()) @ V.T


# ---- stable rank ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 64])
@pytest.mark.parametrize("exact", [True, False])
def test_stable_rank_identity_is_n(n: int, exact: bool) -> None:
    assert stable_rank(torch.eye(n), exact=exact) == pytest.approx(n, rel=1e-5)


@pytest.mark.parametrize("exact", [True, False])
def test_stable_rank_rank_one_is_one(exact: bool) -> None:
    g = _gen(1)
    W = torch.outer(torch.randn(40, generator=g), torch.randn(30, generator=g))
    assert stable_rank(W, exact=exact) == pytest.approx(1.0, rel=1e-5)


def test_stable_rank_known_singular_values() -> None:
    s = torch.tensor([4.0, 2.0, 1.0, 1.0, 0.5])
    expected = float((s**2).sum() / s[0] ** 2)  # (16+4+1+1+0.25)/16
    W = _with_singular_values(s, 30, 20)
    assert stable_rank(W) == pytest.approx(expected, rel=1e-10)
    assert stable_rank(W.float()) == pytest.approx(expected, rel=1e-5)
    assert stable_rank(W.T) == pytest.approx(expected, rel=1e-10)  # transpose-invariant
    assert stable_rank(3.7 * W) == pytest.approx(expected, rel=1e-10)  # scale-invariant


def test_stable_rank_of_low_precision_input() -> None:
    W = _with_singular_values(torch.tensor([2.0, 1.0]), 16, 16).to(torch.bfloat16)
    assert stable_rank(W) == pytest.approx(1.25, rel=2e-2)


def test_stable_rank_zero_matrix_is_zero() -> None:
    assert stable_rank(torch.zeros(5, 3)) == 0.0
    assert stable_rank(torch.zeros(5, 3), exact=False) == 0.0


@pytest.mark.parametrize("shape", [(96, 96), (128, 48), (40, 200)])
def test_power_iteration_within_two_percent_with_spectral_gap(shape: tuple[int, int]) -> None:
    # trained-like: a few strong directions on top of a diffuse bulk
    m, n = shape
    k = min(m, n)
    s = torch.cat([torch.tensor([5.0, 3.0, 2.0]), torch.linspace(0.8, 0.05, k - 3)])
    W = _with_singular_values(s, m, n, seed=3).float()
    exact = stable_rank(W, exact=True)
    approx = stable_rank(W, exact=False)
    assert abs(approx / exact - 1) < 0.02
    # deterministic start vector: same answer twice
    assert stable_rank(W, exact=False) == approx


def test_power_iteration_few_iterations_is_rough_but_bounded() -> None:
    # power iteration under-estimates ||W||_2, so it can only over-estimate the stable rank
    s = torch.cat([torch.tensor([1.0, 0.99]), torch.full((30,), 0.5)])
    W = _with_singular_values(s, 32, 32, seed=4)
    exact = stable_rank(W)
    assert stable_rank(W, exact=False, iters=1) >= exact * (1 - 1e-9)


def test_stable_rank_rejects_non_matrix() -> None:
    with pytest.raises(ValueError, match="2-D"):
        stable_rank(torch.ones(3, 4, 5))


# ---- row cosine and condensation ------------------------------------------------------------------


def test_row_cosine_known_values() -> None:
    W = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    C = row_cosine(W)
    r = 1 / math.sqrt(2)
    expected = torch.tensor(
        [
            [1, 0, -1, r, 0],
            [0, 1, 0, r, 0],
            [-1, 0, 1, -r, 0],
            [r, r, -r, 1, 0],
            [0, 0, 0, 0, 0],  # a zero row has cosine 0 with everything
        ]
    )
    torch.testing.assert_close(C, expected, atol=1e-6, rtol=0)
    assert C.shape == (5, 5)


def test_condensation_index_identical_rows_is_one() -> None:
    row = torch.randn(64, generator=_gen(5))
    W = row.repeat(20, 1) * torch.linspace(0.5, 2.0, 20)[:, None]  # same direction, varied norms
    assert condensation_index(W) == pytest.approx(1.0, abs=1e-6)
    W[::2] *= -1  # anti-aligned rows condense too (|C|)
    assert condensation_index(W) == pytest.approx(1.0, abs=1e-6)


def test_condensation_index_orthogonal_rows_is_zero() -> None:
    assert condensation_index(torch.eye(16)) == pytest.approx(0.0, abs=1e-7)


def test_condensation_index_gaussian_rows() -> None:
    d = 512
    W = torch.randn(256, d, generator=_gen(6))
    expected = math.sqrt(2 / (math.pi * d))
    assert condensation_index(W) == pytest.approx(expected, rel=0.10)


def test_condensation_index_row_subsampling_is_deterministic_and_close() -> None:
    W = torch.randn(3000, 32, generator=_gen(7))
    a = condensation_index(W, max_rows=256)
    assert a == condensation_index(W, max_rows=256)  # fixed generator
    full = condensation_index(W, max_rows=None)
    assert a == pytest.approx(full, rel=0.05)
    assert a != condensation_index(W, max_rows=256, seed=1)


def test_condensation_index_two_blocks() -> None:
    # two equal blocks of identical rows, orthogonal to each other: pairs within a block have
    # |C| = 1, across 0. With 2 blocks of m rows: (2 m (m-1)) / (2m (2m-1)) = (m-1)/(2m-1)
    m = 10
    W = torch.cat([torch.tensor([[1.0, 0.0]]).repeat(m, 1), torch.tensor([[0.0, 1.0]]).repeat(m, 1)])
    assert condensation_index(W) == pytest.approx((m - 1) / (2 * m - 1), rel=1e-6)


def test_condensation_index_needs_two_rows() -> None:
    with pytest.raises(ValueError, match="2 rows"):
        condensation_index(torch.ones(1, 8))


@pytest.mark.parametrize("method", ["svd", "hierarchical"])
def test_heatmap_order_groups_blocks(method: str) -> None:
    # rows from two anti-aligned clusters, interleaved; the order must make each cluster contiguous
    g = _gen(8)
    base = torch.randn(32, generator=g)
    signs = torch.tensor([1.0, -1.0] * 12)
    W = signs[:, None] * base + 0.05 * torch.randn(24, 32, generator=g)
    for M in (W, row_cosine(W)):
        order = order_rows_for_heatmap(M, method=method)
        assert sorted(order.tolist()) == list(range(24))  # a permutation
        s = signs[order]
        assert int((s[1:] != s[:-1]).sum()) == 1  # one boundary between the two blocks


def test_heatmap_order_rejects_unknown_method() -> None:
    with pytest.raises(ValueError, match="method"):
        order_rows_for_heatmap(torch.eye(4), method="tsne")


# ---- attention sink -------------------------------------------------------------------------------


def _uniform_causal(B: int, H: int, T: int) -> torch.Tensor:
    mask = torch.tril(torch.ones(T, T))
    return (mask / mask.sum(-1, keepdim=True)).expand(B, H, T, T).clone()


def test_attention_sink_all_mass_on_first_token_is_one() -> None:
    attn = torch.zeros(2, 3, 8, 8)
    attn[..., 0] = 1.0
    assert attention_sink(attn) == pytest.approx(1.0)


def test_attention_sink_uniform_causal_equals_baseline() -> None:
    T = 16
    assert attention_sink(_uniform_causal(2, 4, T)) == pytest.approx(uniform_sink_baseline(T), rel=1e-6)


def test_attention_sink_diagonal_is_zero_and_query_zero_is_excluded() -> None:
    # every query attends to itself: query 0 puts all mass on position 0 but is excluded
    attn = torch.eye(6).expand(1, 2, 6, 6)
    assert attention_sink(attn) == 0.0


def test_attention_sink_mixed_heads() -> None:
    T = 5
    sink = torch.zeros(T, T)
    sink[:, 0] = 1.0
    attn = torch.stack([sink, torch.eye(T)])[None]  # head 0: full sink, head 1: no sink
    assert attention_sink(attn) == pytest.approx(0.5)


def test_uniform_sink_baseline_exact_values() -> None:
    assert uniform_sink_baseline(2) == pytest.approx(0.5)
    assert uniform_sink_baseline(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    T = 4096
    harmonic = sum(1.0 / k for k in range(1, T + 1))
    assert uniform_sink_baseline(T) == pytest.approx((harmonic - 1) / (T - 1), rel=1e-12)
    # close to (ln T)/T for large T, but not equal
    assert uniform_sink_baseline(T) == pytest.approx(math.log(T) / T, rel=0.1)
    with pytest.raises(ValueError):
        uniform_sink_baseline(1)


def test_attention_sink_rejects_non_square() -> None:
    with pytest.raises(ValueError, match="square"):
        attention_sink(torch.ones(1, 1, 4, 5))


# ---- activations, RMSNorm saturation, residual flow ----------------------------------------------


def test_max_activation() -> None:
    h = torch.zeros(2, 3, 4)
    h[1, 2, 3] = -7.5
    h[0, 0, 0] = 3.0
    assert max_activation(h) == 7.5
    assert max_activation(h.to(torch.bfloat16)) == 7.5


def test_rmsnorm_saturation_constructed() -> None:
    eps = 1e-5
    # token 0: all entries 1e-3 -> ms = 1e-6 ; token 1: entries ±2e-2 -> ms = 4e-4
    h = torch.stack([torch.full((8,), 1e-3), torch.tensor([2e-2, -2e-2] * 4)])[None]
    out = rmsnorm_saturation(h, eps)
    ms = [1e-6, 4e-4]
    assert out["saturation"] == pytest.approx(sum(m / (m + eps) for m in ms) / 2, rel=1e-6)
    assert out["eps_over_ms"] == pytest.approx(sum(eps / m for m in ms) / 2, rel=1e-6)
    assert out["mean_square"] == pytest.approx(sum(ms) / 2, rel=1e-6)
    assert set(out) == {"saturation", "eps_over_ms", "mean_square"}


def test_rmsnorm_saturation_tiny_signal_in_half_precision() -> None:
    # ms = 1e-12 in bfloat16 input: computed in float64, no underflow
    h = torch.full((4, 16), 1e-6, dtype=torch.bfloat16)
    ms = float(h[0, 0].double()) ** 2
    out = rmsnorm_saturation(h, 1e-12)
    assert out["saturation"] == pytest.approx(ms / (ms + 1e-12), rel=1e-6)
    assert 0.4 < out["saturation"] < 0.6  # eps ~ ms: half saturated
    assert rmsnorm_saturation(h, 1e-5)["saturation"] < 1e-6  # eps = 1e-5 dominates completely


def test_rmsnorm_saturation_healthy_is_one() -> None:
    h = torch.randn(3, 5, 32, generator=_gen(9))
    assert rmsnorm_saturation(h, 1e-12)["saturation"] == pytest.approx(1.0, abs=1e-9)


def test_residual_flow_constructed() -> None:
    h = torch.zeros(1, 2, 4)
    h[0, 0, 0] = 2.0  # ||h|| = 2
    h[0, 1] = 1.0  # ||h|| = 2
    F = torch.zeros(1, 2, 4)
    F[0, 0, 1] = 1.0  # ||F|| = 1 -> ratio 0.5
    F[0, 1, :2] = 3.0  # ||F|| = 3 sqrt(2) -> ratio 1.5 sqrt(2)
    assert residual_flow(F, h) == pytest.approx((0.5 + 1.5 * math.sqrt(2)) / 2, rel=1e-6)


def test_residual_flow_scales_linearly() -> None:
    g = _gen(10)
    h = torch.randn(2, 6, 16, generator=g)
    F = torch.randn(2, 6, 16, generator=g)
    assert residual_flow(3 * F, h) == pytest.approx(3 * residual_flow(F, h), rel=1e-9)
    assert residual_flow(h, h) == pytest.approx(1.0, rel=1e-9)


def test_residual_flow_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="shape"):
        residual_flow(torch.ones(2, 3), torch.ones(3, 3))


def test_metrics_do_not_modify_inputs() -> None:
    g = _gen(11)
    W = torch.randn(8, 6, generator=g)
    h = torch.randn(2, 4, 6, generator=g)
    W0, h0 = W.clone(), h.clone()
    stable_rank(W), stable_rank(W, exact=False), condensation_index(W), row_cosine(W)
    order_rows_for_heatmap(W), rmsnorm_saturation(h, 1e-5), residual_flow(h, h), max_activation(h)
    assert torch.equal(W, W0) and torch.equal(h, h0)


# ---- optimizer ε ---------------------------------------------------------------------------------


def _adamw_after(grads: list[torch.Tensor], eps: float = 1e-8, beta2: float = 0.95):
    """A real AdamW (fused, as the Trainer) after one step per gradient in ``grads``; returns (param, optimizer)."""
    p = torch.nn.Parameter(torch.zeros_like(grads[0]))
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, beta2), eps=eps, fused=True)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p, opt


def test_optimizer_eps_after_one_step_uses_the_gradient() -> None:
    # after one step sqrt(v̂) = |g|: two of four entries are under ε = 1e-8
    g = torch.tensor([[1e-10, -1e-9], [1e-7, -1e-6]])
    p, opt = _adamw_after([g])
    st = opt.state[p]
    out = optimizer_eps_damping(st["exp_avg_sq"], float(st["step"]), 0.95, 1e-8)
    assert out["frac_below"] == 0.5
    expected = sum(1e-8 / (a + 1e-8) for a in (1e-10, 1e-9, 1e-7, 1e-6)) / 4
    assert out["damping"] == pytest.approx(expected, rel=1e-5)  # (1e-8/1.01e-8 + 1/1.1 + 1/11 + 1/101)/4
    assert out["median_sqrt_v"] == pytest.approx(1e-9, rel=1e-5)  # torch's median: the lower middle value
    assert out["frac_zero"] == 0.0


def test_optimizer_eps_bias_correction_over_two_steps() -> None:
    # v_2 = β2 (1-β2) g1² + (1-β2) g2², v̂ = v_2 / (1 - β2²): with g1 = 3e-9, g2 = 4e-9 and β2 = 0.5,
    # v̂ = (0.25·9e-18 + 0.5·16e-18) / 0.75 = 13.666…e-18 -> sqrt(v̂) ≈ 3.697e-9 < ε
    g1, g2 = torch.full((2, 3), 3e-9), torch.full((2, 3), 4e-9)
    g2[0, 0] = 1.0  # one large entry: sqrt(v̂) = sqrt((0.25·9e-18 + 0.5) / 0.75) ≈ 0.8165
    p, opt = _adamw_after([g1, g2], beta2=0.5)
    st = opt.state[p]
    assert float(st["step"]) == 2.0
    out = optimizer_eps_damping(st["exp_avg_sq"], 2, 0.5, 1e-8)
    small = math.sqrt((0.25 * 9e-18 + 0.5 * 16e-18) / 0.75)
    large = math.sqrt((0.25 * 9e-18 + 0.5) / 0.75)
    assert out["frac_below"] == pytest.approx(5 / 6)
    assert out["damping"] == pytest.approx((5 * 1e-8 / (small + 1e-8) + 1e-8 / (large + 1e-8)) / 6, rel=1e-4)
    # the uncorrected exp_avg_sq would put sqrt(v) at sqrt(0.75)·3.697e-9: a different damping
    assert optimizer_eps_damping(st["exp_avg_sq"] * 0.75, 2, 0.5, 1e-8)["damping"] != pytest.approx(
        out["damping"], rel=1e-4
    )


def test_optimizer_eps_hand_built_state_edge_cases() -> None:
    e = 2.0**-26  # ε ≈ 1.5e-8, a power of 2 so that every square root below is exact
    v = torch.tensor([0.0, e**2, 4 * e**2, 1.0])  # bias-corrected with β2 = 0 (1 - 0^t = 1): sqrt = 0, ε, 2ε, 1
    out = optimizer_eps_damping(v, 5, 0.0, e)
    assert out["frac_below"] == 0.25  # only the zero entry: sqrt(v̂) = ε is not below ε
    assert out["frac_zero"] == 0.25
    assert out["damping"] == pytest.approx((1.0 + 0.5 + 1 / 3 + e / (1 + e)) / 4, rel=1e-12)
    assert optimizer_eps_damping(v, 5, 0.0, 0.0) == {
        "frac_below": 0.0,
        "damping": 0.0,
        "frac_zero": 0.25,
        "median_sqrt_v": e,
    }
    # tiny values in bfloat16 are not lost (computed in float64): sqrt(1e-30 / 0.1) ≈ 3.2e-15 < 1e-8
    assert optimizer_eps_damping(torch.full((4,), 1e-30, dtype=torch.bfloat16), 1, 0.9, 1e-8)["frac_below"] == 1.0
    for bad in [dict(step=0), dict(beta2=1.0), dict(eps=-1.0)]:
        args = {"step": 1, "beta2": 0.9, "eps": 1e-8, **bad}
        with pytest.raises(ValueError):
            optimizer_eps_damping(v, **args)
    with pytest.raises(ValueError, match="empty"):
        optimizer_eps_damping(torch.zeros(0), 1, 0.9, 1e-8)
