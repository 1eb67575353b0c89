"""Claim 11 (ours, not the paper's): AdamW's ε is a second hidden ε. Adam divides by √v̂ + ε (ε = 1e-8); under
small init the first gradients of the attention matrices shrink with width (≈ d^−2 for W_Q/W_K at γ = 1,
``benchmarks/optimizer_eps.py``), so ε damps their first updates the way the RMSNorm ε damps activations.

Arms at the preset's widest short-run width (the last of ``shrink_sizes``), the paper's setting (γ = 1, ε = 1e-12,
gate) with AdamW ε = 1e-8 (the default) and with ε = 1e-16. Rule (:func:`judge`): the effect is
loss(Adam ε 1e-8) − loss(Adam ε 1e-16) (> 0: the default ε costs loss, as the claim says), with the loss interval of
:func:`~smallinit.experiments.claims.rules.lower_is_better_effect` (t-interval with ≥ 2 seeds; one seed: bootstrap
over windows, at least the preset's seed-noise floor; seeds paired by number), judged at the declared budget: from
runs below ``Preset.enough`` tokens per non-embedding parameter, "inconclusive — not reached at this budget"
(:func:`~smallinit.experiments.claims.rules.at_budget`). The optimizer-ε probe's damping at the first probed step
(mean over attention matrices, ε/(√v̂ + ε)) is reported beside it, not part of the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smallinit.experiments.claims.context import ClaimContext, fmt
from smallinit.experiments.claims.rules import Verdict, at_budget, lower_is_better_effect, seed_pairs
from smallinit.experiments.presets import PAPER, Arm, Preset, arm

ID = 11
CLAIM = "Ours: AdamW's ε = 1e-8 damps small-init (γ = 1) updates at width and costs loss; ε = 1e-16 removes it."
TINY = 1e-16


def arms(p: Preset) -> dict[str, Arm] | None:
    if not p.shrink_sizes:
        return None
    z = p.shrink_sizes[-1]
    return {"default": arm(z, PAPER), "tiny": arm(z, PAPER, adam_eps=TINY)}


def judge(
    tiny: Sequence[float],
    default: Sequence[float],
    boot_hw: float | None,
    tokens_per_param: float | None = None,
    enough: float | None = None,
) -> Verdict:
    """Claim 11: effect = mean loss with Adam ε 1e-8 − mean loss with ε 1e-16 (> 0: the default ε costs loss);
    ``tiny[i]`` and ``default[i]`` are the same seed. Below ``enough`` tokens per parameter: not reached."""
    e = lower_is_better_effect("val loss: Adam ε 1e-8 − Adam ε 1e-16 (γ = 1)", tiny, default, boot_hw)
    return at_budget(
        Verdict(e.verdict, [e], {"tiny": list(tiny), "default": list(default)}), tokens_per_param, enough, "the runs"
    )


def first_damping(records: list[dict[str, Any]]) -> float | None:
    """Mean ε/(√v̂ + ε) over the attention matrices at the first probed step with optimizer state."""
    for rec in records:
        mats = (rec.get("optim_eps") or {}).get("matrices") or {}
        vals = [m["damping"] for n, m in mats.items() if ".attn." in n and m.get("damping") is not None]
        if vals:
            return sum(vals) / len(vals)
    return None


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    default, tiny = ctx.roles["default"], ctx.roles["tiny"]
    _, l_tiny, l_default = seed_pairs(ctx.losses_by_seed(tiny), ctx.losses_by_seed(default))
    v = judge(l_tiny, l_default, ctx.loss_hw(tiny, default), ctx.budget(default, tiny), ctx.p.enough)
    damp = {"Adam ε 1e-8": first_damping(ctx.probes(default)), "Adam ε 1e-16": first_damping(ctx.probes(tiny))}
    v.numbers["first_probe_attention_damping"] = damp
    table = {
        "title": f"γ = 1 at {default.size}: final val loss and the first probed step's Adam-ε damping",
        "columns": ["arm", "val losses", "attention damping ε/(√v̂+ε)"],
        "rows": [
            [k, fmt(ctx.losses(a)), fmt(d)]
            for (k, a), d in zip((("Adam ε 1e-8", default), ("Adam ε 1e-16", tiny)), damp.values())
        ],
    }
    measured = (
        f"final validation loss of the paper's setting at {default.size} with AdamW ε 1e-8 vs 1e-16 "
        f"({ctx.lr_words()}), judged at the declared budget of {ctx.p.enough:g} tokens per parameter; the "
        "optimizer-ε probe's damping beside it"
    )
    return ctx.result(measured, v, tables=[table], runs=ctx.names(default, tiny))
