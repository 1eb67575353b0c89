"""The measurements of an audit (:func:`audit`), on one forward + backward pass of a sample batch through the model
*as it is* (DESIGN.md §2 for every definition):

* **per weight matrix** (``nn.Linear``/``nn.Embedding`` weights, and the logical matrices of modules with a
  ``matrices()`` method, e.g. our fused Q/K/V/gate): shape (out, in), fan-in (the γ-rule's convention,
  :mod:`smallinit.init`: ``Linear(in, out)`` → in, ``Embedding(V, d)`` → d), the measured std σ, the
  **implied γ = −ln σ / ln fan_in** (the γ for which the γ-rule σ = fan_in^(−γ) gives this σ), and the γ-rule's
  target σ = fan_in^(−G) at the requested ``gamma`` G;
* **per norm** (a module whose class name contains "Norm", ε read from ``eps`` / ``variance_epsilon``): ε, the
  mean square ms of its input (per token mean(h²), averaged over tokens; centred first for a LayerNorm) and the
  saturation s = mean_t ms_t / (ms_t + ε) (:func:`smallinit.probes.metrics.rmsnorm_saturation`); a norm with
  s ≤ 0.5 is **ε-dominated**, one with s < 0.9 ε-affected;
* **per block and branch** (pre-norm layouts: ours ``attn_norm→attn``, ``mlp_norm→mlp``; Hugging Face
  Llama/Qwen/Mistral ``input_layernorm→self_attn``, ``post_attention_layernorm→mlp``; GPT-2 ``ln_1→attn``,
  ``ln_2→mlp``; or an explicit ``branches=``): the residual flow mean_t ‖F(norm(h_t))‖ / ‖h_t‖
  (:func:`smallinit.probes.metrics.residual_flow`), h the stream the branch reads, and the branch's update
  size mean_t ‖F(norm(h_t))‖ (for a d×d map with σ = d^(−γ) on a unit-RMS input it is d^(1−γ));
* **per matrix, the first optimizer step**: AdamW's first update is g / (√v̂ + ε) with √v̂ = |g| exactly, so
  an entry with |g| < ε has its first update damped by more than half. Over the entries that received a
  gradient (g ≠ 0; an embedding's unseen rows are counted apart as ``grad_zero``):
  ``grad_below_eps`` = mean[|g| < ε] and ``grad_damping`` = mean ε / (|g| + ε). ``grad_clip`` applies the
  trainer's global-norm clipping first (it shrinks g, so more entries fall under ε).

The sample batch matters for gradients: random token ids carry no signal that averages up over a batch, so
their per-entry gradients shrink roughly like 1/√(tokens); real text gives larger ones. Say which you used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from smallinit.audit.report import AuditReport
from smallinit.audit.rows import BranchAudit, MatrixAudit, NormAudit
from smallinit.core.errors import ConfigError
from smallinit.init import _default_fan_in

__all__ = ["audit", "grad_eps_stats", "implied_gamma", "random_tokens"]

# (norm attribute, branch attribute, branch kind) of pre-norm blocks we recognise
_BRANCH_LAYOUTS: tuple[tuple[str, str, str], ...] = (
    ("attn_norm", "attn", "attn"),
    ("mlp_norm", "mlp", "mlp"),
    ("input_layernorm", "self_attn", "attn"),
    ("post_attention_layernorm", "mlp", "mlp"),
    ("ln_1", "attn", "attn"),
    ("ln_2", "mlp", "mlp"),
)


def implied_gamma(std: float, fan_in: int) -> float | None:
    """γ = −ln σ / ln fan_in: the γ-rule exponent that draws std σ at this fan-in (None if σ ≤ 0 or fan_in ≤ 1)."""
    if not (std > 0 and math.isfinite(std)) or fan_in <= 1:
        return None
    return -math.log(std) / math.log(fan_in)


def audit(
    module: nn.Module,
    sample_input: Any = None,
    *,
    gamma: float = 1.0,
    optimizer_eps: float = 1e-8,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    branches: Iterable[tuple[str, str, nn.Module, nn.Module]] | None = None,
    backward: bool = True,
    grad_clip: float | None = None,
    batch: int = 4,
    seq_len: int = 128,
    seed: int = 0,
    target: str | None = None,
    notes: Sequence[str] = (),
) -> AuditReport:
    """Audit ``module``'s initialization (see :mod:`smallinit.audit.measure` for every definition).

    Args:
        module: any ``nn.Module`` (ours, a Hugging Face model, a plain one). It is left as it was: hooks are
            removed, its train/eval mode and any existing ``.grad`` are restored.
        sample_input: the batch for the sample pass: a tensor (called as ``module(x)``) or a mapping (called as
            ``module(**x)``). None: ``batch`` × ``seq_len`` random token ids (seeded by ``seed``) over the
            model's ``config.vocab_size`` (ours and Hugging Face models have one), ``seq_len`` capped at the
            model's maximum length.
        gamma: the γ of the γ-rule to compare with (target σ = fan_in^(−γ)); it does not change the model.
        optimizer_eps: Adam's ε for the first-step gradient columns.
        loss_fn: ``loss_fn(output, sample_input) -> scalar`` for the backward pass. Default: next-token
            cross-entropy when the output is logits over token ids, else mean(output²)/2.
        branches: explicit ``(block name, branch kind, norm module, branch module)`` residual branches; default:
            the recognised pre-norm layouts (ours, HF Llama/Qwen/Mistral, GPT-2).
        backward: False skips the gradient columns (forward only).
        grad_clip: clip the global gradient norm to this value before counting (as the trainer does); None = off.
        target: a label for the report (default: the module's class name).
        notes: lines to carry into the report (e.g. "audited on a 2-block copy"); a note starting with "!" is
            also repeated in the summary.
    """
    from smallinit.init import check_gamma

    gamma = check_gamma(gamma)
    if not (isinstance(optimizer_eps, (int, float)) and optimizer_eps >= 0 and math.isfinite(optimizer_eps)):
        raise ConfigError(f"optimizer ε must be a finite number >= 0, got {optimizer_eps!r}")
    params = list(module.parameters())
    if not params:
        raise ConfigError("audit: the module has no parameters")
    device = params[0].device
    if device.type == "meta":
        raise ConfigError("audit: the module is on the meta device (no values to measure); materialise it first")
    sample_input, sample_desc = _sample_batch(module, sample_input, device, batch, seq_len, seed)

    mats = _matrices(module)
    norms = [(n, m) for n, m in module.named_modules() if _is_norm(m)]
    rec = _Recorder(norms, list(branches) if branches is not None else _find_branches(module))
    _sample_pass(module, params, sample_input, rec, loss_fn=loss_fn, backward=backward, grad_clip=grad_clip)

    report = AuditReport(
        target=target or type(module).__name__, gamma=gamma, optimizer_eps=float(optimizer_eps), notes=list(notes)
    )
    report.sample = {
        **sample_desc,
        "loss": rec.loss,
        "grad_norm": rec.grad_norm,
        "grad_clip": grad_clip if grad_clip else None,
    }
    report.matrices = _matrix_rows(mats, rec.grads, gamma, float(optimizer_eps))
    report.norms = _norm_rows(norms, rec.norm_stats)
    report.branches = _branch_rows(rec.flows)
    return report


# ---- the steps of an audit -------------------------------------------------------------------------


def _sample_batch(
    module: nn.Module, sample_input: Any, device: torch.device, batch: int, seq_len: int, seed: int
) -> tuple[Any, dict[str, Any]]:
    """The batch of the sample pass and the report's description of it: ``sample_input`` as given, or (None)
    ``batch`` × ``seq_len`` random token ids over the model's ``config.vocab_size``, ``seq_len`` capped at the
    model's maximum length."""
    if sample_input is None:
        vocab, max_len = _vocab_and_len(module)
        if not vocab:
            raise ConfigError("audit: pass sample_input= (the module has no config.vocab_size to draw token ids from)")
        T = min(seq_len, max_len) if max_len else seq_len
        sample_input = random_tokens(int(vocab), batch, T, seed).to(device)
        return sample_input, {"input": "random token ids", "batch": batch, "seq_len": T, "seed": seed}
    shape = tuple(sample_input.shape) if isinstance(sample_input, torch.Tensor) else None
    return sample_input, {"input": "given", "shape": "×".join(map(str, shape)) if shape else "mapping"}


@dataclass
class _Recorder:
    """The forward hooks of the sample pass and what they and the backward pass record: per norm, the saturation
    statistics of its input at each call; per (block, branch kind), (flow, update, stream) at each call; per
    parameter (by id) its gradient, clipped as the trainer would; the loss and the global gradient norm."""

    norms: list[tuple[str, nn.Module]]
    branches: list[tuple[str, str, nn.Module, nn.Module]]
    norm_stats: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    flows: dict[tuple[str, str], list[tuple[float, float, float]]] = field(default_factory=dict)
    grads: dict[int, torch.Tensor] = field(default_factory=dict)
    loss: float | None = None
    grad_norm: float | None = None
    _pending: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # each norm's inputs, for its branch
    _handles: list = field(default_factory=list)

    def attach(self) -> None:
        for name, mod in self.norms:
            self._handles.append(mod.register_forward_pre_hook(self._norm_pre(name, mod)))
        for block, kind, norm, br in self.branches:
            self._handles.append(br.register_forward_hook(self._branch_out(block, kind, norm)))

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._pending.clear()

    def _norm_pre(self, name: str, mod: nn.Module):
        from smallinit.probes.metrics import rmsnorm_saturation

        eps = _norm_eps(mod) or 0.0

        def hook(m, args, kwargs=None):
            h = args[0] if args else next(iter((kwargs or {}).values()))
            x = _wide(h)
            if _centres(mod):
                x = x - x.mean(dim=-1, keepdim=True)
            self.norm_stats.setdefault(name, []).append(rmsnorm_saturation(x, eps))
            self._pending.setdefault(id(mod), []).append(h.detach())

        return hook

    def _branch_out(self, block: str, kind: str, norm: nn.Module):
        from smallinit.probes.metrics import residual_flow

        def hook(m, args, out):
            y = _first_tensor(out)
            stack = self._pending.get(id(norm))
            if y is None or not stack:
                return
            h = stack.pop()
            if y.shape != h.shape:
                return
            self.flows.setdefault((block, kind), []).append(
                (residual_flow(y, h), float(_wide(y).norm(dim=-1).mean()), float(_wide(h).norm(dim=-1).mean()))
            )

        return hook


def _sample_pass(
    module: nn.Module,
    params: list[nn.Parameter],
    sample_input: Any,
    rec: _Recorder,
    *,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None,
    backward: bool,
    grad_clip: float | None,
) -> None:
    """One forward pass of ``sample_input`` in eval mode with ``rec``'s hooks attached and (``backward``) one
    backward pass of the loss, recorded in ``rec``. The module is left as it was: hooks removed, train/eval mode,
    ``requires_grad`` and any existing ``.grad`` restored."""
    was_training = module.training
    saved_grads = {id(p): p.grad for p in params}
    saved_req = {id(p): p.requires_grad for p in params}
    try:
        module.eval()
        rec.attach()
        for p in params:
            p.grad = None
            if backward and p.is_floating_point():
                p.requires_grad_(True)
        with torch.set_grad_enabled(backward):
            kwargs = {"use_cache": False} if hasattr(getattr(module, "config", None), "use_cache") else {}
            if isinstance(sample_input, Mapping):
                out = module(**sample_input, **kwargs)
            else:
                out = module(sample_input, **kwargs) if kwargs else module(sample_input)
            rec.detach()
            if backward:
                loss = (loss_fn or _default_loss)(out, sample_input)
                rec.loss = float(loss.detach())
                del out
                loss.backward()
                del loss
                rec.grad_norm, rec.grads = _clipped_grads(params, grad_clip)
            else:
                del out
    finally:
        rec.detach()
        module.train(was_training)
        for p in params:
            p.grad = saved_grads[id(p)]
            p.requires_grad_(saved_req[id(p)])


def _clipped_grads(params: list[nn.Parameter], grad_clip: float | None) -> tuple[float, dict[int, torch.Tensor]]:
    """(global gradient norm, {id(p): p.grad}) after the backward pass, every gradient scaled by
    ``torch.nn.utils.clip_grad_norm_``'s factor when the norm exceeds ``grad_clip``."""
    gn = math.sqrt(sum(float(_wide(p.grad).square().sum()) for p in params if p.grad is not None))
    scale = 1.0
    if grad_clip and gn > grad_clip:
        scale = grad_clip / (gn + 1e-6)  # torch.nn.utils.clip_grad_norm_'s factor
    grads = {}
    for p in params:
        if p.grad is not None:
            grads[id(p)] = p.grad.detach() * scale if scale != 1.0 else p.grad.detach()
    return gn, grads


def _matrix_rows(
    mats: list[tuple[str, torch.Tensor, int, torch.Tensor]],
    grads: dict[int, torch.Tensor],
    gamma: float,
    optimizer_eps: float,
) -> list[MatrixAudit]:
    """A row per weight matrix: σ, implied γ, the γ-rule's target σ and, when its parameter got a gradient, the
    first-step statistics of the gradient entries the matrix covers."""
    rows = []
    for name, W, fan_in, p in mats:
        std = float(_wide(W).std()) if W.numel() > 1 else 0.0
        row = MatrixAudit(
            name=name,
            shape=(int(W.shape[0]), int(W.shape[1])),
            fan_in=fan_in,
            std=std,
            implied_gamma=implied_gamma(std, fan_in),
            target_std=float(fan_in) ** (-gamma),
        )
        g = grads.get(id(p))
        if g is not None:
            gv = _view_of(W, p, g)
            if gv is not None:
                st = grad_eps_stats(gv, optimizer_eps)
                row.grad_rms, row.grad_below_eps, row.grad_damping, row.grad_zero = (
                    st["rms"],
                    st["below"],
                    st["damping"],
                    st["zero"],
                )
        rows.append(row)
    return rows


def _norm_rows(norms: list[tuple[str, nn.Module]], norm_stats: dict[str, list[dict[str, float]]]) -> list[NormAudit]:
    """A row per norm that saw an input: its ε and the means over its calls of mean square, saturation and ε/ms."""
    rows = []
    for name, mod in norms:
        calls = norm_stats.get(name)
        if not calls:
            continue
        k = len(calls)
        eom = [c["eps_over_ms"] for c in calls]
        rows.append(
            NormAudit(
                name=name,
                eps=float(_norm_eps(mod) or 0.0),
                mean_square=sum(c["mean_square"] for c in calls) / k,
                saturation=sum(c["saturation"] for c in calls) / k,
                eps_over_ms=sum(eom) / k if all(math.isfinite(e) for e in eom) else None,
            )
        )
    return rows


def _branch_rows(flows: dict[tuple[str, str], list[tuple[float, float, float]]]) -> list[BranchAudit]:
    """A row per residual branch that ran: the means over its calls of flow, update and stream."""
    rows = []
    for (block, kind), vals in flows.items():
        k = len(vals)
        rows.append(
            BranchAudit(
                block=block,
                branch=kind,
                flow=sum(v[0] for v in vals) / k,
                update=sum(v[1] for v in vals) / k,
                stream=sum(v[2] for v in vals) / k,
            )
        )
    return rows


# ---- what the steps use -----------------------------------------------------------------------------


def _norm_eps(mod: nn.Module) -> float | None:
    for attr in ("eps", "variance_epsilon", "epsilon"):
        v = getattr(mod, attr, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _is_norm(mod: nn.Module) -> bool:
    return "norm" in type(mod).__name__.lower() and _norm_eps(mod) is not None


def _centres(mod: nn.Module) -> bool:
    """LayerNorm-like (subtracts the mean) rather than RMSNorm-like."""
    n = type(mod).__name__.lower()
    return "rms" not in n and ("layernorm" in n or isinstance(mod, nn.LayerNorm))


def _matrices(module: nn.Module) -> list[tuple[str, torch.Tensor, int, torch.Tensor]]:
    """(name, matrix (out, in) — a parameter or a view of one, fan_in, owning parameter) for every weight matrix.

    Modules with ``matrices()`` contribute their logical views (fan_in = the view's in-dimension, the γ-rule's
    fan-in of the fused parameter they live in); other parameters are classified by
    :func:`smallinit.init._default_fan_in` (Linear → in, Embedding → d, a module's ``fan_in_of``). Tied
    parameters appear once.
    """
    out: list[tuple[str, torch.Tensor, int, torch.Tensor]] = []
    seen: set[int] = set()
    claimed: list[str] = []
    for mname, mod in module.named_modules():
        if any(mname.startswith(c + ".") for c in claimed):
            continue
        if callable(getattr(mod, "matrices", None)):
            claimed.append(mname)
            owners = {p.untyped_storage().data_ptr(): p for p in mod.parameters()}
            for key, W in mod.matrices().items():
                p = owners.get(W.untyped_storage().data_ptr())
                if p is None or W.ndim != 2 or id(p) in seen and W is p:
                    continue
                out.append((f"{mname}.{key}" if mname else key, W, int(W.shape[1]), p))
            for p in mod.parameters():
                seen.add(id(p))
            continue
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            kind, fan_in = _default_fan_in(mod, pname, p)
            if kind != "random" or p.ndim != 2:
                continue
            out.append((f"{mname}.{pname}" if mname else pname, p, int(fan_in), p))
    return out


def _view_of(W: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor | None:
    """The entries of ``t`` (laid out like parameter ``p``, e.g. its gradient) that the view ``W`` of ``p`` covers."""
    if W is p:
        return t
    if t.shape != p.shape or t.stride() != p.stride():
        t = t.contiguous()
        if p.stride() != t.stride():
            return None
    return t.as_strided(W.shape, W.stride(), t.storage_offset() + W.storage_offset() - p.storage_offset())


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float32 if x.device.type == "mps" else torch.float64)


def grad_eps_stats(g: torch.Tensor, eps: float) -> dict[str, float | None]:
    """First-step AdamW damping of one gradient tensor. After one step √v̂ = |g| exactly, so this is
    :func:`smallinit.probes.metrics.optimizer_eps_damping` of v = g² (β2 = 0, t = 1) over the entries with g ≠ 0:
    ``below`` = mean[|g| < ε], ``damping`` = mean ε/(|g| + ε); plus ``zero`` = mean[g = 0] and
    ``rms`` = sqrt(mean g²) over all entries. Computed in float64."""
    from smallinit.probes.metrics import optimizer_eps_damping

    a = _wide(g).abs().reshape(-1)
    nz = a[a > 0]
    zero = 1.0 - nz.numel() / max(1, a.numel())
    rms = float(a.square().mean().sqrt()) if a.numel() else None
    if nz.numel() == 0:
        return {"below": None, "damping": None, "zero": zero, "rms": rms}
    d = optimizer_eps_damping(nz.square(), step=1, beta2=0.0, eps=eps)
    return {"below": d["frac_below"], "damping": d["damping"], "zero": zero, "rms": rms}


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return x[0]
    for attr in ("last_hidden_state", "logits"):
        v = getattr(x, attr, None)
        if isinstance(v, torch.Tensor):
            return v
    return None


def _find_branches(module: nn.Module) -> list[tuple[str, str, nn.Module, nn.Module]]:
    """(block path, branch kind, norm module, branch module) for every recognised pre-norm block."""
    out = []
    for name, mod in module.named_modules():
        if hasattr(mod, "pre_feedforward_layernorm"):  # post-norm blocks (Gemma-2): not this layout
            continue
        for norm_attr, br_attr, kind in _BRANCH_LAYOUTS:
            norm, br = getattr(mod, norm_attr, None), getattr(mod, br_attr, None)
            if isinstance(norm, nn.Module) and isinstance(br, nn.Module) and _is_norm(norm):
                out.append((name, kind, norm, br))
    return out


def _vocab_and_len(module: nn.Module) -> tuple[int | None, int | None]:
    cfg = getattr(module, "config", None)
    if cfg is None:
        return None, None
    vocab = getattr(cfg, "vocab_size", None)
    max_len = getattr(cfg, "max_seq_len", None) or getattr(cfg, "max_position_embeddings", None)
    return vocab, max_len


def random_tokens(vocab_size: int, batch: int = 4, seq_len: int = 128, seed: int = 0) -> torch.Tensor:
    """Token ids uniform in [0, vocab_size), shape (batch, seq_len), from a generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, seq_len), generator=gen)


def _default_loss(out: Any, sample_input: Any) -> torch.Tensor:
    """Next-token cross-entropy when the output is logits (B, T, V) over token ids (B, T); else mean(out²)/2."""
    y = _first_tensor(out)
    if y is None:
        raise ConfigError("audit: the model's output holds no tensor to take a loss of; pass loss_fn=")
    logits = getattr(out, "logits", None)
    if (
        logits is None
        and isinstance(sample_input, torch.Tensor)
        and not sample_input.is_floating_point()
        and y.ndim == 3
        and y.shape[:2] == sample_input.shape
    ):
        logits = y
    if logits is not None and isinstance(sample_input, torch.Tensor) and sample_input.shape[1] >= 2:
        return nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).float(), sample_input[:, 1:].reshape(-1).to(logits.device)
        )
    return 0.5 * y.float().square().mean()
