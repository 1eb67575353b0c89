"""The decoder model: config, norms, attention (RoPE, GQA, output gate), SwiGLU / MoE, transformer."""

from smallinit.model.attention import Attention, RotaryEmbedding, apply_rope
from smallinit.model.config import PRESETS, SIZES, ModelConfig, MoEConfig  # PRESETS: the old name of SIZES
from smallinit.model.mlp import SwiGLU
from smallinit.model.norm import LayerNorm, RMSNorm
from smallinit.model.transformer import Block, Transformer

__all__ = [
    "Attention",
    "Block",
    "LayerNorm",
    "ModelConfig",
    "MoEConfig",
    "PRESETS",
    "RMSNorm",
    "SIZES",
    "RotaryEmbedding",
    "SwiGLU",
    "Transformer",
    "apply_rope",
]
