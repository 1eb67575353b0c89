"""The audit's report: :class:`AuditReport` (the numbers, a summary in words, the terminal table, markdown and
JSON), writing it to an output folder (:meth:`AuditReport.save`, :func:`check_out_dir`) and reading it back
(:func:`load_report`). The figures are drawn by :mod:`smallinit.audit.figures`."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from smallinit.audit.rows import EPS_AFFECTED, EPS_DOMINATED, BranchAudit, MatrixAudit, NormAudit, WidthFit, WidthStudy
from smallinit.audit.text import fmt, group_by_layer_kind, pct, render_columns, value_range
from smallinit.core.errors import ConfigError

__all__ = ["AUDIT_KIND", "AuditReport", "check_out_dir", "load_report"]

AUDIT_KIND = "smallinit-audit"

# the width fits the summary names, in words
_HEADLINE_FITS = {
    "update.attn": "attention update ‖F‖",
    "update.mlp": "MLP update ‖F‖",
    "flow.attn": "attention flow",
    "flow.mlp": "MLP flow",
    "first_norm.mean_square": "first norm's input mean square",
    "grad_below_eps": "share of |g| < ε",
    "update.map": "branch update ‖F‖",
}


@dataclass
class AuditReport:
    """Everything :func:`smallinit.audit.audit` measured; :meth:`summary`, :meth:`table`, :meth:`to_json`,
    :meth:`to_markdown`, :meth:`save`."""

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
            s.append(
                f"This model's init is γ ≈ {self.gamma_median():.3g} (median over {len(gs)} matrices; from "
                f"{lo[1]:.3g} for {lo[0]} to {hi[1]:.3g} for {hi[0]}), against the γ-rule's {self.gamma:g} "
                f"asked for."
            )
        if self.norms:
            first = self.norms[0]
            s.append(
                f"At ε = {first.eps:g} the first norm ({first.name}) is {100 * first.saturation:.3g}% saturated "
                f"at init (input mean square {first.mean_square:.3g}, ε/ms = {fmt(first.eps_over_ms)});"
            )
            dom, aff = self.eps_dominated(), [n for n in self.norms if n.status == "eps-affected"]
            worst = min(self.norms, key=lambda n: n.saturation)
            if dom:
                s.append(
                    f"{len(dom)} of {len(self.norms)} norms are ε-DOMINATED (saturation ≤ {EPS_DOMINATED:g}; "
                    f"lowest {worst.saturation:.3g} at {worst.name})"
                    + (f" and {len(aff)} more ε-affected." if aff else ".")
                )
            elif aff:
                s.append(
                    f"none is ε-dominated, {len(aff)} of {len(self.norms)} are ε-affected (saturation < "
                    f"{EPS_AFFECTED:g}; lowest {worst.saturation:.3g} at {worst.name})."
                )
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
            s.append(
                f"On the sample batch {100 * gb:.3g}% of first-step gradient entries are below Adam's "
                f"ε = {self.optimizer_eps:g} (their first update is damped by more than half; worst "
                f"{worst_m.name}: {100 * worst_m.grad_below_eps:.3g}%, mean damping {worst_m.grad_damping:.3g})."
            )
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
        from smallinit.core.io import json_safe

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
            L += ["Sample pass: " + ", ".join(f"{k} {fmt(v)}" for k, v in self.sample.items()), ""]
        L += [
            f"## Weight matrices (implied γ = −ln σ / ln fan_in; target σ = fan_in^−{self.gamma:g}; gradient "
            f"columns: first step, entries with g ≠ 0, Adam ε = {self.optimizer_eps:g})",
            "",
            "| matrix | shape | fan_in | σ | implied γ | target σ | grad rms | \\|g\\| < ε | damping |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m in self.matrices:
            L.append(
                f"| {m.name} | {m.shape[0]}×{m.shape[1]} | {m.fan_in} | {m.std:.4g} | {fmt(m.implied_gamma, 3)} | "
                f"{m.target_std:.4g} | {fmt(m.grad_rms)} | {pct(m.grad_below_eps)} | {fmt(m.grad_damping, 3)} |"
            )
        L += [
            "",
            f"## Norms (saturation = ms/(ms+ε); ≤ {EPS_DOMINATED:g} ε-dominated, < {EPS_AFFECTED:g} ε-affected)",
            "",
            "| norm | ε | input mean square | saturation | ε/ms | status |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for n in self.norms:
            L.append(
                f"| {n.name} | {n.eps:g} | {n.mean_square:.4g} | {n.saturation:.4g} | "
                f"{fmt(n.eps_over_ms)} | {n.status} |"
            )
        if self.branches:
            L += [
                "",
                "## Residual branches (flow = ‖F(norm(h))‖/‖h‖, update = ‖F(norm(h))‖, stream = ‖h‖; token means)",
                "",
                "| block | branch | flow | update | stream |",
                "|---|---|---:|---:|---:|",
            ]
            for b in self.branches:
                L.append(f"| {b.block} | {b.branch} | {b.flow:.4g} | {b.update:.4g} | {b.stream:.4g} |")
        if self.widths:
            w = self.widths
            L += ["", "## Versus width (slope = d ln(value) / d ln(width), least squares)", ""]
            L += [f"- {n}" for n in w.notes]
            L += [
                "",
                "| quantity | " + " | ".join(f"d={x}" for x in w.widths) + " | slope |",
                "|---|" + "---:|" * (len(w.widths) + 1),
            ]
            for f in w.fits:
                L.append(f"| {f.quantity} | " + " | ".join(fmt(v) for v in f.values) + f" | {fmt(f.slope, 3)} |")
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
        out.append(
            textwrap.fill(
                "fan_in = in (the γ-rule's convention); implied γ = −ln σ / ln fan_in; σ@γ: the "
                "γ-rule's target; |g|<ε and damping ε/(|g|+ε): the first AdamW step",
                width,
            )
        )
        rows = [("matrix [layers]", "out×in", "σ", "implied γ", f"σ@γ={self.gamma:g}", "|g|<ε", "damping")]
        for kind, ms in group_by_layer_kind(self.matrices, lambda m: m.name):
            gs = [m.implied_gamma for m in ms if m.implied_gamma is not None]
            below = [m.grad_below_eps for m in ms if m.grad_below_eps is not None]
            damp = [m.grad_damping for m in ms if m.grad_damping is not None]
            m0 = ms[0]
            rows.append(
                (
                    kind,
                    f"{m0.shape[0]}×{m0.shape[1]}",
                    value_range([m.std for m in ms], 2),
                    value_range(gs, 3),
                    f"{m0.target_std:.2g}",
                    value_range(below, 2, pct=True),
                    value_range(damp, 2),
                )
            )
        out += render_columns(rows, width) + [""]
        rows = [("norm [layers]", "ε", "input mean square", "saturation", "ε/ms", "status")]
        for kind, ns in group_by_layer_kind(self.norms, lambda n: n.name):
            st = sorted({n.status for n in ns}, key=["eps-dominated", "eps-affected", "ok"].index)
            rows.append(
                (
                    kind,
                    f"{ns[0].eps:g}",
                    value_range([n.mean_square for n in ns], 3),
                    value_range([n.saturation for n in ns], 4),
                    value_range([n.eps_over_ms for n in ns if n.eps_over_ms is not None], 3),
                    "/".join(st),
                )
            )
        out += render_columns(rows, width)
        if self.branches:
            rows = [("branch (blocks)", "flow ‖F‖/‖h‖", "update ‖F‖", "stream ‖h‖")]
            for kind in sorted({b.branch for b in self.branches}):
                bs = [b for b in self.branches if b.branch == kind]
                rows.append(
                    (
                        f"{kind} ({len(bs)})",
                        value_range([b.flow for b in bs], 3),
                        value_range([b.update for b in bs], 3),
                        value_range([b.stream for b in bs], 3),
                    )
                )
            out += [""] + render_columns(rows, width)
        if self.widths:
            w = self.widths
            rows = [("vs width",) + tuple(str(x) for x in w.widths) + ("slope",)]
            for f in w.fits:
                rows.append((f.quantity,) + tuple(fmt(v, 3) for v in f.values) + (fmt(f.slope, 3),))
            out += [""] + render_columns(rows, width)
        return "\n".join(out)

    def save(self, out_dir: str | os.PathLike, figures: bool = True) -> list[Path]:
        """Write ``audit.json``, ``audit.md`` and (``figures``) ``audit.png`` / ``audit_widths.png`` into ``out_dir``,
        each atomically. ``out_dir`` must be new, empty, or a previous audit output (:func:`check_out_dir`)."""
        from smallinit.audit.figures import plot_audit
        from smallinit.core.io import atomic_write_text

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
        study = WidthStudy(
            widths=w["widths"], points=w["points"], notes=w.get("notes", []), fits=[WidthFit(**f) for f in w["fits"]]
        )
    return AuditReport(
        target=d["target"],
        gamma=d["gamma"],
        optimizer_eps=d["optimizer_eps"],
        matrices=[
            MatrixAudit(**{k: v for k, v in m.items() if k != "kind"} | {"shape": tuple(m["shape"])})
            for m in d["matrices"]
        ],
        norms=[NormAudit(**{k: v for k, v in n.items() if k != "status"}) for n in d["norms"]],
        branches=[BranchAudit(**b) for b in d["branches"]],
        sample=d.get("sample", {}),
        notes=d.get("notes", []),
        widths=study,
    )


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as a Path if an audit may write there (the one policy, :func:`smallinit.core.outputs.check_out_dir`:
    new, empty, or a previous audit output, which is rewritten), and only if such an output holds nothing but audit
    files; else ConfigError (nothing written)."""
    from smallinit.core.outputs import check_out_dir as output_policy
    from smallinit.core.outputs import output_kind

    p = Path(out_dir)
    if p.is_dir() and any(e.name != ".lock" for e in p.iterdir()) and output_kind(p) != "audit":
        raise ConfigError(
            f"--out {p}: the folder is not empty and is not an audit output; choose a new or empty folder"
        )
    output_policy(p, "audit", can_continue=True, verb="audit")
    allowed = {"audit.json", "audit.md", "audit.png", "audit_widths.png"}
    foreign = (
        sorted(e.name for e in p.iterdir() if e.name not in allowed and not e.name.startswith("."))
        if p.is_dir()
        else []
    )
    if foreign:
        raise ConfigError(
            f"--out {p}: holds files an audit did not write ({', '.join(foreign[:3])}); choose a new or empty folder"
        )
    return p
