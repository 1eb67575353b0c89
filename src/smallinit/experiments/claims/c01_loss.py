"""Claim 1: the paper's setting (γ = 1, ε = 1e-12, elementwise gate) gives lower validation loss than the standard
baseline (γ = 0.5, ε = 1e-5, no gate), at the preset's main size.

Rule (:func:`judge`): effect = mean(baseline loss) − mean(paper loss) over seeds; interval = effect ± max(seed
spread, paired-bootstrap 95% half-width of the token-level loss gain of the seed-0 runs).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from smallinit.experiments.claims.context import ClaimContext, fmt_lr
from smallinit.experiments.claims.plots import plot_loss_curves
from smallinit.experiments.claims.rules import Verdict, lower_is_better_effect
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 1
CLAIM = "γ = 1 with ε = 1e-12 and the gate gives lower validation loss than the standard γ = 0.5, ε = 1e-5, no gate."


def arms(p: Preset) -> dict[str, Arm]:
    return {"baseline": arm(p.main_size, BASELINE), "paper": arm(p.main_size, PAPER)}


def judge(variant: Sequence[float], baseline: Sequence[float], boot_hw: float | None,
          label: str = "val loss: baseline − variant") -> Verdict:
    """The variant's final val loss is lower than the baseline's (claims 1 and 10)."""
    e = lower_is_better_effect(label, variant, baseline, boot_hw)
    return Verdict(e.verdict, [e], {"variant": list(variant), "baseline": list(baseline)})


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    base, paper = ctx.roles["baseline"], ctx.roles["paper"]
    v = judge(ctx.losses(paper), ctx.losses(base), ctx.loss_hw(paper, base), "val loss: baseline − paper setting")
    plot = plot_loss_curves(ctx.out, f"claim{ctx.claim_id}_loss.png", {
        f"baseline ({base.describe()})": ctx.runs(base), f"paper ({paper.describe()})": ctx.runs(paper)},
        title=f"Claim {ctx.claim_id}: validation loss")
    measured = (f"final validation loss of the standard baseline ({base.describe()}) and the paper's setting "
                f"({paper.describe()}), {len(ctx.runs(paper))} seed(s) each, {ctx.lr_words()}; "
                "noise: spread over seeds and a paired bootstrap over validation tokens")
    table = {"title": "final validation loss", "columns": ["arm", "learning rate", "seeds", "val losses"],
             "rows": [[n, fmt_lr(ctx.chosen.get(a.key) or math.nan), len(ctx.runs(a)),
                       ", ".join(f"{x:.4f}" for x in ctx.losses(a))] for n, a in (("baseline", base), ("paper", paper))]}
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(base, paper))
