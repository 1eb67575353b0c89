"""Build vs initialize: Transformer(config, init=False) + reset_parameters(), RoPE reset, counts from the config."""

import pytest
import torch

from smallinit import ModelConfig, Transformer
from smallinit.model.attention import RotaryEmbedding
from smallinit.model.config import SIZES

CONFIGS = {
    "dense-tied-elementwise": dict(
        vocab_size=97,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_seq_len=16,
        tie_embeddings=True,
        gate="elementwise",
    ),
    "dense-untied-none": dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, max_seq_len=16, gate="none"),
    "dense-headwise-gqa": dict(
        vocab_size=50, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, d_ff=64, max_seq_len=8, gate="headwise"
    ),
    "layernorm-untied": dict(
        vocab_size=40, d_model=32, n_layers=2, n_heads=2, d_ff=40, max_seq_len=8, norm="layernorm", gate="elementwise"
    ),
    "moe-every2-shared": dict(
        vocab_size=64,
        d_model=32,
        n_layers=4,
        n_heads=4,
        d_ff=48,
        max_seq_len=8,
        moe=dict(n_experts=4, top_k=2, n_shared_experts=1, d_expert=16, every=2),
    ),
    "moe-tied-default-width": dict(
        vocab_size=64,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_seq_len=8,
        tie_embeddings=True,
        gate="headwise",
        moe=dict(n_experts=3, top_k=1),
    ),
}


def _meta(cfg: ModelConfig) -> Transformer:
    with torch.device("meta"):
        return Transformer(cfg, init=False)


def _counted(model: Transformer, non_embedding: bool, active: bool) -> int:
    """The parameter count of the built tensors, independent of ModelConfig.num_params (which Transformer.num_params
    returns): every parameter once (a tied head is the embedding), less the embedding and an untied head
    (``non_embedding``), less the routed experts a token does not use, (E − k) experts' gate/up/down per MoE layer
    (``active``)."""
    from smallinit.model.moe import MoE

    n = sum(p.numel() for p in model.parameters())
    if non_embedding:
        n -= model.tok_emb.weight.numel()
        if model.lm_head.weight is not model.tok_emb.weight:
            n -= model.lm_head.weight.numel()
    if active:
        for b in model.blocks:
            if isinstance(b.mlp, MoE):
                per_expert = b.mlp.w_gate_up[0].numel() + b.mlp.w_down[0].numel()
                n -= (b.mlp.n_experts - b.mlp.top_k) * per_expert
    return n


def _assert_counts_agree(cfg: ModelConfig) -> Transformer:
    model = _meta(cfg)
    for ne in (False, True):
        for active in (False, True):
            want = _counted(model, ne, active)
            assert cfg.num_params(non_embedding=ne, active=active) == want, (ne, active)
            assert model.num_params(non_embedding=ne, active=active) == want, (ne, active)
    return model


@pytest.mark.parametrize("name", list(CONFIGS) + list(SIZES))
def test_counts_from_config_equal_built_model(name):
    cfg = ModelConfig.from_dict(CONFIGS[name]) if name in CONFIGS else ModelConfig.from_size(name)
    model = _assert_counts_agree(cfg)  # ModelConfig.num_params, Transformer.num_params and the tensors: one count
    n_ne = cfg.num_params(non_embedding=True, active=True)
    assert cfg.flops_per_token(8) == 6 * (n_ne + cfg.vocab_size * cfg.d_model) + 12 * cfg.n_layers * 8 * cfg.d_model
    assert model.flops_per_token(8) == cfg.flops_per_token(8)
    assert cfg.flops_per_token() == cfg.flops_per_token(cfg.max_seq_len)


@pytest.mark.parametrize("gate", ["none", "headwise", "elementwise"])
@pytest.mark.parametrize(
    "moe", [None, dict(n_experts=4, top_k=1), dict(n_experts=3, top_k=2, n_shared_experts=1, d_expert=24, every=2)]
)
@pytest.mark.parametrize("tie", [False, True])
def test_one_parameter_count_dense_and_moe_with_and_without_the_gate(gate, moe, tie):
    """ModelConfig.num_params is the one definition; Transformer.num_params returns it, and both equal the count of
    the tensors a built model holds, for every (non_embedding, active) — dense and MoE, each gate, tied or not."""
    cfg = ModelConfig(
        vocab_size=61,
        d_model=32,
        n_layers=3,
        n_heads=4,
        d_ff=40,
        max_seq_len=8,
        gate=gate,
        tie_embeddings=tie,
        moe=moe or {},
    )
    _assert_counts_agree(cfg)


def test_config_counts_see_the_changes_that_matter():
    base = ModelConfig.from_dict(CONFIGS["dense-untied-none"])
    d, V = base.d_model, base.vocab_size
    assert base.num_params() - base.num_params(non_embedding=True) == 2 * V * d  # untied: embedding + head
    tied = ModelConfig.from_dict({**CONFIGS["dense-untied-none"], "tie_embeddings": True})
    assert base.num_params() - tied.num_params() == V * d
    gated = ModelConfig.from_dict({**CONFIGS["dense-untied-none"], "gate": "elementwise"})
    assert gated.num_params() - base.num_params() == base.n_layers * d * d
    moe = ModelConfig.from_dict(CONFIGS["moe-every2-shared"])
    assert moe.num_params() - moe.num_params(active=True) == 2 * 3 * (4 - 2) * 32 * 16  # 2 MoE layers, E-k idle


@pytest.mark.parametrize("name", ["dense-tied-elementwise", "moe-every2-shared", "layernorm-untied"])
@pytest.mark.parametrize("depth_scale", [False, True])
def test_init_false_then_reset_equals_init_true(name, depth_scale):
    cfg = ModelConfig.from_dict(
        {**CONFIGS[name], "gamma": 0.75, "init_depth_scale": depth_scale, "init_overrides": {"tok_emb.*": 0.5}}
    )
    torch.manual_seed(3)
    a = Transformer(cfg)
    torch.manual_seed(3)
    b = Transformer(cfg, init=False)
    assert b.init_report is None
    sa, sb = a.state_dict(), b.state_dict()
    assert any(not torch.equal(sa[k], sb[k]) for k in sa)  # not initialized yet: the γ-rule has not run
    rep = b.reset_parameters()
    assert rep is b.init_report and len(rep.rows) == len(a.init_report.rows)
    sb = b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert torch.equal(a.rope.cos, b.rope.cos) and torch.equal(a.rope.sin, b.rope.sin)


def test_meta_build_then_reset_on_a_device():
    cfg = ModelConfig.from_dict(CONFIGS["dense-tied-elementwise"])
    m = _meta(cfg)
    assert m.rope.cos.is_meta and m.tok_emb.weight.is_meta and m.init_report is None
    m = m.to_empty(device="cpu")
    m.lm_head.weight = m.tok_emb.weight
    torch.manual_seed(0)
    m.reset_parameters()
    ref = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
    assert torch.equal(m.rope.cos, ref.cos) and torch.equal(m.rope.sin, ref.sin)
    # the γ-rule was applied: the std of a big matrix is close to d^-γ
    w = m.blocks[0].mlp.w_down.weight
    assert abs(w.std().item() / cfg.d_ff**-cfg.gamma - 1) < 0.1
    x = torch.randint(0, cfg.vocab_size, (2, 8))
    assert torch.isfinite(m(x)).all()


def test_rope_reset_recomputes_tables_in_place():
    rope = RotaryEmbedding(8, 12, 500.0)
    cos, sin = rope.cos.clone(), rope.sin.clone()
    ptr = rope.cos.data_ptr()
    rope.cos.zero_()
    rope.sin.fill_(7.0)
    rope.reset_parameters()
    assert rope.cos.data_ptr() == ptr and torch.equal(rope.cos, cos) and torch.equal(rope.sin, sin)
    t, i = 5, 1  # angle t·θ^(-2i/d) at column i and i + d/2
    ang = t * 500.0 ** (-2 * i / 8)
    assert rope.cos[t, i].item() == pytest.approx(torch.tensor(ang).cos().item(), abs=1e-7)
    assert rope.sin[t, i + 4].item() == pytest.approx(torch.tensor(ang).sin().item(), abs=1e-7)
