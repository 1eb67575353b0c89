"""The one table from our parameter names to Hugging Face names (export reads it forwards, import inverted).
``{i}`` is the block index. A fused matrix of ours maps to several HF matrices, stacked along dim 0 in the order
listed; ``parts(cfg)`` gives their row counts.

Dense blocks use Llama's names (:data:`HF_NAMES`). The attention gate (``gate`` != none) is not a separate HF tensor:
its rows are folded into ``q_proj`` per head (Qwen3-Next's layout; :func:`smallinit.interop.hf.fold_gate`), so
``q_proj`` there has H·(hd + g) rows. An MoE block's feed-forward uses :data:`HF_MOE_NAMES` (the names of the remote
code in ``smallinit/interop/hf_remote/modeling_smallinit.py``); the stacked expert matrices are stored transposed
(:func:`transposed`), in nn.Linear's (out, in) layout per expert, as transformers 5's fused experts are.
"""

from __future__ import annotations

from smallinit.model.config import ModelConfig

# ours -> HF names, in our matrix's row order
HF_NAMES: dict[str, tuple[str, ...]] = {
    "tok_emb.weight": ("model.embed_tokens.weight",),
    "blocks.{i}.attn_norm.weight": ("model.layers.{i}.input_layernorm.weight",),
    "blocks.{i}.attn.w_qkvg.weight": (
        "model.layers.{i}.self_attn.q_proj.weight",  # q rows (+ gate rows, folded)
        "model.layers.{i}.self_attn.k_proj.weight",
        "model.layers.{i}.self_attn.v_proj.weight",
    ),
    "blocks.{i}.attn.w_o.weight": ("model.layers.{i}.self_attn.o_proj.weight",),
    "blocks.{i}.mlp_norm.weight": ("model.layers.{i}.post_attention_layernorm.weight",),
    "blocks.{i}.mlp.w_gate_up.weight": ("model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight"),
    "blocks.{i}.mlp.w_down.weight": ("model.layers.{i}.mlp.down_proj.weight",),
    "norm_f.weight": ("model.norm.weight",),
    "lm_head.weight": ("lm_head.weight",),  # absent when the embeddings are tied
}

# the feed-forward of an MoE block (replaces the three blocks.{i}.mlp.* entries above there)
HF_MOE_NAMES: dict[str, tuple[str, ...]] = {
    "blocks.{i}.mlp.router.weight": ("model.layers.{i}.mlp.gate.weight",),
    "blocks.{i}.mlp.w_gate_up": ("model.layers.{i}.mlp.experts.gate_up_proj",),  # (E, d, 2·d_e) -> (E, 2·d_e, d)
    "blocks.{i}.mlp.w_down": ("model.layers.{i}.mlp.experts.down_proj",),  # (E, d_e, d) -> (E, d, d_e)
    "blocks.{i}.mlp.expert_bias": ("model.layers.{i}.mlp.expert_bias",),  # only with moe.bias_update_rate > 0
    "blocks.{i}.mlp.shared.w_gate_up.weight": (
        "model.layers.{i}.mlp.shared_expert.gate_proj.weight",
        "model.layers.{i}.mlp.shared_expert.up_proj.weight",
    ),
    "blocks.{i}.mlp.shared.w_down.weight": ("model.layers.{i}.mlp.shared_expert.down_proj.weight",),
}


def gate_rows(cfg: ModelConfig) -> int:
    """Gate rows per head in w_qkvg (and in the folded q_proj): hd (elementwise), 1 (headwise), 0 (none)."""
    return {"none": 0, "headwise": 1, "elementwise": cfg.head_dim}[cfg.gate]


def transposed(ours: str) -> bool:
    """Whether the HF tensor is ours with its last two dims swapped (the stacked MoE expert matrices)."""
    return ours.endswith(("mlp.w_gate_up", "mlp.w_down"))


def parts(ours: str, cfg: ModelConfig) -> list[int] | None:
    """Row counts of the HF matrices a fused matrix of ours splits into (None: a one-to-one rename).
    w_qkvg: [q rows + gate rows (folded into q_proj), k rows, v rows]; w_gate_up: [d_ff, d_ff] (a shared expert's:
    [S·d_e, S·d_e])."""
    kv = cfg.n_kv_heads * cfg.head_dim
    if ours.endswith("attn.w_qkvg.weight"):
        return [cfg.n_heads * (cfg.head_dim + gate_rows(cfg)), kv, kv]
    if ours.endswith("mlp.shared.w_gate_up.weight"):
        w = cfg.moe.n_shared_experts * (cfg.moe.d_expert or cfg.d_ff)
        return [w, w]
    if ours.endswith("mlp.w_gate_up.weight"):
        return [cfg.d_ff, cfg.d_ff]
    return None


def _moe_entry_present(ours: str, cfg: ModelConfig) -> bool:
    if ".shared." in ours:
        return cfg.moe.n_shared_experts > 0
    if ours.endswith("expert_bias"):
        return cfg.moe.bias_update_rate > 0
    return True


def name_table(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """:data:`HF_NAMES` (and :data:`HF_MOE_NAMES` for MoE blocks) expanded for every block of ``cfg``
    (``lm_head`` only when untied)."""
    out: dict[str, tuple[str, ...]] = {}
    for ours, theirs in HF_NAMES.items():
        if ours == "lm_head.weight" and cfg.tie_embeddings:
            continue
        if "{i}" not in ours:
            out[ours] = theirs
            continue
        for i in range(cfg.n_layers):
            if cfg.is_moe_layer(i) and ours.startswith("blocks.{i}.mlp."):
                continue
            out[ours.format(i=i)] = tuple(t.format(i=i) for t in theirs)
    for i in range(cfg.n_layers):
        if cfg.is_moe_layer(i):
            for ours, theirs in HF_MOE_NAMES.items():
                if _moe_entry_present(ours, cfg):
                    out[ours.format(i=i)] = tuple(t.format(i=i) for t in theirs)
    return out


def inverse_table(cfg: ModelConfig) -> dict[str, tuple[str, int]]:
    """HF name -> (our name, position among the parts): :func:`name_table` inverted, for import."""
    return {t: (ours, j) for ours, theirs in name_table(cfg).items() for j, t in enumerate(theirs)}


__all__ = ["HF_MOE_NAMES", "HF_NAMES", "gate_rows", "inverse_table", "name_table", "parts", "transposed"]
