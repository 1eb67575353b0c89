"""MoE feed-forward: agreement with a per-token reference, the auxiliary losses, gradients, γ-rule, accounting."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from smallinit.init import gamma_init
from smallinit.model import ModelConfig, Transformer
from smallinit.model.moe import MoE, load_balancing_loss, moe_stats, router_z_loss, update_expert_bias

D, E, DE = 16, 4, 8


def tiny_cfg(top_k=2, n_shared=0, **moe_kw) -> ModelConfig:
    moe = dict(n_experts=E, top_k=top_k, n_shared_experts=n_shared, d_expert=DE, every=1, **moe_kw)
    return ModelConfig(vocab_size=64, d_model=D, n_layers=2, n_heads=2, d_ff=24, max_seq_len=16, moe=moe)


def make_moe(impl="auto", seed=0, **kw) -> MoE:
    torch.manual_seed(seed)
    m = MoE(tiny_cfg(**kw), impl=impl)
    gamma_init(m, 0.5)
    return m


def reference(m: MoE, x: torch.Tensor) -> torch.Tensor:
    """The formula of the module docstring, one token at a time."""
    xf = x.reshape(-1, m.d_model)
    rows = []
    for t in range(xf.shape[0]):
        xt = xf[t]
        p = torch.softmax(m.router.weight @ xt, dim=-1)
        bias = m.expert_bias if m.bias_update_rate > 0 else torch.zeros_like(p)
        top_e = torch.topk(p + bias, m.top_k).indices  # the bias steers the choice only
        top_p = p[top_e]
        y = torch.zeros_like(xt)
        weights = top_p if m.top_k == 1 else top_p / top_p.sum()  # k = 1: Switch's unnormalized p
        for w, e in zip(weights, top_e.tolist()):
            g = xt @ m.w_gate_up[e, :, : m.d_expert]
            u = xt @ m.w_gate_up[e, :, m.d_expert :]
            y = y + w * ((F.silu(g) * u) @ m.w_down[e])
        if m.shared is not None:
            gu = m.shared.w_gate_up.weight @ xt
            g, u = gu.chunk(2)
            y = y + m.shared.w_down.weight @ (F.silu(g) * u)
        rows.append(y)
    return torch.stack(rows).reshape(x.shape)


def grads(m: MoE, x: torch.Tensor, out: torch.Tensor, g: torch.Tensor):
    m.zero_grad(set_to_none=True)
    x.grad = None
    (out * g).sum().backward()
    return [x.grad.clone()] + [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in m.parameters()]


@pytest.mark.parametrize("impl", ["loop", "grouped_mm"])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("n_shared", [0, 1])
def test_matches_per_token_reference(impl, top_k, n_shared):
    m = make_moe(impl, top_k=top_k, n_shared=n_shared)
    torch.manual_seed(1)
    x = torch.randn(3, 5, D, requires_grad=True)
    g = torch.randn(3, 5, D)
    out = m(x)
    ref = reference(m, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads(m, x, out, g), grads(m, x, ref, g)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fp32_grouped_mm_and_loop_agree():
    torch.manual_seed(0)
    cfg = tiny_cfg(top_k=2, n_shared=1)
    a, b = MoE(cfg, impl="loop"), MoE(cfg, impl="grouped_mm")
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 7, D)
    ya, yb = a(x), b(x)
    torch.testing.assert_close(ya, yb, rtol=1e-5, atol=1e-5)
    ya.sum().backward()
    yb.sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-5)


def router_as_identity(top_k: int) -> MoE:
    """d_model = E and router weight = I, so the router logits are the input itself."""
    cfg = ModelConfig(
        vocab_size=64,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=8,
        max_seq_len=8,
        moe=dict(n_experts=8, top_k=top_k, d_expert=8, aux_loss_coef=0.1, z_loss_coef=0.01),
    )
    m = MoE(cfg)
    with torch.no_grad():
        m.router.weight.copy_(torch.eye(8))
    return m


def test_load_balance_equals_formula_on_constructed_routing():
    m = router_as_identity(top_k=2)
    logits = torch.full((4, 8), -1e4)
    logits[:, 0] = 0.0  # every token: expert 0 ...
    logits[:3, 1] = math.log(3.0)  # ... tokens 0-2 with expert 1 (p = 3/4, 1/4)
    logits[3, 2] = 0.0  # ... token 3 with expert 2 (p = 1/2, 1/2)
    m(logits)
    # f = (4, 3, 1, 0, ...)/8 ; P = ((3·1/4 + 1/2)/4, (3·3/4)/4, (1/2)/4, 0, ...)
    f = [4 / 8, 3 / 8, 1 / 8]
    P = [(0.75 + 0.5) / 4, 2.25 / 4, 0.5 / 4]
    expected = 8 * sum(a * b for a, b in zip(f, P))
    assert m.last_stats["load_balance"].item() == pytest.approx(expected, rel=1e-6)
    assert m.last_stats["expert_fraction"][:4].tolist() == pytest.approx([0.5, 0.375, 0.125, 0.0])
    z = torch.logsumexp(logits, dim=-1).square().mean().item()
    assert m.last_stats["z_loss"].item() == pytest.approx(z, rel=1e-6)
    assert m.aux_loss.item() == pytest.approx(0.1 * expected + 0.01 * z, rel=1e-6)


@pytest.mark.parametrize("top_k", [1, 2])
def test_load_balance_is_one_for_uniform_routing_and_larger_otherwise(top_k):
    m = router_as_identity(top_k)
    # uniform: token t prefers experts t, t+1 (mod 8); every expert is chosen equally and P is uniform
    logits = torch.zeros(16, 8)
    for t in range(16):
        logits[t, t % 8] = 2.0
        logits[t, (t + 1) % 8] = 1.0
    m(logits)
    assert m.last_stats["load_balance"].item() == pytest.approx(1.0, rel=1e-6)
    assert m.last_stats["expert_fraction"].tolist() == pytest.approx([1 / 8] * 8)
    # equal logits: P uniform → LB = 1 whatever the tie-break
    m(torch.zeros(5, 8))
    assert m.last_stats["load_balance"].item() == pytest.approx(1.0, rel=1e-6)
    # imbalanced routings cost more; collapse onto one expert → E
    skew = torch.randn(64, 8)
    skew[:, :2] += 3.0
    m(skew)
    assert m.last_stats["load_balance"].item() > 1.2
    collapse = torch.full((6, 8), -50.0)
    collapse[:, 3] = 50.0
    collapse[:, 5] = 0.0
    m(collapse)
    expected = 8.0 if top_k == 1 else 8.0 * 0.5  # f_3 = 1/k, P_3 ≈ 1
    assert m.last_stats["load_balance"].item() == pytest.approx(expected, rel=1e-5)


def test_load_balance_with_f_equal_p_is_minimal_at_uniform():
    # E·Σ f_e P_e with f = P is E·|P|² ≥ 1 (Cauchy–Schwarz), equality only at the uniform distribution
    torch.manual_seed(0)
    for _ in range(20):
        P = torch.softmax(torch.randn(8) * 2, dim=0)
        assert 8 * (P * P).sum().item() >= 1.0
    assert 8 * (torch.full((8,), 1 / 8) ** 2).sum().item() == pytest.approx(1.0)


def test_loss_functions_standalone():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    idx = torch.tensor([[0], [2]])
    # f = (1/2, 0, 1/2), P = (0.4, 0.25, 0.35)
    assert load_balancing_loss(probs, idx, 3).item() == pytest.approx(3 * (0.5 * 0.4 + 0.5 * 0.35))
    logits = torch.tensor([[0.0, 0.0], [1.0, -1.0]])
    expected = (math.log(2.0) ** 2 + math.log(math.e + 1 / math.e) ** 2) / 2
    assert router_z_loss(logits).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_router_gets_a_language_model_gradient_for_every_top_k(top_k):
    """Without auxiliary losses the router learns only through the output: for top_k = 1 a renormalized
    weight (always 1) would give it exactly zero gradient; scaling by p (Switch) does not."""
    torch.manual_seed(0)
    m = MoE(tiny_cfg(top_k=top_k, aux_loss_coef=0.0, z_loss_coef=0.0))
    x = torch.randn(2, 6, D)
    y = m(x)
    (y * torch.randn_like(y)).sum().backward()
    assert m.router.weight.grad is not None and m.router.weight.grad.abs().sum() > 1e-6


def test_gradients_reach_router_and_every_selected_expert():
    torch.manual_seed(0)
    m = MoE(tiny_cfg(top_k=2, aux_loss_coef=0.0))  # the router's gradient then comes from the output only
    x = torch.randn(2, 6, D)
    y = m(x)
    (y * torch.randn_like(y)).sum().backward()
    assert m.router.weight.grad.abs().sum() > 0
    used = m.last_stats["expert_fraction"] > 0
    per_expert = m.w_gate_up.grad.abs().sum(dim=(1, 2)) + m.w_down.grad.abs().sum(dim=(1, 2))
    assert used.any()
    assert torch.equal(per_expert > 0, used)
    # the load-balancing loss alone also trains the router (and nothing else)
    m = MoE(tiny_cfg(top_k=2, aux_loss_coef=1.0))
    m(x)
    m.aux_loss.backward()
    assert m.router.weight.grad.abs().sum() > 0
    assert m.w_gate_up.grad is None and m.w_down.grad is None


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_gamma_rule_each_expert_matrix_uses_its_own_fan_in(gamma):
    cfg = ModelConfig(
        vocab_size=64,
        d_model=64,
        n_layers=2,
        n_heads=2,
        d_ff=96,
        max_seq_len=16,
        gamma=gamma,
        moe=dict(n_experts=4, top_k=2, n_shared_experts=1, d_expert=128),
    )
    torch.manual_seed(0)
    model = Transformer(cfg)
    moe = model.blocks[0].mlp
    assert isinstance(moe, MoE)
    report = model.init_report
    assert report.skipped == []
    assert report.row("blocks.0.mlp.w_gate_up").fan_in == 64
    assert report.row("blocks.0.mlp.w_down").fan_in == 128
    assert report.row("blocks.0.mlp.router.weight").fan_in == 64
    for name, w in moe.matrices().items():
        fan_in = w.shape[1]  # (out, in) layout
        target = fan_in ** (-gamma)
        assert abs(w.std().item() - target) / target < 0.05, (name, w.std().item(), target)
    assert moe.matrices()["expert0.down"].shape == (64, 128)
    assert moe.matrices()["expert3.gate"].shape == (128, 64)
    assert len(moe.matrices()) == 1 + 3 * 4 + 3


def test_num_params_total_and_active_exact():
    cfg = ModelConfig(
        vocab_size=64,
        d_model=16,
        n_layers=3,
        n_heads=2,
        d_ff=24,
        max_seq_len=16,
        tie_embeddings=True,
        moe=dict(n_experts=4, top_k=2, n_shared_experts=1, d_expert=8, every=2),
    )
    model = Transformer(cfg)
    d, V, L = 16, 64, 3
    attn = d * (3 * d + d) + d * d  # q, k, v, elementwise gate; o
    dense_ffn = 3 * d * 24
    moe_ffn = d * 4 + 4 * 3 * d * 8 + 3 * d * 8  # router, 4 routed experts, 1 shared
    norms = 2 * d
    total = V * d + L * (attn + norms) + 2 * dense_ffn + moe_ffn + d  # blocks 0, 2 dense; block 1 MoE
    assert [cfg.is_moe_layer(i) for i in range(3)] == [False, True, False]
    assert model.num_params() == total
    inactive = (4 - 2) * 3 * d * 8
    assert model.num_params(active=True) == total - inactive
    assert model.num_params(non_embedding=True, active=True) == total - inactive - V * d
    T = 16
    assert model.flops_per_token(T) == 6.0 * (total - inactive - V * d + V * d) + 12.0 * L * T * d


def test_full_transformer_forward_backward_and_stats():
    torch.manual_seed(0)
    cfg = tiny_cfg(top_k=2, n_shared=1, z_loss_coef=1e-3)
    model = Transformer(cfg)
    assert model.aux_loss() is None  # before any forward
    assert moe_stats(model) == {}
    idx = torch.randint(0, 64, (2, 16))
    logits = model(idx)
    loss = F.cross_entropy(logits.reshape(-1, 64), idx.reshape(-1))
    aux = model.aux_loss()
    assert aux.dim() == 0 and torch.isfinite(aux)
    per_layer = [b.mlp.aux_loss for b in model.blocks]
    assert aux.item() == pytest.approx(sum(a.item() for a in per_layer))  # a sum over layers, not a mean
    (loss + aux).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    stats = moe_stats(model)
    assert set(stats["layers"]) == {"blocks.0.mlp", "blocks.1.mlp"}
    layer = stats["layers"]["blocks.0.mlp"]
    assert sum(layer["expert_fraction"]) == pytest.approx(1.0)
    assert sum(layer["router_prob"]) == pytest.approx(1.0, rel=1e-5)
    assert 0.0 < layer["router_entropy"] <= math.log(E) + 1e-6
    assert layer["dead_experts"] == sum(f == 0 for f in layer["expert_fraction"])
    assert layer["tokens"] == 32
    assert stats["load_balance"] == pytest.approx(sum(v["load_balance"] for v in stats["layers"].values()))
    assert stats["router_entropy_max"] == pytest.approx(math.log(E))


def test_dead_experts_counted():
    m = router_as_identity(top_k=1)
    x = torch.full((5, 8), -5.0)
    x[:, 2] = 5.0
    m(x)
    s = moe_stats(torch.nn.ModuleDict({"moe": m}))
    assert s["dead_experts"] == 7
    assert s["max_expert_fraction"] == 1.0


def test_autocast_bfloat16_runs():
    torch.manual_seed(0)
    m = MoE(tiny_cfg(top_k=2, n_shared=1))
    x = torch.randn(2, 8, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    assert m.last_stats["router_prob"].dtype == torch.float32
    y.float().sum().backward()
    assert m.w_gate_up.grad is not None and m.w_gate_up.grad.dtype == torch.float32


def test_bad_impl_and_misaligned_grouped_mm():
    with pytest.raises(ValueError, match="impl"):
        MoE(tiny_cfg(), impl="fast")
    cfg = ModelConfig(
        vocab_size=64,
        d_model=10,
        n_layers=1,
        n_heads=1,
        d_ff=8,
        max_seq_len=8,
        moe=dict(n_experts=2, top_k=1, d_expert=6),
    )
    with pytest.raises(ValueError, match="16 bytes"):
        MoE(cfg, impl="grouped_mm")(torch.randn(3, 10))
    assert MoE(cfg)(torch.randn(3, 10)).shape == (3, 10)  # auto falls back to the loop


def test_sizes_small_moe_active_params_match_dense_small():
    with torch.device("meta"):
        dense = Transformer(ModelConfig.from_size("small"))
        moe = Transformer(ModelConfig.from_size("small-moe"))
    c = moe.config
    routers = sum(c.d_model * c.moe.n_experts for i in range(c.n_layers) if c.is_moe_layer(i))
    assert moe.num_params(active=True) == dense.num_params() + routers
    assert moe.num_params() > 3 * dense.num_params(active=True) // 2


def test_paper_moe_size_counts_follow_from_shapes():
    cfg = ModelConfig.from_size("0.5b-moe")
    with torch.device("meta"):
        model = Transformer(cfg)
    d, L, V, m = cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.moe
    attn = d * (cfg.n_heads * cfg.head_dim * 3 + 2 * cfg.n_kv_heads * cfg.head_dim)  # q, gate, o; k, v
    ffn = d * m.n_experts + (m.n_experts + m.n_shared_experts) * 3 * d * m.d_expert
    total = L * (attn + ffn + 2 * d) + 2 * V * d + d
    assert model.num_params() == total
    assert abs(total - 0.5e9) / 0.5e9 < 0.10
    assert model.num_params(active=True) == total - L * (m.n_experts - m.top_k) * 3 * d * m.d_expert


@pytest.mark.parametrize(
    "field,value",
    [
        ("aux_loss_coef", -0.1),
        ("z_loss_coef", float("nan")),
        ("top_k", 5),
        ("d_expert", -1),
        ("every", 0),
        ("router", "sinkhorn"),
    ],
)
def test_bad_moe_config_names_the_field(field, value):
    moe = {**dict(n_experts=E, top_k=2, d_expert=DE), field: value}
    with pytest.raises(ValueError, match=f"moe.{field}"):
        ModelConfig(vocab_size=64, d_model=D, n_layers=2, n_heads=2, d_ff=24, max_seq_len=16, moe=moe)


# ---- auxiliary-loss-free balancing (moe.bias_update_rate) ----------------------------------------------------


def test_expert_bias_steers_the_choice_but_not_the_weights():
    m = make_moe(top_k=2, bias_update_rate=1e-3)
    with torch.no_grad():
        m.expert_bias.copy_(torch.tensor([0.0, 0.0, 0.0, 10.0]))  # expert 3 always chosen
    x = torch.randn(3, 5, D)
    out = m(x)
    assert m.last_stats["expert_fraction"][3] == pytest.approx(0.5)  # one of the two slots of every token
    torch.testing.assert_close(out, reference(m, x), rtol=1e-5, atol=1e-6)
    assert "expert_bias" in m.state_dict() and "tokens_per_expert" not in m.state_dict()
    assert "expert_bias" not in make_moe(top_k=2).state_dict()  # off by default: state dicts unchanged


def collapsed_router(rate: float) -> tuple[MoE, torch.Tensor]:
    """Every token of x prefers expert 0 (router weights along the tokens' shared mean direction)."""
    m = make_moe(top_k=1, bias_update_rate=rate)
    torch.manual_seed(1)
    mean = torch.randn(D)
    x = mean + 0.3 * torch.randn(256, D)
    with torch.no_grad():
        m.router.weight.zero_()
        m.router.weight[0] = mean / mean.norm() * 0.5
        m.router.weight += 0.05 * torch.randn(E, D)
    return m, x


def test_bias_updates_revive_dead_experts():
    m, x = collapsed_router(0.005)
    m(x)
    assert moe_stats(m)["dead_experts"] == E - 1  # the constructed collapse
    m.tokens_per_expert.zero_()
    for _ in range(100):  # training-mode forwards with grad enabled count the assignments
        m(x)
        update_expert_bias(m)
    assert m.tokens_per_expert.sum() == 0  # reset after each update
    assert abs(float(m.expert_bias.sum())) < 1e-5  # centred
    # sign updates balance up to a limit cycle of amplitude ~rate: no dead expert at any step, and balanced
    # on average over the cycle
    mean_fraction = torch.zeros(E)
    for _ in range(50):
        m(x)
        update_expert_bias(m)
        assert moe_stats(m)["dead_experts"] == 0
        mean_fraction += m.last_stats["expert_fraction"] / 50
    assert mean_fraction.min() > 0.15 and mean_fraction.max() < 0.35, mean_fraction
    still, x = collapsed_router(0.0)  # without the bias nothing moves
    for _ in range(5):
        still(x)
    assert moe_stats(still)["dead_experts"] == E - 1


def test_bias_update_counts_only_training_forwards():
    m, x = collapsed_router(0.02)
    with torch.no_grad():
        m(x)
    m.eval()
    m(x)
    assert m.tokens_per_expert.sum() == 0
    m.train()
    m(x)
    assert m.tokens_per_expert.sum() == x.shape[0]  # top_k = 1: one assignment per token
    update_expert_bias(Transformer(tiny_cfg()))  # a model without the option: a no-op
