"""The residual-flow law at initialization across the paper's widths (docs/definitions.md §2, "Residual flow").

The paper reads a residual branch's update as scaling like d^(1−γ) relative to the stream: at γ = 1 the flow
‖F(norm(h))‖ / ‖h‖ is flat in width, for γ < 1 it grows, for γ > 1 it shrinks. :func:`measure_flow` builds a model of a
named size (the widths and head/FFN shapes of ``0.1b`` … ``1.5b``; a few blocks, a small vocabulary: the flow of a
block does not depend on either) at a γ and a seed, and reads every block's flow from one forward over random tokens
with the training probes' hooks. :func:`flow_exponents` fits, per seed, the least-squares slope of ln(flow) on ln(d)
and gives the seed mean with its 95% t-interval (k − 1 degrees of freedom).

The rule (:func:`judge_flow_law`), per γ and branch: the deviation Δ = slope − (1 − γ) is *supported* as the law when
its 95% interval lies inside ±``margin`` (declared: 0.15), *not supported* when it lies wholly outside that band, and
*inconclusive* otherwise — a rule that can fail and can pass (tested on constructed slopes both ways).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from smallinit.core.stats import paired_t_interval

MARGIN = 0.15
"""How far the fitted exponent may lie from 1 − γ (both ends of its interval) for the law to count as holding."""
PAPER_SIZES = ("0.1b", "0.3b", "0.7b", "1.5b")


def measure_flow(
    size: str,
    gamma: float,
    seed: int,
    *,
    layers: int = 4,
    vocab: int = 4096,
    batch: int = 2,
    seq: int = 128,
    norm_eps: float = 1e-12,
    gate: str = "elementwise",
) -> dict[str, list[float]]:
    """Per block, the attention and MLP flow ‖F(norm(h))‖/‖h‖ at init of the size ``size`` (its width, heads, KV heads
    and d_ff) cut to ``layers`` blocks and a ``vocab``-token vocabulary, at ``gamma`` and ``seed``."""
    import torch

    from smallinit.model import ModelConfig, Transformer
    from smallinit.model.config import SIZES
    from smallinit.probes import compute_probes

    shape = {k: v for k, v in SIZES[size].items() if k in ("d_model", "n_heads", "n_kv_heads", "d_ff")}
    torch.manual_seed(seed)
    cfg = ModelConfig(
        **shape, vocab_size=vocab, n_layers=layers, max_seq_len=seq, gamma=gamma, norm_eps=norm_eps, gate=gate
    )
    model = Transformer(cfg)
    idx = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1000 + seed))
    with torch.no_grad():
        rec = compute_probes(model, idx, weights=False)
    return {"attn": [lay["flow_attn"] for lay in rec["layers"]], "mlp": [lay["flow_mlp"] for lay in rec["layers"]]}


@dataclass(frozen=True)
class FlowExponent:
    """The fitted width exponent of one branch's flow at one γ: per-seed slopes, their mean and 95% t-interval."""

    gamma: float
    branch: str
    slopes: list[float]
    value: float
    lo: float | None
    hi: float | None
    predicted: float
    verdict: str
    margin: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def loglog_slope(widths: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ln(value) on ln(width)."""
    return float(np.polyfit(np.log(np.asarray(widths, float)), np.log(np.asarray(values, float)), 1)[0])


def judge_flow_law(lo: float | None, hi: float | None, predicted: float, margin: float = MARGIN) -> str:
    """Module docstring's rule on the interval [lo, hi] of the fitted exponent against ``predicted`` = 1 − γ."""
    from smallinit.analysis.loss_verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

    if lo is None or hi is None:
        return INCONCLUSIVE
    d_lo, d_hi = lo - predicted, hi - predicted
    if -margin <= d_lo and d_hi <= margin:
        return SUPPORTED
    if d_lo > margin or d_hi < -margin:
        return NOT_SUPPORTED
    return INCONCLUSIVE


def flow_exponents(
    flows: Mapping[int, Mapping[int, float]], gamma: float, branch: str, margin: float = MARGIN
) -> FlowExponent:
    """``flows[seed][width]`` = a branch's flow (mean over blocks) → per-seed log-log slopes on width, their mean,
    95% t-interval over the seeds, and the verdict of :func:`judge_flow_law` against 1 − γ."""
    slopes = []
    for per_width in flows.values():
        ws = sorted(per_width)
        vals = [per_width[w] for w in ws]
        if len(ws) >= 2 and all(v > 0 and math.isfinite(v) for v in vals):
            slopes.append(loglog_slope(ws, vals))
    iv = paired_t_interval(slopes)
    predicted = 1.0 - gamma
    value = iv.value if iv.value is not None else float("nan")
    return FlowExponent(
        gamma, branch, slopes, value, iv.lo, iv.hi, predicted, judge_flow_law(iv.lo, iv.hi, predicted, margin), margin
    )


def flow_law(
    sizes: Sequence[str] = PAPER_SIZES,
    gammas: Sequence[float] = (0.5, 1.0, 1.5),
    seeds: int = 3,
    log: Any = None,
    **measure_kw: Any,
) -> dict[str, Any]:
    """Measure every size × γ × seed (:func:`measure_flow`) and fit the exponents per γ and branch (mean flow over
    blocks and block 0's). Returns {"sizes", "widths", "flows": {γ: {seed: {size: per-branch per-block flows}}},
    "exponents": [FlowExponent dicts]}."""
    from smallinit.model.config import SIZES

    widths = {s: int(SIZES[s]["d_model"]) for s in sizes}
    flows: dict[str, dict[str, dict[str, Any]]] = {}
    exps = []
    for g in gammas:
        per = {seed: {s: measure_flow(s, g, seed, **measure_kw) for s in sizes} for seed in range(seeds)}
        flows[f"{g:g}"] = {str(k): v for k, v in per.items()}
        for branch in ("attn", "mlp"):
            for where, pick in (("mean", np.mean), ("block 0", lambda x: x[0])):
                table = {seed: {widths[s]: float(pick(v[s][branch])) for s in sizes} for seed, v in per.items()}
                e = flow_exponents(table, g, f"{branch} ({where})")
                exps.append(e.to_dict())
                if log:
                    log(
                        f"γ {g:g} {branch} ({where}): slope {e.value:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] vs 1−γ "
                        f"{e.predicted:+.2f} → {e.verdict}"
                    )
    return {"sizes": list(sizes), "widths": widths, "flows": flows, "exponents": exps, "margin": MARGIN}


__all__ = ["MARGIN", "PAPER_SIZES", "FlowExponent", "flow_exponents", "flow_law", "judge_flow_law", "measure_flow"]
