"""Model configuration: one typed dataclass with documented fields, validation and named sizes (:data:`SIZES`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from smallinit.init import check_gamma, parse_override

NORMS = ("rmsnorm", "layernorm")
GATES = ("none", "headwise", "elementwise")
ROUTERS = ("softmax",)


@dataclass
class MoEConfig:
    """Mixture-of-Experts feed-forward. ``n_experts = 0`` means a dense model."""

    n_experts: int = 0
    """Routed experts per MoE layer (0 = dense MLP everywhere)."""
    top_k: int = 2
    """Experts each token is routed to."""
    n_shared_experts: int = 0
    """Always-on experts whose output is added to the routed output."""
    d_expert: int = 0
    """Hidden width of each expert's SwiGLU (0 = the model's d_ff)."""
    every: int = 1
    """MoE in every k-th block (blocks k-1, 2k-1, ...), dense MLP elsewhere."""
    aux_loss_coef: float = 0.01
    """Weight of the load-balancing loss."""
    z_loss_coef: float = 0.0
    """Weight of the router z-loss (mean squared log-sum-exp of router logits)."""
    router: str = "softmax"
    """Router type: "softmax" top-k with weights renormalized over the chosen experts."""
    bias_update_rate: float = 0.0
    """Auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias b is added to the router probabilities
    for the top-k *choice* only (the mixing weights stay p), and after every optimizer step
    b_e += rate · sign(mean_e' c_e' − c_e), centred, with c the assignments counted in that step. 0 = off.
    DeepSeek-V3 used 1e-3 (over many thousands of steps)."""

    @property
    def enabled(self) -> bool:
        return self.n_experts > 0


@dataclass
class ModelConfig:
    """A pre-norm decoder-only transformer (Llama-style) with the paper's two knobs, ``norm_eps``
    and ``gate``, and the initialization exponent ``gamma``."""

    vocab_size: int = 8192
    """Tokens in the vocabulary (the training data's tokenizer decides it)."""
    d_model: int = 384
    """Residual stream width d."""
    n_layers: int = 6
    """Transformer blocks."""
    n_heads: int = 6
    """Query heads; head_dim = d_model / n_heads."""
    n_kv_heads: int | None = None
    """Key/value heads for grouped-query attention (None = n_heads, i.e. plain multi-head)."""
    d_ff: int | None = None
    """SwiGLU hidden width (None = 8/3·d_model rounded up to a multiple of 64)."""
    max_seq_len: int = 256
    """Longest sequence the rotary tables cover."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    norm: str = "rmsnorm"
    """"rmsnorm" or "layernorm" (float32 math under any autocast)."""
    norm_eps: float = 1e-12
    """ε inside the norm: y = g·h/sqrt(mean(h²) + ε). The paper: 1e-5 swamps small-init signals, use 1e-12."""
    gate: str = "elementwise"
    """Gated attention after SDPA: "none", "headwise" (a scalar per head) or "elementwise" (per channel)."""
    tie_embeddings: bool = False
    """Share the token embedding with the output head."""
    gamma: float = 1.0
    """Initialization exponent: every weight ~ N(0, fan_in^(-2γ)). 0.5 = standard, 1.0 = small init."""
    init_overrides: dict[str, Any] = field(default_factory=dict)
    """{glob on parameter names: γ | {"gamma": γ} | {"std": σ}}, e.g. {"tok_emb.*": 0.5}."""
    init_depth_scale: bool = False
    """Divide the std of each block's output projections (attention W_O, MLP down) by sqrt(2·n_layers)."""
    moe: MoEConfig = field(default_factory=MoEConfig)
    """Mixture-of-Experts settings (off by default)."""

    def __post_init__(self) -> None:
        if isinstance(self.moe, dict):
            self.moe = MoEConfig(**self.moe)
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.d_ff is None and isinstance(self.d_model, int) and self.d_model > 0:
            self.d_ff = 64 * math.ceil(8 * self.d_model / 3 / 64)
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field of any impossible setting."""

        def bad(name: str, why: str) -> None:
            raise ValueError(f"ModelConfig.{name}: {why}")

        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                bad(name, f"must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            bad("n_heads", f"{self.n_heads} does not divide d_model={self.d_model}")
        if self.n_heads % self.n_kv_heads:
            bad("n_kv_heads", f"{self.n_kv_heads} does not divide n_heads={self.n_heads}")
        if self.head_dim % 2:
            bad("n_heads", f"head_dim = d_model/n_heads = {self.head_dim} must be even for RoPE")
        if not (isinstance(self.rope_theta, (int, float)) and math.isfinite(self.rope_theta) and self.rope_theta > 0):
            bad("rope_theta", f"must be a finite number > 0, got {self.rope_theta!r}")
        if self.norm not in NORMS:
            bad("norm", f"unknown norm {self.norm!r}; choose one of {', '.join(NORMS)}")
        if not isinstance(self.norm_eps, (int, float)) or not math.isfinite(self.norm_eps) or self.norm_eps < 0:
            bad("norm_eps", f"must be a finite number >= 0, got {self.norm_eps!r}")
        if self.gate not in GATES:
            bad("gate", f"unknown gate mode {self.gate!r}; choose one of {', '.join(GATES)}")
        try:
            check_gamma(self.gamma, "gamma")
        except ValueError as e:
            bad("gamma", str(e))
        if not isinstance(self.init_overrides, dict):
            bad("init_overrides", f"must be a mapping of glob -> gamma/std, got {self.init_overrides!r}")
        for pattern, value in self.init_overrides.items():
            if value is None:  # YAML read {"blocks.*":-5} without a space after the colon as one key
                bad("init_overrides", f"pattern {pattern!r} has no value (write a space after the colon: {{a: 0.5}})")
            try:
                parse_override(str(pattern), value)
            except ValueError as e:
                bad("init_overrides", str(e))
        m = self.moe
        if m.n_experts < 0:
            bad("moe.n_experts", f"must be >= 0, got {m.n_experts}")
        if m.enabled:
            if not 1 <= m.top_k <= m.n_experts:
                bad("moe.top_k", f"must be in 1..n_experts={m.n_experts}, got {m.top_k}")
            if m.n_shared_experts < 0:
                bad("moe.n_shared_experts", f"must be >= 0, got {m.n_shared_experts}")
            if m.d_expert < 0:
                bad("moe.d_expert", f"must be >= 0, got {m.d_expert}")
            if m.every < 1:
                bad("moe.every", f"must be >= 1, got {m.every}")
            if m.router not in ROUTERS:
                bad("moe.router", f"unknown router {m.router!r}; choose one of {', '.join(ROUTERS)}")
            for name in ("aux_loss_coef", "z_loss_coef", "bias_update_rate"):
                v = getattr(m, name)
                if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    bad(f"moe.{name}", f"must be a finite number >= 0, got {v!r}")

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) uses the MoE feed-forward."""
        return self.moe.enabled and (layer + 1) % self.moe.every == 0

    # ---- accounting without building weights -------------------------------------------------
    def attention_out_features(self) -> int:
        """Rows of the fused projection ``w_qkvg``: q_dim + 2·kv_dim + gate_dim, with q_dim = n_heads·head_dim,
        kv_dim = n_kv_heads·head_dim, gate_dim = 0 / n_heads / q_dim for gate none / headwise / elementwise."""
        q = self.n_heads * self.head_dim
        gate = {"none": 0, "headwise": self.n_heads, "elementwise": q}[self.gate]
        return q + 2 * self.n_kv_heads * self.head_dim + gate

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        """Parameter count of ``Transformer(self)`` computed from the fields alone (tied weights once): the one
        definition (``Transformer.num_params`` returns it; tests/test_model_build.py checks it against built tensors).

        Per block: norms 2·n_d (n_d = d for RMSNorm, 2d for LayerNorm); attention d·(q + 2kv + gate) + q·d;
        dense FFN 3·d·d_ff; MoE layer d·E (router) + 3·E·d·d_e + 3·d·(S·d_e) (S shared experts).
        Plus the embedding V·d, the final norm n_d, and an untied head V·d.
        ``non_embedding`` drops the embedding and an untied head (Kaplan's N); ``active`` counts, in MoE
        layers, only the k routed experts a token uses (subtracts 3·(E − k)·d·d_e per MoE layer)."""
        d, m = self.d_model, self.moe
        nd = d if self.norm == "rmsnorm" else 2 * d
        d_e = m.d_expert or self.d_ff
        attn = d * self.attention_out_features() + self.n_heads * self.head_dim * d
        n = 0
        for layer in range(self.n_layers):
            n += 2 * nd + attn
            if self.is_moe_layer(layer):
                n += d * m.n_experts + 3 * m.n_experts * d * d_e + 3 * d * m.n_shared_experts * d_e
                if active:
                    n -= 3 * (m.n_experts - m.top_k) * d * d_e
            else:
                n += 3 * d * self.d_ff
        n += nd
        if not non_embedding:
            n += self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return n

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token, 6·N + 12·L·T·d (the convention of nanoGPT / Chinchilla-style benchmarks):
        N = active non-embedding parameters + the LM-head matmul V·d (counted even when tied; the embedding
        lookup costs no matmul), T = ``seq_len`` (default ``max_seq_len``)."""
        T = seq_len or self.max_seq_len
        n = self.num_params(non_embedding=True, active=True) + self.vocab_size * self.d_model
        return 6.0 * n + 12.0 * self.n_layers * T * self.d_model

    def to_dict(self) -> dict[str, Any]:
        """Plain-data dict (JSON/YAML safe) that :meth:`from_dict` turns back into an equal config."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown field(s) {', '.join(unknown)}")
        d = dict(d)
        if isinstance(d.get("moe"), dict):
            mknown = {f.name for f in dataclasses.fields(MoEConfig)}
            bad = sorted(set(d["moe"]) - mknown)
            if bad:
                raise ValueError(f"ModelConfig.moe: unknown field(s) {', '.join(bad)}")
            d["moe"] = MoEConfig(**d["moe"])
        return cls(**d)

    @classmethod
    def from_size(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named model size (see :data:`SIZES`) with field overrides, e.g. ``from_size("small", gamma=0.5)``."""
        if name not in SIZES:
            raise ValueError(f"unknown model size {name!r}; choose one of {', '.join(SIZES)}")
        d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in SIZES[name].items()}
        moe_over = overrides.pop("moe", None)
        if moe_over is not None:
            base = d.get("moe", {})
            d["moe"] = {**base, **(dataclasses.asdict(moe_over) if isinstance(moe_over, MoEConfig) else moe_over)}
        d.update(overrides)
        return cls.from_dict(d)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """The old name of :meth:`from_size`, kept so that existing code still runs."""
        return cls.from_size(name, **overrides)


# The paper's recommended setting is every size's default: γ = 1, ε = 1e-12, elementwise gate.
# The standard baseline is one override away: gamma=0.5, norm_eps=1e-5, gate="none".
SIZES: dict[str, dict[str, Any]] = {
    # CPU-sized
    "tiny": dict(vocab_size=8192, d_model=128, n_layers=4, n_heads=4, d_ff=384, max_seq_len=256, tie_embeddings=True),
    "small": dict(vocab_size=8192, d_model=384, n_layers=6, n_heads=6, d_ff=1024, max_seq_len=256, tie_embeddings=True),
    # small-moe: 8 SwiGLU experts of width 512, top-2, in every block: the active FFN width 2·512 equals
    # small's d_ff = 1024, so active parameters = small's + the routers (6·384·8); 35.9M total, 14.67M active.
    "small-moe": dict(
        vocab_size=8192,
        d_model=384,
        n_layers=6,
        n_heads=6,
        d_ff=1024,
        max_seq_len=256,
        tie_embeddings=True,
        moe=dict(n_experts=8, top_k=2, n_shared_experts=0, d_expert=512, every=1),
    ),
    # Paper-sized (for GPU users; total parameter counts within 10% of the names, gate included)
    "0.1b": dict(
        vocab_size=32768,
        d_model=768,
        n_layers=12,
        n_heads=12,
        n_kv_heads=4,
        d_ff=2048,
        max_seq_len=2048,
        tie_embeddings=True,
    ),
    "0.3b": dict(vocab_size=32768, d_model=1024, n_layers=18, n_heads=16, n_kv_heads=8, d_ff=2816, max_seq_len=2048),
    "0.7b": dict(vocab_size=32768, d_model=1536, n_layers=22, n_heads=16, n_kv_heads=8, d_ff=4096, max_seq_len=2048),
    "1.5b": dict(vocab_size=32768, d_model=2048, n_layers=26, n_heads=16, n_kv_heads=8, d_ff=5632, max_seq_len=2048),
    # 0.5b-moe: 16 routed experts + 1 shared of width 448, top-2, every block: 0.51B total, 0.20B active
    # (0.13B active non-embedding). d_ff applies to dense blocks only (none here with every=1).
    "0.5b-moe": dict(
        vocab_size=32768,
        d_model=1024,
        n_layers=16,
        n_heads=16,
        n_kv_heads=8,
        d_ff=2816,
        max_seq_len=2048,
        moe=dict(n_experts=16, top_k=2, n_shared_experts=1, d_expert=448, every=1),
    ),
}

PRESETS = SIZES
"""The old name of :data:`SIZES`, kept so that existing code still runs."""
