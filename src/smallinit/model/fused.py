"""Hand-written forward/backward pairs for the model's eager path: RoPE, the split of attention's fused projection,
and RMSNorm. Each computes the same function as the plain-op composite it replaces (to float rounding;
tests/test_model_fastpath.py) with fewer passes over memory, and steps aside for the plain ops under
``torch.compile`` or a ``torch.func`` transform (:func:`plain_ops_only`), where inductor fuses and functorch composes.

Why they pay on CPU (benchmarks/RESULTS.md, "Issue #19, fourth pass"): autograd's backward of a slice is a
zero-filled tensor of the whole input with the slice's gradient copied in, so slicing q, k, v and the gate out of one
projection costs one full-size fill + copy per slice and an add per pair; ``F.rms_norm`` on CPU is ≈ 6 composite ops
forward and ≈ 10 backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def plain_ops_only() -> bool:
    """True under ``torch.compile`` tracing or a ``torch.func`` transform (vmap, grad): there the functions of this
    module and the chunked LM-head loss step aside for plain ops."""
    return torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()


# ---- RoPE ---------------------------------------------------------------------------------------------------------
def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[x₁·c − sign·x₂·s, x₂·c + sign·x₁·s] over the two halves x₁, x₂ of the last dim, written into ``out`` (a new
    contiguous tensor when None; no rotate-half copy, no ``cat``). ``cos``/``sin`` are half-width tables
    broadcastable against x₁. sign = +1 rotates by +θ, −1 by −θ (the inverse, = the transpose: the gradient)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    o1, o2 = out[..., :h], out[..., h:]
    torch.mul(x1, cos, out=o1)
    o1.addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=o2)
    o2.addcmul_(x1, sin, value=sign)
    return out


def rotate_plain(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:func:`rotate` by +θ in plain ops (products and a ``cat``), for compile/functorch to trace."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Rope(torch.autograd.Function):
    """RoPE as one linear map R_θ with its own backward: dL/dx = R_θᵀ g = R_{−θ} g (saves only the tables)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return rotate(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        return rotate(g, cos, sin, -1.0), None, None


# ---- attention's fused projection -----------------------------------------------------------------------------------
def _split(
    p: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int, rotate_qk
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v, g) of the fused projection ``p`` (B, T, D), ``rotate_qk`` applied to its q|k heads (B, T, H + H_kv,
    hd); v and g are views of ``p`` (the layout of :class:`SplitRope`)."""
    B, T, _ = p.shape
    q_dim, kv_dim = n_heads * head_dim, n_kv_heads * head_dim
    qk = rotate_qk(p[..., : q_dim + kv_dim].view(B, T, n_heads + n_kv_heads, head_dim))
    v = p[..., q_dim + kv_dim : q_dim + 2 * kv_dim].view(B, T, n_kv_heads, head_dim)
    return qk[:, :, :n_heads], qk[:, :, n_heads:], v, p[..., q_dim + 2 * kv_dim :]


class SplitRope(torch.autograd.Function):
    """q, k, v, g from the fused projection P = X W_qkvgᵀ of shape (B, T, D), D = (H + 2·H_kv)·hd + gate_dim:

        q = R_θ P[..., :H·hd]  (B, T, H, hd),    k = R_θ P[..., H·hd : (H+H_kv)·hd]  (B, T, H_kv, hd),
        v = P[..., (H+H_kv)·hd : (H+2H_kv)·hd]  (B, T, H_kv, hd),    g = P[..., (H+2H_kv)·hd:]  (B, T, gate_dim)

    q and k are rotated into one new tensor; v and g are views of P. The backward writes all four gradients into one
    new (B, T, D) tensor — R_{−θ} dq, R_{−θ} dk, dv, dg (zeros for an output that got none) — where autograd over
    slices would build a zero-filled (B, T, D) tensor per slice and add them. ``cos``/``sin``: half-width tables
    (T, 1, hd/2) in P's dtype."""

    @staticmethod
    def forward(ctx, p, cos, sin, n_heads: int, n_kv_heads: int, head_dim: int):
        ctx.save_for_backward(cos, sin)
        ctx.set_materialize_grads(False)  # an output without a gradient arrives as None: its part is zero-filled
        ctx.layout = (*p.shape, n_heads, n_kv_heads, head_dim, p.dtype)
        return _split(p, n_heads, n_kv_heads, head_dim, lambda qk: rotate(qk, cos, sin, 1.0))

    @staticmethod
    def backward(ctx, dq, dk, dv, dg):
        cos, sin = ctx.saved_tensors
        B, T, D, n_heads, n_kv_heads, head_dim, dtype = ctx.layout
        q_dim, kv_dim = n_heads * head_dim, n_kv_heads * head_dim
        dp = torch.empty(B, T, D, dtype=dtype, device=cos.device)
        parts = (
            (dq, 0, q_dim, n_heads),
            (dk, q_dim, q_dim + kv_dim, n_kv_heads),
            (dv, q_dim + kv_dim, q_dim + 2 * kv_dim, None),
            (dg, q_dim + 2 * kv_dim, D, None),
        )
        for grad, lo, hi, rotated_heads in parts:
            if hi == lo:
                continue
            dst = dp[..., lo:hi]
            if grad is None:
                dst.zero_()
            elif rotated_heads is not None:
                rotate(grad, cos, sin, -1.0, out=dst.view(B, T, rotated_heads, head_dim))
            else:
                dst.copy_(grad.reshape(dst.shape))
        return dp, None, None, None, None, None


def split_rope(
    p: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v, g) of :class:`SplitRope` from the fused projection ``p`` (B, T, D), with the full-width (T, hd)
    tables of :class:`~smallinit.model.attention.RotaryEmbedding`: SplitRope in eager mode, slices and the
    rotate-half formula under compile/functorch."""
    h = head_dim // 2
    c, s = cos[:, None, :h].to(p.dtype), sin[:, None, :h].to(p.dtype)
    if not plain_ops_only():
        return SplitRope.apply(p, c, s, n_heads, n_kv_heads, head_dim)
    return _split(p, n_heads, n_kv_heads, head_dim, lambda qk: rotate_plain(qk, c, s))


# ---- RMSNorm ------------------------------------------------------------------------------------------------------
class RMSNormFunction(torch.autograd.Function):
    """y = x̂ ⊙ g with x̂ = x·r, r = (‖x‖²/d + ε)^(−1/2) per row, and its backward written out:

        dL/dg = Σ_rows G ⊙ x̂,     dL/dx = r · (G ⊙ g − x̂ · ⟨G ⊙ g, x̂⟩ / d)

    Saves x̂ and r (not x): 3 passes over the activation forward, 4 plus two reductions (one a matrix-vector product)
    backward, against ≈ 6 + 10 for autograd over ``F.rms_norm``'s composite ops on CPU."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x, d = x.contiguous(), x.shape[-1]
        rstd = torch.linalg.vector_norm(x, 2, -1, keepdim=True).square_().div_(d).add_(eps).rsqrt_()
        x_hat = x * rstd
        ctx.save_for_backward(x_hat, rstd, weight)
        return x_hat * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x_hat, rstd, weight = ctx.saved_tensors
        d = x_hat.shape[-1]
        grad = grad.contiguous()
        g_x_hat = (grad * x_hat).view(-1, d)
        grad_weight = g_x_hat.sum(0)
        dot = (g_x_hat @ weight).view(rstd.shape).div_(-d)  # −⟨G ⊙ g, x̂⟩/d per row
        grad_x = torch.mul(grad, weight, out=g_x_hat.view(grad.shape))  # reuses the buffer: G ⊙ g
        grad_x.addcmul_(x_hat, dot).mul_(rstd)
        return grad_x, grad_weight, None


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """g ⊙ h / sqrt(mean(h²) + ε) over the last dim: :class:`RMSNormFunction` for float32 on the CPU in eager mode
    (where ``F.rms_norm`` is composite ops), ``F.rms_norm`` otherwise (a fused kernel on CUDA; plain ops under
    compile/functorch)."""
    if plain_ops_only() or h.device.type != "cpu" or h.dtype != torch.float32 or weight.dtype != torch.float32:
        return F.rms_norm(h, (h.shape[-1],), weight, eps)
    return RMSNormFunction.apply(h, weight, eps)
