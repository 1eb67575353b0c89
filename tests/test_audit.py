"""smallinit audit: implied γ, ε-dominated norms, width slopes, first-step gradients under Adam's ε, and HF configs
audited from config.json alone (no network)."""

from __future__ import annotations

import json
import math
import socket

import pytest
import torch
from torch import nn

from smallinit import ModelConfig, RMSNorm, Transformer, gamma_init
from smallinit.audit import audit, audit_widths, check_out_dir, grad_eps_stats, implied_gamma, loglog_slope
from smallinit.core.errors import ConfigError

transformers = pytest.importorskip("transformers")


def _tiny(gamma: float, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig.from_size("tiny", gamma=gamma, **kw))


def _small_llama_config(**kw):
    d = dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    d.update(kw)
    return transformers.LlamaConfig(**d)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket fails the test."""

    def refuse(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ---- implied γ ---------------------------------------------------------------------------------------


def test_implied_gamma_formula():
    assert implied_gamma(4096**-0.5, 4096) == pytest.approx(0.5)
    assert implied_gamma(0.02, 4096) == pytest.approx(-math.log(0.02) / math.log(4096))
    assert implied_gamma(0.02, 4096) == pytest.approx(0.470, abs=1e-3)  # the example
    assert implied_gamma(0.02, 400) == pytest.approx(0.653, abs=1e-3)
    assert implied_gamma(0.0, 128) is None and implied_gamma(0.1, 1) is None


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_implied_gamma_recovers_gamma_init_on_our_transformer(gamma):
    model = _tiny(gamma)
    rep = audit(model, gamma=gamma, batch=2, seq_len=32)
    names = {m.name for m in rep.matrices}
    # logical matrices of the fused projections, the tied embedding once
    assert {"tok_emb.weight", "blocks.0.attn.q", "blocks.0.attn.gate", "blocks.3.mlp.down"} <= names
    assert len(rep.matrices) == 1 + 4 * (5 + 3)
    for m in rep.matrices:
        assert abs(m.implied_gamma - gamma) < 0.02, m
        assert m.target_std == pytest.approx(m.fan_in**-gamma)
    assert rep.matrices[[m.name for m in rep.matrices].index("blocks.0.mlp.down")].fan_in == 384
    assert abs(rep.gamma_median() - gamma) < 0.02
    # every norm and both branches of every block were seen
    assert len(rep.norms) == 2 * 4 + 1 and len(rep.branches) == 2 * 4


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_implied_gamma_recovers_gamma_init_on_hf_llama(gamma):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_small_llama_config())
    gamma_init(model, gamma)
    rep = audit(model, gamma=gamma, batch=2, seq_len=32)
    assert len(rep.matrices) == 2 + 2 * 7  # embed, head, q k v o gate up down per layer
    for m in rep.matrices:
        assert abs(m.implied_gamma - gamma) < 0.02, m
    down = next(m for m in rep.matrices if m.name == "model.layers.1.mlp.down_proj.weight")
    assert down.fan_in == 352 and down.shape == (128, 352)
    # HF Llama layout: input_layernorm→self_attn, post_attention_layernorm→mlp; Llama's RMSNorm ε is variance_epsilon
    assert {(b.block, b.branch) for b in rep.branches} == {
        (f"model.layers.{i}", k) for i in range(2) for k in ("attn", "mlp")
    }
    assert len(rep.norms) == 5 and all(n.eps == pytest.approx(1e-6) for n in rep.norms)


def test_hf_default_init_implies_the_fixed_std():
    """transformers' own init (initializer_range 0.02 everywhere) implies γ = −ln 0.02 / ln fan_in: smaller fan-in,
    larger γ."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_small_llama_config())
    rep = audit(model, backward=False, batch=1, seq_len=8)
    for m in rep.matrices:
        assert m.std == pytest.approx(0.02, rel=0.05)
        assert abs(m.implied_gamma - implied_gamma(0.02, m.fan_in)) < 0.02
    q = next(m for m in rep.matrices if m.name.endswith("layers.0.self_attn.q_proj.weight"))
    d = next(m for m in rep.matrices if m.name.endswith("layers.0.mlp.down_proj.weight"))
    assert q.implied_gamma > d.implied_gamma  # fan_in 128 vs 352


# ---- ε-dominated norms -------------------------------------------------------------------------------


class _TinyActs(nn.Module):
    """Embedding → RMSNorm → head, with an embedding std of ``scale`` (mean square scale² per token)."""

    def __init__(self, eps: float, scale: float, vocab: int = 64, d: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.norm = RMSNorm(d, eps)
        self.head = nn.Linear(d, vocab, bias=False)
        with torch.no_grad():
            self.emb.weight.normal_(0, scale)

    def forward(self, idx):
        return self.head(self.norm(self.emb(idx)))


def test_tiny_activations_are_flagged_eps_dominated():
    torch.manual_seed(0)
    x = torch.randint(0, 64, (2, 16))
    rep = audit(_TinyActs(eps=1e-5, scale=1e-4), x)  # ms ≈ 1e-8 ≪ ε = 1e-5
    (n,) = rep.norms
    assert n.mean_square == pytest.approx(1e-8, rel=0.3)
    assert n.saturation < 0.01 and n.status == "eps-dominated"
    assert rep.eps_dominated() == [n]
    assert "ε-DOMINATED" in rep.summary()
    # the same activations with ε = 1e-12 are healthy: the flag must be able to stay down
    rep = audit(_TinyActs(eps=1e-12, scale=1e-4), x)
    assert rep.norms[0].status == "ok" and rep.norms[0].saturation > 0.999
    assert not rep.eps_dominated() and "ε-DOMINATED" not in rep.summary()


def test_layernorm_saturation_uses_the_centred_input():
    """A LayerNorm's ε competes with the variance: a large constant offset must not hide tiny fluctuations."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(16, eps=1e-5)

        def forward(self, x):
            return self.ln(x)

    x = 5.0 + 1e-4 * torch.randn(4, 8, 16)
    rep = audit(M(), x, backward=False)
    assert rep.norms[0].status == "eps-dominated"


# ---- width slope -------------------------------------------------------------------------------------


class _ResidualMap(nn.Module):
    """h + W·norm(h) with one d×d map W."""

    def __init__(self, d: int):
        super().__init__()
        self.norm = RMSNorm(d, 1e-12)
        self.map = nn.Linear(d, d, bias=False)

    def forward(self, h):
        return h + self.map(self.norm(h))


@pytest.mark.parametrize("gamma", [0.5, 1.0, 1.5])
def test_width_slope_of_a_gamma_map_is_one_minus_gamma(gamma):
    def build(d):
        torch.manual_seed(d)
        m = _ResidualMap(d)
        gamma_init(m, gamma)
        x = torch.randn(4, 32, d, generator=torch.Generator().manual_seed(1))
        return m, x, [("map", "map", m.norm, m.map)]

    study = audit_widths(build, [64, 128, 256, 512, 1024], gamma=gamma, backward=False)
    fit = study.fit("update.map")
    assert abs(fit.slope - (1 - gamma)) < 0.05, fit
    # the stream is unit-RMS random input (‖h‖ ∝ d^½), so flow = update/‖h‖ has slope ½ − γ
    assert abs(study.fit("flow.map").slope - (0.5 - gamma)) < 0.05
    assert abs(study.fit("implied_gamma.median").slope) < 0.01  # γ-init keeps γ at every width


def test_loglog_slope():
    assert loglog_slope([1, 2, 4, 8], [3, 6, 12, 24]) == pytest.approx(1.0)
    assert loglog_slope([10, 100], [1, 0.01]) == pytest.approx(-2.0)
    assert loglog_slope([1, 2], [1, None]) is None and loglog_slope([2, 2], [1, 3]) is None


# ---- the first optimizer step ------------------------------------------------------------------------


def test_grad_eps_stats_definition():
    g = torch.tensor([0.0, 1e-10, 1e-9, 1e-7, 1e-3])
    st = grad_eps_stats(g, 1e-8)
    assert st["zero"] == pytest.approx(0.2)
    assert st["below"] == pytest.approx(0.5)  # 1e-10, 1e-9 of the four nonzero entries
    want = sum(1e-8 / (a + 1e-8) for a in (1e-10, 1e-9, 1e-7, 1e-3)) / 4
    assert st["damping"] == pytest.approx(want)


@pytest.mark.parametrize("scale,expect_below", [(1e-9, True), (1.0, False)])
def test_small_gradients_are_counted_below_adam_eps(scale, expect_below):
    """loss = mean(out²)/2 of a linear map: the gradient (W x) xᵀ is linear in W — tiny weights, tiny gradients."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 64, bias=False)
    with torch.no_grad():
        lin.weight.normal_(0, scale)
    x = torch.randn(8, 64)
    rep = audit(lin, x, optimizer_eps=1e-8)
    m = rep.matrices[0]
    if expect_below:
        assert m.grad_below_eps > 0.99 and m.grad_damping > 0.9
        assert "below Adam's ε" in rep.summary()
    else:
        assert m.grad_below_eps < 0.01 and m.grad_damping < 0.01
    assert lin.weight.grad is None  # left as found


def test_grad_clip_shrinks_gradients_first():
    torch.manual_seed(0)
    lin = nn.Linear(64, 64, bias=False)
    x = torch.randn(8, 64)
    free = audit(lin, x, optimizer_eps=1e-4)
    clipped = audit(lin, x, optimizer_eps=1e-4, grad_clip=1e-6)
    assert clipped.sample["grad_norm"] == free.sample["grad_norm"] > 1e-6
    assert clipped.matrices[0].grad_below_eps > free.matrices[0].grad_below_eps


def test_audit_leaves_the_module_as_found():
    model = _tiny(1.0)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = model.blocks[0].attn.w_o.weight
    p.grad = torch.ones_like(p)
    out_before = model(torch.arange(8)[None])
    audit(model, batch=1, seq_len=16)
    assert model.training
    assert torch.equal(p.grad, torch.ones_like(p))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert torch.equal(model(torch.arange(8)[None]), out_before)


# ---- report renderings ----------------------------------------------------------------------------------


def test_report_renderings_and_out_dir(tmp_path):
    model = _tiny(0.5, norm_eps=1e-5)
    rep = audit(model, gamma=1.0, batch=2, seq_len=32, target="tiny γ=0.5")
    text = rep.table(width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "implied γ" in text and "attn.q [0–3]" in text
    assert rep.summary().startswith("This model's init is γ ≈ 0.5")
    md = rep.to_markdown()
    assert "| blocks.2.attn.k |" in md and "## Norms" in md
    d = json.loads(rep.to_json())
    assert d["kind"] == "smallinit-audit" and len(d["matrices"]) == len(rep.matrices)
    assert d["norms"][0]["status"] in ("ok", "eps-affected", "eps-dominated")
    out = tmp_path / "a"
    paths = rep.save(out, figures=True)
    assert {p.name for p in paths} == {"audit.json", "audit.md", "audit.png"}
    assert (out / "audit.png").stat().st_size > 1000
    rep.save(out, figures=False)  # a previous audit output may be rewritten
    foreign = tmp_path / "b"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an audit output"):
        check_out_dir(foreign)
    (out / "extra.txt").write_text("user file")
    with pytest.raises(ConfigError, match="did not write"):
        check_out_dir(out)


# ---- targets: HF configs, smallinit configs ----------------------------------------------------------------


def _write_hf_config(folder, **over):
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(
        model_type="llama",
        architectures=["LlamaForCausalLM"],
        vocab_size=300,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        torch_dtype="bfloat16",
    )
    cfg.update(over)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_hf_folder_with_only_a_config_audits_without_network(tmp_path, no_network):
    from smallinit.audit.targets import load_target

    folder = _write_hf_config(tmp_path / "llama-like")
    tgt = load_target(str(folder))
    assert tgt.kind == "hf-config" and type(tgt.module).__name__ == "LlamaForCausalLM"
    assert next(tgt.module.parameters()).dtype == torch.float32  # not the config's bfloat16
    assert tgt.module.config.num_hidden_layers == 3  # small enough to build whole
    rep = audit(tgt.module, gamma=1.0, batch=2, seq_len=16, notes=tgt.notes)
    assert len(rep.norms) == 7 and rep.norms[0].eps == pytest.approx(1e-5)
    assert all(abs(m.implied_gamma - implied_gamma(0.02, m.fan_in)) < 0.02 for m in rep.matrices)
    # a config.json file given directly, too big for the budget → a 1-block copy at full width, and it says so
    tgt = load_target(str(folder / "config.json"), max_params=10_000, blocks=1, vocab_cap=128)
    assert tgt.module.config.num_hidden_layers == 1 and tgt.module.config.hidden_size == 64
    assert tgt.module.config.vocab_size == 128
    assert any("copy with 1 of 3 blocks" in n for n in tgt.notes)
    assert any("Vocabulary cut from 300 to 128" in n for n in tgt.notes)


def test_cli_audits_a_qwen_style_config_with_widths(tmp_path, no_network, capsys):
    from smallinit.cli import main

    folder = _write_hf_config(
        tmp_path / "qwen-like",
        model_type="qwen2",
        architectures=["Qwen2ForCausalLM"],
        hidden_size=128,
        intermediate_size=448,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        num_hidden_layers=2,
    )
    out = tmp_path / "out"
    rc = main(["audit", str(folder), "--widths", "64,128,256", "--out", str(out), "--batch", "2", "--seq", "16"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "This model's init is γ ≈" in text and "vs width" in text
    d = json.loads((out / "audit.json").read_text())
    assert d["kind"] == "smallinit-audit" and d["widths"]["widths"] == [64, 128, 256]
    # fixed initializer_range: the implied γ falls as the width grows (ln 0.02 / ln d)
    g = next(f for f in d["widths"]["fits"] if f["quantity"] == "implied_gamma.median")
    assert g["values"][0] > g["values"][1] > g["values"][2]
    assert {"audit.md", "audit.png", "audit_widths.png"} <= {p.name for p in out.iterdir()}


def test_width_scaling_keeps_head_dim():
    from smallinit.audit.width_family import scale_hf_config, scale_model_config

    q = transformers.Qwen2Config(
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_key_value_heads=4,
        num_hidden_layers=28,
        vocab_size=152064,
    )
    s = scale_hf_config(q, 1024, n_layers=2, vocab_size=32768)
    assert (s.hidden_size, s.num_attention_heads, s.num_key_value_heads) == (1024, 8, 1)
    assert s.intermediate_size == round(18944 * 1024 / 3584) and s.num_hidden_layers == 2
    assert len(s.layer_types) == 2 and s.vocab_size == 32768
    assert q.hidden_size == 3584  # the original is untouched
    m = scale_model_config(ModelConfig.from_size("0.1b"), 256, n_layers=2)
    assert (m.d_model, m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff) == (256, 4, 1, 64, round(2048 / 3))
    with pytest.raises(ConfigError, match="head_dim"):
        scale_model_config(ModelConfig.from_size("0.1b"), 100)


def test_a_smallinit_width_over_the_budget_is_refused_with_its_parameter_count():
    """The width family of a smallinit config is counted by ModelConfig.num_params (no model built): the count of
    the model that width would build, named in the error."""
    from smallinit.audit.targets import load_target
    from smallinit.audit.width_family import scale_model_config
    from smallinit.train import load_config

    mcfg = load_config("tiny", []).model
    with torch.device("meta"):
        n = sum(p.numel() for p in Transformer(scale_model_config(mcfg, 4096), init=False).parameters())
    with pytest.raises(ConfigError, match=f"width 4096 builds a model of {n / 1e6:,.0f}M parameters"):
        load_target("tiny", widths=[64, 4096], max_params=2_000_000)
    assert load_target("tiny", widths=[64, 256], max_params=2_000_000_000).width == mcfg.d_model


def test_cli_config_name_with_overrides_and_bad_input(tmp_path, capsys):
    from smallinit.cli import main

    rc = main(
        [
            "audit",
            "tiny",
            "model.gamma=0.5",
            "model.d_model=64",
            "model.n_heads=2",
            "model.d_ff=128",
            "model.n_layers=2",
            "--gamma",
            "0.5",
            "--seq",
            "16",
            "--batch",
            "1",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "γ ≈ 0.5" in out
    # bad input: one error line, before any model is built
    assert main(["audit", "tiny", "--widths", "a,b"]) == 2
    assert "error: --widths" in capsys.readouterr().err
    assert main(["audit", "no-such-config"]) == 2
    assert "error: unknown config 'no-such-config'; configs: " in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    assert main(["audit", "tiny", "--out", str(busy)]) == 2
    assert "not an audit output" in capsys.readouterr().err
    assert main(["audit", "tiny", "--gamma", "-1"]) == 2


def test_load_report_round_trips(tmp_path):
    from smallinit.audit import load_report

    rep = audit(_tiny(1.0), batch=1, seq_len=16, notes=["!a note"])
    rep.save(tmp_path / "o", figures=False)
    back = load_report(tmp_path / "o")
    assert back.to_dict() == rep.to_dict()
    with pytest.raises(ConfigError):
        load_report(tmp_path)


def test_cli_audits_a_run_directory_and_its_checkpoint(tiny_cfg, tmp_path, capsys):
    """`smallinit audit RUN_DIR` (the README's example) reads the run's config.yaml and its latest checkpoint's
    weights; a checkpoint folder is audited alone; a damaged config.yaml is one error line."""
    from smallinit.cli import main
    from smallinit.runs.checkpoint import list_checkpoints
    from smallinit.train import train

    run = tmp_path / "run"
    train(tiny_cfg(**{"train.max_steps": 5}), run)
    capsys.readouterr()
    assert main(["audit", str(run), "--seq", "16", "--batch", "1"]) == 0
    out = "".join(capsys.readouterr().out.split())  # the text is wrapped at any space
    ckpt = list_checkpoints(run)[-1]
    assert f"Weightsofcheckpoint{ckpt}atstep5:atrainedstate" in out
    assert main(["audit", str(ckpt), "--seq", "16", "--batch", "1"]) == 0
    assert f"Weightsofcheckpoint{ckpt}atstep5" in "".join(capsys.readouterr().out.split())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.yaml").write_text("model: [unclosed\n")
    assert main(["audit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "config.yaml" in err and "Traceback" not in err
