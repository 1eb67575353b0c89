"""Width families for ``smallinit audit --widths``: a model's config at another width — smallinit's ModelConfig
(:func:`scale_model_config`) or a ``transformers`` config (:func:`scale_hf_config`) — and the memory check of a whole
family before any member is built (:func:`check_width_family`).

At width d (d_model / hidden_size = d) the heads are scaled to keep head_dim, and key/value heads and d_ff /
intermediate_size (an MoE's d_expert) proportionally; fewer blocks and a smaller vocabulary are optional.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from smallinit.core.errors import ConfigError

__all__ = ["check_width_family", "scale_hf_config", "scale_model_config"]


def _kv_for(n_heads_new: int, n_heads: int, n_kv: int) -> int:
    """Key/value heads scaled with the query heads (n_kv · n_heads_new / n_heads), at least 1, dividing n_heads_new."""
    want = max(1, round(n_kv * n_heads_new / n_heads))
    for k in range(want, 0, -1):
        if n_heads_new % k == 0:
            return k
    return 1


def check_width_family(
    widths: Sequence[int], own: int, count_at: Callable[[int], int], max_params: int, what: str
) -> None:
    """Before any model is built: every width of ``--widths`` (but the audited one, ``own``) must make a model
    (``count_at(w)`` parameters, counted with no weights: from the config or on the meta device) within the
    ``max_params`` budget — a width of 65536 used to allocate tens of GiB with no estimate first. ConfigError naming
    the first width that does not fit (a width that is no multiple of head_dim is named by ``count_at`` itself)."""
    for w in sorted({int(x) for x in widths}):
        if w == own:
            continue
        n = count_at(w)
        if n > max_params:
            raise ConfigError(
                f"--widths: width {w} builds a model of {n / 1e6:,.0f}M parameters ({what}; "
                f"{n * 4 / 2**30:,.1f} GiB of float32 weights before their gradients), above the "
                f"{max_params / 1e6:,.0f}M budget of --max-params; choose smaller widths or raise "
                "--max-params if the memory is there"
            )


def scale_model_config(mcfg, width: int, n_layers: int | None = None, vocab_size: int | None = None):
    """``mcfg`` (a ModelConfig) at d_model = ``width``: n_heads = width / head_dim (head_dim kept), n_kv_heads
    and d_ff (and an MoE's d_expert) scaled by width / d_model, rounded; optionally fewer layers / a smaller vocab."""
    from smallinit.model import ModelConfig

    hd = mcfg.head_dim
    if width % hd:
        raise ConfigError(f"--widths: {width} is not a multiple of head_dim {hd} (heads are scaled keeping head_dim)")
    nh = width // hd
    r = width / mcfg.d_model
    d = mcfg.to_dict()
    d.update(
        d_model=width,
        n_heads=nh,
        n_kv_heads=_kv_for(nh, mcfg.n_heads, mcfg.n_kv_heads),
        d_ff=max(1, round(mcfg.d_ff * r)),
    )
    if d.get("moe", {}).get("d_expert"):
        d["moe"]["d_expert"] = max(1, round(d["moe"]["d_expert"] * r))
    if n_layers is not None:
        d["n_layers"] = n_layers
    if vocab_size is not None:
        d["vocab_size"] = vocab_size
    return ModelConfig.from_dict(d)


def _hf_head_dim(cfg) -> int:
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if hd else cfg.hidden_size // cfg.num_attention_heads


def scale_hf_config(cfg, width: int | None = None, n_layers: int | None = None, vocab_size: int | None = None):
    """A copy of a ``transformers`` config at hidden_size = ``width`` (heads = width / head_dim, head_dim kept;
    key/value heads and intermediate_size scaled by width / hidden_size), optionally with fewer layers (a
    ``layer_types`` list is cut to match) and a smaller vocabulary (special ids beyond it dropped)."""
    c = copy.deepcopy(cfg)
    if width is not None and width != cfg.hidden_size:
        hd = _hf_head_dim(cfg)
        if width % hd:
            raise ConfigError(
                f"--widths: {width} is not a multiple of head_dim {hd} (heads are scaled keeping head_dim)"
            )
        nh = width // hd
        r = width / cfg.hidden_size
        kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        c.hidden_size = width
        c.num_attention_heads = nh
        if hasattr(c, "num_key_value_heads"):
            c.num_key_value_heads = _kv_for(nh, cfg.num_attention_heads, kv)
        if getattr(c, "head_dim", None):
            c.head_dim = hd
        if getattr(c, "intermediate_size", None):
            c.intermediate_size = max(1, round(cfg.intermediate_size * r))
    if n_layers is not None:
        c.num_hidden_layers = n_layers
        lt = getattr(c, "layer_types", None)
        if isinstance(lt, list):
            c.layer_types = lt[:n_layers]
        mw = getattr(c, "max_window_layers", None)
        if isinstance(mw, int) and mw > n_layers:
            c.max_window_layers = n_layers
    if vocab_size is not None and vocab_size != cfg.vocab_size:
        c.vocab_size = vocab_size
        for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
            v = getattr(c, k, None)
            if isinstance(v, int) and v >= vocab_size:
                setattr(c, k, None)
            elif isinstance(v, list):
                setattr(c, k, [x for x in v if x < vocab_size] or None)
    return c
