"""Causal self-attention with RoPE, grouped-query attention and the query-dependent output gate."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.model.config import ModelConfig
from smallinit.model.fused import Rope, plain_ops_only, rotate_plain, split_rope


class RotaryEmbedding(nn.Module):
    """RoPE tables in the Hugging Face Llama layout: cos/sin of shape (max_seq_len, head_dim),
    frequencies θ_i = base^(−2i/head_dim) repeated over the two halves of a head."""

    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        self.head_dim, self.max_seq_len, self.theta = head_dim, max_seq_len, float(theta)
        self.register_buffer("cos", torch.empty(max_seq_len, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(max_seq_len, head_dim), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """(Re)compute the tables in place on the buffers' device: cos/sin(t·θ_i), computed in float64 on the
        CPU and stored as float32. A no-op on the meta device (call again after ``to_empty``)."""
        if self.cos.device.type == "meta":
            return
        inv_freq = 1.0 / (
            self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64, device="cpu") / self.head_dim)
        )
        t = torch.arange(self.max_seq_len, dtype=torch.float64, device="cpu")
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos.copy_(emb.cos().float())
        self.sin.copy_(emb.sin().float())

    def forward(self, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        if seq_len > self.cos.shape[0]:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len={self.cos.shape[0]}")
        return self.cos[:seq_len], self.sin[:seq_len]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin, with rotate_half(x) = [−x₂, x₁] over the two halves of the head.

    ``cos``/``sin`` are the full-width tables of :class:`RotaryEmbedding` (both halves equal), broadcastable
    against ``x``; computed as [x₁c − x₂s, x₂c + x₁s] with the first half of each table."""
    h = x.shape[-1] // 2
    c, s = cos[..., :h].to(x.dtype), sin[..., :h].to(x.dtype)
    return rotate_plain(x, c, s) if plain_ops_only() else Rope.apply(x, c, s)


class Attention(nn.Module):
    """Y = W_O · concat_h( SDPA(Q_h, K_h, V_h) ⊙ σ(X W_g,h) ), causal.

    Q, K, V and the gate are one fused projection ``w_qkvg`` of the normalized input X (all have
    fan-in d_model, so the γ-rule treats them alike). The gate is query-dependent: it reads the same
    X that feeds Q, and is applied after attention and before W_O (DESIGN §2). Gate modes:
    "none" (no parameters), "headwise" (one scalar per head), "elementwise" (one per head channel).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        self.gate_mode = config.gate
        self.q_dim = self.n_heads * self.head_dim
        self.kv_dim = self.n_kv_heads * self.head_dim
        self.gate_dim = {"none": 0, "headwise": self.n_heads, "elementwise": self.q_dim}[config.gate]
        self.w_qkvg = nn.Linear(config.d_model, self.q_dim + 2 * self.kv_dim + self.gate_dim, bias=False)
        self.w_o = nn.Linear(self.q_dim, config.d_model, bias=False)

    def matrices(self) -> dict[str, torch.Tensor]:
        """The logical weight matrices (views into the fused projection): q, k, v, [gate], o."""
        q, k, v, g = self.w_qkvg.weight.split([self.q_dim, self.kv_dim, self.kv_dim, self.gate_dim], dim=0)
        out = {"q": q, "k": k, "v": v}
        if self.gate_dim:
            out["gate"] = g
        out["o"] = self.w_o.weight
        return out

    def _project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q (B, H, T, hd), k, v (B, H_kv, T, hd) and the gate pre-activation (B, T, gate_dim).

        RoPE is applied once to q and k together, in the (B, T, heads, hd) layout of the fused projection's
        output (``cos``/``sin``: (T, hd) tables); q, k, v are transposed views, as SDPA takes them. In eager mode
        the split and the rotation are one :class:`~smallinit.model.fused.SplitRope` (one gradient buffer; plain
        slices under compile/functorch — :func:`~smallinit.model.fused.split_rope`)."""
        q, k, v, g = split_rope(self.w_qkvg(x), cos, sin, self.n_heads, self.n_kv_heads, self.head_dim)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), g

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v, g = self._project(x, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads)
        y = y.transpose(1, 2)  # (B, T, H, hd)
        if self.gate_dim:
            gate = torch.sigmoid(g).view(B, T, self.n_heads, -1)  # -1: 1 (headwise) or hd (elementwise)
            y = y * gate
        return self.w_o(y.reshape(B, T, self.q_dim))

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """softmax(Q Kᵀ/√d_h + causal mask) for input ``x``: shape (B, n_heads, T, T), float32.

        The same computation SDPA performs inside :meth:`forward`, made explicit for probes.
        """
        q, k, _, _ = self._project(x, cos, sin)
        rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(rep, dim=1) if rep > 1 else k
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        T = x.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
