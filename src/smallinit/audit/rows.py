"""The rows of an audit: one weight matrix, one norm, one residual branch, one quantity fitted against width; the
saturation thresholds that label a norm; and how a parameter path names its layer and kind."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BranchAudit",
    "EPS_AFFECTED",
    "EPS_DOMINATED",
    "MatrixAudit",
    "NormAudit",
    "WidthFit",
    "WidthStudy",
    "layer_kind",
]

EPS_DOMINATED = 0.5
"""Saturation at or below which a norm is ε-dominated (DESIGN.md §2: ≤ 0.5 = ε dominates)."""
EPS_AFFECTED = 0.9
"""Saturation below which a norm is ε-affected (ε is ≥ 11% of the signal's mean square)."""


def layer_kind(name: str) -> tuple[int | None, str]:
    """(layer index, kind) of a parameter/module path: ``model.layers.3.self_attn.q_proj`` → (3, ``self_attn.q_proj``),
    ``blocks.1.mlp.down`` → (1, ``mlp.down``), ``tok_emb`` → (None, ``tok_emb``); a trailing ``.weight`` is dropped."""
    parts = name.split(".")
    if parts and parts[-1] == "weight":
        parts = parts[:-1]
    for i, p in enumerate(parts):
        if p.isdigit():
            return int(p), ".".join(parts[i + 1 :]) or ".".join(parts)
    return None, ".".join(parts)


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
    """One residual branch: flow = mean_t ‖F(norm(h_t))‖/‖h_t‖, update = mean_t ‖F(norm(h_t))‖,
    stream = mean_t ‖h_t‖."""

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
