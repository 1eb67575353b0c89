"""Claim 5: across the preset's γ sweep (ε = 1e-12 and the elementwise gate throughout, main size), loss is best
near γ = 1 (inside [0.75, 1.25]) and worse above it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_lr
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.figures import finish_axes
from smallinit.experiments.claims.rules import (INCONCLUSIVE, Verdict, is_finite, combine, half_width, interval_effect,
                                                lower_is_better_effect, seed_spread)
from smallinit.experiments.presets import Arm, Preset, arm

ID = 5
CLAIM = "Across γ ∈ {0.25 … 1.5}, loss is best near γ = 1 and worse above it."


def arms(p: Preset) -> dict[str, Arm]:
    if any(xp.claim == ID for xp in p.extra_crossovers):
        return {}  # its crossover trains the runs
    return {f"{g:g}": arm(p.main_size, (g, 1e-12, "elementwise")) for g in p.gammas}


def judge(losses: dict[float, Sequence[float]], hw_near: float | None = None,
                      hw_above: float | None = None, near: tuple[float, float] = (0.75, 1.25)) -> Verdict:
    """Claim 5. losses[γ] = final val losses (seeds) per γ. Parts: (a) best near 1: the best γ outside
    [0.75, 1.25] has higher loss than the best γ inside; (b) worse above 1: loss(γ_max) − loss(γ=1) > 0."""
    mean = {g: float(np.mean([x for x in v if is_finite(x)])) if any(is_finite(x) for x in v) else math.inf
            for g, v in losses.items()}
    inside = {g: l for g, l in mean.items() if near[0] <= g <= near[1]}
    outside = {g: l for g, l in mean.items() if not near[0] <= g <= near[1]}
    if not inside or not outside or 1.0 not in mean:
        return Verdict(INCONCLUSIVE, notes=["the sweep must include γ = 1 and values on both sides"])
    g_in, g_out = min(inside, key=inside.get), min(outside, key=outside.get)
    # a diverged run (inf loss) is as bad as it gets: the effect is then the finite gap to the worst finite loss
    finite = [l for l in mean.values() if math.isfinite(l)]
    cap = max(finite) if finite else 0.0

    def v(g):
        return mean[g] if math.isfinite(mean[g]) else cap

    a = lower_is_better_effect(f"(a) best outside [{near[0]}, {near[1]}] (γ={g_out:g}) − best inside (γ={g_in:g})",
                               [v(g_in)], [v(g_out)], hw_near)
    g_max = max(mean)
    b = lower_is_better_effect(f"(b) loss(γ={g_max:g}) − loss(γ=1)", [v(1.0)], [v(g_max)], hw_above)
    if seed_spread(*losses.values()) is not None:
        sp = seed_spread(*losses.values())
        a = interval_effect(a.label, a.value, max(sp, half_width(a) or 0), a.noise + f"; seed spread {sp:.3g}")
        b = interval_effect(b.label, b.value, max(sp, half_width(b) or 0), b.noise + f"; seed spread {sp:.3g}")
    nums = {"loss_by_gamma": {f"{g:g}": (mean[g] if math.isfinite(mean[g]) else None) for g in sorted(mean)},
            "best_gamma": min(mean, key=mean.get)}
    return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)


def analyse_crossover(ctx: ClaimContext, xp: Any, x: dict[str, Any] | None) -> dict[str, Any]:
    """Claim 5 from its crossover (``cpu-long``): the same rule (:func:`judge`) on the annealed losses L(D_max) of
    each γ arm; a one-seed difference must exceed the claim-1 crossover's seed-noise floor."""
    from smallinit.experiments.crossover_plan import arm_settings, crossover_folder

    folder = crossover_folder(xp)
    if not x:
        return ctx.result("annealed loss L(D_max) by γ (crossover)", None, notes=[f"{folder} did not finish"])
    gammas = {a: float(s[0]) for a, s in arm_settings(xp).items()}
    losses = {g: [v if is_finite(v) else math.inf for v in ctx.final_losses(x, a)] or [math.inf]
              for a, g in gammas.items()}
    one_seed = min(len(v) for v in losses.values()) < 2
    hw = ctx.crossover_noise_floor if one_seed else None
    v = judge(losses, hw, hw)
    if one_seed:
        v.notes.append(f"one seed per γ: a difference must exceed the claim-1 crossover's seed-noise floor "
                       f"({fmt(ctx.crossover_noise_floor)} nats)")
    D = x["budgets"][-1]["tokens"]
    plot = plot_gamma(ctx.out, "claim5_gamma.png", losses, title=f"Claim 5: annealed loss at D = {D:,} tokens vs γ")
    table = {"title": f"annealed validation loss L(D_max = {D:,} tokens) by γ (ε = 1e-12, gate)",
             "columns": ["γ", "L(D_max) per seed"],
             "rows": [[f"{g:g}", fmt(l)] for g, l in sorted(losses.items())]}
    measured = (f"annealed loss at the crossover's largest budget ({D:,} tokens, "
                f"{x['tokens_per_param'][-1]:.3g} tokens/param) for each γ, ε = 1e-12 and the gate throughout")
    return ctx.result(measured, v, plots=[plot, f"{folder}/crossover.png"], tables=[table],
                      runs=[f"{folder}/runs/{a}" for a in gammas])


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    extra = ctx.extra_crossovers(ID)
    if extra:
        return analyse_crossover(ctx, *extra[0])
    roles = ctx.roles
    losses = {float(g): ctx.losses(a) or [math.inf] for g, a in roles.items()}
    finite = {g: np.mean(v) for g, v in losses.items() if all(math.isfinite(x) for x in v)}
    hw_near = hw_above = None
    if finite and 1.0 in losses:  # roles are keyed by the γ as text ("1"), losses by the number
        inside = [g for g in finite if 0.75 <= g <= 1.25]
        outside = [g for g in finite if not 0.75 <= g <= 1.25]
        if inside and outside:
            gi, go = min(inside, key=finite.get), min(outside, key=finite.get)
            hw_near = ctx.loss_hw(roles[f"{gi:g}"], roles[f"{go:g}"])
        gmax = max(losses)
        if gmax in finite and gmax != 1.0:
            hw_above = ctx.loss_hw(roles["1"], roles[f"{gmax:g}"])
    v = judge(losses, hw_near, hw_above)
    plot = plot_gamma(ctx.out, "claim5_gamma.png", losses, title="Claim 5: final val loss vs γ")
    table = {"title": "final validation loss by γ (ε = 1e-12, gate), each at its chosen learning rate",
             "columns": ["γ", "learning rate", "val loss"],
             "rows": [[f"{g:g}", fmt_lr(ctx.chosen.get(roles[f'{g:g}'].key) or math.nan),
                       fmt(v_) if all(math.isfinite(x) for x in v_) else "diverged/failed"]
                      for g, v_ in sorted(losses.items())]}
    measured = "final val loss at each γ of the sweep (ε = 1e-12 and the elementwise gate throughout)"
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(*roles.values()))


def plot_gamma(out: Path, name: str, losses: dict[float, list[float]], title: str = "") -> str | None:
    plt = pyplot()
    pts = sorted((g, float(np.mean(v))) for g, v in losses.items() if v and all(math.isfinite(x) for x in v))
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(*zip(*pts), marker="o")
    for g, v in losses.items():
        for x in v:
            if math.isfinite(x):
                ax.plot([g], [x], "k.", ms=3)
    bad = [g for g, v in losses.items() if not v or not all(math.isfinite(x) for x in v)]
    for g in bad:
        ax.axvline(g, color="C3", ls=":", lw=1)
    ax.axvline(1.0, color="gray", ls="--", lw=0.8)
    finish_axes(ax, "γ (σ = d_in^−γ)" + (" — dotted: diverged/failed" if bad else ""), "final val loss", title, legend=None)
    return save(fig, out, name)
