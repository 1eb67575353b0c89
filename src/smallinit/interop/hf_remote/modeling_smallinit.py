"""SmallinitForCausalLM: the smallinit decoder as ``transformers`` remote code (``trust_remote_code=True``).

Written into the export folder by ``smallinit export`` for the models no ``transformers`` class computes exactly
(query-dependent attention output gate; Mixture-of-Experts). Imports only torch and transformers. The computation,
per block (pre-norm, Llama's tensor names)::

    x   = input_layernorm(h)                        RMSNorm: w ⊙ h / sqrt(mean(h²) + ε), in float32
    q|g = q_proj(x), per head h: [hd query rows ; g gate rows]   (g = hd elementwise, 1 headwise, 0 none)
    k, v = k_proj(x), v_proj(x)                      (num_key_value_heads heads: GQA)
    q, k = RoPE(q), RoPE(k)                          rotate-half layout, cos/sin(t·θ_i) computed in float64
    y_h = causal softmax(q_h k_hᵀ / sqrt(hd)) v_h ⊙ sigmoid(g_h)
    h   = h + o_proj(concat_h y_h)
    h   = h + mlp(post_attention_layernorm(h))      SwiGLU: down(silu(gate(x)) ⊙ up(x)), or the MoE below

MoE feed-forward (blocks where ``config.is_moe_layer``): p = softmax(gate(x)) in float32; the top-k experts by p
(by p + expert_bias when ``router_expert_bias``); weights p_e / Σ_chosen p (``norm_topk_prob``) or p_e;
y = Σ_e w_e · SwiGLU_e(x) + shared_expert(x), with ``experts.gate_up_proj[e]`` = [gate rows ; up rows]
(2·d_e, d) and ``experts.down_proj[e]`` (d, d_e).

Works with and without a KV cache (``generate`` passes one), with left padding (``attention_mask`` +
``position_ids``), on transformers 4.4x (``past_key_values``) and 5.x (``cache``).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .configuration_smallinit import SmallinitConfig

try:
    from transformers import GenerationMixin
except ImportError:  # transformers < 4.45: every PreTrainedModel generates
    GenerationMixin = object
try:
    from transformers.cache_utils import DynamicCache
except ImportError:  # no cache objects: generate without a KV cache
    DynamicCache = None
try:  # transformers 5: init functions that leave loaded weights alone
    from transformers import initialization as init
except ImportError:
    from torch.nn import init

_TRANSFORMERS_MAJOR = int(__import__("transformers").__version__.split(".")[0])
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


class SmallinitRMSNorm(nn.Module):
    """y = w ⊙ h / sqrt(mean(h²) + ε), computed in float32 whatever the input dtype."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, h):
        x = h.float()
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(h.dtype)


def rope_tables(position_ids, head_dim, theta):
    """cos, sin of shape (B, T, head_dim/2) for ``position_ids`` (B, T): angle t·θ_i with θ_i = theta^(−2i/hd),
    computed in float64 (on the CPU where the device lacks it) and returned as float32."""
    dev = position_ids.device
    calc = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=calc) / head_dim))
    ang = position_ids.to(calc, torch.float64)[..., None] * inv_freq
    return ang.cos().float().to(dev), ang.sin().float().to(dev)


def apply_rope(x, cos, sin):
    """x (B, heads, T, hd) rotated by the tables (B, T, hd/2): [x₁c − x₂s, x₂c + x₁s] over the two halves."""
    h = x.shape[-1] // 2
    c, s = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class SmallinitAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.gate_rows = config.gate_rows
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.n_heads * (self.head_dim + self.gate_rows), bias=False)
        self.k_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin, mask, is_causal, cache):
        B, T, _ = x.shape
        hd = self.head_dim
        qg = self.q_proj(x).view(B, T, self.n_heads, hd + self.gate_rows)
        q = apply_rope(qg[..., :hd].transpose(1, 2), cos, sin)
        k = apply_rope(self.k_proj(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        gqa = self.n_kv_heads != self.n_heads
        if gqa and not _SDPA_GQA:
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        kw = {"enable_gqa": True} if gqa and _SDPA_GQA else {}
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, **kw).transpose(1, 2)
        if self.gate_rows:
            y = y * torch.sigmoid(qg[..., hd:])
        return self.o_proj(y.reshape(B, T, self.n_heads * hd))


class SmallinitMLP(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SmallinitExperts(nn.Module):
    """E SwiGLU experts, stacked: gate_up_proj (E, 2·d_e, d) = [gate rows ; up rows], down_proj (E, d, d_e)."""

    def __init__(self, n_experts, d_model, d_expert):
        super().__init__()
        self.d_expert = d_expert
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, 2 * d_expert, d_model))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d_model, d_expert))

    def forward(self, x, e):
        gate, up = F.linear(x, self.gate_up_proj[e]).split([self.d_expert, self.d_expert], dim=-1)
        return F.linear(F.silu(gate) * up, self.down_proj[e])


class SmallinitMoE(nn.Module):
    """Dropless softmax top-k routing over :class:`SmallinitExperts`, plus the always-on shared experts."""

    def __init__(self, config):
        super().__init__()
        d, E = config.hidden_size, config.num_experts
        self.n_experts, self.top_k, self.norm_topk_prob = E, config.num_experts_per_tok, config.norm_topk_prob
        self.gate = nn.Linear(d, E, bias=False)
        self.experts = SmallinitExperts(E, d, config.moe_intermediate_size)
        if config.router_expert_bias:
            self.register_buffer("expert_bias", torch.zeros(E))
        else:
            self.expert_bias = None
        self.shared_expert = (
            SmallinitMLP(d, config.n_shared_experts * config.moe_intermediate_size) if config.n_shared_experts else None
        )

    def forward(self, x):
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        probs = self.gate(xf).float().softmax(dim=-1)
        if self.expert_bias is not None:  # the bias steers the choice; the weights stay p
            top_e = (probs + self.expert_bias.float()).topk(self.top_k, dim=-1).indices
            top_p = probs.gather(-1, top_e)
        else:
            top_p, top_e = probs.topk(self.top_k, dim=-1)
        w = top_p / top_p.sum(dim=-1, keepdim=True) if self.norm_topk_prob else top_p
        y = torch.zeros_like(xf)
        for e in top_e.unique().tolist():
            tok, slot = (top_e == e).nonzero(as_tuple=True)
            out = self.experts(xf[tok], e)
            y.index_add_(0, tok, out * w[tok, slot].unsqueeze(-1).to(out.dtype))
        if self.shared_expert is not None:
            y = y + self.shared_expert(xf)
        return y.reshape(shape)


class SmallinitDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = SmallinitRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = SmallinitAttention(config, layer_idx)
        self.post_attention_layernorm = SmallinitRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = (
            SmallinitMoE(config)
            if config.is_moe_layer(layer_idx)
            else SmallinitMLP(config.hidden_size, config.intermediate_size)
        )

    def forward(self, h, cos, sin, mask, is_causal, cache):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask, is_causal, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class SmallinitPreTrainedModel(PreTrainedModel):
    config_class = SmallinitConfig
    base_model_prefix = "model"
    _no_split_modules = ["SmallinitDecoderLayer"]
    supports_gradient_checkpointing = False
    _supports_sdpa = True
    _supports_cache_class = True
    _supports_static_cache = False

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, SmallinitRMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, SmallinitExperts):
            init.normal_(module.gate_up_proj, mean=0.0, std=std)
            init.normal_(module.down_proj, mean=0.0, std=std)
        elif isinstance(module, SmallinitMoE) and module.expert_bias is not None:
            init.zeros_(module.expert_bias)


def _new_cache(config):
    try:
        return DynamicCache(config=config)
    except TypeError:  # transformers 4
        return DynamicCache()


def _attention_mask(attention_mask, past, T, S, device):
    """(mask, is_causal) for SDPA: queries at positions past..past+T-1 over S keys. None + is_causal when plain
    causal attention over an unpadded batch is what is asked (the kernel our own model uses)."""
    if attention_mask is not None and attention_mask.dim() == 2 and bool(attention_mask.all()):
        attention_mask = None
    if attention_mask is None:
        if past == 0:
            return None, T > 1
        if T == 1:
            return None, False
    if attention_mask is not None and attention_mask.dim() == 4:
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        allowed = allowed[..., :S]
    else:
        q_pos = torch.arange(past, past + T, device=device)[:, None]
        allowed = (torch.arange(S, device=device)[None, :] <= q_pos)[None, None]
        if attention_mask is not None:
            allowed = allowed & attention_mask[:, None, None, -S:].to(device=device, dtype=torch.bool)
    return allowed | ~allowed.any(dim=-1, keepdim=True), False  # a fully padded query row attends everywhere


class SmallinitModel(SmallinitPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(SmallinitDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = SmallinitRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        use_cache=None,
        output_hidden_states=None,
        return_dict=None,
        cache=None,
        **kwargs,
    ):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        h = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        B, T = h.shape[:2]
        cache = cache if cache is not None else past_key_values
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if isinstance(cache, (tuple, list)):
            cache = DynamicCache.from_legacy_cache(cache)
        if use_cache and cache is None and DynamicCache is not None and not self.training:
            cache = _new_cache(self.config)
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=h.device)[None].expand(B, T)
        elif position_ids.dim() == 1:
            position_ids = position_ids[None].expand(B, T)
        cos, sin = rope_tables(position_ids, self.config.head_dim, self.config.rope_theta)
        mask, is_causal = _attention_mask(attention_mask, past, T, past + T, h.device)
        hidden = [] if output_hidden_states else None
        for layer in self.layers:
            if hidden is not None:
                hidden.append(h)
            h = layer(h, cos, sin, mask, is_causal, cache)
        h = self.norm(h)
        if hidden is not None:
            hidden.append(h)
        out = BaseModelOutputWithPast(
            last_hidden_state=h,
            hidden_states=tuple(hidden) if hidden else None,
            **{_CACHE_FIELD: cache if use_cache else None},
        )
        return out if return_dict is not False else out.to_tuple()


class SmallinitForCausalLM(SmallinitPreTrainedModel, GenerationMixin):
    _tied_weights_keys = (
        {"lm_head.weight": "model.embed_tokens.weight"} if _TRANSFORMERS_MAJOR >= 5 else ["lm_head.weight"]
    )

    def __init__(self, config):
        super().__init__(config)
        self.model = SmallinitModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_hidden_states=None,
        return_dict=None,
        logits_to_keep=0,
        cache=None,
        **kwargs,
    ):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        h = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            h = h[:, -logits_to_keep:] if logits_to_keep else h
        else:
            h = h[:, logits_to_keep]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten().to(logits.device), ignore_index=-100
            )
        res = CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=out.hidden_states, **{_CACHE_FIELD: getattr(out, _CACHE_FIELD)}
        )
        return res if return_dict is not False else res.to_tuple()


__all__ = ["SmallinitForCausalLM", "SmallinitModel", "SmallinitPreTrainedModel"]
