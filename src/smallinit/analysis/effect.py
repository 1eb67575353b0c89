"""The claimed effect δ of a loss claim in nats (docs/definitions.md §2, "The declared budget").

The paper says small initialization is worth "≈ 44% effective model size". At a model of N non-embedding parameters
trained on D tokens that is δ = L_base(N) − L_base(1.44·N), from the fit L(N) = E + A·N^(−α) of the baseline's
losses at ≥ 3 sizes, all at that D (:func:`claimed_effect`). A size measured at other budgets is read at D by
interpolating its L(D) linearly in (ln D, ln L) between the two budgets around D (:func:`loss_at_budget`); D outside
its measured budgets is refused (no extrapolation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

PAPER_FACTOR = 1.44
"""The paper's effective-size gain: small init is worth a 1.44× larger baseline."""


@dataclass(frozen=True)
class ClaimedEffect:
    """δ and where it came from."""

    effect: float
    """δ = L(N) − L(factor·N) in nats."""
    params: float
    factor: float
    tokens: float
    sizes: list[float]
    losses: list[float]
    fit: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        f = self.fit
        pts = ", ".join(f"N {n:,.0f}: {v:.4f}" for n, v in zip(self.sizes, self.losses))
        return (
            f"δ = L({self.params:,.0f}) − L({self.factor:g}·{self.params:,.0f}) = {self.effect:.4f} nats at "
            f"D = {self.tokens:,.0f} tokens, from L(N) = {f['E']:.4f} + {f['A']:.4g}·N^(−{f['alpha']:.3f}) "
            f"fitted to the baseline at {len(self.sizes)} sizes ({pts})"
        )


def loss_at_budget(budgets: Sequence[float], losses: Sequence[float | None], tokens: float) -> float:
    """L at ``tokens`` from an L(D) curve: exact at a measured budget, else linear in (ln D, ln L) between the two
    finite budgets around it. ValueError outside the measured range (no extrapolation)."""
    pts = sorted((float(d), float(v)) for d, v in zip(budgets, losses) if v is not None and math.isfinite(v))
    if not pts:
        raise ValueError("no finite loss to read")
    D = np.array([p[0] for p in pts])
    L = np.array([p[1] for p in pts])
    if not D[0] * (1 - 1e-3) <= tokens <= D[-1] * (1 + 1e-3):
        raise ValueError(f"D = {tokens:,.0f} lies outside the measured budgets {D[0]:,.0f} … {D[-1]:,.0f}")
    t = min(max(tokens, D[0]), D[-1])
    return float(np.exp(np.interp(np.log(t), np.log(D), np.log(L))))


def claimed_effect(
    sizes: Sequence[float], losses: Sequence[float], params: float, tokens: float, factor: float = PAPER_FACTOR
) -> ClaimedEffect:
    """δ = L(params) − L(factor·params) from L(N) = E + A·N^(−α) fitted to the baseline's ``losses`` at ``sizes``
    (non-embedding parameters, ≥ 3 distinct, all at ``tokens``). ValueError when the fit fails or δ ≤ 0."""
    from smallinit.analysis.scaling import ScalingError, fit_scaling_law, predict

    try:
        fit = fit_scaling_law(np.asarray(sizes, dtype=float), np.asarray(losses, dtype=float))
    except ScalingError as e:
        raise ValueError(f"no size fit: {e}") from None
    effect = float(predict(fit, params) - predict(fit, factor * params))
    if not effect > 0:
        raise ValueError(f"the fit does not fall with N (δ = {effect:+.4g}): no claimed effect in nats")
    return ClaimedEffect(
        effect,
        float(params),
        float(factor),
        float(tokens),
        [float(x) for x in sizes],
        [float(x) for x in losses],
        {"E": fit.E, "A": fit.A, "alpha": fit.alpha, "r2": fit.r2, "n_points": fit.n_points},
    )


__all__ = ["PAPER_FACTOR", "ClaimedEffect", "claimed_effect", "loss_at_budget"]
