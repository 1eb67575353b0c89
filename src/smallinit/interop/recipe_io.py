"""A model patched by :func:`~smallinit.interop.recipe.apply_recipe`, saved, loaded back, converted and exported.

* **Save / load.** ``model.save_pretrained(folder)`` (also what ``transformers.Trainer`` saves) writes the gate
  weights (``...self_attn.o_proj.gate.weight``) and, in config.json, ``rms_norm_eps`` and the
  ``smallinit_recipe`` record. :func:`load_recipe_model` reads such a folder back with the gate: the model is built
  from config.json (no download), patched again (``init=False``) and every tensor is loaded, none missing, none
  left over. ``transformers.AutoModelForCausalLM.from_pretrained(folder)`` alone would build a plain model and drop
  the gate weights.
* **Our Transformer ↔ Llama.** A patched Llama *is* our Transformer with the gate (pre-norm, RoPE in the
  ``rotate_half`` layout, SwiGLU, float32 RMSNorm): :func:`to_transformer` converts it exactly, :func:`to_llama`
  goes the other way (a ``LlamaForCausalLM`` patched to the same shape, with the same weights). Tensor names are
  those of :data:`smallinit.model.hf_names.HF_NAMES`, with the gate rows of our fused ``w_qkvg`` in
  ``o_proj.gate.weight`` (head-major, as in ours). Mistral, Qwen2 and Qwen3 are patched but not converted (sliding
  windows, q/k/v biases, q/k norms: our model computes none of them), and are refused here.
* **Export.** :func:`write_recipe_run` writes a patched Llama (or a folder saved from one) as a smallinit run
  directory (config.yaml, tokenizer.json, a step-0 checkpoint), so the usual verbs apply to it:
  ``smallinit export RUN --to hf OUT`` (a ``SmallinitForCausalLM`` folder with its code, the gate folded into
  ``q_proj`` as :mod:`smallinit.interop.hf` describes), ``smallinit audit RUN``, ``smallinit eval RUN``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from smallinit.core.errors import CheckpointError, ConfigError
from smallinit.interop.hf import (
    check_exportable,
    fold_gate,
    from_hf_state_dict,
    hf_config_dict,
    load_hf_tensors,
    model_config_from_hf,
    to_hf_state_dict,
    unfold_gate,
)
from smallinit.interop.recipe import EPS_ATTRS, RECIPE_KEY, OutputGate, apply_recipe, hf_attentions, recipe_record
from smallinit.model.config import ModelConfig
from smallinit.model.transformer import Transformer

__all__ = ["load_recipe_model", "to_llama", "to_transformer", "transformer_config", "write_recipe_run"]

GATE_KEY = "model.layers.{i}.self_attn.o_proj.gate.weight"
Q_KEY = "model.layers.{i}.self_attn.q_proj.weight"


# ---- loading a saved patched model --------------------------------------------------------------------------------


def _load_exact(model: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Load ``tensors`` into ``model``: every entry of its state dict present (a tied one may be absent when the
    tensor it shares storage with is there), nothing left over, every shape equal; CheckpointError otherwise."""
    expected = model.state_dict()
    ptr = {k: v.untyped_storage().data_ptr() for k, v in expected.items()}
    present = {ptr[k] for k in expected if k in tensors}
    missing = sorted(k for k in expected if k not in tensors and ptr[k] not in present)
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"{where}: weights do not match the patched model (missing {missing[:4]}, unexpected {extra[:4]})"
        )
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise CheckpointError(
                f"{where}: weight {k} has shape {tuple(v.shape)}, the model {tuple(expected[k].shape)}"
            )
    model.load_state_dict(tensors, strict=False)


def load_recipe_model(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The patched Hugging Face model saved in folder ``path`` (``save_pretrained`` of a model patched by
    :func:`~smallinit.interop.recipe.apply_recipe`), with its gates, ε and every saved tensor, in eval mode.

    Built from config.json with ``AutoModelForCausalLM.from_config`` (nothing is downloaded), patched from the
    ``smallinit_recipe`` record (``init=False``), then loaded from the safetensors file(s). ConfigError when
    config.json has no record; CheckpointError when the tensors do not match the patched model exactly."""
    from transformers import AutoConfig, AutoModelForCausalLM

    d = Path(path)
    if not (d / "config.json").is_file():
        raise CheckpointError(f"{d}: not a saved model folder (no config.json)")
    try:
        raw = json.loads((d / "config.json").read_text())
    except ValueError as e:
        raise CheckpointError(f"{d / 'config.json'}: not valid JSON ({e})") from None
    rec = raw.get(RECIPE_KEY) if isinstance(raw, dict) else None
    if not isinstance(rec, dict) or not {"norm_eps", "gate"} <= set(rec):
        raise ConfigError(
            f"{d / 'config.json'}: no {RECIPE_KEY} record (not saved from a model patched by "
            "smallinit.apply_recipe); load it with transformers"
        )
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(d)), dtype=dtype)
    apply_recipe(model, gamma=rec.get("gamma") or 1.0, norm_eps=rec["norm_eps"], gate=rec["gate"], init=False)
    setattr(model.config, RECIPE_KEY, dict(rec))  # the saved record (its γ), not the one init=False writes
    _load_exact(model, load_hf_tensors(d), str(d))
    return model.eval()


# ---- a patched Llama <-> our Transformer -----------------------------------------------------------------------------


def _norm_eps_values(model: nn.Module) -> set[float]:
    out = set()
    for _, mod in model.named_modules():
        if "norm" in type(mod).__name__.lower():
            v = next((getattr(mod, a) for a in EPS_ATTRS if hasattr(mod, a)), None)
            if isinstance(v, (int, float)):
                out.add(float(v))
    return out


def transformer_config(model: nn.Module) -> ModelConfig:
    """Our :class:`ModelConfig` for a (patched or plain) Hugging Face Llama: its config.json fields read by
    :func:`~smallinit.interop.hf_config.model_config_from_hf`, the gate mode of its attention modules, the γ of
    its recipe record. ConfigError for a model our Transformer does not compute exactly."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type != "llama":
        raise ConfigError(
            f"to_transformer: {model_type or type(model).__name__!r} is not a Llama model; only Llama "
            "(model_type 'llama') is our Transformer exactly (Mistral, Qwen2, Qwen3 are patched, not converted)"
        )
    attns = hf_attentions(model)
    modes = sorted({a.o_proj.mode if isinstance(a.o_proj, OutputGate) else "none" for _, a, _, _ in attns})
    if len(modes) != 1:
        raise ConfigError(f"to_transformer: the attention modules have different gates {modes}; ours have one mode")
    try:
        mcfg = model_config_from_hf(cfg.to_dict())
    except ConfigError as e:
        raise ConfigError(f"to_transformer: {e}") from None
    eps = _norm_eps_values(model)
    if eps != {mcfg.norm_eps}:
        raise ConfigError(
            f"to_transformer: the norms' ε {sorted(eps)} differ from rms_norm_eps {mcfg.norm_eps:g}; "
            "our Transformer has one ε"
        )
    gamma = (getattr(cfg, RECIPE_KEY, None) or {}).get("gamma")
    return dataclasses.replace(mcfg, gate=modes[0], gamma=float(gamma) if gamma is not None else mcfg.gamma)


def to_transformer(model: nn.Module) -> Transformer:
    """Our :class:`~smallinit.model.Transformer` computing exactly what the (patched) Hugging Face Llama ``model``
    computes: :func:`transformer_config`, and its weights (float32, on the model's device), the gate rows taken from
    ``o_proj.gate``. ConfigError for a model that cannot be converted."""
    from smallinit.runs.checkpoint import model_from_state

    cfg = transformer_config(model)
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    for i in range(cfg.n_layers):
        gate = sd.pop(GATE_KEY.format(i=i), None)
        if gate is not None:  # our layout reader (from_hf_state_dict) takes the gate folded into q_proj
            sd[Q_KEY.format(i=i)] = fold_gate(sd[Q_KEY.format(i=i)], gate, cfg.n_heads)
    tensors = {k: v.float() for k, v in from_hf_state_dict(sd, cfg).items()}
    device = next(model.parameters()).device
    return model_from_state(cfg.to_dict(), tensors, map_location=str(device))


def to_llama(model: Transformer) -> nn.Module:
    """A ``transformers.LlamaForCausalLM`` patched by :func:`~smallinit.interop.recipe.apply_recipe` to the shape of
    our ``model`` (its ε and gate), holding the same weights (float32, on the model's device), in the mode of
    ``model``: the same logits. ConfigError for a model with no Llama layout (LayerNorm, MoE)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = model.config
    if cfg.moe.enabled:
        raise ConfigError("to_llama: an MoE model has no Llama layout (write_recipe_run/export it instead)")
    try:
        check_exportable(cfg)
    except ConfigError as e:
        raise ConfigError(f"to_llama: {e}") from None
    hcfg = LlamaConfig.from_dict(hf_config_dict(dataclasses.replace(cfg, gate="none"), None, None))
    device = next(model.parameters()).device
    with torch.device(device):
        llama = LlamaForCausalLM(hcfg)
    apply_recipe(llama, gamma=cfg.gamma, norm_eps=cfg.norm_eps, gate=cfg.gate, init=False)
    setattr(llama.config, RECIPE_KEY, recipe_record(cfg.gamma, cfg.norm_eps, cfg.gate))
    sd = to_hf_state_dict({k: v.detach().float() for k, v in model.state_dict().items()}, cfg)
    if cfg.gate != "none":
        for i in range(cfg.n_layers):
            q, gate = unfold_gate(sd[Q_KEY.format(i=i)], cfg.n_heads, cfg.head_dim)
            sd[Q_KEY.format(i=i)], sd[GATE_KEY.format(i=i)] = q.contiguous(), gate.contiguous()
    _load_exact(llama, sd, "to_llama")
    return llama.train(model.training)


# ---- a smallinit run directory (for export, audit, eval) -----------------------------------------------------------


def write_recipe_run(
    model: nn.Module | str | os.PathLike,
    out_dir: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    force: bool = False,
) -> Path:
    """Write a patched Llama (``model``: in memory, or a folder it was saved to with ``save_pretrained``) or our
    Transformer as a smallinit run directory ``out_dir``: ``config.yaml`` (its :func:`transformer_config`),
    ``tokenizer.json`` (``tokenizer``, default: the folder's) and ``checkpoints/step_00000000`` with its weights and
    empty optimizer state, built in a temporary folder and renamed into place. ``smallinit export RUN --to hf OUT``
    then writes the Hugging Face folder (``SmallinitForCausalLM`` when gated), ``smallinit audit RUN`` audits the
    weights. Returns ``out_dir``."""
    from tokenizers import Tokenizer

    from smallinit.config import RunConfig, config_from_dict, save_config
    from smallinit.core.outputs import check_out_dir, staged_dir
    from smallinit.runs.checkpoint import save_checkpoint

    src = None
    if isinstance(model, (str, os.PathLike)):
        src = Path(model)
        tokenizer = tokenizer if tokenizer is not None else src / "tokenizer.json"
        model = load_recipe_model(src)
    if tokenizer is None or not Path(tokenizer).is_file():
        raise ConfigError(f"write_recipe_run: no tokenizer.json ({tokenizer}); the run and its export need one")
    tok = Path(tokenizer)
    ours = model if isinstance(model, Transformer) else to_transformer(model)
    cfg = ours.config
    plan = check_out_dir(out_dir, "run", inputs=[p for p in (src, tok) if p is not None], force=force, verb="recipe")
    n_tok = Tokenizer.from_file(str(tok)).get_vocab_size()
    if n_tok > cfg.vocab_size:
        raise ConfigError(f"{tok}: {n_tok} tokens, but the model's vocabulary is {cfg.vocab_size}")
    run_cfg = RunConfig(model=cfg)
    run_cfg.data.seq_len = min(run_cfg.data.seq_len, cfg.max_seq_len)
    run_cfg = config_from_dict(run_cfg.to_dict())  # validated, and what a later load reads back
    state: dict[str, Any] = {"tokens": 0, "converted_from": str(src) if src else type(model).__name__}
    with staged_dir(plan) as tmp:
        save_config(run_cfg, tmp / "config.yaml")
        shutil.copyfile(tok, tmp / "tokenizer.json")
        tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
        save_checkpoint(tmp, 0, ours.state_dict(), {}, state, run_cfg.to_dict(), tied_keys=tied)
    return plan.path
