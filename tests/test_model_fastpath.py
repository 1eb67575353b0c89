"""The fast paths of the model (fused RoPE, joint q/k rotation and split of the fused projection, RMSNorm's
hand-written backward, SwiGLU's two half-matmuls, chunked LM-head cross-entropy) against a reference copy of the code
they replaced: same logits, same loss, and the same few training steps within float tolerance."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from smallinit import ModelConfig, Transformer
from smallinit.model.attention import RotaryEmbedding, apply_rope
from smallinit.model.fused import RMSNormFunction, SplitRope, rms_norm
from smallinit.model.loss import linear_cross_entropy
from smallinit.model.mlp import SwiGLU
from smallinit.model.norm import RMSNorm


# ---- the reference: the forward as written before the fast paths (rotate-half with cat, RoPE per head group,
# full logits + F.cross_entropy) ------------------------------------------------------------------------------
def ref_apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def ref_attention(attn, x, cos, sin):
    B, T, _ = x.shape
    q, k, v, g = attn.w_qkvg(x).split([attn.q_dim, attn.kv_dim, attn.kv_dim, attn.gate_dim], dim=-1)
    q = ref_apply_rope(q.view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2), cos, sin)
    k = ref_apply_rope(k.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2), cos, sin)
    v = v.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=attn.n_kv_heads != attn.n_heads)
    y = y.transpose(1, 2)
    if attn.gate_dim:
        y = y * torch.sigmoid(g).view(B, T, attn.n_heads, -1)
    return attn.w_o(y.reshape(B, T, attn.q_dim))


def ref_mlp(mlp, x):
    if not isinstance(mlp, SwiGLU):
        return mlp(x)
    gate, up = mlp.w_gate_up(x).chunk(2, dim=-1)  # one matmul, then chunk (its backward: a cat)
    return mlp.w_down(F.silu(gate) * up)


def ref_norm(norm, h):
    if isinstance(norm, RMSNorm):
        return F.rms_norm(h, (h.shape[-1],), norm.weight, norm.eps)
    return norm(h)


def ref_logits(model, idx):
    cos, sin = model.rope(idx.shape[1])
    h = model.tok_emb(idx)
    for b in model.blocks:
        h = h + ref_attention(b.attn, ref_norm(b.attn_norm, h), cos, sin)
        h = h + ref_mlp(b.mlp, ref_norm(b.mlp_norm, h))
    return model.lm_head(ref_norm(model.norm_f, h))


def ref_loss(model, idx, targets):
    return F.cross_entropy(ref_logits(model, idx).float().flatten(0, 1), targets.flatten())


CONFIGS = {
    "elementwise-tied": dict(
        vocab_size=211,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=64,
        max_seq_len=24,
        gate="elementwise",
        tie_embeddings=True,
    ),
    "none-untied": dict(vocab_size=150, d_model=48, n_layers=2, n_heads=3, d_ff=96, max_seq_len=24, gate="none"),
    "headwise-gqa": dict(
        vocab_size=99, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=96, max_seq_len=24, gate="headwise"
    ),
    "moe": dict(
        vocab_size=120,
        d_model=32,
        n_layers=2,
        n_heads=2,
        d_ff=64,
        max_seq_len=24,
        gate="elementwise",
        moe=dict(n_experts=4, top_k=2, d_expert=32),
    ),
}


def test_apply_rope_matches_rotate_half_reference_and_its_gradient():
    torch.manual_seed(0)
    cos, sin = RotaryEmbedding(16, 10, 100.0)(10)
    x = torch.randn(3, 2, 10, 16, dtype=torch.float64, requires_grad=True)
    out = apply_rope(x, cos.double(), sin.double())
    ref = ref_apply_rope(x, cos.double(), sin.double())
    assert torch.allclose(out, ref, atol=1e-12)
    g = torch.randn_like(out)
    (ga,) = torch.autograd.grad(out, x, g)
    (gb,) = torch.autograd.grad(ref, x, g)
    assert torch.allclose(ga, gb, atol=1e-12)
    # a rotation keeps the norm of every pair (x_i, x_{i+hd/2})
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda t: apply_rope(t, cos.double()[:4], sin.double()[:4]),
        (torch.randn(4, 16, dtype=torch.float64, requires_grad=True),),
    )


@pytest.mark.parametrize("heads,kv_heads,gate_dim", [(4, 4, 0), (4, 2, 4), (2, 1, 16)])
def test_split_rope_matches_slices_and_its_gradient(heads, kv_heads, gate_dim, monkeypatch):
    """SplitRope against slicing + rotate-half RoPE on every output, and its one-buffer backward against autograd over
    the slices — also when some outputs get no gradient (v unused, gate unused: their part of the buffer is zero).
    Deterministic mode fills ``torch.empty`` with NaN, so a part of the buffer left unwritten cannot pass."""
    monkeypatch.setattr(torch.utils.deterministic, "fill_uninitialized_memory", True)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _check_split_rope(heads, kv_heads, gate_dim)
    finally:
        torch.use_deterministic_algorithms(was)


def _check_split_rope(heads, kv_heads, gate_dim):
    torch.manual_seed(3)
    hd, B, T = 8, 2, 5
    D = (heads + 2 * kv_heads) * hd + gate_dim
    cos, sin = (t.double()[:, None, :] for t in RotaryEmbedding(hd, T, 100.0)(T))
    p = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    q, k, v, g = SplitRope.apply(p, cos[..., : hd // 2], sin[..., : hd // 2], heads, kv_heads, hd)
    rq, rk, rv, rg = p.split([heads * hd, kv_heads * hd, kv_heads * hd, gate_dim], dim=-1)
    assert torch.allclose(q, ref_apply_rope(rq.view(B, T, heads, hd), cos, sin), atol=1e-12)
    assert torch.allclose(k, ref_apply_rope(rk.view(B, T, kv_heads, hd), cos, sin), atol=1e-12)
    assert torch.equal(v, rv.view(B, T, kv_heads, hd)) and torch.equal(g, rg)
    for used in [(q, k, v, g), (q, k), (k, g)]:  # sum of random projections of the used outputs
        weights = [torch.randn_like(t) for t in used]
        out = sum((t * w).sum() for t, w in zip(used, weights))
        (ga,) = torch.autograd.grad(out, p, retain_graph=True)
        ref_outs = {
            id(q): ref_apply_rope(rq.view(B, T, heads, hd), cos, sin),
            id(k): ref_apply_rope(rk.view(B, T, kv_heads, hd), cos, sin),
            id(v): rv.view(B, T, kv_heads, hd),
            id(g): rg,
        }
        ref = sum((ref_outs[id(t)] * w).sum() for t, w in zip(used, weights))
        (gb,) = torch.autograd.grad(ref, p, retain_graph=True)
        assert torch.allclose(ga, gb, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda t: SplitRope.apply(t, cos[..., : hd // 2], sin[..., : hd // 2], heads, kv_heads, hd),
        (torch.randn(1, T, D, dtype=torch.float64, requires_grad=True),),
    )


@pytest.mark.parametrize("scale,eps", [(1.0, 1e-5), (1e-6, 1e-12), (1e-4, 1e-5)])
def test_rms_norm_matches_f_rms_norm_and_its_gradient(scale, eps):
    """The hand-written backward against autograd through ``F.rms_norm``: at unit scale, and at the small-init scale
    where mean(h²) is near or below ε (the ε-dominated regime the paper is about); non-contiguous gradient."""
    torch.manual_seed(2)
    x = (scale * torch.randn(3, 5, 24, dtype=torch.float64)).requires_grad_()
    w = (torch.rand(24, dtype=torch.float64) + 0.5).requires_grad_()
    g = torch.randn(3, 24, 5, dtype=torch.float64).transpose(1, 2)  # a non-contiguous gradient
    x32, w32 = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    out = rms_norm(x32, w32, eps)
    ref = F.rms_norm(x, (24,), w, eps)
    assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-6 * ref.abs().max().item())
    ga = torch.autograd.grad(out, (x32, w32), g.float())
    gb = torch.autograd.grad(ref, (x, w), g)
    for a, b in zip(ga, gb):
        assert torch.allclose(a.double(), b, rtol=1e-4, atol=1e-5 * b.abs().max().item())
    # the formula itself, in float64 through the same autograd.Function: exact to rounding (non-contiguous input)
    t = (x.detach()[:, :2] / scale).transpose(0, 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: RMSNormFunction.apply(scale * a, b, eps), (t, w))


@pytest.mark.parametrize("chunk", [1, 7, 1024])
@pytest.mark.parametrize("ignore", [False, True])
def test_linear_cross_entropy_equals_full_logits(chunk, ignore):
    torch.manual_seed(1)
    h = torch.randn(2, 13, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 30, (2, 13))
    if ignore:
        t[0, ::2] = -100
    ref = F.cross_entropy((h @ w.T).flatten(0, 1), t.flatten())
    out = linear_cross_entropy(h, w, t, chunk=chunk)
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    ga = torch.autograd.grad(3.0 * out, (h, w))
    gb = torch.autograd.grad(3.0 * ref, (h, w))
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=1e-12)
    with torch.no_grad():  # no gradient work when none is wanted
        assert linear_cross_entropy(h, w, t, chunk=chunk).item() == pytest.approx(ref.item(), rel=1e-12)


def test_cpu_chunks_keep_their_logits_within_16_mib():
    """glibc maps a block above its mmap threshold (at most 32 MiB) afresh on every use: a CPU chunk's float32 logits
    stay ≤ 16 MiB (V 8192 → 512 rows, not the 1024 × 8192 × 4 B = 32 MiB of before); CUDA keeps 1024 rows."""
    from smallinit.model.loss import CPU_CHUNK_BYTES, default_chunk

    for vocab, rows in ((257, 1024), (4096, 1024), (8192, 512), (32000, 128), (50304, 64), (10**7, 16)):
        assert default_chunk(vocab, "cpu") == rows, vocab
        assert rows * vocab * 4 <= CPU_CHUNK_BYTES or rows == 16
    assert default_chunk(8192, "cuda") == 1024
    torch.manual_seed(0)  # the default chunking gives the one-chunk value
    h, w = torch.randn(600, 4, dtype=torch.float64), torch.randn(8192, 4, dtype=torch.float64)
    t = torch.randint(0, 8192, (600,))
    assert linear_cross_entropy(h, w, t).item() == pytest.approx(
        linear_cross_entropy(h, w, t, chunk=600).item(), rel=1e-12
    )


def test_linear_cross_entropy_rejects_mismatched_targets():
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(torch.randn(4, 3), torch.randn(5, 3), torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_loss_equal_reference(name):
    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_dict(CONFIGS[name]))
    idx = torch.randint(0, model.config.vocab_size, (3, 20))
    tgt = torch.randint(0, model.config.vocab_size, (3, 20))
    with torch.no_grad():
        assert torch.allclose(model(idx), ref_logits(model, idx), rtol=1e-5, atol=1e-6)
        assert model(idx, targets=tgt).item() == pytest.approx(ref_loss(model, idx, tgt).item(), rel=1e-6)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_training_steps_match_the_reference_path(name):
    """Eight AdamW steps at γ = 0.5 on two alternated batches (so that the weights move and the loss falls): per-step
    losses of the new and the old path agree to float tolerance, and so do the final weights."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**CONFIGS[name], "gamma": 0.5})
    new = Transformer(cfg)
    old = copy.deepcopy(new)
    opt_new = torch.optim.AdamW(new.parameters(), lr=3e-3)
    opt_old = torch.optim.AdamW(old.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(5)
    data = torch.randint(0, cfg.vocab_size, (2, 4, 25), generator=g)  # two batches, alternated
    losses = []
    for i in range(8):
        idx, tgt = data[i % 2, :, :-1], data[i % 2, :, 1:]
        pair = []
        for model, opt, fn in (
            (new, opt_new, lambda m: m(idx, targets=tgt)),
            (old, opt_old, lambda m: ref_loss(m, idx, tgt)),
        ):
            loss = fn(model)
            aux = model.aux_loss()
            (loss + aux if aux is not None else loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            pair.append(loss.item())
        losses.append(pair)
    for a, b in losses:
        assert math.isfinite(a) and a == pytest.approx(b, rel=1e-4, abs=1e-5)
    assert losses[-1][0] < losses[0][0]  # it trained
    for (k, a), b in zip(new.state_dict().items(), old.state_dict().values()):
        assert (a - b).abs().max().item() < 3e-3, k  # < one Adam step (lr): float noise can flip a tiny gradient


def test_bf16_autocast_loss_close_to_float32():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_dict(CONFIGS["elementwise-tied"]))
    idx = torch.randint(0, 211, (2, 16))
    tgt = torch.randint(0, 211, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = model(idx, targets=tgt)
        b = ref_loss(model, idx, tgt)
    assert a.dtype == torch.float32
    assert a.item() == pytest.approx(b.item(), rel=2e-2)
    a.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_plain_path_equals_fast_path(name, monkeypatch):
    """The plain-op path that torch.compile and functorch trace (plain_ops_only() True: slices + cat-RoPE,
    F.rms_norm, full logits + cross-entropy) gives the fast path's loss and gradients."""
    import smallinit.model.attention as attention_mod
    import smallinit.model.fused as fused_mod
    import smallinit.model.transformer as transformer_mod

    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_dict(CONFIGS[name]))
    idx = torch.randint(0, model.config.vocab_size, (3, 20))
    tgt = torch.randint(0, model.config.vocab_size, (3, 20))
    results = []
    for plain in (False, True):
        for mod in (attention_mod, fused_mod, transformer_mod):
            monkeypatch.setattr(mod, "plain_ops_only", lambda plain=plain: plain)
        model.zero_grad(set_to_none=True)
        loss = model(idx, targets=tgt)
        loss.backward()
        results.append((loss.item(), {k: p.grad.clone() for k, p in model.named_parameters()}))
    (fast_loss, fast_grads), (plain_loss, plain_grads) = results
    assert fast_loss == pytest.approx(plain_loss, rel=1e-6)
    for k, g in fast_grads.items():
        assert torch.allclose(g, plain_grads[k], rtol=1e-4, atol=1e-6 * plain_grads[k].abs().max().item() + 1e-9), k
