"""The language-model loss fused with the output head, in row chunks, so that the full (N, V) logits and their
gradient never exist at once.

For hidden states h (N, d), head W (V, d) and targets y (N,), with z = h Wᵀ:

    loss = (1/n) Σ_{i valid} ( logsumexp_j z_ij − z_{i,y_i} )        (n = number of valid targets; a target
                                                                     equal to ``ignore_index`` is not valid)
    ∂loss/∂z_ij = (softmax(z_i)_j − [j = y_i]) / n   for valid rows, 0 otherwise
    ∂loss/∂h = (∂loss/∂z) W,      ∂loss/∂W = (∂loss/∂z)ᵀ h

— the same value and gradients as ``F.cross_entropy(h @ W.T, y)`` (mean reduction). The forward walks the rows
in chunks of ``chunk`` rows: each chunk's logits are formed, reduced to its loss, turned in place into ∂loss/∂z
and multiplied into ∂loss/∂h (rows of the chunk) and ∂loss/∂W (accumulated) at once, then freed; the backward
only scales the stored gradients by the incoming gradient. Memory: O(chunk·V) instead of 3·N·V floats, and the
chunk's logits stay in cache between their uses. Logits are float32 whatever the autocast dtype (the matmuls
run in the autocast dtype, as ``nn.Linear`` would).
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK = 1024
"""Rows per chunk (on the CPU at most :data:`CPU_CHUNK_BYTES` of logits, :func:`default_chunk`)."""

CPU_CHUNK_BYTES = 16 * 2**20
"""On the CPU a chunk's float32 logits stay within 16 MiB. glibc serves a block above its dynamic mmap threshold
(which rises with freed blocks, to at most 32 MiB) with a fresh ``mmap``, page-faulted in on every use: 1024 rows ×
V 8192 × 4 bytes is exactly 32 MiB, and 512-row chunks halved a step's minor page faults and cut its time by 3% at
d 128 × 4 and 1% at d 384 × 6 (V 8192, one thread; benchmarks/RESULTS.md, fifth pass)."""


def default_chunk(vocab: int, device: torch.device | str = "cpu") -> int:
    """Rows per chunk: :data:`DEFAULT_CHUNK`; on the CPU the largest power of two ≤ it whose float32 logits
    (rows · V · 4 bytes) fit :data:`CPU_CHUNK_BYTES`, at least 16 (V 8192 → 512, V 257 → 1024, V 50,304 → 64)."""
    if torch.device(device).type != "cpu":
        return DEFAULT_CHUNK
    rows = DEFAULT_CHUNK
    while rows > 16 and rows * vocab * 4 > CPU_CHUNK_BYTES:
        rows //= 2
    return rows


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    dev = h.device.type
    if torch.amp.is_autocast_available(dev) and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return h.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, chunk, ignore_index, need_grad):
        cdt = _compute_dtype(h)
        with torch.autocast(h.device.type, enabled=False):
            hc, wc = h.to(cdt), weight.to(cdt)
            fdt = torch.promote_types(cdt, torch.float32)  # logits' dtype: float32 (float64 stays float64)
            N = h.shape[0]
            valid = targets != ignore_index
            any_ignored = not bool(valid.all())
            n = valid.sum() if any_ignored else torch.tensor(N, device=h.device)
            safe_t = targets.masked_fill(~valid, 0) if any_ignored else targets
            total = torch.zeros((), dtype=fdt, device=h.device)
            grad_h = torch.empty(h.shape, dtype=h.dtype, device=h.device) if need_grad else None
            grad_w = torch.zeros(weight.shape, dtype=fdt, device=h.device) if need_grad else None
            inv_n = 1.0 / n.clamp_min(1).to(fdt)
            for s in range(0, N, chunk):
                e = min(s + chunk, N)
                z = (hc[s:e] @ wc.t()).to(fdt)  # (rows, V)
                t = safe_t[s:e]
                picked = z.gather(1, t[:, None]).squeeze(1)
                m = z.amax(dim=-1, keepdim=True)
                p = z.sub_(m).exp_()  # exp(z − max), in place of the logits (no logsumexp temporaries)
                ssum = p.sum(dim=-1, keepdim=True)
                per_row = (m + ssum.log()).squeeze(1) - picked  # logsumexp(z) − z_y
                if any_ignored:
                    per_row = per_row * valid[s:e]
                total += per_row.sum()
                if need_grad:
                    p.div_(ssum)  # softmax
                    p.scatter_add_(1, t[:, None], torch.full((e - s, 1), -1.0, dtype=fdt, device=h.device))
                    if any_ignored:
                        p.mul_(valid[s:e, None])
                    p.mul_(inv_n)
                    pc = p.to(cdt)
                    grad_h[s:e] = (pc @ wc).to(h.dtype)
                    grad_w.addmm_(p.t(), hc[s:e].to(fdt)) if cdt != fdt else grad_w.addmm_(pc.t(), hc[s:e])
            loss = total * inv_n
        if need_grad:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, g):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * g.to(grad_h.dtype), grad_w * g.to(grad_w.dtype), None, None, None, None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None = None, ignore_index: int = -100
) -> torch.Tensor:
    """Mean cross-entropy of the logits h Wᵀ against ``targets`` without materializing all logits (module
    docstring). ``h`` (..., d), ``weight`` (V, d), ``targets`` (...) int64; ``chunk`` rows at a time (None:
    :func:`default_chunk`); returns a 0-dim float32 tensor (float64 for float64 inputs)."""
    if chunk is None:
        chunk = default_chunk(weight.shape[0], h.device)
    h2 = h.reshape(-1, h.shape[-1])
    t = targets.reshape(-1)
    if t.shape[0] != h2.shape[0]:
        raise ValueError(f"targets hold {t.shape[0]} positions, hidden states {h2.shape[0]}")
    need_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(h2, weight, t, int(chunk), int(ignore_index), need_grad)
