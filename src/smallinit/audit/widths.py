""":func:`audit_widths` rebuilds a model family at several widths and fits the log-log slope of each quantity
against width (the d^(1−γ) law of the branch update, the d^(−2γ) law of the first norm's mean square, …)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from smallinit.audit.measure import audit
from smallinit.audit.report import AuditReport
from smallinit.audit.rows import WidthFit, WidthStudy, layer_kind
from smallinit.core.errors import ConfigError

__all__ = ["audit_widths", "loglog_slope", "width_quantities"]


def loglog_slope(x: Sequence[float], y: Sequence[float | None]) -> float | None:
    """Least-squares slope of ln y on ln x over the pairs with x, y > 0 (None with fewer than 2 such pairs)."""
    pts = [
        (math.log(a), math.log(b)) for a, b in zip(x, y) if a and b is not None and a > 0 and b > 0 and math.isfinite(b)
    ]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


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
