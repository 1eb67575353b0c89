"""smallinit.apply_recipe: ε, the attention output gate and the γ-rule on our Transformer and on Hugging Face
Llama, Mistral, Qwen2 and Qwen3 (built from local configs); what cannot be patched is refused in one line; a patched
Llama trains with transformers' Trainer, saves and loads back with its gates, equals our Transformer with the gate
(parity), and is exported and audited through a smallinit run directory."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import smallinit
from smallinit.audit import load_report
from smallinit.cli import main as cli
from smallinit.core.errors import ConfigError
from smallinit.interop.recipe import OutputGate
from smallinit.interop.recipe_io import to_llama, to_transformer
from smallinit.model import ModelConfig, Transformer

transformers = pytest.importorskip("transformers")

V, D, L, H, KV, FF, T = 64, 32, 2, 4, 2, 64, 32
HF_SIZES = dict(
    vocab_size=V,
    hidden_size=D,
    intermediate_size=FF,
    num_hidden_layers=L,
    num_attention_heads=H,
    num_key_value_heads=KV,
    max_position_embeddings=T,
)
FAMILIES = {  # model_type: (config class, model class, extra config fields)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": D // H}),
}


@pytest.fixture(autouse=True, scope="module")
def hf_modules_cache():
    """Remote code loaded by transformers goes to this session's temporary cache (conftest's SMALLINIT_CACHE)."""
    import transformers.dynamic_module_utils as dmu

    old = dmu.HF_MODULES_CACHE
    dmu.HF_MODULES_CACHE = str(Path(os.environ["SMALLINIT_CACHE"]) / "hf_modules")
    yield
    dmu.HF_MODULES_CACHE = old


def hf_model(family: str = "llama", seed: int = 0, **kw) -> nn.Module:
    """A random tiny causal LM of ``family`` built from a local config (float32, eval mode)."""
    cfg_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_cls)(**{**HF_SIZES, **extra, **kw})
    return getattr(transformers, model_cls)(cfg).eval()


def logits(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(idx)
    return out if isinstance(out, torch.Tensor) else out.logits


def ids(seed: int = 1, batch: int = 2, seq: int = 12) -> torch.Tensor:
    return torch.randint(0, V, (batch, seq), generator=torch.Generator().manual_seed(seed))


def norms_eps(model: nn.Module) -> dict[str, float]:
    return {
        n: float(getattr(m, "variance_epsilon", getattr(m, "eps", math.nan)))
        for n, m in model.named_modules()
        if "norm" in type(m).__name__.lower()
    }


# ---- Hugging Face families ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_recipe_patches_each_family_eps_gate_and_gamma(family):
    model = hf_model(family)
    n_norms = len(norms_eps(model))
    report = smallinit.apply_recipe(model, gamma=1.0, norm_eps=1e-12, gate="elementwise")
    assert report.family == family and report.gate == "elementwise"
    assert len(report.norms) == n_norms >= 2 * L + 1  # qwen3: q_norm and k_norm too
    assert set(norms_eps(model).values()) == {1e-12} and model.config.rms_norm_eps == 1e-12
    assert model.config.smallinit_recipe == {"gamma": 1.0, "norm_eps": 1e-12, "gate": "elementwise"}
    assert [name for name, _ in report.gates] == [f"model.layers.{i}.self_attn" for i in range(L)]
    for layer in model.model.layers:
        assert isinstance(layer.self_attn.o_proj, OutputGate)
        assert tuple(layer.self_attn.o_proj.gate.weight.shape) == (H * (D // H), D)
    # the γ-rule: every matrix (the gates too) at σ = fan_in^-1, gains 1, biases 0
    rows = {r.name: r for r in report.init.rows}
    assert "model.layers.0.self_attn.o_proj.gate.weight" in rows
    assert report.init.max_rel_error() < 0.15 and not report.init.skipped
    assert rows["model.layers.1.mlp.down_proj.weight"].target_std == pytest.approx(FF**-1.0)
    assert all(r.rule == "ones" for n, r in rows.items() if "norm" in n)
    # trains: the loss has a gradient on every gate
    model.train()
    model(ids(), labels=ids()).loss.backward()
    assert all(layer.self_attn.o_proj.gate.weight.grad.abs().sum() > 0 for layer in model.model.layers)
    assert "RMSNorm ε = 1e-12" in str(report) and json.dumps(report.to_dict())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_gate_sits_between_the_heads_and_o_proj(family):
    """With W_g = 0 every gate is sigmoid(0) = 1/2: the patched model equals the plain one with W_O halved (the
    gate multiplies o_proj's input, in every family, and nothing else changed)."""
    plain, gated = hf_model(family, seed=3), hf_model(family, seed=3)
    smallinit.apply_recipe(gated, norm_eps=plain.config.rms_norm_eps, gate="elementwise", init=False)
    with torch.no_grad():
        for lp, lg in zip(plain.model.layers, gated.model.layers):
            lp.self_attn.o_proj.weight.mul_(0.5)
            lg.self_attn.o_proj.gate.weight.zero_()
    torch.testing.assert_close(logits(gated, ids()), logits(plain, ids()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["elementwise", "headwise"])
def test_output_gate_computes_y_h_times_sigmoid_x_w_gh(mode):
    """DESIGN §2: Y'_h = Y_h ⊙ sigmoid(X W_g,h), then W_O (and its bias), written out head by head."""
    torch.manual_seed(0)
    hd = D // H
    o_proj = nn.Linear(D, D, bias=True)
    og = OutputGate(o_proj, D, H, mode)
    nn.init.normal_(og.gate.weight)
    x, y = torch.randn(2, 5, D), torch.randn(2, 5, H * hd)
    og.capture(None, (), {"hidden_states": x})
    got = og(y)
    g = og.gate.weight.view(H, -1, D)  # (H, 1 or hd, D)
    heads = [y[..., h * hd : (h + 1) * hd] * torch.sigmoid(x @ g[h].T) for h in range(H)]
    torch.testing.assert_close(got, o_proj(torch.cat(heads, dim=-1)))
    assert og.weight is o_proj.weight and og.bias is o_proj.bias
    with pytest.raises(RuntimeError, match="no gate input"):
        og(y)  # X is used once: a call outside the attention's forward is an error, not a stale gate


def test_reapplying_changes_or_removes_the_gate_and_keeps_weights_with_init_false():
    model = hf_model()
    smallinit.apply_recipe(model, gate="elementwise")
    w_q = model.model.layers[0].self_attn.q_proj.weight.clone()
    r = smallinit.apply_recipe(model, gamma=0.5, norm_eps=1e-8, gate="headwise", init=False)
    assert r.init is None and model.config.smallinit_recipe == {"gamma": None, "norm_eps": 1e-8, "gate": "headwise"}
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, w_q)
    assert model.model.layers[0].self_attn.o_proj.gate.weight.shape == (H, D)
    assert len(model.model.layers[0].self_attn._forward_pre_hooks) == 1
    r = smallinit.apply_recipe(model, gate="none", init=False)
    assert r.removed_gates == [f"model.layers.{i}.self_attn" for i in range(L)] and not r.gates
    layer = model.model.layers[0].self_attn
    assert type(layer.o_proj) is nn.Linear and not layer._forward_pre_hooks
    assert not any(".gate." in k for k in model.state_dict())
    logits(model, ids())  # still runs


# ---- our Transformer ----------------------------------------------------------------------------------------------


def test_recipe_on_our_transformer_sets_config_eps_gate_and_gamma():
    cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=H, n_kv_heads=KV, d_ff=FF, max_seq_len=T)
    model = Transformer(ModelConfig(**{**cfg.to_dict(), "gate": "none", "norm_eps": 1e-5, "gamma": 0.5}))
    report = smallinit.apply_recipe(model)
    assert model.config.gate == "elementwise" and model.config.norm_eps == 1e-12 and model.config.gamma == 1.0
    assert report.config == {"gamma": (0.5, 1.0), "norm_eps": (1e-5, 1e-12), "gate": ("none", "elementwise")}
    assert [n for n, _ in report.gates] == ["blocks.0.attn", "blocks.1.attn"] and report.gates[0][1] == (D, D)
    assert {e for _, _, e in report.norms} == {1e-12} and len(report.norms) == 2 * L + 1
    assert all(m.eps == 1e-12 for m in model.modules() if isinstance(m, smallinit.RMSNorm))
    assert report.init.max_rel_error() < 0.15 and report.init.gamma == 1.0
    assert logits(model, ids()).shape == (2, 12, V)
    # init=False keeps q, k, v, W_O and draws only the new gate rows (fan-in d_model)
    before = {k: v.clone() for k, v in model.blocks[0].attn.matrices().items()}
    smallinit.apply_recipe(model, gate="headwise", init=False)
    after = model.blocks[0].attn.matrices()
    assert all(torch.equal(before[k], after[k]) for k in ("q", "k", "v", "o")) and after["gate"].shape == (H, D)


# ---- refusals -----------------------------------------------------------------------------------------------------


def _gpt2():
    c = transformers.GPT2Config(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=T, bos_token_id=0)
    return transformers.GPT2LMHeadModel(c)


def _llama_with_layernorm():
    m = hf_model()
    m.model.layers[1].post_attention_layernorm = nn.LayerNorm(D)
    return m


def _llama_with_gated_q():
    m = hf_model()
    m.model.layers[0].self_attn.q_proj = nn.Linear(D, 2 * D, bias=False)
    return m


REFUSALS = {
    "gpt2": (_gpt2, "no Llama-layout attention"),
    "gemma": (lambda: transformers.GemmaForCausalLM(transformers.GemmaConfig(head_dim=8, **HF_SIZES)), r"\(1 \+ g\)"),
    "olmo2": (lambda: transformers.Olmo2ForCausalLM(transformers.Olmo2Config(**HF_SIZES)), "pre-norm"),
    "mixtral": (
        lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(num_local_experts=2, **HF_SIZES)),
        "no fan-in for model.layers.0.mlp",
    ),
    "layernorm": (_llama_with_layernorm, "is a LayerNorm, not an RMSNorm"),
    "gated-q": (_llama_with_gated_q, "q_proj has 64 outputs"),
    "ours-layernorm": (
        lambda: Transformer(ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=H, d_ff=FF, norm="layernorm")),
        "the model has norm='layernorm'",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_cannot_be_patched_is_refused_in_one_line_and_left_untouched(case):
    build, msg = REFUSALS[case]
    model = build()
    eps, state = norms_eps(model), {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError, match=msg) as e:
        smallinit.apply_recipe(model)
    assert "\n" not in str(e.value) and str(e.value).startswith("apply_recipe: ")
    assert norms_eps(model) == eps and not any(isinstance(m, OutputGate) for m in model.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"gate": "channel"}, "gate must be one of none, headwise, elementwise"),
        ({"norm_eps": 0.0}, "norm_eps must be a finite number > 0"),
        ({"gamma": -1}, "gamma must be a finite number > 0"),
        ({"overrides": {"model.embed_tokens.*": {"std": -1}}}, "std must be a finite number >= 0"),
    ],
)
def test_bad_arguments_are_refused(kw, msg):
    model = hf_model()
    with pytest.raises(ConfigError, match=msg):
        smallinit.apply_recipe(model, **kw)
    assert model.config.rms_norm_eps == 1e-6 and not any(isinstance(m, OutputGate) for m in model.modules())


def test_overrides_set_their_own_std():
    model = hf_model()
    report = smallinit.apply_recipe(model, overrides={"model.embed_tokens.*": 0.5})
    assert report.init.row("model.embed_tokens.weight").target_std == pytest.approx(D**-0.5)
    assert report.init.row("lm_head.weight").target_std == pytest.approx(D**-1.0)


def test_conversion_refuses_what_our_transformer_does_not_compute():
    m = hf_model("qwen2")
    smallinit.apply_recipe(m)
    with pytest.raises(ConfigError, match="to_transformer: 'qwen2' is not a Llama model"):
        to_transformer(m)
    moe = Transformer(ModelConfig(vocab_size=V, d_model=D, n_layers=1, n_heads=H, d_ff=FF, max_seq_len=T))
    moe.config.moe.n_experts = 2
    with pytest.raises(ConfigError, match="to_llama: an MoE model"):
        to_llama(moe)


# ---- parity: our Transformer with the gate == a Llama patched to the same shape and weights ----------------------


@pytest.mark.parametrize(
    "gate,n_kv,tie", [("elementwise", KV, False), ("headwise", H, True), ("none", 1, False)], ids=str
)
def test_parity_our_gated_transformer_vs_patched_llama(gate, n_kv, tie):
    cfg = ModelConfig(
        vocab_size=V, d_model=D, n_layers=L, n_heads=H, n_kv_heads=n_kv, d_ff=FF, max_seq_len=T, gate=gate,
        tie_embeddings=tie, gamma=0.5, rope_theta=5000.0,
    )  # fmt: skip
    torch.manual_seed(0)
    ours = Transformer(cfg).eval()
    with torch.no_grad():  # norm gains away from 1, so that a swapped or dropped norm shows
        for p in ours.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.5 * torch.randn_like(p))
    llama = to_llama(ours)
    assert type(llama).__name__ == "LlamaForCausalLM" and llama.config.rms_norm_eps == 1e-12
    assert sum(isinstance(m, OutputGate) for m in llama.modules()) == (0 if gate == "none" else L)
    x = ids(seq=T)
    assert (logits(ours, x) - logits(llama, x)).abs().max() < 1e-4
    back = to_transformer(llama)
    assert back.config == cfg
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def test_a_patched_llama_converts_to_our_transformer_with_equal_logits():
    llama = hf_model(tie_word_embeddings=True)
    smallinit.apply_recipe(llama, gamma=1.0, gate="elementwise", generator=torch.Generator().manual_seed(0))
    ours = to_transformer(llama)
    assert ours.config.gate == "elementwise" and ours.config.norm_eps == 1e-12 and ours.config.gamma == 1.0
    assert ours.config.tie_embeddings
    x = ids(seq=T)
    assert (logits(ours, x) - logits(llama, x)).abs().max() < 1e-4


# ---- Trainer, save/load, export, audit ----------------------------------------------------------------------------


class CountingData(torch.utils.data.Dataset):
    """Sequences (s, s+1, s+2, ...) mod V: the next token is the current one plus one."""

    def __init__(self, n: int = 256, seq: int = 16):
        g = torch.Generator().manual_seed(0)
        self.rows = (torch.randint(0, V, (n, 1), generator=g) + torch.arange(seq)) % V

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def word_tokenizer(path: Path) -> Path:
    """A tokenizer.json of V words (id 0 = <|endoftext|>), small enough for the tiny model's vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, V)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A patched tiny Llama trained by transformers' Trainer for 40 steps and saved by it: (trainer, folder)."""
    tmp = tmp_path_factory.mktemp("recipe-trainer")
    model = hf_model()
    smallinit.apply_recipe(model, generator=torch.Generator().manual_seed(0))
    args = transformers.TrainingArguments(
        output_dir=str(tmp / "out"),
        max_steps=40,
        per_device_train_batch_size=16,
        learning_rate=1e-2,
        warmup_steps=4,
        logging_steps=4,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=CountingData())
    trainer.train()
    saved = tmp / "saved"
    trainer.save_model(str(saved))
    word_tokenizer(saved / "tokenizer.json")
    return trainer, saved


def test_trainer_trains_a_patched_llama_and_the_saved_folder_loads_back_with_its_gates(trained):
    trainer, saved = trained
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) >= 5 and losses[-1] < 0.5 * losses[0], losses
    model = trainer.model.eval()
    conf = json.loads((saved / "config.json").read_text())
    assert conf["rms_norm_eps"] == 1e-12 and conf["smallinit_recipe"]["gate"] == "elementwise"
    loaded = smallinit.load_recipe_model(saved)
    assert all(isinstance(layer.self_attn.o_proj, OutputGate) for layer in loaded.model.layers)
    assert set(norms_eps(loaded).values()) == {1e-12}
    want, got = model.state_dict(), loaded.state_dict()
    assert set(want) == set(got) and any(".o_proj.gate." in k for k in got)
    assert all(torch.equal(want[k], got[k]) for k in want)
    x = ids(seq=16)
    assert torch.equal(logits(loaded, x), logits(model, x))


def test_load_recipe_model_refuses_a_folder_without_the_recipe_record(tmp_path):
    hf_model().save_pretrained(str(tmp_path / "plain"))
    with pytest.raises(ConfigError, match="no smallinit_recipe record"):
        smallinit.load_recipe_model(tmp_path / "plain")


def test_export_through_a_run_directory_and_audit(trained, tmp_path, capsys):
    trainer, saved = trained
    model = trainer.model.eval()
    run = smallinit.write_recipe_run(saved, tmp_path / "run")
    assert (run / "config.yaml").is_file() and (run / "tokenizer.json").is_file()
    out = tmp_path / "hf"
    assert cli(["export", str(run), "--to", "hf", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == ["SmallinitForCausalLM"] and conf["gate"] == "elementwise"
    assert conf["rms_norm_eps"] == 1e-12
    exported = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32)
    x = ids(seq=16)
    assert (logits(exported.eval(), x) - logits(model, x)).abs().max() < 1e-4


def test_smallinit_audit_of_a_patched_llama_run_shows_gamma_one_eps_and_gates(tmp_path, capsys):
    """``smallinit audit RUN`` of a freshly patched Llama written as a run: implied γ ≈ 1 for every matrix (the
    gates among them), every norm at ε = 1e-12."""
    model = hf_model()
    smallinit.apply_recipe(model, gamma=1.0, generator=torch.Generator().manual_seed(0))
    run = smallinit.write_recipe_run(model, tmp_path / "run", tokenizer=word_tokenizer(tmp_path / "tok.json"))
    assert cli(["audit", str(run), "--no-figures", "--seq", "16", "--batch", "2", "--out", str(tmp_path / "a")]) == 0
    assert "attn.gate [0–1]" in capsys.readouterr().out
    rep = load_report(tmp_path / "a")
    gates = [m for m in rep.matrices if m.kind == "attn.gate"]
    assert len(gates) == L and all(tuple(m.shape) == (D, D) for m in gates)
    assert all(abs(m.implied_gamma - 1.0) < 0.05 for m in rep.matrices), [
        (m.name, m.implied_gamma) for m in rep.matrices
    ]
    assert {n.eps for n in rep.norms} == {1e-12}


def test_audit_of_a_freshly_patched_llama_shows_gamma_one_eps_and_gates():
    model = hf_model()
    smallinit.apply_recipe(model, gamma=1.0, generator=torch.Generator().manual_seed(0))
    report = smallinit.audit(model, gamma=1.0, batch=2, seq_len=16)
    gates = [m for m in report.matrices if m.name.endswith("o_proj.gate.weight")]
    assert len(gates) == L and all(m.shape == (D, D) for m in gates)
    assert all(abs(m.implied_gamma - 1.0) < 0.05 for m in report.matrices), [
        (m.name, m.implied_gamma) for m in report.matrices
    ]
    assert {n.eps for n in report.norms} == {1e-12}


def test_greedy_generation_with_the_kv_cache_equals_full_recomputation():
    """The gate reads only the new tokens' hidden states when generate() decodes with the cache."""
    model = hf_model(eos_token_id=None, bos_token_id=None, pad_token_id=None)
    smallinit.apply_recipe(model, gamma=0.5, generator=torch.Generator().manual_seed(0))
    x = ids(batch=2, seq=4)
    got = model.generate(x, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(x))
    want = x
    for _ in range(8):
        want = torch.cat([want, logits(model, want)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, want)
