"""Hugging Face export and import: transformers loads our export with equal logits, import→export is exact,
gated models use the Qwen3-Next q_proj folding, gated and MoE exports carry their own code (trust_remote_code=True)
and match our logits and greedy decoding, unsupported models and configs are refused."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
import torch

from smallinit.cli import main as cli
from smallinit.config import RunConfig
from smallinit.core.errors import CheckpointError, ConfigError
from smallinit.data.tokenizer import EOT_TOKEN, byte_tokenizer
from smallinit.interop.hf import (
    GATED_ARCH,
    export_hf,
    fold_gate,
    hf_config_dict,
    import_hf,
    load_hf_tensors,
    model_config_from_hf,
    unfold_gate,
)
from smallinit.model import ModelConfig, Transformer
from smallinit.runs.checkpoint import load_checkpoint, save_checkpoint

transformers = pytest.importorskip("transformers")

VOCAB = 260  # byte tokenizer: 257 tokens (+3 unused rows)
EOT = 256


@pytest.fixture(autouse=True, scope="module")
def hf_modules_cache():
    """Remote code loaded by transformers is copied into a modules cache: this session's temporary one (conftest's
    SMALLINIT_CACHE), not the user's ~/.cache/huggingface/modules."""
    import transformers.dynamic_module_utils as dmu

    old = dmu.HF_MODULES_CACHE
    dmu.HF_MODULES_CACHE = str(Path(os.environ["SMALLINIT_CACHE"]) / "hf_modules")
    yield
    dmu.HF_MODULES_CACHE = old


def small_cfg(**kw) -> ModelConfig:
    base = dict(
        vocab_size=VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=4,
        d_ff=64,
        max_seq_len=64,
        gate="none",
        gamma=0.5,
        norm_eps=1e-12,
        rope_theta=5000.0,
        tie_embeddings=True,
    )
    base.update(kw)
    return ModelConfig.from_size("tiny", **base)


def make_run(root: Path, cfg: ModelConfig, seed: int = 0, steps: tuple[int, ...] = (0,)) -> Path:
    """A run dir with checkpoints at ``steps`` (different random weights each; norm gains randomized too, so
    that a swapped or dropped norm shows in the logits) and the byte tokenizer."""
    run = root / "run"
    torch.manual_seed(seed)
    model = Transformer(cfg)
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
    for step in steps:
        model.reset_parameters()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.ndim == 1:
                    p.copy_(1 + 0.5 * torch.randn_like(p))
        save_checkpoint(
            run, step, model.state_dict(), {}, {"tokens": 0}, RunConfig(model=cfg).to_dict(), tied_keys=tied
        )
    byte_tokenizer().save(str(run / "tokenizer.json"))
    return run


def hf_logits(model, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx).logits


def ours_logits(model, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx)


# ----------------------------------------------------------------------------- export -> transformers


@pytest.mark.parametrize(
    "tie,n_kv,eps",
    [(True, 4, 1e-12), (False, 2, 0.05), (True, 1, 1e-5), (False, 4, 1e-12)],
    ids=["tied-mha", "untied-gqa", "tied-mqa", "untied-mha"],
)
def test_export_loads_in_transformers_with_equal_logits(tmp_path, tie, n_kv, eps):
    cfg = small_cfg(tie_embeddings=tie, n_kv_heads=n_kv, norm_eps=eps)
    run = make_run(tmp_path, cfg)
    out = tmp_path / "hf"
    assert cli(["export", str(run), "--to", "hf", str(out)]) == 0
    hf_cfg = json.loads((out / "config.json").read_text())
    assert hf_cfg["architectures"] == ["LlamaForCausalLM"]
    assert hf_cfg["rms_norm_eps"] == eps and hf_cfg["num_key_value_heads"] == n_kv
    assert hf_cfg["tie_word_embeddings"] is tie and hf_cfg["rope_theta"] == 5000.0
    assert hf_cfg["intermediate_size"] == 64 and hf_cfg["vocab_size"] == VOCAB

    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.rms_norm_eps == eps  # exactly, not a library default
    ours = load_checkpoint(run)
    idx = torch.randint(0, VOCAB, (3, 48), generator=torch.Generator().manual_seed(1))
    a, b = ours_logits(ours, idx), hf_logits(model, idx)
    assert a.std() > 0.3  # logits far from zero, so the tolerance below is a real test
    torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
    if tie:
        assert "lm_head.weight" not in load_hf_tensors(out)


def test_export_tokenizer_loads_offline_and_matches(tmp_path):
    run = make_run(tmp_path, small_cfg())
    out = export_hf(run, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ours = byte_tokenizer()
    eot = ours.token_to_id(EOT_TOKEN)
    text = "Small init: σ = d^(-γ), 小初始化!"
    assert tok(text)["input_ids"] == ours.encode(text).ids  # no BOS added
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.bos_token_id == eot and tok.eos_token_id == eot
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["bos_token_id"] == eot and cfg["eos_token_id"] == eot
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == eot


def test_export_picks_checkpoint_step_and_is_atomic(tmp_path):
    cfg = small_cfg(tie_embeddings=False)
    run = make_run(tmp_path, cfg, steps=(0, 5))
    out = tmp_path / "hf"
    export_hf(run, out, step=0)
    first = load_hf_tensors(out)["lm_head.weight"]
    from safetensors.torch import load_file

    step0 = load_file(str(run / "checkpoints/step_00000000/model.safetensors"))["lm_head.weight"]
    step5 = load_file(str(run / "checkpoints/step_00000005/model.safetensors"))["lm_head.weight"]
    assert torch.equal(first, step0) and not torch.equal(first, step5)
    from smallinit.core.io import umask

    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert set(modes.values()) == {0o666 & ~umask()}, modes  # the weights as readable as the rest (were 0600)
    with pytest.raises(ConfigError, match="already holds"):
        export_hf(run, out)
    assert cli(["export", str(run), "--to", "hf", str(out), "--force"]) == 0  # latest step now
    assert torch.equal(load_hf_tensors(out)["lm_head.weight"], step5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temporary folders left behind
    assert cli(["export", str(run), "--to", "hf", str(tmp_path / "x"), "--ckpt", "7"]) == 2


def test_export_through_a_symbolic_link_fills_its_folder_and_keeps_the_link(tmp_path, capsys):
    """An output folder given as a link (to scratch space, say) gets the export; the link stays a link — also when
    --force replaces a previous export there. A dangling link is refused before any work, with one error line."""
    run = make_run(tmp_path, small_cfg(tie_embeddings=False), steps=(0, 5))
    target = tmp_path / "scratch" / "hf"
    target.mkdir(parents=True)
    link = tmp_path / "hf-link"
    link.symlink_to(target, target_is_directory=True)
    export_hf(run, link, step=0)
    assert link.is_symlink() and (target / "model.safetensors").is_file()
    assert cli(["export", str(run), "--to", "hf", str(link), "--force"]) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert torch.equal(load_hf_tensors(link)["lm_head.weight"], load_hf_tensors(target)["lm_head.weight"])
    assert sorted(p.name for p in target.parent.iterdir()) == ["hf"]  # nothing left beside the target
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere", target_is_directory=True)
    capsys.readouterr()
    assert cli(["export", str(run), "--to", "hf", str(dangling)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link to" in err[0] and "does not exist" in err[0], err
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()


def test_export_bf16_weights(tmp_path):
    run = make_run(tmp_path, small_cfg())
    (tmp_path / "hf").mkdir()  # an existing empty folder is fine
    out = export_hf(run, tmp_path / "hf", dtype="bfloat16")
    t = load_hf_tensors(out)
    assert all(v.dtype == torch.bfloat16 for v in t.values())
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


@pytest.mark.parametrize("over", [dict(norm="layernorm"), dict(norm="layernorm", moe=dict(n_experts=4, top_k=2))])
def test_export_refuses_layernorm(tmp_path, capsys, over):
    run = make_run(tmp_path, small_cfg(**over))
    assert cli(["export", str(run), "--to", "hf", str(tmp_path / "hf")]) == 2
    assert "norm='layernorm'" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


# ----------------------------------------------------------------------------- gated layout


def test_fold_gate_interleaves_per_head():
    H, hd, d = 3, 4, 5
    q = torch.arange(H * hd * d, dtype=torch.float32).reshape(H * hd, d)
    for g in (hd, 1):
        gate = -torch.arange(H * g * d, dtype=torch.float32).reshape(H * g, d) - 1
        folded = fold_gate(q, gate, H)
        assert folded.shape == (H * (hd + g), d)
        for h in range(H):  # head h: its hd query rows, then its g gate rows
            block = folded[h * (hd + g) : (h + 1) * (hd + g)]
            assert torch.equal(block[:hd], q[h * hd : (h + 1) * hd]) and torch.equal(
                block[hd:], gate[h * g : (h + 1) * g]
            )
        q2, gate2 = unfold_gate(folded, H, hd)
        assert torch.equal(q2, q) and torch.equal(gate2, gate)


def test_gated_export_matches_qwen3_next_attention_without_qk_norm(tmp_path):
    """Our elementwise gate folded into q_proj is exactly Qwen3-Next's gated attention — apart from Qwen3-Next's
    per-head q/k RMSNorm, which is why no transformers class can hold the export (the README says so) and it carries
    its own code instead."""
    if not hasattr(transformers, "Qwen3NextForCausalLM"):
        pytest.skip("this transformers has no Qwen3-Next")
    cfg = small_cfg(gate="elementwise", n_kv_heads=2, tie_embeddings=False, norm_eps=1e-6)
    run = make_run(tmp_path, cfg)
    out = export_hf(run, tmp_path / "hf")
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == [GATED_ARCH] and conf["gate"] == "elementwise"
    assert "q_norm" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="trust_remote_code"):
        transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False)  # refused, not mis-loaded

    qc = transformers.Qwen3NextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        layer_types=["full_attention"] * 2,
        num_experts=0,
        partial_rotary_factor=1.0,
        rms_norm_eps=1e-6,
        rope_theta=5000.0,
        tie_word_embeddings=False,
        max_position_embeddings=64,
    )
    qwen = transformers.Qwen3NextForCausalLM(qc).eval()
    tensors = load_hf_tensors(out)
    # Qwen3-Next's RMSNorm multiplies by (1 + w): store w - 1
    tensors = {
        k: (v - 1 if k.endswith("layernorm.weight") or k == "model.norm.weight" else v) for k, v in tensors.items()
    }
    missing, unexpected = qwen.load_state_dict(tensors, strict=False)
    assert not unexpected and all("q_norm" in k or "k_norm" in k for k in missing)
    for layer in qwen.model.layers:
        layer.self_attn.q_norm = torch.nn.Identity()
        layer.self_attn.k_norm = torch.nn.Identity()
    idx = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(2))
    a = ours_logits(load_checkpoint(run), idx)
    assert a.std() > 0.3
    torch.testing.assert_close(hf_logits(qwen, idx), a, atol=1e-4, rtol=0)


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_gated_export_import_round_trip(tmp_path, gate):
    cfg = small_cfg(gate=gate, n_kv_heads=2)
    run = make_run(tmp_path, cfg)
    out = export_hf(run, tmp_path / "hf")
    g = 1 if gate == "headwise" else 8
    assert load_hf_tensors(out)["model.layers.0.self_attn.q_proj.weight"].shape == (4 * (8 + g), 32)
    back = import_hf(out, tmp_path / "back")
    m0, m1 = load_checkpoint(run), load_checkpoint(back)
    assert m1.config.gate == gate
    for (k, v0), (k1, v1) in zip(m0.state_dict().items(), m1.state_dict().items()):
        assert k == k1 and torch.equal(v0, v1), k


# ----------------------------------------------------------------------------- gated and MoE: remote code

REMOTE_CASES = {
    "gated-elementwise-gqa-untied": dict(gate="elementwise", n_kv_heads=2, tie_embeddings=False),
    "gated-headwise-mqa-tied": dict(gate="headwise", n_kv_heads=1, norm_eps=1e-5),
    "moe-gated-top2-shared-bias": dict(
        gate="elementwise",
        n_kv_heads=2,
        moe=dict(n_experts=4, top_k=2, n_shared_experts=1, d_expert=16, every=1, bias_update_rate=0.01),
    ),
    "moe-ungated-top1-every2": dict(
        gate="none", tie_embeddings=False, moe=dict(n_experts=3, top_k=1, d_expert=24, every=2)
    ),
}


def make_remote_run(root: Path, cfg: ModelConfig) -> Path:
    """:func:`make_run`, with the MoE routers' expert_bias (a checkpointed buffer) randomized too, so that a dropped
    or misapplied bias changes the expert choices."""
    run = make_run(root, cfg)
    if cfg.moe.bias_update_rate > 0:
        model = load_checkpoint(run)
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name.endswith("expert_bias"):
                    b.copy_(0.2 * torch.randn_like(b))
        save_checkpoint(
            run,
            0,
            model.state_dict(),
            {},
            {"tokens": 0},
            RunConfig(model=cfg).to_dict(),
            tied_keys=("lm_head.weight",) if cfg.tie_embeddings else (),
        )
    return run


def load_remote(out: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32).eval()


def greedy_ours(model, prompt: torch.Tensor, n: int) -> list[int]:
    """Our greedy continuation of ``prompt`` (1, T), cut after the first <|endoftext|> (where generate stops)."""
    new = model.generate(prompt, n, temperature=0)[0, prompt.shape[1] :].tolist()
    return new[: new.index(EOT) + 1] if EOT in new else new


@pytest.mark.parametrize("case", list(REMOTE_CASES))
def test_remote_code_export_loads_in_transformers_with_equal_logits_and_greedy_decoding(tmp_path, case):
    cfg = small_cfg(**REMOTE_CASES[case])
    run = make_remote_run(tmp_path, cfg)
    out = tmp_path / "hf"
    assert cli(["export", str(run), "--to", "hf", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == [GATED_ARCH] and conf["model_type"] == "smallinit"
    assert conf["auto_map"]["AutoModelForCausalLM"] == "modeling_smallinit.SmallinitForCausalLM"
    assert conf["rms_norm_eps"] == cfg.norm_eps and conf["num_experts"] == cfg.moe.n_experts
    assert (out / "modeling_smallinit.py").is_file() and (out / "configuration_smallinit.py").is_file()
    assert "trust_remote_code=True" in (out / "README.md").read_text()

    model = load_remote(out)
    assert type(model).__name__ == "SmallinitForCausalLM" and model.config.rms_norm_eps == cfg.norm_eps
    ours = load_checkpoint(run)
    idx = torch.randint(0, VOCAB, (3, 48), generator=torch.Generator().manual_seed(1))
    a = ours_logits(ours, idx)
    assert a.std() > 0.3
    torch.testing.assert_close(hf_logits(model, idx), a, atol=1e-4, rtol=0)
    if cfg.tie_embeddings:
        assert "lm_head.weight" not in load_hf_tensors(out)
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    for prompt in (idx[:1, :10], idx[1:2, :7]):
        want = greedy_ours(ours, prompt, 5)
        with torch.no_grad():
            runs = [
                model.generate(prompt, max_new_tokens=5, do_sample=False, use_cache=c)[0, prompt.shape[1] :].tolist()
                for c in (True, True, False)
            ]
        assert runs[0] == runs[1] == runs[2] == want, (runs, want)  # deterministic, with or without the KV cache


def test_remote_code_batched_generation_with_left_padding(tmp_path):
    """A left-padded batch (attention_mask, position_ids from generate) decodes each row as it decodes alone."""
    run = make_remote_run(tmp_path, small_cfg(**REMOTE_CASES["moe-gated-top2-shared-bias"]))
    model = load_remote(export_hf(run, tmp_path / "hf"))
    ours = load_checkpoint(run)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (1, n), generator=g) for n in (9, 4)]
    ids = torch.full((2, 9), EOT)
    mask = torch.zeros(2, 9, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, 9 - p.shape[1] :], mask[i, 9 - p.shape[1] :] = p[0], 1
    with torch.no_grad():
        got = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=EOT)[:, 9:]
    for i, p in enumerate(prompts):
        want = greedy_ours(ours, p, 4)
        assert got[i, : len(want)].tolist() == want


def test_remote_code_pipeline_and_tokenizer(tmp_path):
    run = make_remote_run(tmp_path, small_cfg(gate="elementwise"))
    out = export_hf(run, tmp_path / "hf")
    pipe = transformers.pipeline(
        "text-generation", model=str(out), trust_remote_code=True, device="cpu", dtype=torch.float32
    )
    text = "Small init"
    res = pipe(text, max_new_tokens=4, do_sample=False, return_full_text=False)
    ids = byte_tokenizer().encode(text).ids
    want = greedy_ours(load_checkpoint(run), torch.tensor([ids]), 4)
    assert res[0]["generated_text"] == pipe.tokenizer.decode(want, skip_special_tokens=True)


def test_remote_code_files_are_self_contained():
    """The files written into exports import only torch, transformers and each other (no smallinit, nothing else)."""
    from smallinit.interop.hf_remote import REMOTE_FILES, remote_code_sources

    srcs = remote_code_sources()
    assert sorted(srcs) == sorted(REMOTE_FILES)
    for name, code in srcs.items():
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [("." * node.level) + (node.module or "")]
            else:
                continue
            for m in mods:
                assert m.split(".")[0] in ("torch", "transformers") or m == ".configuration_smallinit", (name, m)


def test_remote_code_export_force_replaces_a_previous_export(tmp_path):
    run = make_run(tmp_path, small_cfg(gate="elementwise"))
    export_hf(run, tmp_path / "hf")
    export_hf(run, tmp_path / "hf", force=True)
    assert (tmp_path / "hf" / "modeling_smallinit.py").is_file()


@pytest.mark.parametrize("case", ["moe-gated-top2-shared-bias", "moe-ungated-top1-every2"])
def test_moe_export_import_round_trip(tmp_path, case):
    cfg = small_cfg(**REMOTE_CASES[case])
    run = make_remote_run(tmp_path, cfg)
    out = export_hf(run, tmp_path / "hf")
    t = load_hf_tensors(out)
    assert t["model.layers.1.mlp.experts.gate_up_proj"].shape == (cfg.moe.n_experts, 2 * cfg.moe.d_expert, 32)
    back = import_hf(out, tmp_path / "back")
    m0, m1 = load_checkpoint(run), load_checkpoint(back)
    assert m1.config.moe == cfg.moe
    s0, s1 = m0.state_dict(), m1.state_dict()
    assert sorted(s0) == sorted(s1)
    for k in s0:
        assert torch.equal(s0[k], s1[k]), k


# ----------------------------------------------------------------------------- import


def hf_llama(
    tmp_path: Path, name: str = "src", tie: bool = False, shard: bool = False, **cfg_kw
) -> tuple[Path, object]:
    """A random transformers LlamaForCausalLM saved as a local folder with the byte tokenizer."""
    conf = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_theta=20000.0,
        tie_word_embeddings=tie,
        bos_token_id=256,
        eos_token_id=256,
    )
    conf.update(cfg_kw)
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**conf)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if p.ndim == 1 else 0.3 * torch.randn_like(p))
    d = tmp_path / name
    model.save_pretrained(d, max_shard_size="20KB" if shard else "5GB")
    byte_tokenizer().save(str(d / "tokenizer.json"))
    return d, model


@pytest.mark.parametrize("tie,shard", [(False, True), (True, False)], ids=["untied-sharded", "tied-single"])
def test_import_then_export_is_identical(tmp_path, tie, shard):
    src, hf_model = hf_llama(tmp_path, tie=tie, shard=shard)
    if shard:
        assert (src / "model.safetensors.index.json").is_file()
    run = tmp_path / "run"
    assert cli(["import-hf", str(src), "--out", str(run)]) == 0
    assert (run / "config.yaml").is_file() and (run / "tokenizer.json").is_file()
    ours = load_checkpoint(run)
    assert ours.config.norm_eps == 1e-5 and ours.config.rope_theta == 20000.0 and ours.config.n_kv_heads == 2
    assert ours.config.tie_embeddings is tie and ours.config.gate == "none"
    idx = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(4))
    a = ours_logits(ours, idx)
    assert a.std() > 0.3
    torch.testing.assert_close(a, hf_logits(hf_model, idx), atol=1e-4, rtol=0)

    out = export_hf(run, tmp_path / "again")
    t0, t1 = load_hf_tensors(src), load_hf_tensors(out)
    assert sorted(t0) == sorted(t1)
    for k in t0:
        assert t0[k].dtype == t1[k].dtype and torch.equal(t0[k], t1[k]), k
    c0, c1 = json.loads((src / "config.json").read_text()), json.loads((out / "config.json").read_text())
    for key in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
    ):
        assert c0.get(key) == c1.get(key), key


def test_imported_run_is_usable_by_smallinit_eval(tmp_path):
    src, _ = hf_llama(tmp_path)
    run = import_hf(src, tmp_path / "run", max_seq_len=32)
    assert load_checkpoint(run).config.max_seq_len == 32
    items = tmp_path / "items.jsonl"
    items.write_text(
        "\n".join(json.dumps({"q": f"Is {i} even?", "choices": ["yes", "no"], "label": i % 2}) for i in range(4)) + "\n"
    )
    (tmp_path / "task.yaml").write_text('file: items.jsonl\nquestion: "Q: {q}\\nA:"\nchoices: choices\nlabel: label\n')
    res = tmp_path / "res.json"
    assert (
        cli(
            [
                "eval",
                str(run),
                "--tasks",
                str(tmp_path / "task.yaml"),
                "--data-dir",
                str(tmp_path),
                "--out",
                str(res),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads(res.read_text())["tasks"]["task"]["metrics"]["n"] == 4
    with pytest.raises(ConfigError, match="already holds"):
        import_hf(src, run)


@pytest.mark.parametrize(
    "change,msg",
    [
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(attention_bias=True), "attention_bias"),
        (dict(mlp_bias=True), "mlp_bias"),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
        (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}), "rope_parameters"),
        (dict(head_dim=16), "head_dim"),
        (dict(head_dim="abc"), "head_dim='abc' is not a whole number"),
        (dict(num_attention_heads=0), "invalid model"),
        (dict(hidden_size=64.5), "hidden_size=64.5 is not a whole number"),
        (dict(num_hidden_layers=True), "num_hidden_layers=True"),
        (dict(architectures=["MistralForCausalLM"], model_type="mistral"), "not supported"),
    ],
)
def test_import_refuses_unsupported_configs(tmp_path, capsys, change, msg):
    src, _ = hf_llama(tmp_path)
    conf = json.loads((src / "config.json").read_text())
    conf.update(change)
    if "rope_scaling" in change:
        conf.pop("rope_parameters", None)
    (src / "config.json").write_text(json.dumps(conf))
    capsys.readouterr()
    assert cli(["import-hf", str(src), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and msg in err and err.count("config.json") == 1, err  # said once, not rewrapped
    assert not (tmp_path / "run").exists()


def test_import_refuses_missing_or_mismatched_files(tmp_path):
    src, _ = hf_llama(tmp_path)
    (src / "tokenizer.json").rename(src / "tok.bak")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        import_hf(src, tmp_path / "r1")
    (src / "tok.bak").rename(src / "tokenizer.json")
    conf = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**conf, "intermediate_size": 64}))
    with pytest.raises(CheckpointError, match="shape"):
        import_hf(src, tmp_path / "r2")
    (src / "config.json").write_text(json.dumps(conf))
    (src / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no safetensors"):
        import_hf(src, tmp_path / "r3")
    with pytest.raises(CheckpointError, match="no config.json"):
        import_hf(tmp_path / "nowhere", tmp_path / "r4")
    assert not any(p.name.startswith(("r", ".r")) for p in tmp_path.iterdir())


def test_config_mapping_round_trip_and_transformers5_rope():
    cfg = small_cfg(n_kv_heads=2, tie_embeddings=False, norm_eps=1e-12, rope_theta=123.0)
    back = model_config_from_hf(hf_config_dict(cfg, 256, 256))
    for f in (
        "vocab_size",
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "d_ff",
        "max_seq_len",
        "rope_theta",
        "norm_eps",
        "tie_embeddings",
        "gate",
    ):
        assert getattr(back, f) == getattr(cfg, f), f
    v5 = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 300,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "rope_parameters": {"rope_type": "default", "rope_theta": 777.0},
    }
    c = model_config_from_hf(v5)
    assert c.rope_theta == 777.0 and c.norm_eps == 1e-6 and c.n_kv_heads == 2 and not c.tie_embeddings


def test_export_of_imported_model_keeps_its_special_ids(tmp_path):
    """A Llama tokenizer without <|endoftext|> (here "</s>" = 256): export takes bos/eos from the import's
    hf_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from smallinit.data.tokenizer import bytes_to_unicode

    src, _ = hf_llama(tmp_path, bos_token_id=3, eos_token_id=256)
    tok = Tokenizer(models.BPE(vocab={ch: b for b, ch in bytes_to_unicode().items()}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["</s>"])
    tok.save(str(src / "tokenizer.json"))
    run = import_hf(src, tmp_path / "run")
    assert json.loads((run / "hf_config.json").read_text())["eos_token_id"] == 256
    out = export_hf(run, tmp_path / "hf")
    conf = json.loads((out / "config.json").read_text())
    assert (conf["bos_token_id"], conf["eos_token_id"]) == (3, 256)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["eos_token"] == "</s>"
    assert transformers.AutoTokenizer.from_pretrained(out).eos_token_id == 256
