"""Audit a model's initialization: the γ it really has, where the norm ε and Adam's ε bite, how big each
residual branch starts (``smallinit audit``; DESIGN.md §2 for every definition).

    report = smallinit.audit(model, gamma=1.0, optimizer_eps=1e-8)   # any nn.Module; LMs get random token ids
    print(report.summary()); print(report.table())
    report.save("audit-out")                                          # audit.json, audit.md, figures

What is measured, on one forward + backward pass of a sample batch through the model *as it is*:

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

:func:`audit_widths` rebuilds a model family at several widths and fits the log-log slope of each quantity
against width (the d^(1−γ) law of the branch update, the d^(−2γ) law of the first norm's mean square, …).
The sample batch matters for gradients: random token ids carry no signal that averages up over a batch, so
their per-entry gradients shrink roughly like 1/√(tokens); real text gives larger ones. Say which you used.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from smallinit.errors import ConfigError
from smallinit.init import _default_fan_in

__all__ = [
    "AuditReport",
    "BranchAudit",
    "MatrixAudit",
    "NormAudit",
    "WidthFit",
    "WidthStudy",
    "EPS_DOMINATED",
    "EPS_AFFECTED",
    "audit",
    "audit_widths",
    "implied_gamma",
    "loglog_slope",
    "check_out_dir",
    "load_report",
]

AUDIT_KIND = "smallinit-audit"
EPS_DOMINATED = 0.5
"""Saturation at or below which a norm is ε-dominated (DESIGN.md §2: ≤ 0.5 = ε dominates)."""
EPS_AFFECTED = 0.9
"""Saturation below which a norm is ε-affected (ε is ≥ 11% of the signal's mean square)."""

# (norm attribute, branch attribute, branch kind) of pre-norm blocks we recognise
_BRANCH_LAYOUTS: tuple[tuple[str, str, str], ...] = (
    ("attn_norm", "attn", "attn"),
    ("mlp_norm", "mlp", "mlp"),
    ("input_layernorm", "self_attn", "attn"),
    ("post_attention_layernorm", "mlp", "mlp"),
    ("ln_1", "attn", "attn"),
    ("ln_2", "mlp", "mlp"),
)


# ---- rows ------------------------------------------------------------------------------------------

@dataclass
class MatrixAudit:
    """One weight matrix. ``implied_gamma`` = −ln(std)/ln(fan_in); ``target_std`` = fan_in^(−gamma) at the audit's γ.
    Gradient fields are over entries with g ≠ 0 (None when no backward pass ran or no entry got a gradient)."""

    name: str
    shape: tuple[int, int]
    fan_in: int
    std: float
    implied_gamma: float | None
    target_std: float
    grad_rms: float | None = None
    grad_below_eps: float | None = None
    grad_damping: float | None = None
    grad_zero: float | None = None

    @property
    def kind(self) -> str:
        return layer_kind(self.name)[1]


@dataclass
class NormAudit:
    """One norm: its ε, the mean square of its input at init, saturation ms/(ms+ε) and ε/ms (token means)."""

    name: str
    eps: float
    mean_square: float
    saturation: float
    eps_over_ms: float | None

    @property
    def status(self) -> str:
        if self.saturation <= EPS_DOMINATED:
            return "eps-dominated"
        if self.saturation < EPS_AFFECTED:
            return "eps-affected"
        return "ok"


@dataclass
class BranchAudit:
    """One residual branch: flow = mean_t ‖F(norm(h_t))‖/‖h_t‖, update = mean_t ‖F(norm(h_t))‖, stream = mean_t ‖h_t‖."""

    block: str
    branch: str
    flow: float
    update: float
    stream: float


@dataclass
class WidthFit:
    """A quantity measured at several widths d and its least-squares slope of ln(value) on ln(d)."""

    quantity: str
    widths: list[int]
    values: list[float | None]
    slope: float | None
    note: str = ""


@dataclass
class WidthStudy:
    """The same family rebuilt at each width: per-width quantities and their log-log slopes."""

    widths: list[int]
    points: list[dict[str, float | None]]
    fits: list[WidthFit]
    notes: list[str] = field(default_factory=list)

    def fit(self, quantity: str) -> WidthFit:
        for f in self.fits:
            if f.quantity == quantity:
                return f
        raise KeyError(quantity)


# ---- helpers ---------------------------------------------------------------------------------------

def implied_gamma(std: float, fan_in: int) -> float | None:
    """γ = −ln σ / ln fan_in: the γ-rule exponent that draws std σ at this fan-in (None if σ ≤ 0 or fan_in ≤ 1)."""
    if not (std > 0 and math.isfinite(std)) or fan_in <= 1:
        return None
    return -math.log(std) / math.log(fan_in)


def loglog_slope(x: Sequence[float], y: Sequence[float | None]) -> float | None:
    """Least-squares slope of ln y on ln x over the pairs with x, y > 0 (None with fewer than 2 such pairs)."""
    pts = [(math.log(a), math.log(b)) for a, b in zip(x, y) if a and b is not None and a > 0 and b > 0
           and math.isfinite(b)]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def layer_kind(name: str) -> tuple[int | None, str]:
    """(layer index, kind) of a parameter/module path: ``model.layers.3.self_attn.q_proj`` → (3, ``self_attn.q_proj``),
    ``blocks.1.mlp.down`` → (1, ``mlp.down``), ``tok_emb`` → (None, ``tok_emb``); a trailing ``.weight`` is dropped."""
    parts = name.split(".")
    if parts and parts[-1] == "weight":
        parts = parts[:-1]
    for i, p in enumerate(parts):
        if p.isdigit():
            return int(p), ".".join(parts[i + 1:]) or ".".join(parts)
    return None, ".".join(parts)


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
    if logits is None and isinstance(sample_input, torch.Tensor) and not sample_input.is_floating_point() \
            and y.ndim == 3 and y.shape[:2] == sample_input.shape:
        logits = y
    if logits is not None and isinstance(sample_input, torch.Tensor) and sample_input.shape[1] >= 2:
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                           sample_input[:, 1:].reshape(-1).to(logits.device))
    return 0.5 * y.float().square().mean()


# ---- the report ------------------------------------------------------------------------------------

@dataclass
class AuditReport:
    """Everything :func:`audit` measured; :meth:`summary`, :meth:`table`, :meth:`to_json`, :meth:`to_markdown`, :meth:`save`."""

    target: str
    gamma: float
    optimizer_eps: float
    matrices: list[MatrixAudit] = field(default_factory=list)
    norms: list[NormAudit] = field(default_factory=list)
    branches: list[BranchAudit] = field(default_factory=list)
    sample: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    widths: WidthStudy | None = None

    # -- aggregate numbers
    def gammas(self) -> list[tuple[str, float]]:
        return [(m.name, m.implied_gamma) for m in self.matrices if m.implied_gamma is not None]

    def gamma_median(self) -> float | None:
        g = sorted(v for _, v in self.gammas())
        if not g:
            return None
        n = len(g)
        return g[n // 2] if n % 2 else 0.5 * (g[n // 2 - 1] + g[n // 2])

    def eps_dominated(self) -> list[NormAudit]:
        return [n for n in self.norms if n.status == "eps-dominated"]

    def grad_below_eps(self) -> float | None:
        """Fraction of gradient entries (g ≠ 0) below the optimizer's ε over all matrices, weighted by entries."""
        num = den = 0.0
        for m in self.matrices:
            if m.grad_below_eps is not None:
                n = m.shape[0] * m.shape[1] * (1 - (m.grad_zero or 0.0))
                num += m.grad_below_eps * n
                den += n
        return num / den if den else None

    def summary(self) -> str:
        """One paragraph in words: the implied γ and its range, the first norm's saturation, ε-dominated norms,
        branch sizes, the first-step gradients under Adam's ε, and the width slopes when measured."""
        s: list[str] = []
        gs = self.gammas()
        if gs:
            lo = min(gs, key=lambda t: t[1])
            hi = max(gs, key=lambda t: t[1])
            s.append(f"This model's init is γ ≈ {self.gamma_median():.3g} (median over {len(gs)} matrices; from "
                     f"{lo[1]:.3g} for {lo[0]} to {hi[1]:.3g} for {hi[0]}), against the γ-rule's {self.gamma:g} "
                     f"asked for.")
        if self.norms:
            first = self.norms[0]
            s.append(f"At ε = {first.eps:g} the first norm ({first.name}) is {100 * first.saturation:.3g}% saturated "
                     f"at init (input mean square {first.mean_square:.3g}, ε/ms = {_fmt(first.eps_over_ms)});")
            dom, aff = self.eps_dominated(), [n for n in self.norms if n.status == "eps-affected"]
            worst = min(self.norms, key=lambda n: n.saturation)
            if dom:
                s.append(f"{len(dom)} of {len(self.norms)} norms are ε-DOMINATED (saturation ≤ {EPS_DOMINATED:g}; "
                         f"lowest {worst.saturation:.3g} at {worst.name})" + (f" and {len(aff)} more ε-affected." if aff else "."))
            elif aff:
                s.append(f"none is ε-dominated, {len(aff)} of {len(self.norms)} are ε-affected (saturation < "
                         f"{EPS_AFFECTED:g}; lowest {worst.saturation:.3g} at {worst.name}).")
            else:
                s.append(f"no norm is ε-affected (lowest saturation {worst.saturation:.4g} at {worst.name}).")
        if self.branches:
            parts = []
            for kind in sorted({b.branch for b in self.branches}):
                fl = [b.flow for b in self.branches if b.branch == kind]
                parts.append(f"{kind} {min(fl):.3g}–{max(fl):.3g}")
            s.append("Residual branches start at " + ", ".join(parts) + " of the stream (‖F(norm(h))‖/‖h‖ per block).")
        gb = self.grad_below_eps()
        if gb is not None:
            worst_m = max((m for m in self.matrices if m.grad_below_eps is not None), key=lambda m: m.grad_below_eps)
            s.append(f"On the sample batch {100 * gb:.3g}% of first-step gradient entries are below Adam's "
                     f"ε = {self.optimizer_eps:g} (their first update is damped by more than half; worst "
                     f"{worst_m.name}: {100 * worst_m.grad_below_eps:.3g}%, mean damping {worst_m.grad_damping:.3g}).")
        if self.widths:
            bits = []
            for f in self.widths.fits:
                if f.slope is not None and f.quantity in _HEADLINE_FITS:
                    bits.append(f"{_HEADLINE_FITS[f.quantity]} ∝ d^{f.slope:+.2f}")
            if bits:
                w = self.widths.widths
                s.append(f"Across widths {w[0]}–{w[-1]}: " + "; ".join(bits) + ".")
        for n in self.notes:
            if n.startswith("!"):
                s.append(n[1:].strip())
        return " ".join(s)

    # -- renderings
    def to_dict(self) -> dict[str, Any]:
        from smallinit.io import json_safe

        d = asdict(self)
        for m, row in zip(self.matrices, d["matrices"]):
            row["kind"] = m.kind
        for n, row in zip(self.norms, d["norms"]):
            row["status"] = n.status
        d = {"kind": AUDIT_KIND, "summary": self.summary(), **d}
        return json_safe(d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_markdown(self) -> str:
        """audit.md: the summary, then the full per-matrix, per-norm, per-branch and width tables."""
        L = [f"# Initialization audit: {self.target}", "", self.summary(), ""]
        if self.notes:
            L += ["Notes:", ""] + [f"- {n.lstrip('!').strip()}" for n in self.notes] + [""]
        if self.sample:
            L += ["Sample pass: " + ", ".join(f"{k} {_fmt(v)}" for k, v in self.sample.items()), ""]
        L += [f"## Weight matrices (implied γ = −ln σ / ln fan_in; target σ = fan_in^−{self.gamma:g}; gradient "
              f"columns: first step, entries with g ≠ 0, Adam ε = {self.optimizer_eps:g})", "",
              "| matrix | shape | fan_in | σ | implied γ | target σ | grad rms | \\|g\\| < ε | damping |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for m in self.matrices:
            L.append(f"| {m.name} | {m.shape[0]}×{m.shape[1]} | {m.fan_in} | {m.std:.4g} | {_fmt(m.implied_gamma, 3)} | "
                     f"{m.target_std:.4g} | {_fmt(m.grad_rms)} | {_pct(m.grad_below_eps)} | {_fmt(m.grad_damping, 3)} |")
        L += ["", f"## Norms (saturation = ms/(ms+ε); ≤ {EPS_DOMINATED:g} ε-dominated, < {EPS_AFFECTED:g} ε-affected)", "",
              "| norm | ε | input mean square | saturation | ε/ms | status |", "|---|---:|---:|---:|---:|---|"]
        for n in self.norms:
            L.append(f"| {n.name} | {n.eps:g} | {n.mean_square:.4g} | {n.saturation:.4g} | {_fmt(n.eps_over_ms)} | {n.status} |")
        if self.branches:
            L += ["", "## Residual branches (flow = ‖F(norm(h))‖/‖h‖, update = ‖F(norm(h))‖, stream = ‖h‖; token means)", "",
                  "| block | branch | flow | update | stream |", "|---|---|---:|---:|---:|"]
            for b in self.branches:
                L.append(f"| {b.block} | {b.branch} | {b.flow:.4g} | {b.update:.4g} | {b.stream:.4g} |")
        if self.widths:
            w = self.widths
            L += ["", "## Versus width (slope = d ln(value) / d ln(width), least squares)", ""]
            L += [f"- {n}" for n in w.notes]
            L += ["", "| quantity | " + " | ".join(f"d={x}" for x in w.widths) + " | slope |",
                  "|---|" + "---:|" * (len(w.widths) + 1)]
            for f in w.fits:
                L.append(f"| {f.quantity} | " + " | ".join(_fmt(v) for v in f.values) + f" | {_fmt(f.slope, 3)} |")
        return "\n".join(L) + "\n"

    def table(self, width: int = 100) -> str:
        """The terminal view: the summary (wrapped to ``width``), then per matrix kind / norm kind / branch the
        range over layers (the full per-layer tables are in :meth:`to_markdown`)."""
        import textwrap

        out = [textwrap.fill(self.summary(), width), ""]
        for n in self.notes:
            out.append(textwrap.fill("note: " + n.lstrip("!").strip(), width, subsequent_indent="      "))
        if self.notes:
            out.append("")
        out.append(textwrap.fill("fan_in = in (the γ-rule's convention); implied γ = −ln σ / ln fan_in; σ@γ: the "
                                 "γ-rule's target; |g|<ε and damping ε/(|g|+ε): the first AdamW step", width))
        rows = [("matrix [layers]", "out×in", "σ", "implied γ", f"σ@γ={self.gamma:g}", "|g|<ε", "damping")]
        for kind, ms in _group(self.matrices, lambda m: m.name):
            gs = [m.implied_gamma for m in ms if m.implied_gamma is not None]
            below = [m.grad_below_eps for m in ms if m.grad_below_eps is not None]
            damp = [m.grad_damping for m in ms if m.grad_damping is not None]
            m0 = ms[0]
            rows.append((kind, f"{m0.shape[0]}×{m0.shape[1]}", _rng([m.std for m in ms], 2), _rng(gs, 3),
                         f"{m0.target_std:.2g}", _rng(below, 2, pct=True), _rng(damp, 2)))
        out += _render(rows, width) + [""]
        rows = [("norm [layers]", "ε", "input mean square", "saturation", "ε/ms", "status")]
        for kind, ns in _group(self.norms, lambda n: n.name):
            st = sorted({n.status for n in ns}, key=["eps-dominated", "eps-affected", "ok"].index)
            rows.append((kind, f"{ns[0].eps:g}", _rng([n.mean_square for n in ns], 3), _rng([n.saturation for n in ns], 4),
                         _rng([n.eps_over_ms for n in ns if n.eps_over_ms is not None], 3), "/".join(st)))
        out += _render(rows, width)
        if self.branches:
            rows = [("branch (blocks)", "flow ‖F‖/‖h‖", "update ‖F‖", "stream ‖h‖")]
            for kind in sorted({b.branch for b in self.branches}):
                bs = [b for b in self.branches if b.branch == kind]
                rows.append((f"{kind} ({len(bs)})", _rng([b.flow for b in bs], 3), _rng([b.update for b in bs], 3),
                             _rng([b.stream for b in bs], 3)))
            out += [""] + _render(rows, width)
        if self.widths:
            w = self.widths
            rows = [("vs width",) + tuple(str(x) for x in w.widths) + ("slope",)]
            for f in w.fits:
                rows.append((f.quantity,) + tuple(_fmt(v, 3) for v in f.values) + (_fmt(f.slope, 3),))
            out += [""] + _render(rows, width)
        return "\n".join(out)

    def save(self, out_dir: str | os.PathLike, figures: bool = True) -> list[Path]:
        """Write ``audit.json``, ``audit.md`` and (``figures``) ``audit.png`` / ``audit_widths.png`` into ``out_dir``,
        each atomically. ``out_dir`` must be new, empty, or a previous audit output (:func:`check_out_dir`)."""
        from smallinit.io import atomic_write_text

        out = check_out_dir(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        if figures:
            written += plot_audit(self, out)
        atomic_write_text(out / "audit.md", self.to_markdown())
        written.append(out / "audit.md")
        atomic_write_text(out / "audit.json", self.to_json())  # last: its presence marks a complete audit output
        written.append(out / "audit.json")
        return written


_HEADLINE_FITS = {
    "update.attn": "attention update ‖F‖", "update.mlp": "MLP update ‖F‖", "flow.attn": "attention flow",
    "flow.mlp": "MLP flow", "first_norm.mean_square": "first norm's input mean square",
    "grad_below_eps": "share of |g| < ε", "update.map": "branch update ‖F‖",
}


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3g}%"


def _rng(vals: list[float], digits: int, pct: bool = False) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    f = (lambda v: f"{100 * v:.{digits}g}%") if pct else (lambda v: f"{v:.{digits}g}")
    lo, hi = min(vals), max(vals)
    return f(lo) if f(lo) == f(hi) else f"{f(lo)}–{f(hi)}"


def _group(rows: list, name_of: Callable[[Any], str]) -> list[tuple[str, list]]:
    """Rows grouped by layer_kind, in first-seen order, labelled ``kind (n)`` or ``kind [i–j]``."""
    groups: dict[str, list] = {}
    layers: dict[str, list[int]] = {}
    for r in rows:
        i, kind = layer_kind(name_of(r))
        groups.setdefault(kind, []).append(r)
        if i is not None:
            layers.setdefault(kind, []).append(i)
    out = []
    for kind, rs in groups.items():
        ls = layers.get(kind)
        label = kind if not ls else (f"{kind} [{min(ls)}]" if min(ls) == max(ls) else f"{kind} [{min(ls)}–{max(ls)}]")
        out.append((label, rs))
    return out


def _render(rows: list[tuple[str, ...]], width: int) -> list[str]:
    """Left-aligned columns separated by two spaces; the first column is cut with '…' to fit ``width``."""
    n = len(rows[0])
    w = [max(len(r[i]) for r in rows) for i in range(n)]
    rest = sum(w[1:]) + 2 * (n - 1)
    w[0] = max(12, min(w[0], width - rest))
    lines = []
    for k, r in enumerate(rows):
        first = r[0] if len(r[0]) <= w[0] else "…" + r[0][-(w[0] - 1):]
        cells = [first.ljust(w[0])] + [c.rjust(w[i]) if k else c.rjust(w[i]) for i, c in enumerate(r[1:], 1)]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return lines


def load_report(path: str | os.PathLike) -> AuditReport:
    """An :class:`AuditReport` back from an ``audit.json`` (or the folder holding it), e.g. to redraw its figures."""
    p = Path(path)
    p = p / "audit.json" if p.is_dir() else p
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: not a readable audit.json ({e})") from None
    if not isinstance(d, dict) or d.get("kind") != AUDIT_KIND:
        raise ConfigError(f"{p}: not an audit output")
    w = d.get("widths")
    study = None
    if w:
        study = WidthStudy(widths=w["widths"], points=w["points"], notes=w.get("notes", []),
                           fits=[WidthFit(**f) for f in w["fits"]])
    return AuditReport(
        target=d["target"], gamma=d["gamma"], optimizer_eps=d["optimizer_eps"],
        matrices=[MatrixAudit(**{k: v for k, v in m.items() if k != "kind"} | {"shape": tuple(m["shape"])})
                  for m in d["matrices"]],
        norms=[NormAudit(**{k: v for k, v in n.items() if k != "status"}) for n in d["norms"]],
        branches=[BranchAudit(**b) for b in d["branches"]], sample=d.get("sample", {}), notes=d.get("notes", []),
        widths=study)


# ---- out folder ------------------------------------------------------------------------------------

def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as a Path if an audit may write there (the one policy, :func:`smallinit.outputs.check_out_dir`:
    new, empty, or a previous audit output, which is rewritten), and only if such an output holds nothing but audit
    files; else ConfigError (nothing written)."""
    from smallinit.outputs import check_out_dir as output_policy, output_kind

    p = Path(out_dir)
    if p.is_dir() and any(e.name != ".lock" for e in p.iterdir()) and output_kind(p) != "audit":
        raise ConfigError(f"--out {p}: the folder is not empty and is not an audit output; choose a new or empty folder")
    output_policy(p, "audit", can_continue=True, verb="audit")
    allowed = {"audit.json", "audit.md", "audit.png", "audit_widths.png"}
    foreign = sorted(e.name for e in p.iterdir() if e.name not in allowed and not e.name.startswith(".")) \
        if p.is_dir() else []
    if foreign:
        raise ConfigError(f"--out {p}: holds files an audit did not write ({', '.join(foreign[:3])}); "
                          "choose a new or empty folder")
    return p
    if not p.is_dir():
        raise ConfigError(f"--out {p}: exists and is not a folder")
    entries = [e.name for e in p.iterdir()]
    if not entries:
        return p
    mine = p / "audit.json"
    try:
        kind = json.loads(mine.read_text()).get("kind") if mine.is_file() else None
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != AUDIT_KIND:
        raise ConfigError(f"--out {p}: the folder is not empty and is not an audit output; choose a new or empty folder")
    allowed = {"audit.json", "audit.md", "audit.png", "audit_widths.png"}
    foreign = sorted(e for e in entries if e not in allowed and not e.startswith("."))
    if foreign:
        raise ConfigError(f"--out {p}: holds files an audit did not write ({', '.join(foreign[:3])}); "
                          "choose a new or empty folder")
    return p


# ---- the audit -------------------------------------------------------------------------------------

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
    """Audit ``module``'s initialization (see the module docstring for every definition).

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
    from smallinit.probes.metrics import residual_flow, rmsnorm_saturation

    gamma = check_gamma(gamma)
    if not (isinstance(optimizer_eps, (int, float)) and optimizer_eps >= 0 and math.isfinite(optimizer_eps)):
        raise ConfigError(f"optimizer ε must be a finite number >= 0, got {optimizer_eps!r}")
    params = list(module.parameters())
    if not params:
        raise ConfigError("audit: the module has no parameters")
    device = params[0].device
    if device.type == "meta":
        raise ConfigError("audit: the module is on the meta device (no values to measure); materialise it first")
    if sample_input is None:
        vocab, max_len = _vocab_and_len(module)
        if not vocab:
            raise ConfigError("audit: pass sample_input= (the module has no config.vocab_size to draw token ids from)")
        T = min(seq_len, max_len) if max_len else seq_len
        sample_input = random_tokens(int(vocab), batch, T, seed).to(device)
        sample_desc = {"input": "random token ids", "batch": batch, "seq_len": T, "seed": seed}
    else:
        shape = tuple(sample_input.shape) if isinstance(sample_input, torch.Tensor) else None
        sample_desc = {"input": "given", "shape": "×".join(map(str, shape)) if shape else "mapping"}

    mats = _matrices(module)
    norms = [(n, m) for n, m in module.named_modules() if _is_norm(m)]
    brs = list(branches) if branches is not None else _find_branches(module)

    norm_stats: dict[str, list[dict[str, float]]] = {}
    pending: dict[int, list[torch.Tensor]] = {}
    flows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    handles = []

    def norm_pre(name: str, mod: nn.Module):
        eps = _norm_eps(mod) or 0.0

        def hook(m, args, kwargs=None):
            h = args[0] if args else next(iter((kwargs or {}).values()))
            x = _wide(h)
            if _centres(mod):
                x = x - x.mean(dim=-1, keepdim=True)
            norm_stats.setdefault(name, []).append(rmsnorm_saturation(x, eps))
            pending.setdefault(id(mod), []).append(h.detach())
        return hook

    def branch_out(block: str, kind: str, norm: nn.Module):
        def hook(m, args, out):
            y = _first_tensor(out)
            stack = pending.get(id(norm))
            if y is None or not stack:
                return
            h = stack.pop()
            if y.shape != h.shape:
                return
            flows.setdefault((block, kind), []).append(
                (residual_flow(y, h), float(_wide(y).norm(dim=-1).mean()), float(_wide(h).norm(dim=-1).mean())))
        return hook

    was_training = module.training
    saved_grads = {id(p): p.grad for p in params}
    saved_req = {id(p): p.requires_grad for p in params}
    grads: dict[int, torch.Tensor] = {}
    loss_value = grad_norm = None
    try:
        module.eval()
        for name, mod in norms:
            handles.append(mod.register_forward_pre_hook(norm_pre(name, mod)))
        for block, kind, norm, br in brs:
            handles.append(br.register_forward_hook(branch_out(block, kind, norm)))
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
            for h in handles:
                h.remove()
            handles.clear()
            pending.clear()
            if backward:
                loss = (loss_fn or _default_loss)(out, sample_input)
                loss_value = float(loss.detach())
                del out
                loss.backward()
                del loss
                gn = math.sqrt(sum(float(_wide(p.grad).square().sum()) for p in params if p.grad is not None))
                grad_norm = gn
                scale = 1.0
                if grad_clip and gn > grad_clip:
                    scale = grad_clip / (gn + 1e-6)  # torch.nn.utils.clip_grad_norm_'s factor
                for p in params:
                    if p.grad is not None:
                        grads[id(p)] = p.grad.detach() * scale if scale != 1.0 else p.grad.detach()
            else:
                del out
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
        for p in params:
            p.grad = saved_grads[id(p)]
            p.requires_grad_(saved_req[id(p)])

    report = AuditReport(target=target or type(module).__name__, gamma=gamma, optimizer_eps=float(optimizer_eps),
                         notes=list(notes))
    report.sample = {**sample_desc, "loss": loss_value, "grad_norm": grad_norm,
                     "grad_clip": grad_clip if grad_clip else None}
    for name, W, fan_in, p in mats:
        std = float(_wide(W).std()) if W.numel() > 1 else 0.0
        row = MatrixAudit(name=name, shape=(int(W.shape[0]), int(W.shape[1])), fan_in=fan_in, std=std,
                          implied_gamma=implied_gamma(std, fan_in), target_std=float(fan_in) ** (-gamma))
        g = grads.get(id(p))
        if g is not None:
            gv = _view_of(W, p, g)
            if gv is not None:
                st = grad_eps_stats(gv, float(optimizer_eps))
                row.grad_rms, row.grad_below_eps, row.grad_damping, row.grad_zero = st["rms"], st["below"], st["damping"], st["zero"]
        report.matrices.append(row)
    for name, mod in norms:
        calls = norm_stats.get(name)
        if not calls:
            continue
        k = len(calls)
        eom = [c["eps_over_ms"] for c in calls]
        report.norms.append(NormAudit(
            name=name, eps=float(_norm_eps(mod) or 0.0), mean_square=sum(c["mean_square"] for c in calls) / k,
            saturation=sum(c["saturation"] for c in calls) / k,
            eps_over_ms=sum(eom) / k if all(math.isfinite(e) for e in eom) else None))
    for (block, kind), vals in flows.items():
        k = len(vals)
        report.branches.append(BranchAudit(block=block, branch=kind, flow=sum(v[0] for v in vals) / k,
                                           update=sum(v[1] for v in vals) / k, stream=sum(v[2] for v in vals) / k))
    return report


def width_quantities(report: AuditReport) -> dict[str, float | None]:
    """The per-model numbers a width sweep fits: median implied γ, the first norm's input mean square and
    saturation, the lowest saturation, per branch kind the mean (over blocks) flow and update, and the share of
    gradient entries below the optimizer's ε."""
    q: dict[str, float | None] = {"implied_gamma.median": report.gamma_median()}
    for kind in ("tok_emb", "embed_tokens"):
        for m in report.matrices:
            if layer_kind(m.name)[1].endswith(kind):
                q["embedding.std"] = m.std
    if report.norms:
        q["first_norm.mean_square"] = report.norms[0].mean_square
        q["first_norm.saturation"] = report.norms[0].saturation
        q["min_saturation"] = min(n.saturation for n in report.norms)
    for kind in sorted({b.branch for b in report.branches}):
        bs = [b for b in report.branches if b.branch == kind]
        q[f"flow.{kind}"] = sum(b.flow for b in bs) / len(bs)
        q[f"update.{kind}"] = sum(b.update for b in bs) / len(bs)
    q["grad_below_eps"] = report.grad_below_eps()
    return q


def audit_widths(
    build: Callable[[int], tuple],
    widths: Sequence[int],
    *,
    notes: Sequence[str] = (),
    known: Mapping[int, AuditReport] | None = None,
    **audit_kwargs: Any,
) -> WidthStudy:
    """Rebuild a model family at each width and fit each :func:`width_quantities` number's log-log slope on width.

    ``build(d) -> (module, sample_input[, branches])`` makes the width-d member (sample_input None = random token
    ids; branches as in :func:`audit`, default the recognised layouts); ``audit_kwargs`` go to :func:`audit`
    (``gamma``, ``optimizer_eps``, ...). Members are built, audited and dropped one at a time; a width in
    ``known`` (width → an :func:`audit` report made with the same settings) is taken from there, not rebuilt.
    Slope = least-squares d ln(value) / d ln(width) over the widths with a positive value.
    """
    ws = sorted({int(w) for w in widths})
    if len(ws) < 2:
        raise ConfigError(f"--widths needs at least two distinct widths, got {list(widths)}")
    if any(w <= 1 for w in ws):
        raise ConfigError(f"--widths must be integers > 1, got {list(widths)}")
    if "branches" in audit_kwargs:
        raise ConfigError("audit_widths: return each member's branches from build(d) as a third element")
    points = []
    for w in ws:
        if known and w in known:  # this member was audited already (e.g. the model itself at its own width)
            points.append({"width": w, **width_quantities(known[w])})
            continue
        built = build(w)
        module, x = built[0], built[1]
        rep = audit(module, x, branches=built[2] if len(built) > 2 else None, **audit_kwargs)
        points.append({"width": w, **width_quantities(rep)})
        del module, rep
    keys: list[str] = []
    for p in points:
        keys += [k for k in p if k != "width" and k not in keys]
    fits = []
    for k in keys:
        vals = [p.get(k) for p in points]
        fits.append(WidthFit(quantity=k, widths=ws, values=vals, slope=loglog_slope(ws, vals)))
    return WidthStudy(widths=ws, points=points, fits=fits, notes=list(notes))


# ---- figures ---------------------------------------------------------------------------------------

def plot_audit(report: AuditReport, out_dir: str | os.PathLike) -> list[Path]:
    """``audit.png`` (implied γ per layer and matrix kind, saturation per norm, residual flow per block) and, with a
    width study, ``audit_widths.png`` (each quantity vs width, log-log, slope in the title). Saved atomically
    by :func:`smallinit.figures.save_png`."""
    from smallinit.figures import pyplot, save_png

    plt = pyplot()
    out_dir = Path(out_dir)
    paths = []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    by_kind: dict[str, list[tuple[int, float]]] = {}
    other: list[tuple[str, float]] = []
    for m in report.matrices:
        i, kind = layer_kind(m.name)
        if m.implied_gamma is None:
            continue
        if i is None:
            other.append((m.name, m.implied_gamma))
        else:
            by_kind.setdefault(kind, []).append((i, m.implied_gamma))
    for kind, pts in by_kind.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=kind)
    for k, (name, g) in enumerate(other):
        ax.axhline(g, ls=":", color=f"C{(len(by_kind) + k) % 10}", label=name)
    ax.axhline(report.gamma, color="k", lw=0.8, label=f"γ-rule target {report.gamma:g}")
    ax.set_xlabel("layer")
    ax.set_ylabel("implied γ = −ln σ / ln fan_in")
    ax.set_title("implied γ per matrix")
    ax.legend(fontsize=6, ncol=2)
    ax = axes[1]
    if report.norms:
        xs = list(range(len(report.norms)))
        ax.semilogy(xs, [max(n.saturation, 1e-12) for n in report.norms], marker="o", ms=3)
        ax.axhline(EPS_DOMINATED, color="r", lw=0.8, ls="--", label=f"ε-dominated (≤ {EPS_DOMINATED:g})")
        ax.axhline(EPS_AFFECTED, color="orange", lw=0.8, ls=":", label=f"ε-affected (< {EPS_AFFECTED:g})")
        ax.legend(fontsize=7)
        ax.set_xlabel("norm, in forward order")
    ax.set_ylabel("saturation ms/(ms+ε)")
    ax.set_title(f"norm saturation at init (ε = {report.norms[0].eps:g})" if report.norms else "no norms")
    ax = axes[2]
    for kind in sorted({b.branch for b in report.branches}):
        bs = [b for b in report.branches if b.branch == kind]
        ax.semilogy(range(len(bs)), [max(b.flow, 1e-30) for b in bs], marker="o", ms=3, label=kind)
    ax.set_xlabel("block")
    ax.set_ylabel("‖F(norm(h))‖ / ‖h‖")
    ax.set_title("residual flow at init")
    if report.branches:
        ax.legend(fontsize=7)
    fig.suptitle(report.target, fontsize=9)
    fig.tight_layout()
    paths.append(save_png(fig, out_dir / "audit.png"))
    if report.widths:
        fits = [f for f in report.widths.fits if any(v is not None and v > 0 for v in f.values)]
        ncols = min(4, len(fits)) or 1
        nrows = math.ceil(len(fits) / ncols) or 1
        fig, axs = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.9 * nrows), squeeze=False)
        for ax in axs.flat[len(fits):]:
            ax.set_visible(False)
        for ax, f in zip(axs.flat, fits):
            pts = [(w, v) for w, v in zip(f.widths, f.values) if v is not None and v > 0]
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o")
            ax.minorticks_off()
            ax.set_xticks([p[0] for p in pts], [str(p[0]) for p in pts])
            lo, hi = min(p[1] for p in pts), max(p[1] for p in pts)
            if hi < 2 * lo:  # a flat quantity is drawn flat, not zoomed into its noise
                ax.set_ylim(lo / 2, hi * 2)
            ax.set_title(f"{f.quantity}\nslope {_fmt(f.slope, 3)}", fontsize=8)
            ax.set_xlabel("width d", fontsize=8)
            ax.tick_params(labelsize=7)
        fig.tight_layout()
        paths.append(save_png(fig, out_dir / "audit_widths.png"))
    return paths
