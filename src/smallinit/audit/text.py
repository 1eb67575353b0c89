"""Number and column formatting shared by the audit's terminal table, its markdown and its figure titles."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from smallinit.audit.rows import layer_kind

__all__ = ["fmt", "group_by_layer_kind", "pct", "render_columns", "value_range"]


def fmt(v: Any, digits: int = 3) -> str:
    """A value for a table cell: None → "-", a float to ``digits`` significant digits, anything else as str."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3g}%"


def value_range(vals: list[float], digits: int, pct: bool = False) -> str:
    """``lo–hi`` of the values that are not None (one value when both print the same; "-" when none)."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    f = (lambda v: f"{100 * v:.{digits}g}%") if pct else (lambda v: f"{v:.{digits}g}")
    lo, hi = min(vals), max(vals)
    return f(lo) if f(lo) == f(hi) else f"{f(lo)}–{f(hi)}"


def group_by_layer_kind(rows: list, name_of: Callable[[Any], str]) -> list[tuple[str, list]]:
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


def render_columns(rows: list[tuple[str, ...]], width: int) -> list[str]:
    """Left-aligned columns separated by two spaces; the first column is cut with '…' to fit ``width``."""
    n = len(rows[0])
    w = [max(len(r[i]) for r in rows) for i in range(n)]
    rest = sum(w[1:]) + 2 * (n - 1)
    w[0] = max(12, min(w[0], width - rest))
    lines = []
    for k, r in enumerate(rows):
        first = r[0] if len(r[0]) <= w[0] else "…" + r[0][-(w[0] - 1) :]
        cells = [first.ljust(w[0])] + [c.rjust(w[i]) if k else c.rjust(w[i]) for i, c in enumerate(r[1:], 1)]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return lines
