"""The one table from our parameter names to Hugging Face Llama names (export reads it forwards, import
inverted). ``{i}`` is the block index. A fused matrix of ours maps to several HF matrices, stacked along
dim 0 in the order listed; ``parts(cfg)`` gives their row counts.

The attention gate (``gate`` != none) is not a separate HF tensor: its rows are folded into ``q_proj`` per
head (Qwen3-Next's layout; :func:`smallinit.hf.fold_gate`), so ``q_proj`` there has H·(hd + g) rows.
"""

from __future__ import annotations

from smallinit.model.config import ModelConfig

# ours -> HF names, in our matrix's row order
HF_NAMES: dict[str, tuple[str, ...]] = {
    "tok_emb.weight": ("model.embed_tokens.weight",),
    "blocks.{i}.attn_norm.weight": ("model.layers.{i}.input_layernorm.weight",),
    "blocks.{i}.attn.w_qkvg.weight": ("model.layers.{i}.self_attn.q_proj.weight",    # q rows (+ gate rows, folded)
                                      "model.layers.{i}.self_attn.k_proj.weight",
                                      "model.layers.{i}.self_attn.v_proj.weight"),
    "blocks.{i}.attn.w_o.weight": ("model.layers.{i}.self_attn.o_proj.weight",),
    "blocks.{i}.mlp_norm.weight": ("model.layers.{i}.post_attention_layernorm.weight",),
    "blocks.{i}.mlp.w_gate_up.weight": ("model.layers.{i}.mlp.gate_proj.weight",
                                        "model.layers.{i}.mlp.up_proj.weight"),
    "blocks.{i}.mlp.w_down.weight": ("model.layers.{i}.mlp.down_proj.weight",),
    "norm_f.weight": ("model.norm.weight",),
    "lm_head.weight": ("lm_head.weight",),  # absent when the embeddings are tied
}


def gate_rows(cfg: ModelConfig) -> int:
    """Gate rows per head in w_qkvg (and in the folded q_proj): hd (elementwise), 1 (headwise), 0 (none)."""
    return {"none": 0, "headwise": 1, "elementwise": cfg.head_dim}[cfg.gate]


def parts(ours: str, cfg: ModelConfig) -> list[int] | None:
    """Row counts of the HF matrices a fused matrix of ours splits into (None: a one-to-one rename).
    w_qkvg: [q rows + gate rows (folded into q_proj), k rows, v rows]; w_gate_up: [d_ff, d_ff]."""
    kv = cfg.n_kv_heads * cfg.head_dim
    if ours.endswith("attn.w_qkvg.weight"):
        return [cfg.n_heads * (cfg.head_dim + gate_rows(cfg)), kv, kv]
    if ours.endswith("mlp.w_gate_up.weight"):
        return [cfg.d_ff, cfg.d_ff]
    return None


def name_table(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """:data:`HF_NAMES` expanded for every block of ``cfg`` (``lm_head`` only when untied)."""
    out: dict[str, tuple[str, ...]] = {}
    for ours, theirs in HF_NAMES.items():
        if ours == "lm_head.weight" and cfg.tie_embeddings:
            continue
        if "{i}" in ours:
            for i in range(cfg.n_layers):
                out[ours.format(i=i)] = tuple(t.format(i=i) for t in theirs)
        else:
            out[ours] = theirs
    return out


def inverse_table(cfg: ModelConfig) -> dict[str, tuple[str, int]]:
    """HF name -> (our name, position among the parts): :func:`name_table` inverted, for import."""
    return {t: (ours, j) for ours, theirs in name_table(cfg).items() for j, t in enumerate(theirs)}


__all__ = ["HF_NAMES", "gate_rows", "inverse_table", "name_table", "parts"]
