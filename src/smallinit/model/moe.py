"""Mixture-of-Experts feed-forward: a softmax top-k router over SwiGLU experts, dropless.

Forward, for the N = B·T tokens x_t of a batch (E routed experts, top-k routing):

    logits_t = W_r x_t                      (router, nn.Linear(d_model, E), no bias)
    p_t      = softmax(logits_t)             (float32)
    S_t      = the k experts with the largest p_t,e;   w_t,e = p_t,e / Σ_{e'∈S_t} p_t,e'   (k ≥ 2)
                                                       w_t,e = p_t,e                      (k = 1, Switch)
    y_t      = Σ_{e∈S_t} w_t,e · SwiGLU_e(x_t)  +  SwiGLU_shared(x_t)

Each routed expert is SwiGLU_e(x) = (silu(x G_e) ⊙ (x U_e)) D_e with [G_e | U_e] = ``w_gate_up[e]``
(d_model × 2·d_expert) and D_e = ``w_down[e]`` (d_expert × d_model): stacked parameters, input-major
(x @ W), so each expert matrix has its own fan-in for the γ-rule (d_model for gate/up, d_expert for
down; see :meth:`MoE.fan_in_of`). The shared experts are one dense SwiGLU of width
n_shared_experts·d_expert, always on. Routing is dropless (no capacity factor): the N·k (token, expert)
assignments are sorted by expert, the token rows gathered, each expert applied to its contiguous
slice (``torch._grouped_mm`` or a loop over experts), and the weighted results scatter-added back.

Auxiliary losses of one MoE layer (this project's definitions; the README quotes them):

    load balance  LB = E · Σ_e f_e · P_e
                  f_e = (number of (token, slot) assignments routed to e) / (N·k)   so Σ_e f_e = 1
                  P_e = (1/N) Σ_t p_t,e                                              so Σ_e P_e = 1
        f_e is a count (no gradient); the gradient flows through P_e (Switch Transformer / Mixtral).
        LB = 1 for uniform routing (f_e = P_e = 1/E) and → E when every token goes to one expert
        with probability 1. It is normalized by k (through f_e) and is *per layer*: the model's
        auxiliary loss (``Transformer.aux_loss()``) is the *sum* over MoE layers, not the mean.
    z-loss        Z = (1/N) Σ_t (logsumexp_e logits_t,e)²                             (ST-MoE)

    ``self.aux_loss = aux_loss_coef · LB + z_loss_coef · Z``   (a 0-dim tensor, set on every forward,
    in training and in eval mode alike)

Optional auxiliary-loss-free balancing (``moe.bias_update_rate`` > 0, DeepSeek-V3 / torchtitan style):

    S_t = top-k of (p_t + b) instead of p_t;   w_t,e = p_t,e / Σ_{e'∈S_t} p_t,e'   (b only steers the choice)
    after each optimizer step (:func:`update_expert_bias`):  Δ_e = rate · sign(mean(c) − c_e),
    b += Δ − mean(Δ),  with c_e the assignments to e counted in training forwards since the last update.

What it does not fix (measured, benchmarks/moe_dead_experts.py): under γ = 1 the hidden states that reach
the routers of layers ≥ 1 condense early in training (mean pairwise cosine between tokens ≈ 0.9 at step 20
of `small-moe`), so every token prefers the same experts whatever the router; a bias can only move all of
them together, and the transient dead experts of that phase remain (they are gone once the states expand).

With top_k = 1 a renormalized weight would always be 1 and the router would get no gradient from the
language-model loss (only from the auxiliary losses), so for k = 1 the expert's output is scaled by the router
probability p_t,e itself, as Switch Transformer does; for k ≥ 2 the weights are renormalized (Mixtral). The
router's LM-loss gradient is non-zero for every k (tests/test_moe.py).

The unscaled pieces and routing statistics of the last forward are kept, detached, in
``self.last_stats``; :func:`moe_stats` gathers them over a model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.model.config import ModelConfig
from smallinit.model.mlp import SwiGLU

IMPLS = ("auto", "grouped_mm", "loop")


def expert_counts(expert_idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Number of assignments to each expert, shape (E,) int64 (a scatter-add: no data-dependent shape)."""
    flat = expert_idx.reshape(-1)
    return torch.zeros(n_experts, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))


def load_balancing_loss(probs: torch.Tensor, expert_idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """LB = E · Σ_e f_e · P_e for router probabilities ``probs`` (N, E) and chosen experts ``expert_idx`` (N, k).

    f_e = (assignments to e) / (N·k) (a count, no gradient); P_e = mean_t probs[t, e]. 1 for uniform routing.
    """
    counts = expert_counts(expert_idx, n_experts).to(probs.dtype)
    f = counts / expert_idx.numel()
    P = probs.mean(dim=0)
    return n_experts * (f * P).sum()


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Z = mean over tokens of (logsumexp over experts of the router logits)²; ``logits`` (N, E)."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def _grouped_mm_ok(x: torch.Tensor, *dims: int) -> bool:
    """``torch._grouped_mm`` exists, takes x's dtype, and the row strides it will see are multiples of 16 bytes."""
    return (
        hasattr(torch, "_grouped_mm")
        and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and all((d * x.element_size()) % 16 == 0 for d in dims)
    )


class MoE(nn.Module):
    """Dropless softmax top-k Mixture-of-Experts SwiGLU feed-forward (formulas in the module docstring).

    Attributes set on every forward:
        aux_loss: 0-dim tensor, aux_loss_coef · LB + z_loss_coef · Z (differentiable w.r.t. the router).
        last_stats: detached tensors of the last forward: ``load_balance`` (LB), ``z_loss`` (Z),
            ``expert_fraction`` (f, shape (E,)), ``router_prob`` (P, shape (E,)), ``router_entropy``
            (mean over tokens of −Σ_e p_t,e ln p_t,e, nats; ln E at most), ``tokens`` (N).
    ``impl`` chooses the expert computation: "grouped_mm", "loop" (over experts) or "auto": grouped_mm
    for bfloat16, and for float32/16 on CPU outside torch.compile (it measured faster than the loop there,
    see benchmarks/moe_throughput.py); the loop otherwise (torch's CUDA and fake-tensor kernels of
    ``_grouped_mm`` take bfloat16 only), or when the shapes are not 16-byte aligned.
    """

    def __init__(self, config: ModelConfig, impl: str = "auto"):
        super().__init__()
        m = config.moe
        if impl not in IMPLS:
            raise ValueError(f"MoE impl must be one of {', '.join(IMPLS)}, got {impl!r}")
        self.impl = impl
        self.d_model = config.d_model
        self.n_experts = m.n_experts
        self.top_k = m.top_k
        self.d_expert = m.d_expert or config.d_ff
        self.aux_loss_coef = m.aux_loss_coef
        self.z_loss_coef = m.z_loss_coef
        self.bias_update_rate = m.bias_update_rate
        if self.bias_update_rate > 0:  # checkpointed with the weights; the counts live for one step only
            self.register_buffer("expert_bias", torch.zeros(m.n_experts))
            self.register_buffer("tokens_per_expert", torch.zeros(m.n_experts), persistent=False)
        self.router = nn.Linear(config.d_model, m.n_experts, bias=False)
        self.w_gate_up = nn.Parameter(torch.empty(m.n_experts, config.d_model, 2 * self.d_expert))
        self.w_down = nn.Parameter(torch.empty(m.n_experts, self.d_expert, config.d_model))
        self.shared = SwiGLU(config.d_model, m.n_shared_experts * self.d_expert) if m.n_shared_experts else None
        self.aux_loss: torch.Tensor | None = None
        self.last_stats: dict[str, torch.Tensor] = {}
        # A usable default draw (std = fan_in^-1/2); Transformer re-draws everything with the γ-rule.
        with torch.no_grad():
            self.w_gate_up.normal_(0.0, self.d_model**-0.5)
            self.w_down.normal_(0.0, self.d_expert**-0.5)

    # ---- γ-rule -----------------------------------------------------------------------------
    def fan_in_of(self, param_name: str) -> int | None:
        """Fan-in of each expert matrix (used by ``gamma_init``): d_model for ``w_gate_up``, d_expert for ``w_down``."""
        return {"w_gate_up": self.d_model, "w_down": self.d_expert}.get(param_name)

    def matrices(self) -> dict[str, torch.Tensor]:
        """Logical weight matrices in nn.Linear layout (out_features, in_features), rows = output neurons:
        "router", "expert{e}.gate" / ".up" / ".down" (views into the stacked parameters), "shared.*"."""
        out = {"router": self.router.weight}
        de = self.d_expert
        for e in range(self.n_experts):
            out[f"expert{e}.gate"] = self.w_gate_up[e, :, :de].T
            out[f"expert{e}.up"] = self.w_gate_up[e, :, de:].T
            out[f"expert{e}.down"] = self.w_down[e].T
        if self.shared is not None:
            out.update({f"shared.{k}": v for k, v in self.shared.matrices().items()})
        return out

    def extra_repr(self) -> str:
        return (
            f"n_experts={self.n_experts}, top_k={self.top_k}, d_expert={self.d_expert}, "
            f"shared={0 if self.shared is None else self.shared.d_ff // self.d_expert}, impl={self.impl!r}"
        )

    # ---- forward ----------------------------------------------------------------------------
    def _use_grouped_mm(self, xs: torch.Tensor) -> bool:
        if self.impl == "loop":
            return False
        ok = _grouped_mm_ok(xs, self.d_model, self.d_expert)
        if self.impl == "grouped_mm":
            if not ok:
                raise ValueError(
                    "MoE impl='grouped_mm' needs torch._grouped_mm, float32/bfloat16/float16 and "
                    "d_model, d_expert whose rows are multiples of 16 bytes "
                    f"(d_model={self.d_model}, d_expert={self.d_expert}, dtype={xs.dtype})"
                )
            return True
        # auto: grouped_mm beat the loop on CPU (eager); torch's CUDA and meta/fake-tensor (torch.compile)
        # kernels take bfloat16 only, so elsewhere other dtypes use the loop.
        cpu_eager = xs.device.type == "cpu" and not torch.compiler.is_compiling()
        return ok and (xs.dtype == torch.bfloat16 or cpu_eager)

    def _experts(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Apply expert e to its contiguous slice of ``xs`` (rows sorted by expert; ``counts[e]`` rows each)."""
        w_gu, w_d = self.w_gate_up.to(xs.dtype), self.w_down.to(xs.dtype)
        de = self.d_expert
        if self._use_grouped_mm(xs):
            offs = counts.cumsum(0).to(torch.int32)
            gate, up = torch._grouped_mm(xs, w_gu, offs=offs).split([de, de], dim=-1)
            return torch._grouped_mm(F.silu(gate) * up, w_d, offs=offs)
        outs = []
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            x_e = xs[start : start + n]
            gate, up = (x_e @ w_gu[e]).split([de, de], dim=-1)
            outs.append((F.silu(gate) * up) @ w_d[e])
            start += n
        return torch.cat(outs) if outs else xs.new_zeros(0, self.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d_model) → (..., d_model); also sets ``aux_loss`` and ``last_stats``."""
        shape = x.shape
        xf = x.reshape(-1, self.d_model)
        N, E, k = xf.shape[0], self.n_experts, self.top_k

        logits = self.router(xf).float()  # (N, E)
        probs = logits.softmax(dim=-1)
        if self.bias_update_rate > 0:
            top_e = (probs + self.expert_bias).topk(k, dim=-1).indices  # the bias steers the choice only
            top_p = probs.gather(-1, top_e)
        else:
            top_p, top_e = probs.topk(k, dim=-1)  # (N, k)
        # k = 1: scale by p itself (Switch); renormalizing would make the weight 1 and starve the router
        top_w = top_p if k == 1 else top_p / top_p.sum(dim=-1, keepdim=True)

        flat_e = top_e.reshape(-1)  # assignment a = t·k + slot
        order = torch.argsort(flat_e, stable=True)
        token = order // k  # token of each sorted assignment
        counts = expert_counts(flat_e, E)
        if self.bias_update_rate > 0 and self.training and torch.is_grad_enabled():
            with torch.no_grad():
                self.tokens_per_expert += counts.to(self.tokens_per_expert.dtype)

        dev = x.device.type
        autocast = torch.amp.is_autocast_available(dev) and torch.is_autocast_enabled(dev)
        compute_dtype = torch.get_autocast_dtype(dev) if autocast else x.dtype
        ys = self._experts(xf[token].to(compute_dtype), counts)  # (N·k, d_model), sorted by expert
        ys = ys * top_w.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)
        y = torch.zeros(N, self.d_model, dtype=ys.dtype, device=x.device).index_add(0, token, ys)
        if self.shared is not None:
            y = y + self.shared(xf).to(y.dtype)

        lb = load_balancing_loss(probs, top_e, E)
        z = router_z_loss(logits)
        self.aux_loss = self.aux_loss_coef * lb + self.z_loss_coef * z
        with torch.no_grad():
            entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(dim=-1).mean()
            self.last_stats = {
                "load_balance": lb.detach(),
                "z_loss": z.detach(),
                "expert_fraction": counts.float() / max(flat_e.numel(), 1),
                "router_prob": probs.mean(dim=0),
                "router_entropy": entropy,
                "tokens": torch.tensor(N),
            }
        return y.reshape(shape)


@torch.no_grad()
def update_expert_bias(model: nn.Module) -> None:
    """After an optimizer step: b += Δ − mean(Δ), Δ_e = rate · sign(mean(c) − c_e), for every MoE layer with
    ``bias_update_rate`` > 0; c = its assignment counts since the last call (summed over ranks when
    torch.distributed is initialized, so every rank applies the same bias), then reset. A no-op for other models."""
    layers = [m for m in model.modules() if isinstance(m, MoE) and m.bias_update_rate > 0]
    if not layers:
        return
    counts = torch.stack([m.tokens_per_expert for m in layers])  # (layers, E)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(counts)
    for m, c in zip(layers, counts):
        delta = m.bias_update_rate * torch.sign(c.mean() - c)
        m.expert_bias += delta - delta.mean()
        m.tokens_per_expert.zero_()


def moe_stats(model: nn.Module) -> dict:
    """Routing statistics of the last forward of every :class:`MoE` in ``model`` (JSON-safe floats/lists).

    Returns ``{}`` when the model has no MoE layer that has run, else::

        {"layers": {module name: {"expert_fraction": [f_e], "router_prob": [P_e], "router_entropy": H,
                                  "load_balance": LB, "z_loss": Z, "dead_experts": #{e: f_e = 0},
                                  "max_expert_fraction": max_e f_e, "tokens": N}},
         "load_balance": Σ_layers LB,  "z_loss": Σ_layers Z,  "dead_experts": Σ_layers dead,
         "router_entropy": mean_layers H,  "router_entropy_max": ln E,  "max_expert_fraction": max over layers}

    A dead expert received no token in the last forward (so it depends on that batch's size).
    """
    layers = {}
    n_experts = None
    for name, mod in model.named_modules():
        if not isinstance(mod, MoE) or not mod.last_stats:
            continue
        s = mod.last_stats
        frac = s["expert_fraction"].tolist()
        n_experts = mod.n_experts
        layers[name] = {
            "expert_fraction": frac,
            "router_prob": s["router_prob"].tolist(),
            "router_entropy": float(s["router_entropy"]),
            "load_balance": float(s["load_balance"]),
            "z_loss": float(s["z_loss"]),
            "dead_experts": sum(1 for f in frac if f == 0),
            "max_expert_fraction": max(frac),
            "tokens": int(s["tokens"]),
        }
    if not layers:
        return {}
    vals = list(layers.values())
    return {
        "layers": layers,
        "load_balance": sum(v["load_balance"] for v in vals),
        "z_loss": sum(v["z_loss"] for v in vals),
        "dead_experts": sum(v["dead_experts"] for v in vals),
        "router_entropy": sum(v["router_entropy"] for v in vals) / len(vals),
        "router_entropy_max": math.log(n_experts),
        "max_expert_fraction": max(v["max_expert_fraction"] for v in vals),
    }
