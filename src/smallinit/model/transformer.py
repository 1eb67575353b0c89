"""The decoder: token embedding → n_layers × pre-norm blocks → final norm → LM head.

The model computes logits (or, given targets, the LM loss from them) and nothing else: probes, logging and parallelism
attach from outside (forward hooks on ``blocks[i].attn_norm``, ``.attn``, ``.mlp_norm``, ``.mlp``, and
``Attention.attention_weights`` for the attention pattern).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.init import InitReport, gamma_init
from smallinit.model.attention import Attention, RotaryEmbedding
from smallinit.model.config import ModelConfig
from smallinit.model.fused import plain_ops_only
from smallinit.model.loss import linear_cross_entropy
from smallinit.model.mlp import SwiGLU
from smallinit.model.norm import make_norm


class Block(nn.Module):
    """h' = h + Attn(Norm(h));  out = h' + FFN(Norm(h'))."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.attn_norm = make_norm(config.norm, config.d_model, config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = make_norm(config.norm, config.d_model, config.norm_eps)
        if config.is_moe_layer(layer):
            from smallinit.model.moe import MoE

            self.mlp = MoE(config)
        else:
            self.mlp = SwiGLU(config.d_model, config.d_ff)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.attn_norm(h), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class Transformer(nn.Module):
    """A pre-norm decoder-only LM; ``Transformer(config)`` applies the γ-rule from ``config``.

    ``Transformer(config, init=False)`` builds the modules without the γ-rule draw (weights keep PyTorch's
    default construction, or no storage at all under ``torch.device("meta")``); call :meth:`reset_parameters`
    to initialize. The default construction consumes the global RNG exactly as ``init=True`` does, so
    ``manual_seed(s); m = Transformer(c, init=False); m.reset_parameters()`` gives the weights of
    ``manual_seed(s); Transformer(c)``. Parameter and FLOP counts need no model: ``ModelConfig.num_params`` /
    ``ModelConfig.flops_per_token``.
    """

    def __init__(self, config: ModelConfig, init: bool = True):
        super().__init__()
        config.validate()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.rope = RotaryEmbedding(config.head_dim, config.max_seq_len, config.rope_theta)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm_f = make_norm(config.norm, config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.init_report: InitReport | None = None
        if init:
            self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> InitReport:
        """Re-draw every weight with the γ-rule of ``self.config`` (plus its overrides), recompute the RoPE
        tables, and return (and keep as ``init_report``) the init report."""
        c = self.config
        overrides = dict(c.init_overrides)
        if c.init_depth_scale:
            depth_gamma_std = {}  # std = fan_in^(-γ) / sqrt(2L) on each block's output projections
            for name, p in self.named_parameters():
                if name.endswith(("attn.w_o.weight", "mlp.w_down.weight", "mlp.w_down", "mlp.shared.w_down.weight")):
                    depth_gamma_std[name] = {
                        "std": p.shape[-2 if p.ndim == 3 else 1] ** (-c.gamma) / math.sqrt(2 * c.n_layers)
                    }
            overrides = {**overrides, **{k: v for k, v in depth_gamma_std.items() if k not in overrides}}
        report = gamma_init(self, c.gamma, overrides, generator=generator)
        self.rope.reset_parameters()
        self.init_report = report
        return report

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T) int64 → logits (B, T, vocab_size); with ``targets`` (B, T) int64, the mean next-token
        cross-entropy instead (a 0-dim float32 tensor, equal to ``F.cross_entropy(logits.float().flatten(0, 1),
        targets.flatten())``), computed by the chunked head + loss of :mod:`smallinit.model.loss`, which never
        holds the full logits and their gradient (under ``torch.compile`` or ``torch.func`` transforms: plain
        logits + cross-entropy)."""
        cos, sin = self.rope(idx.shape[1])
        h = self.tok_emb(idx)
        for block in self.blocks:
            h = block(h, cos, sin)
        h = self.norm_f(h)
        if targets is None:
            return self.lm_head(h)
        if plain_ops_only():
            return F.cross_entropy(self.lm_head(h).float().flatten(0, 1), targets.flatten())
        return linear_cross_entropy(h, self.lm_head.weight, targets)

    def aux_loss(self) -> torch.Tensor | None:
        """Sum of the auxiliary (MoE load-balancing and z-) losses of the last forward, or None for dense models."""
        losses = [b.mlp.aux_loss for b in self.blocks if getattr(b.mlp, "aux_loss", None) is not None]
        return torch.stack(losses).sum() if losses else None

    # ---- accounting -------------------------------------------------------------------------
    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        """Parameter count (tied weights once): :meth:`ModelConfig.num_params` of this model's config, the one
        definition (``non_embedding``: without the token embedding and an untied LM head, Kaplan's N; ``active``:
        in MoE layers only the experts a token uses). The modules built here hold exactly that many parameters
        (tests/test_model_build.py checks the count against ``self.parameters()``)."""
        return self.config.num_params(non_embedding=non_embedding, active=active)

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token, 6·N + 12·L·T·d (see :meth:`ModelConfig.flops_per_token`)."""
        return self.config.flops_per_token(seq_len)

    # ---- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (B, T). ``temperature = 0`` is greedy."""
        for _ in range(max_new_tokens):
            ctx = idx[:, -self.config.max_seq_len :]
            logits = self(ctx)[:, -1, :].float()
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
