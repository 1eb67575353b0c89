"""Claim 10: claim 1 on a Mixture-of-Experts model (the preset's ``moe_size``): the same arms, analysis and rule
as :mod:`~smallinit.experiments.claims.c01_loss`. Not run when the preset has no MoE size. With a crossover of its
own (``Preset.extra_crossovers``, ``cpu-long``) the verdict is claim 1's crossover rule on the MoE pair."""

from __future__ import annotations

from typing import Any

from smallinit.experiments.claims import c01_loss
from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 10
CLAIM = "The MoE variant shows claim 1 too."


def arms(p: Preset) -> dict[str, Arm] | None:
    if any(xp.claim == ID for xp in p.extra_crossovers):
        return {}  # its crossover trains the runs
    if not p.moe_size:
        return None
    return {"baseline": arm(p.moe_size, BASELINE, moe=True), "paper": arm(p.moe_size, PAPER, moe=True)}


judge = c01_loss.judge


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    extra = ctx.extra_crossovers(ID)
    if extra:
        from smallinit.experiments.crossover_plan import crossover_folder

        xp, x = extra[0]
        r = c01_loss.analyse_crossover(ctx, x, crossover_folder(xp))
    else:
        r = c01_loss.analyse(ctx)
    r["measured"] = "MoE: " + r["measured"]
    return r
