"""The decoder: norms, gate, causality, GQA, RoPE, named sizes, validation, config round trip."""

import pytest
import torch

from smallinit import ModelConfig, RMSNorm, Transformer
from smallinit.model import Attention, LayerNorm
from smallinit.model.attention import RotaryEmbedding, apply_rope
from smallinit.model.config import PRESETS, SIZES


def rmsnorm_ref(h, g, eps):
    h = h.double()
    return g.double() * h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("eps", [1e-5, 1e-12])
@pytest.mark.parametrize("scale", [1.0, 1e-5])  # 1e-5 → variance 1e-10, far below ε = 1e-5
def test_rmsnorm_matches_float64_reference(eps, scale):
    torch.manual_seed(0)
    norm = RMSNorm(256, eps)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    h = torch.randn(8, 256) * scale
    ref = rmsnorm_ref(h, norm.weight, eps)
    out = norm(h)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), ref, rtol=1e-6, atol=0)
    if scale == 1e-5 and eps == 1e-5:  # ε dominates: the output stays tiny instead of being rescaled
        assert ref.pow(2).mean().sqrt() < 0.01  # healthy output RMS would be ~1


def test_rmsnorm_runs_in_float32_under_bf16_autocast():
    torch.manual_seed(0)
    norm = RMSNorm(128, 1e-12)
    h = (torch.randn(4, 128) * 1e-5).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = norm(h)
    ref = rmsnorm_ref(h.float(), norm.weight, 1e-12)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, ref.float().bfloat16())  # exactly the fp64 result rounded to bf16
    # an fp32 input under autocast stays fp32 (residual stream precision kept)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(h.float()).dtype == torch.float32


def test_layernorm_float32_reference():
    ln = LayerNorm(64, 1e-12)
    h = torch.randn(3, 64) * 1e-4
    ref = (h.double() - h.double().mean(-1, keepdim=True)) / torch.sqrt(
        h.double().var(-1, unbiased=False, keepdim=True) + 1e-12
    )
    assert torch.allclose(ln(h).double(), ref, rtol=1e-5, atol=1e-6)


def _params(gate, **kw):
    return Transformer(ModelConfig.from_size("tiny", gate=gate, **kw)).num_params()


def test_gate_parameter_counts_exact():
    c = ModelConfig.from_size("tiny")
    base = _params("none")
    assert _params("headwise") - base == c.n_layers * c.d_model * c.n_heads
    assert _params("elementwise") - base == c.n_layers * c.d_model * c.n_heads * c.head_dim
    m = Transformer(ModelConfig.from_size("tiny", gate="none"))
    assert "gate" not in m.blocks[0].attn.matrices()


@pytest.mark.parametrize("mode", ["headwise", "elementwise"])
def test_zero_gate_halves_attention_output(mode):
    torch.manual_seed(0)
    gated = Attention(ModelConfig.from_size("tiny", gate=mode))
    plain = Attention(ModelConfig.from_size("tiny", gate="none"))
    with torch.no_grad():
        n = plain.w_qkvg.weight.shape[0]
        gated.w_qkvg.weight[:n] = plain.w_qkvg.weight
        gated.w_qkvg.weight[n:] = 0.0
        gated.w_o.weight.copy_(plain.w_o.weight)
    rope = RotaryEmbedding(32, 64, 10000.0)
    x = torch.randn(2, 16, 128)
    cos, sin = rope(16)
    assert torch.equal(gated(x, cos, sin), 0.5 * plain(x, cos, sin))


def test_causality():
    torch.manual_seed(0)
    m = Transformer(ModelConfig.from_size("tiny", gamma=0.5)).eval()
    idx = torch.randint(0, 8192, (1, 32))
    t = 17
    idx2 = idx.clone()
    idx2[0, t + 1] = (idx[0, t + 1] + 1) % 8192
    a, b = m(idx), m(idx2)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1], b[:, t + 1])


def test_gqa_with_all_kv_heads_equals_mha_and_grouped_matches_repeat():
    torch.manual_seed(0)
    mha = Attention(ModelConfig.from_size("tiny", gate="none", gamma=0.5))
    gqa = Attention(ModelConfig.from_size("tiny", gate="none", gamma=0.5, n_kv_heads=4))
    gqa.load_state_dict(mha.state_dict())
    cos, sin = RotaryEmbedding(32, 64, 10000.0)(24)
    x = torch.randn(2, 24, 128)
    assert torch.equal(mha(x, cos, sin), gqa(x, cos, sin))
    # grouped (2 kv heads): SDPA output equals explicit attention weights @ repeated V
    grouped = Attention(ModelConfig.from_size("tiny", gate="none", gamma=0.5, n_kv_heads=2))
    w = grouped.attention_weights(x, cos, sin)
    _, _, v, _ = grouped._project(x, cos, sin)
    y = (w @ v.repeat_interleave(2, dim=1)).transpose(1, 2).reshape(2, 24, 128)
    assert torch.allclose(grouped(x, cos, sin), grouped.w_o(y), atol=1e-5)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 24))


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryEmbedding(32, 128, 10000.0)
    cos, sin = rope(128)
    q, k = torch.randn(32), torch.randn(32)

    def score(i, j):
        return (apply_rope(q, cos[i], sin[i]) @ apply_rope(k, cos[j], sin[j])).item()

    assert score(10, 3) == pytest.approx(score(57, 50), rel=1e-4, abs=1e-5)
    assert score(100, 0) == pytest.approx(score(120, 20), rel=1e-4, abs=1e-5)
    assert score(10, 3) != pytest.approx(score(10, 4), rel=1e-3)


@pytest.mark.parametrize("name,target", [("0.1b", 0.1e9), ("0.3b", 0.3e9), ("0.7b", 0.7e9), ("1.5b", 1.5e9)])
def test_paper_sizes_parameter_counts(name, target):
    cfg = ModelConfig.from_size(name)
    assert (cfg.gamma, cfg.norm_eps, cfg.gate) == (1.0, 1e-12, "elementwise")
    with torch.device("meta"):
        m = Transformer(cfg)
    n = m.num_params()
    assert abs(n - target) / target < 0.10, n
    # the count follows from the shapes alone
    d, L, V, f = cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.d_ff
    per_block = d * (cfg.n_heads * cfg.head_dim * 3 + 2 * cfg.n_kv_heads * cfg.head_dim) + 3 * d * f + 2 * d
    assert n == L * per_block + V * d * (1 if cfg.tie_embeddings else 2) + d


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("n_heads", 5, "n_heads"),
        ("n_kv_heads", 4, "n_kv_heads"),
        ("d_model", 0, "d_model"),
        ("n_layers", -1, "n_layers"),
        ("gate", "sigmoid", "gate"),
        ("norm_eps", -1e-5, "norm_eps"),
        ("norm", "batchnorm", "norm"),
        ("vocab_size", 0, "vocab_size"),
        ("gamma", 0.0, "gamma"),
        ("max_seq_len", 0, "max_seq_len"),
        ("d_ff", 0, "d_ff"),
    ],
)
def test_bad_configs_name_the_field(field, value, match):
    kw = {field: value}
    if field == "n_kv_heads":
        kw["n_kv_heads"] = 3  # tiny has 4 heads: 3 kv heads cannot group them
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_size("tiny", **kw)


def test_config_round_trip_and_sizes():
    for name in SIZES:
        c = ModelConfig.from_size(name, gamma=0.5, init_overrides={"tok_emb.*": {"std": 0.02}})
        assert ModelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown field"):
        ModelConfig.from_dict({**ModelConfig().to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="unknown model size 'huge'; choose one of tiny, small"):
        ModelConfig.from_size("huge")


def test_the_old_names_of_sizes_still_work():
    """``PRESETS`` and ``from_preset`` are the old names of ``SIZES`` and ``from_size``."""
    import smallinit.model

    assert PRESETS is SIZES and smallinit.model.PRESETS is SIZES
    assert ModelConfig.from_preset("small", gamma=0.5) == ModelConfig.from_size("small", gamma=0.5)
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        ModelConfig.from_preset("huge")


def test_flops_and_params_accounting():
    m = Transformer(ModelConfig.from_size("small"))
    c = m.config
    n_ne = m.num_params(non_embedding=True)
    assert m.num_params() - n_ne == c.vocab_size * c.d_model  # tied: one embedding matrix
    assert m.flops_per_token(256) == 6 * (n_ne + c.vocab_size * c.d_model) + 12 * c.n_layers * 256 * c.d_model


def test_generate_greedy_is_deterministic_and_extends():
    torch.manual_seed(0)
    m = Transformer(ModelConfig.from_size("tiny", gamma=0.5)).eval()
    idx = torch.randint(0, 8192, (2, 5))
    a = m.generate(idx, 7, temperature=0)
    b = m.generate(idx, 7, temperature=0)
    assert a.shape == (2, 12) and torch.equal(a, b) and torch.equal(a[:, :5], idx)
    s = m.generate(idx, 4, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(0))
    assert s.shape == (2, 9)
