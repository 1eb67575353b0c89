"""The audit's figures: ``audit.png`` (implied γ, norm saturation, residual flow) and ``audit_widths.png`` (each
quantity against width)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from smallinit.audit.rows import EPS_AFFECTED, EPS_DOMINATED, layer_kind
from smallinit.audit.text import fmt

__all__ = ["plot_audit"]


def plot_audit(report, out_dir: str | os.PathLike) -> list[Path]:
    """``audit.png`` (implied γ per layer and matrix kind, saturation per norm, residual flow per block) and, with a
    width study, ``audit_widths.png`` (each quantity vs width, log-log, slope in the title) of an
    :class:`~smallinit.audit.report.AuditReport` (not imported here: ``AuditReport.save`` imports this module).
    Saved atomically by :func:`smallinit.core.figures.save_png`."""
    from smallinit.core.figures import pyplot, save_png

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
        for ax in axs.flat[len(fits) :]:
            ax.set_visible(False)
        for ax, f in zip(axs.flat, fits):
            pts = [(w, v) for w, v in zip(f.widths, f.values) if v is not None and v > 0]
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o")
            ax.minorticks_off()
            ax.set_xticks([p[0] for p in pts], [str(p[0]) for p in pts])
            lo, hi = min(p[1] for p in pts), max(p[1] for p in pts)
            if hi < 2 * lo:  # a flat quantity is drawn flat, not zoomed into its noise
                ax.set_ylim(lo / 2, hi * 2)
            ax.set_title(f"{f.quantity}\nslope {fmt(f.slope, 3)}", fontsize=8)
            ax.set_xlabel("width d", fontsize=8)
            ax.tick_params(labelsize=7)
        fig.tight_layout()
        paths.append(save_png(fig, out_dir / "audit_widths.png"))
    return paths
