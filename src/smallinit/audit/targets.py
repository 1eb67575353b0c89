"""What ``smallinit audit TARGET`` audits: a Hugging Face model folder or ``config.json`` (built from the config,
never downloading), or a smallinit run directory / checkpoint / config name / YAML config.

A model whose full size exceeds ``max_params`` is audited on a **copy with ``blocks`` blocks at full width**
(the per-matrix init and the per-block statistics of the first blocks do not depend on how many blocks follow;
the summary says so), and, when its vocabulary exceeds ``vocab_cap``, with the vocabulary cut to ``vocab_cap``
for the sample pass (the embedding rows are i.i.d., so σ and the hidden-state statistics do not change; the
output head's gradient does, since the softmax spreads over fewer tokens — said in the notes).

A Hugging Face config is first built on the meta device (no memory) to count its parameters; the model or copy
that is audited is then built with ``AutoModelForCausalLM.from_config(config, dtype=float32)``, i.e. with the
model's own ``_init_weights`` (``initializer_range`` for Llama/Qwen). Weights in the folder are *not* read: the
audit is of the initialization the config implies.

Width families (:meth:`AuditTarget.build_at_width`): the same model at another width, the same number of blocks as
the audited copy and the same (capped) vocabulary; the configs are scaled by :mod:`smallinit.audit.width_family`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from smallinit.audit.width_family import check_width_family, scale_hf_config, scale_model_config
from smallinit.core.errors import ConfigError

__all__ = ["AuditTarget", "load_target"]

DEFAULT_MAX_PARAMS = 500_000_000
DEFAULT_BLOCKS = 2
DEFAULT_VOCAB_CAP = 32768


@dataclass
class AuditTarget:
    """A model ready to audit, with where it came from and how to rebuild its family at another width."""

    label: str
    kind: str  # "hf-config", "smallinit-config", "smallinit-checkpoint"
    module: nn.Module
    notes: list[str] = field(default_factory=list)
    optimizer_eps: float | None = None
    grad_clip: float | None = None
    full_params: int = 0
    audited_params: int = 0
    width: int = 0
    _builder: Callable[[int], nn.Module] | None = None

    def build_at_width(self, width: int) -> nn.Module:
        if self._builder is None:
            raise ConfigError(f"{self.label}: no model family to rebuild at other widths")
        return self._builder(int(width))


def _check_fits(n_params: int, what: str) -> None:
    """ConfigError, before the model is built, when its float32 weights and gradients (8 bytes a parameter) exceed
    this machine's physical memory (an impossible size such as hidden_size 10^12 used to fail allocating)."""
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if n_params * 8 > have:
        raise ConfigError(
            f"{what} has {n_params:,} parameters: {n_params * 8 / 2**30:,.1f} GiB of float32 weights and gradients, "
            f"more than this machine's {have / 2**30:.1f} GiB of memory; check its sizes (or audit fewer --blocks)"
        )


def _n_params(module: nn.Module) -> int:
    seen, n = set(), 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


# ---- smallinit configs ----------------------------------------------------------------------------


def _smallinit_family(mcfg, whole: bool, max_params, blocks, vocab_cap) -> tuple[int, int]:
    """(blocks, vocabulary) of the audited copy: the model's own when ``whole`` (a checkpoint's weights) or small
    enough, else ``blocks`` blocks and the vocabulary capped (module docstring)."""
    if whole or mcfg.num_params() <= max_params:
        return mcfg.n_layers, mcfg.vocab_size
    return min(blocks, mcfg.n_layers), min(mcfg.vocab_size, vocab_cap)


def _check_smallinit_widths(mcfg, widths, whole: bool, max_params, blocks, vocab_cap) -> None:
    use_layers, use_vocab = _smallinit_family(mcfg, whole, max_params, blocks, vocab_cap)

    def count_at(w: int) -> int:  # ModelConfig.num_params: the count of the model it would build, none built
        return scale_model_config(mcfg, w, use_layers, use_vocab).num_params()

    check_width_family(widths, mcfg.d_model, count_at, max_params, f"{use_layers} blocks, vocabulary {use_vocab}")


def _smallinit_target(
    label: str,
    kind: str,
    mcfg,
    *,
    optimizer_eps,
    grad_clip,
    max_params,
    blocks,
    vocab_cap,
    seed,
    notes: list[str],
    module: nn.Module | None = None,
    widths: Sequence[int] = (),
) -> AuditTarget:
    from smallinit.model import Transformer

    full = mcfg.num_params()
    use_layers, use_vocab = _smallinit_family(mcfg, module is not None, max_params, blocks, vocab_cap)
    if widths:
        _check_smallinit_widths(mcfg, widths, module is not None, max_params, blocks, vocab_cap)
    if module is None:
        build_cfg = scale_model_config(mcfg, mcfg.d_model, use_layers, use_vocab)
        _check_fits(build_cfg.num_params(), f"{label}: the audited model ({use_layers} blocks, vocabulary {use_vocab})")
        torch.manual_seed(seed)
        module = Transformer(build_cfg)
    n = _n_params(module)
    if use_layers != mcfg.n_layers:
        notes.append(
            f"!Audited on a copy with {use_layers} of {mcfg.n_layers} blocks at full width "
            f"({full / 1e6:.0f}M parameters exceed the {max_params / 1e6:.0f}M memory budget; --max-params)."
        )
    if use_vocab != mcfg.vocab_size:
        notes.append(
            f"Vocabulary cut from {mcfg.vocab_size} to {use_vocab} for the sample pass (embedding σ and "
            "hidden-state statistics unchanged; the output head's gradient is that of the smaller softmax)."
        )

    def builder(w: int) -> nn.Module:
        torch.manual_seed(seed)
        return Transformer(scale_model_config(mcfg, w, use_layers, use_vocab))

    return AuditTarget(
        label=label,
        kind=kind,
        module=module,
        notes=notes,
        optimizer_eps=optimizer_eps,
        grad_clip=grad_clip,
        full_params=full,
        audited_params=n,
        width=mcfg.d_model,
        _builder=builder,
    )


# ---- Hugging Face configs ---------------------------------------------------------------------------


def read_hf_config(path: str | os.PathLike):
    """A ``transformers`` config from a model folder holding ``config.json`` or from a JSON file; never downloads
    (the JSON is read here and given to ``AutoConfig.for_model``)."""
    p = Path(path)
    f = p / "config.json" if p.is_dir() else p
    if not f.is_file():
        raise ConfigError(f"{p}: no config.json")
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(d, dict) or "model_type" not in d:
        raise ConfigError(f'{f}: a Hugging Face config needs a "model_type" field')
    try:
        from transformers import AutoConfig
    except ImportError:  # pragma: no cover - transformers is a dependency
        raise ConfigError("auditing a Hugging Face config needs the transformers package") from None
    d = dict(d)
    model_type = d.pop("model_type")
    try:
        from huggingface_hub.errors import StrictDataclassError  # transformers ≥ 5 validates its configs with it
    except ImportError:  # pragma: no cover - older huggingface_hub
        StrictDataclassError = ValueError
    try:
        cfg = AutoConfig.for_model(model_type, **d)
    except StrictDataclassError as e:  # a known model type with impossible values
        raise ConfigError(
            f"{f}: transformers refuses this {model_type!r} config ({' '.join(str(e).split())[:200]})"
        ) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"{f}: transformers cannot build model_type {model_type!r} "
            f"({str(e).splitlines()[0][:160]}); custom-code models are not run"
        ) from None
    for k in HF_SIZES:  # transformers accepts hidden_size: -64 or intermediate_size: 0; building them fails late
        v = getattr(cfg, k, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{f}: {k} must be a positive integer, got {v!r}")
    for k in HF_FINITE:  # rms_norm_eps: NaN printed NaN statistics and "100% saturated" (import-hf refuses it)
        v = getattr(cfg, k, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == math.inf):
            raise ConfigError(f"{f}: {k} must be a finite number >= 0, got {v!r}")
    return cfg


HF_SIZES = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
)
"""Sizes of a Hugging Face config that must be positive integers when present (not None)."""
HF_FINITE = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", "initializer_range")
"""Values of a Hugging Face config that must be finite numbers >= 0 when present (NaN would audit as NaN)."""


def _hf_build(cfg, seed: int) -> nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    try:
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    except (ValueError, KeyError) as e:
        raise ConfigError(
            f"transformers cannot build a causal LM from this config ({str(e).splitlines()[0][:160]})"
        ) from None


def _hf_target(path: Path, *, max_params, blocks, vocab_cap, seed, widths: Sequence[int] = ()) -> AuditTarget:
    from transformers import AutoModelForCausalLM

    cfg = read_hf_config(path)
    with torch.device("meta"):
        try:
            meta = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        except (ValueError, KeyError, RuntimeError) as e:  # RuntimeError: sizes whose product overflows
            raise ConfigError(
                f"{path}: transformers cannot build a causal LM from this config ({str(e).splitlines()[0][:160]})"
            ) from None
    full = _n_params(meta)
    del meta
    L = cfg.num_hidden_layers
    use_layers, use_vocab = L, cfg.vocab_size
    notes = [
        f"Built from the config only ({type(cfg).__name__}; weights in the folder, if any, are not read): "
        f"the init transformers' _init_weights draws (initializer_range = {getattr(cfg, 'initializer_range', '?')})."
    ]
    if full > max_params:
        use_layers = min(blocks, L)
        if cfg.vocab_size > vocab_cap:
            use_vocab = vocab_cap
        notes.append(
            f"!Audited on a copy with {use_layers} of {L} blocks at full width ({full / 1e9:.2f}B parameters "
            f"exceed the {max_params / 1e6:.0f}M memory budget; --max-params)."
        )
    if use_vocab != cfg.vocab_size:
        notes.append(
            f"Vocabulary cut from {cfg.vocab_size} to {use_vocab} for the sample pass (embedding σ and "
            "hidden-state statistics unchanged; the output head's gradient is that of the smaller softmax)."
        )
    if widths:

        def count_at(w: int) -> int:
            with torch.device("meta"):
                try:
                    return _n_params(
                        AutoModelForCausalLM.from_config(
                            scale_hf_config(cfg, w, use_layers, use_vocab), dtype=torch.float32
                        )
                    )
                except (ValueError, KeyError) as e:
                    raise ConfigError(
                        f"--widths: transformers cannot build width {w} ({str(e).splitlines()[0][:160]})"
                    ) from None

        check_width_family(
            widths, cfg.hidden_size, count_at, max_params, f"{use_layers} blocks, vocabulary {use_vocab}"
        )
    with torch.device("meta"):  # counted with no weights before the copy is built
        n_copy = _n_params(AutoModelForCausalLM.from_config(scale_hf_config(cfg, None, use_layers, use_vocab)))
    _check_fits(n_copy, f"{path}: the audited model ({use_layers} blocks, vocabulary {use_vocab})")
    module = _hf_build(scale_hf_config(cfg, None, use_layers, use_vocab), seed)

    def builder(w: int) -> nn.Module:
        return _hf_build(scale_hf_config(cfg, w, use_layers, use_vocab), seed)

    label = str(path)
    return AuditTarget(
        label=label,
        kind="hf-config",
        module=module,
        notes=notes,
        full_params=full,
        audited_params=_n_params(module),
        width=cfg.hidden_size,
        _builder=builder,
    )


# ---- dispatch ---------------------------------------------------------------------------------------


def load_target(
    target: str,
    overrides: Sequence[str] = (),
    *,
    max_params: int = DEFAULT_MAX_PARAMS,
    blocks: int = DEFAULT_BLOCKS,
    vocab_cap: int = DEFAULT_VOCAB_CAP,
    seed: int = 0,
    widths: Sequence[int] = (),
) -> AuditTarget:
    """Resolve TARGET (checked in this order):

    1. a ``.json`` file or a folder with ``config.json`` → a Hugging Face config (built from the config);
    2. a folder with ``config.yaml`` → a smallinit run or checkpoint directory: the weights of its latest good
       checkpoint (or the one given), else a fresh init from its config;
    3. a config name or a YAML file → a smallinit config (``overrides`` = dotted ``section.key=value``), freshly
       initialized with its γ-rule; the optimizer's ε and gradient clipping come from its ``optim`` section.

    ``widths`` (the width family ``audit --widths`` will rebuild): each member's size is counted first (from its
    config for a smallinit model, on the meta device for a Hugging Face one) and one over ``max_params`` is a
    ConfigError, before any model is built (:func:`check_width_family`).
    """
    if blocks < 1:
        raise ConfigError(f"--blocks must be >= 1, got {blocks}")
    if max_params < 1:
        raise ConfigError(f"--max-params must be >= 1, got {max_params}")
    p = Path(target)
    if (p.is_file() and p.suffix == ".json") or (
        p.is_dir() and (p / "config.json").is_file() and not (p / "config.yaml").is_file()
    ):
        if overrides:
            raise ConfigError("dotted overrides apply to smallinit configs only, not to a Hugging Face config")
        return _hf_target(p, max_params=max_params, blocks=blocks, vocab_cap=vocab_cap, seed=seed, widths=widths)
    if p.is_dir() and (p / "config.yaml").is_file():
        if overrides:
            raise ConfigError("dotted overrides apply to a config name or YAML config, not to a run directory")
        return _run_target(p, max_params=max_params, blocks=blocks, vocab_cap=vocab_cap, seed=seed, widths=widths)
    if p.is_dir():
        raise ConfigError(f"{p}: neither a Hugging Face model folder (config.json) nor a smallinit run (config.yaml)")
    from smallinit.train import load_config

    try:
        cfg = load_config(target, list(overrides))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return _smallinit_target(
        str(target),
        "smallinit-config",
        cfg.model,
        optimizer_eps=cfg.optim.eps,
        grad_clip=cfg.optim.grad_clip or None,
        max_params=max_params,
        blocks=blocks,
        vocab_cap=vocab_cap,
        seed=seed,
        notes=[],
        widths=widths,
    )


def _run_target(p: Path, *, max_params, blocks, vocab_cap, seed, widths: Sequence[int] = ()) -> AuditTarget:
    from smallinit.config import config_from_dict
    from smallinit.model import ModelConfig
    from smallinit.runs.checkpoint import latest_good_checkpoint, load_checkpoint
    from smallinit.runs.rundir import read_config

    raw = read_config(p)  # RunDirError (one error: line) when it is not YAML
    try:
        cfg = config_from_dict(raw) if "model" in raw else None
        mcfg = cfg.model if cfg is not None else ModelConfig.from_dict(raw.get("model", raw))
    except (ValueError, TypeError, AttributeError) as e:
        raise ConfigError(f"{p / 'config.yaml'}: not a smallinit config ({str(e).splitlines()[0][:160]})") from None
    eps = cfg.optim.eps if cfg is not None else None
    clip = (cfg.optim.grad_clip or None) if cfg is not None else None
    is_ckpt = (p / "model.safetensors").is_file()
    ckpt = p if is_ckpt else latest_good_checkpoint(p)
    if widths:  # before the checkpoint is read (its config.yaml copy describes the same model)
        _check_smallinit_widths(mcfg, widths, ckpt is not None, max_params, blocks, vocab_cap)
    if ckpt is not None:
        model = load_checkpoint(ckpt)
        step = ""
        try:
            step = f" at step {json.loads((Path(ckpt) / 'state.json').read_text()).get('step')}"
        except (OSError, ValueError, AttributeError):
            pass
        notes = [f"!Weights of checkpoint {ckpt}{step}: a trained state, not a fresh init."]
        return _smallinit_target(
            str(p),
            "smallinit-checkpoint",
            model.config,
            optimizer_eps=eps,
            grad_clip=clip,
            max_params=max_params,
            blocks=blocks,
            vocab_cap=vocab_cap,
            seed=seed,
            notes=notes,
            module=model,
            widths=widths,
        )
    return _smallinit_target(
        str(p),
        "smallinit-config",
        mcfg,
        optimizer_eps=eps,
        grad_clip=clip,
        max_params=max_params,
        blocks=blocks,
        vocab_cap=vocab_cap,
        seed=seed,
        notes=["No checkpoint in the run: a fresh init from its config.yaml."],
        widths=widths,
    )
