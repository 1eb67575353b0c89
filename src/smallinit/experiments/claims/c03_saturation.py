"""Claim 3: under γ = 1, ε = 1e-5 saturates RMSNorm (ms/(ms+ε) well below 1) and costs loss; ε = 1e-12 restores
both. Arms at the main size, elementwise gate both: ε = 1e-5 ("eps_large") and ε = 1e-12 ("eps_small")."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.plots import plot_probe_series
from smallinit.experiments.claims.rules import Effect, Verdict, combine, lower_is_better_effect, paired_effect
from smallinit.experiments.presets import PAPER, Arm, Preset, arm

ID = 3
CLAIM = "ε = 1e-5 saturates RMSNorm under γ = 1 and costs loss; ε = 1e-12 restores both."


def arms(p: Preset) -> dict[str, Arm]:
    return {"eps_large": arm(p.main_size, (1.0, 1e-5, "elementwise")), "eps_small": arm(p.main_size, PAPER)}


def judge(sat_eps_large: Sequence[float], sat_eps_small: Sequence[float], loss_effect: Effect) -> Verdict:
    """Claim 3. sat_* = RMSNorm saturation per norm (averaged over training), same norms in the same order,
    under γ = 1 with ε = 1e-5 (large) and ε = 1e-12 (small). Parts: (a) saturation is higher with ε = 1e-12,
    paired bootstrap over norms; (b) loss_effect = loss(ε=1e-5) − loss(ε=1e-12) > 0."""
    sat = paired_effect("(a) saturation(ε=1e-12) − saturation(ε=1e-5)", sat_eps_small, sat_eps_large, "norms")
    loss_effect = Effect("(b) " + loss_effect.label, loss_effect.value, loss_effect.lo, loss_effect.hi, loss_effect.noise)
    nums = {"saturation_eps_1e-5_mean": float(np.mean(sat_eps_large)) if len(sat_eps_large) else None,
            "saturation_eps_1e-5_min": float(np.min(sat_eps_large)) if len(sat_eps_large) else None,
            "saturation_eps_1e-12_mean": float(np.mean(sat_eps_small)) if len(sat_eps_small) else None}
    return Verdict(combine([sat.verdict, loss_effect.verdict]), [sat, loss_effect], nums)


def norm_saturations(records: list[dict[str, Any]]) -> dict[str, float]:
    """{norm name: saturation averaged over the probed steps}."""
    acc: dict[str, list[float]] = {}
    for rec in records:
        for l in rec.get("layers") or []:
            for n in ("attn_norm", "mlp_norm"):
                s = (l.get(n) or {}).get("saturation")
                if s is not None:
                    acc.setdefault(f"{l.get('layer')}.{n}", []).append(s)
        s = (rec.get("final_norm") or {}).get("saturation")
        if s is not None:
            acc.setdefault("final_norm", []).append(s)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    big, small = ctx.roles["eps_large"], ctx.roles["eps_small"]
    pb, ps = ctx.probes(big), ctx.probes(small)
    sb, ss = norm_saturations(pb), norm_saturations(ps)
    names = [n for n in sb if n in ss]
    loss = lower_is_better_effect("val loss: ε=1e-5 − ε=1e-12 (γ=1)", ctx.losses(small), ctx.losses(big),
                                  ctx.loss_hw(small, big))
    v = judge([sb[n] for n in names], [ss[n] for n in names], loss)
    plot = plot_probe_series(ctx.out, "claim3_saturation.png", {"ε=1e-5": pb, "ε=1e-12": ps},
                             "saturation_min", "lowest RMSNorm saturation", title="Claim 3: RMSNorm saturation (γ = 1)")
    table = {"title": "RMSNorm saturation ms/(ms+ε), averaged over training, per norm",
             "columns": ["norm", "ε = 1e-5", "ε = 1e-12"], "rows": [[n, f"{sb[n]:.3f}", f"{ss[n]:.3f}"] for n in names]}
    measured = ("RMSNorm saturation s = ms/(ms+ε) of every norm input, averaged over probed steps, and final val loss, "
                "under γ = 1 with ε = 1e-5 vs ε = 1e-12 (elementwise gate both)")
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(big, small))
