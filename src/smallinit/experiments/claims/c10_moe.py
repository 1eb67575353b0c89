"""Claim 10: claim 1 on a Mixture-of-Experts model (the preset's ``moe_size``): the same arms, analysis and rule
as :mod:`~smallinit.experiments.claims.c01_loss`, shared through :mod:`~smallinit.experiments.claims.loss_claims`.
Not run when the preset has no MoE size. With a crossover of its own (``Preset.extra_crossovers``, ``cpu-long``) the
verdict is claim 1's crossover rule on the MoE pair (judged at the declared budget by
:func:`smallinit.analysis.crossing.loss_claim_verdict`).

From short runs (:func:`judge`) it is a loss claim judged at the declared budget: when the MoE runs train fewer than
``Preset.enough`` tokens per non-embedding parameter (``ModelConfig.num_params(non_embedding=True)``: every expert
counts) the verdict is "inconclusive — not reached at this budget" whatever the loss difference says
(:func:`~smallinit.experiments.claims.rules.at_budget`): at 0.3 tokens per parameter γ = 1 is always behind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.loss_claims import analyse_crossover, analyse_final_loss, judge_lower_loss
from smallinit.experiments.claims.rules import Verdict, at_budget
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 10
CLAIM = "The MoE variant shows claim 1 too."


def arms(p: Preset) -> dict[str, Arm] | None:
    if any(xp.claim == ID for xp in p.extra_crossovers):
        return {}  # its crossover trains the runs
    if not p.moe_size:
        return None
    return {"baseline": arm(p.moe_size, BASELINE, moe=True), "paper": arm(p.moe_size, PAPER, moe=True)}


def judge(
    variant: Sequence[float],
    baseline: Sequence[float],
    boot_hw: float | None,
    label: str = "val loss: baseline − variant",
    tokens_per_param: float | None = None,
    enough: float | None = None,
) -> Verdict:
    """Claim 1's rule (:func:`~smallinit.experiments.claims.loss_claims.judge_lower_loss`: baseline − variant final
    loss, seed-paired t-interval or the one-seed bootstrap and floor) at the declared budget: below ``enough`` tokens
    per parameter, "inconclusive — not reached"."""
    return at_budget(judge_lower_loss(variant, baseline, boot_hw, label), tokens_per_param, enough, "the MoE runs")


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    extra = ctx.extra_crossovers(ID)
    if extra:
        from smallinit.experiments.crossover_plan import crossover_folder

        xp, x = extra[0]
        r = analyse_crossover(ctx, x, crossover_folder(xp))
    else:
        r = analyse_final_loss(ctx)
        # claim 1's analysis reads the final losses; this claim judges them at the declared budget as well
        tpp = ctx.budget(ctx.roles["baseline"], ctx.roles["paper"])
        v = at_budget(Verdict(r["verdict"], notes=[]), tpp, ctx.p.enough, "the MoE runs")
        r["verdict"] = v.verdict
        r["notes"] = list(r.get("notes") or []) + v.notes
        r.setdefault("numbers", {}).update({"budget_tokens_per_param": tpp, "declared_tokens_per_param": ctx.p.enough})
    r["measured"] = "MoE: " + r["measured"]
    return r
