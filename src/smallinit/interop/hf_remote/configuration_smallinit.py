"""SmallinitConfig: the configuration of a smallinit export (remote code for ``transformers``).

Written into the export folder by ``smallinit export``; imports only ``transformers``. Fields (Llama's names where
Llama has the concept):

    vocab_size, hidden_size, intermediate_size (dense SwiGLU width), num_hidden_layers, num_attention_heads,
    num_key_value_heads, head_dim (= hidden_size / num_attention_heads), max_position_embeddings,
    rms_norm_eps (ε of y = w ⊙ h / sqrt(mean(h²) + ε), float32), rope_theta (RoPE base, rotate-half layout),
    tie_word_embeddings,
    gate                 "none" | "headwise" | "elementwise": query-dependent sigmoid gate on each head's attention
                         output, its rows folded into q_proj per head (gate_layout "qwen3_next_interleaved")
    num_experts          routed experts of an MoE feed-forward (0: dense everywhere)
    num_experts_per_tok  top-k;  norm_topk_prob: renormalize the k chosen probabilities (false: weight = p, k = 1)
    moe_intermediate_size  width of each expert;  n_shared_experts: always-on experts (one SwiGLU of width S·d_e)
    moe_every            MoE in blocks every-1, 2·every-1, ...; dense SwiGLU elsewhere
    router_expert_bias   a per-expert bias added to the router probabilities for the top-k choice only
"""

from transformers import PretrainedConfig

GATES = ("none", "headwise", "elementwise")


class SmallinitConfig(PretrainedConfig):
    model_type = "smallinit"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]

    def __init__(
        self,
        vocab_size=8192,
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=None,
        head_dim=None,
        max_position_embeddings=256,
        rms_norm_eps=1e-12,
        rope_theta=10000.0,
        gate="elementwise",
        num_experts=0,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        moe_intermediate_size=None,
        n_shared_experts=0,
        moe_every=1,
        router_expert_bias=False,
        hidden_act="silu",
        initializer_range=0.02,
        use_cache=True,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **kwargs,
    ):
        if gate not in GATES:
            raise ValueError(f"SmallinitConfig: gate must be one of {', '.join(GATES)}, got {gate!r}")
        if hidden_act != "silu":
            raise ValueError(f"SmallinitConfig: hidden_act must be 'silu' (SwiGLU), got {hidden_act!r}")
        rope_parameters = kwargs.get("rope_parameters")
        if isinstance(rope_parameters, dict) and rope_parameters.get("rope_theta") is not None:
            rope_theta = rope_parameters["rope_theta"]
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads if head_dim is None else head_dim
        if self.head_dim * num_attention_heads != hidden_size:
            raise ValueError("SmallinitConfig: head_dim must equal hidden_size / num_attention_heads")
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = float(rms_norm_eps)
        self.rope_theta = float(rope_theta)
        self.gate = gate
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.norm_topk_prob = bool(norm_topk_prob)
        self.moe_intermediate_size = intermediate_size if moe_intermediate_size is None else moe_intermediate_size
        self.n_shared_experts = n_shared_experts
        self.moe_every = moe_every
        self.router_expert_bias = bool(router_expert_bias)
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(
            tie_word_embeddings=tie_word_embeddings,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            **kwargs,
        )

    @property
    def gate_rows(self) -> int:
        """Gate rows per head folded into q_proj: head_dim (elementwise), 1 (headwise) or 0."""
        return {"none": 0, "headwise": 1, "elementwise": self.head_dim}[self.gate]

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has the MoE feed-forward."""
        return self.num_experts > 0 and (layer + 1) % self.moe_every == 0


__all__ = ["SmallinitConfig"]
