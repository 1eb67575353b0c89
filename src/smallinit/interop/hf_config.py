"""Hugging Face ``config.json`` <-> our :class:`~smallinit.model.config.ModelConfig`.

:func:`check_exportable` decides the export layout ("llama", or "remote": SmallinitForCausalLM with its code in the
folder), :func:`hf_config_dict` writes config.json for a model, :func:`model_config_from_hf` reads one back, refusing
any setting our model cannot compute exactly. The tensors and the folders are in :mod:`smallinit.interop.hf`, which
re-exports these names (layouts described in its module docstring).
"""

from __future__ import annotations

from typing import Any

from smallinit.core.errors import ConfigError
from smallinit.model.config import ModelConfig

LLAMA_ARCH = "LlamaForCausalLM"
GATED_ARCH = "SmallinitForCausalLM"
GATED_MODEL_TYPE = "smallinit"

__all__ = ["GATED_ARCH", "GATED_MODEL_TYPE", "LLAMA_ARCH", "check_exportable", "hf_config_dict", "model_config_from_hf"]


def check_exportable(cfg: ModelConfig) -> str:
    """The export layout of ``cfg``: "llama" (dense, RMSNorm, no gate) or "remote" (gated or MoE: SmallinitForCausalLM
    with its code in the folder); ConfigError for the rest."""
    if cfg.norm != "rmsnorm":
        raise ConfigError(
            f"cannot export a model with norm={cfg.norm!r} to Hugging Face: Llama (and every "
            "layout we export) uses RMSNorm; only norm=rmsnorm models are exportable"
        )
    if cfg.moe.enabled and cfg.moe.router != "softmax":
        raise ConfigError(
            f"cannot export an MoE model with moe.router={cfg.moe.router!r}: the exported code "
            "implements the softmax top-k router only"
        )
    return "llama" if cfg.gate == "none" and not cfg.moe.enabled else "remote"


def hf_config_dict(cfg: ModelConfig, bos_id: int | None, eos_id: int | None, dtype: str = "float32") -> dict[str, Any]:
    """config.json for ``cfg``: a LlamaConfig, or the SmallinitForCausalLM layout (remote code) when
    the model is gated or MoE.

    Written for both transformers 4 (``rope_theta``, ``rope_scaling``, ``torch_dtype``) and 5
    (``rope_parameters``). ``rms_norm_eps`` is ``cfg.norm_eps`` exactly.
    """
    layout = check_exportable(cfg)
    d: dict[str, Any] = {
        "architectures": [LLAMA_ARCH if layout == "llama" else GATED_ARCH],
        "model_type": "llama" if layout == "llama" else GATED_MODEL_TYPE,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": float(cfg.norm_eps),
        "rope_theta": float(cfg.rope_theta),
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "use_cache": True,
        "torch_dtype": dtype,
    }
    if layout == "remote":
        from smallinit.interop.hf_remote import AUTO_MAP

        m = cfg.moe
        for key in ("rope_scaling", "rope_parameters", "pretraining_tp"):  # Llama-only (rope_theta is ours)
            d.pop(key)
        d["auto_map"] = dict(AUTO_MAP)
        d["attn_output_gate"] = cfg.gate != "none"
        d["gate"] = cfg.gate
        d["gate_layout"] = "qwen3_next_interleaved"  # per head: [hd query rows ; g gate rows] in q_proj
        d.update(
            num_experts=m.n_experts,
            num_experts_per_tok=m.top_k if m.enabled else 0,
            norm_topk_prob=m.top_k > 1,
            moe_intermediate_size=(m.d_expert or cfg.d_ff) if m.enabled else 0,
            n_shared_experts=m.n_shared_experts if m.enabled else 0,
            moe_every=m.every,
            router_expert_bias=m.enabled and m.bias_update_rate > 0,
        )
        d["smallinit"] = cfg.to_dict()
    return d


def _get(hf: dict[str, Any], key: str, default: Any = None) -> Any:
    v = hf.get(key, default)
    return default if v is None else v


def model_config_from_hf(hf: dict[str, Any], max_seq_len: int | None = None) -> ModelConfig:
    """Our ModelConfig for a Llama (or SmallinitForCausalLM) config.json dict; ConfigError naming any
    setting our model cannot compute exactly."""
    archs = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if GATED_ARCH in archs or model_type == GATED_MODEL_TYPE:
        if not isinstance(hf.get("smallinit"), dict):
            raise ConfigError("config.json: SmallinitForCausalLM layout without its 'smallinit' model config")
        d = dict(hf["smallinit"])
        if max_seq_len is not None:
            d["max_seq_len"] = max_seq_len
        try:
            return ModelConfig.from_dict(d)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"config.json: invalid 'smallinit' model config ({e})") from None
    if LLAMA_ARCH not in archs and model_type != "llama":
        raise ConfigError(
            f"config.json: architecture {archs or model_type!r} is not supported; import-hf reads "
            f"Llama checkpoints (model_type 'llama', {LLAMA_ARCH}) and {GATED_ARCH} exports"
        )
    act = _get(hf, "hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"config.json: hidden_act={act!r} is not supported (our MLP is SwiGLU with silu)")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise ConfigError(f"config.json: {key}=true is not supported (our projections have no bias)")
    if hf.get("rope_scaling") is not None:
        raise ConfigError(f"config.json: rope_scaling={hf['rope_scaling']!r} is not supported (plain RoPE only)")
    rp = hf.get("rope_parameters")
    theta = hf.get("rope_theta")
    if isinstance(rp, dict):
        if rp.get("rope_type", "default") != "default" or set(rp) - {"rope_type", "rope_theta"}:
            raise ConfigError(f"config.json: rope_parameters={rp!r} is not supported (plain RoPE only)")
        theta = rp.get("rope_theta", theta)
    elif rp is not None:
        raise ConfigError(f"config.json: rope_parameters={rp!r} is not supported (plain RoPE only)")
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError("config.json: partial_rotary_factor != 1 is not supported (RoPE on every channel)")
    try:
        d_model, n_heads = _int(hf, "hidden_size"), _int(hf, "num_attention_heads")
        fields = dict(
            vocab_size=_int(hf, "vocab_size"),
            d_model=d_model,
            n_layers=_int(hf, "num_hidden_layers"),
            n_heads=n_heads,
            n_kv_heads=_int(hf, "num_key_value_heads", n_heads),
            d_ff=_int(hf, "intermediate_size"),
            max_seq_len=int(max_seq_len or _int(hf, "max_position_embeddings", 2048)),
            rope_theta=float(theta if theta is not None else 10000.0),
            norm="rmsnorm",
            norm_eps=float(_get(hf, "rms_norm_eps", 1e-6)),
            gate="none",
            tie_embeddings=bool(_get(hf, "tie_word_embeddings", False)),
        )
    except KeyError as e:
        raise ConfigError(f"config.json: missing field {e.args[0]!r}") from None
    except ConfigError:
        raise  # _int's own line, naming the field (ConfigError is a ValueError: not to be wrapped again)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config.json: bad value ({e})") from None
    try:
        cfg = ModelConfig(**fields)
    except ValueError as e:
        raise ConfigError(f"config.json maps to an invalid model: {e}") from None
    head_dim = _int(hf, "head_dim", cfg.d_model // cfg.n_heads)
    if head_dim * cfg.n_heads != cfg.d_model:
        raise ConfigError(
            f"config.json: head_dim={head_dim} but hidden_size/num_attention_heads = "
            f"{cfg.d_model / cfg.n_heads:g}; our attention needs head_dim = hidden_size / num_heads"
        )
    return cfg


def _int(hf: dict[str, Any], key: str, default: int | None = None) -> int:
    """``hf[key]`` (or ``default`` when absent or null) as an int; ConfigError naming the field for anything else
    (a string, a bool, 64.5 — ``int()`` would have truncated it)."""
    v = hf.get(key)
    if v is None:
        if default is None:
            raise KeyError(key)
        return default
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        raise ConfigError(f"config.json: {key}={v!r} is not a whole number")
    return int(v)
