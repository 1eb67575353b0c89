"""The γ-rule: measured std of every weight follows fan_in^(-γ), on our model, HF Llama and plain modules."""

import math
import warnings

import pytest
import torch
from torch import nn

from smallinit import ModelConfig, Transformer, gamma_init


@pytest.mark.parametrize("gamma", [0.5, 1.0, 1.5])
def test_small_model_std_within_5pct(gamma):
    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_size("small", gamma=gamma))
    rep = model.init_report
    drawn = [r for r in rep.rows if r.target_std is not None]
    assert len(drawn) == 2 + 4 * 6 - 1  # emb (tied head), per block qkvg/o/gate_up/down
    for r in drawn:
        assert r.target_std == pytest.approx(r.fan_in**-gamma)
        assert abs(r.measured_std - r.target_std) / r.target_std < 0.05, r
    # and the tensors themselves, independently of the report
    w = model.blocks[2].mlp.w_down.weight
    assert w.std().item() == pytest.approx(1024**-gamma, rel=0.05)
    assert abs(w.mean().item()) < 3 * 1024**-gamma / math.sqrt(w.numel())
    for b in model.blocks:
        assert torch.all(b.attn_norm.weight == 1) and torch.all(b.mlp_norm.weight == 1)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 1.5])
def test_hf_llama_std_within_5pct(gamma):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every HF parameter must be covered by a rule
        rep = gamma_init(model, gamma=gamma)
    by_name = {r.name: r for r in rep.rows}
    assert by_name["model.layers.0.mlp.down_proj.weight"].fan_in == 352
    assert by_name["model.embed_tokens.weight"].fan_in == 128
    assert by_name["model.norm.weight"].rule == "ones"
    for name, p in model.named_parameters():
        r = by_name[name]
        if r.target_std is None:
            assert torch.all(p == 1) or torch.all(p == 0)
        else:
            assert abs(p.std().item() - r.fan_in**-gamma) / r.fan_in**-gamma < 0.05, name


def test_sequential_and_biases():
    net = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.GELU(), nn.Linear(512, 64))
    rep = gamma_init(net, gamma=1.0)
    assert net[0].weight.std().item() == pytest.approx(1 / 256, rel=0.05)
    assert net[3].weight.std().item() == pytest.approx(1 / 512, rel=0.05)
    assert torch.all(net[0].bias == 0) and torch.all(net[1].weight == 1) and torch.all(net[1].bias == 0)
    assert [r.name for r in rep.rows] == [n for n, _ in net.named_parameters()]
    text = str(rep)
    assert "0.weight" in text and "256" in text and "measured std" in text


def test_overrides_change_exactly_the_matched_parameters():
    cfg = ModelConfig.from_size("tiny", tie_embeddings=False)
    torch.manual_seed(0)
    model = Transformer(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    rep = gamma_init(model, 1.0, overrides={"tok_emb.*": 0.5, "lm_head.weight": {"std": 0.02}}, generator=gen)
    gen = torch.Generator().manual_seed(1)
    ref = gamma_init(Transformer(cfg), 1.0, generator=gen)
    for r, r0 in zip(rep.rows, ref.rows):
        if r.name == "tok_emb.weight":
            assert r.target_std == pytest.approx(128**-0.5) and r.rule == "gamma=0.5"
        elif r.name == "lm_head.weight":
            assert r.target_std == 0.02 and r.measured_std == pytest.approx(0.02, rel=0.05)
        else:
            assert r.target_std == r0.target_std and r.rule == r0.rule
    assert model.tok_emb.weight.std().item() == pytest.approx(128**-0.5, rel=0.05)
    assert not torch.equal(before["tok_emb.weight"], model.tok_emb.weight)


def test_generator_makes_draws_reproducible():
    a, b = nn.Linear(64, 64), nn.Linear(64, 64)
    gamma_init(a, 1.0, generator=torch.Generator().manual_seed(3))
    gamma_init(b, 1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.weight, b.weight)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "x"])
def test_bad_gamma_raises_with_value(bad):
    with pytest.raises(ValueError, match=str(bad) if bad != "x" else "'x'"):
        gamma_init(nn.Linear(4, 4), gamma=bad)
    with pytest.raises(ValueError, match="gamma"):
        gamma_init(nn.Linear(4, 4), gamma=1.0, overrides={"*": bad})


def test_unknown_parameter_types_warn_by_name():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.full((3,), 7.0))
            self.lin = nn.Linear(8, 8)

    m = Odd()
    with pytest.warns(UserWarning, match="'scale'"):
        rep = gamma_init(m, 1.0)
    assert rep.skipped == ["scale"] and torch.all(m.scale == 7.0)


def test_depth_scale_option_divides_output_projections():
    torch.manual_seed(0)
    m = Transformer(ModelConfig.from_size("small", init_depth_scale=True))
    assert m.blocks[0].attn.w_o.weight.std().item() == pytest.approx(384**-1 / math.sqrt(12), rel=0.05)
    assert m.blocks[0].mlp.w_down.weight.std().item() == pytest.approx(1024**-1 / math.sqrt(12), rel=0.05)
    assert m.blocks[0].attn.w_qkvg.weight.std().item() == pytest.approx(384**-1, rel=0.05)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 1.5])
def test_linear_output_norm_scales_as_d_pow_one_minus_gamma(gamma):
    """Unit-RMS input (‖x‖ = √d): each output has variance d·σ² = d^(1−2γ), so ‖Wx‖ = d^(1−γ)."""
    ds = torch.tensor([64, 128, 256, 512, 1024])
    g = torch.Generator().manual_seed(0)
    norms = []
    for d in ds.tolist():
        lin = nn.Linear(d, d, bias=False)
        gamma_init(lin, gamma, generator=g)
        x = torch.randn(256, d, generator=g)
        x = x / x.pow(2).mean(-1, keepdim=True).sqrt()
        norms.append(lin(x).norm(dim=-1).mean().item())
    A = torch.stack([ds.double().log(), torch.ones(len(ds), dtype=torch.float64)], 1)
    slope = torch.linalg.lstsq(A, torch.tensor(norms, dtype=torch.float64).log().unsqueeze(1)).solution[0].item()
    assert abs(slope - (1 - gamma)) < 0.05, slope
