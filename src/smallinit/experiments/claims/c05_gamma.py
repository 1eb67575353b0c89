"""Claim 5: across the preset's γ sweep (ε = 1e-12 and the elementwise gate throughout, main size), loss is best
near γ = 1 (inside [0.75, 1.25]) and worse above it.

Rule (:func:`judge`). Per γ the final validation losses by seed ({seed: loss}; a diverged run counts as the worst
finite loss of the sweep). γ_in = the γ inside [0.75, 1.25] with the lowest mean loss, γ_out = the one outside.
Parts: (a) best near 1: loss(γ_out) − loss(γ_in) > 0; (b) worse above 1: loss(γ_max) − loss(γ = 1) > 0. Each is
:func:`~smallinit.experiments.claims.rules.lower_is_better_effect` on the seeds both γ ran (**paired by seed
number**): with k ≥ 2 seeds a 95% t-interval over the seed-paired differences (k − 1 degrees of freedom; the preset
should run ≥ 3 — with 2, t = 12.7), with one seed ± the bootstrap over windows widened to the seed-noise floor. (The
old rule fell back to the range over 2 seeds, and its bootstrap half-widths were never used: it looked the γ = 1 arm
up as ``1.0 in roles`` while the roles are keyed by text.) A loss claim: from runs below the declared budget
(``Preset.enough`` tokens per non-embedding parameter) the verdict is "inconclusive — not reached at this budget"
(:func:`~smallinit.experiments.claims.rules.at_budget`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.figures import finish_axes
from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_lr
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    Verdict,
    at_budget,
    combine,
    is_finite,
    lower_is_better_effect,
)
from smallinit.experiments.presets import Arm, Preset, arm

ID = 5
CLAIM = "Across γ ∈ {0.25 … 1.5}, loss is best near γ = 1 and worse above it."


def arms(p: Preset) -> dict[str, Arm]:
    if any(xp.claim == ID for xp in p.extra_crossovers):
        return {}  # its crossover trains the runs
    return {f"{g:g}": arm(p.main_size, (g, 1e-12, "elementwise")) for g in p.gammas}


def _by_seed(v: Mapping[int, float] | Sequence[float]) -> dict[int, float]:
    """{seed: loss} from a mapping, or from a list read as seeds 0, 1, … (non-finite kept: a diverged run)."""
    return {
        int(k): float(x)
        for k, x in (v.items() if isinstance(v, Mapping) else enumerate(v))
        if isinstance(x, (int, float)) and not math.isnan(x)
    }


def pick(
    losses: Mapping[float, Mapping[int, float] | Sequence[float]], near: tuple[float, float] = (0.75, 1.25)
) -> tuple[float, float, float] | None:
    """(γ_in, γ_out, γ_max) by mean loss over seeds (inf for a γ with no finite run); None without γ = 1 or values on
    both sides of ``near``."""
    mean = {float(g): _mean(_by_seed(v)) for g, v in losses.items()}
    inside = {g: l for g, l in mean.items() if near[0] <= g <= near[1]}
    outside = {g: l for g, l in mean.items() if not near[0] <= g <= near[1]}
    if not inside or not outside or 1.0 not in mean:
        return None
    return min(inside, key=inside.get), min(outside, key=outside.get), max(mean)


def _mean(d: dict[int, float]) -> float:
    f = [x for x in d.values() if math.isfinite(x)]
    return float(np.mean(f)) if f and len(f) == len(d) else (math.inf if d else math.inf)


def judge(
    losses: Mapping[float, Mapping[int, float] | Sequence[float]],
    hw_near: float | None = None,
    hw_above: float | None = None,
    near: tuple[float, float] = (0.75, 1.25),
    tokens_per_param: float | None = None,
    enough: float | None = None,
) -> Verdict:
    """Claim 5. losses[γ] = final val losses by seed ({seed: loss}, or a list read as seeds 0, 1, …); ``hw_*`` = the
    one-seed half-widths of the two comparisons (bootstrap and noise floor); ``tokens_per_param`` / ``enough``: the
    runs' budget and the declared one (None: not checked). Parts (a) and (b) as in the module docstring."""
    seeds = {float(g): _by_seed(v) for g, v in losses.items()}
    chosen = pick(seeds, near)
    if chosen is None:
        return at_budget(
            Verdict(INCONCLUSIVE, notes=["the sweep must include γ = 1 and values on both sides"]),
            tokens_per_param,
            enough,
            "the γ sweep's runs",
        )
    g_in, g_out, g_max = chosen
    # a diverged run (inf loss) is as bad as it gets: the effect is then the finite gap to the worst finite loss
    finite = [x for d in seeds.values() for x in d.values() if math.isfinite(x)]
    cap = max(finite) if finite else 0.0

    def paired(g_variant: float, g_base: float) -> tuple[list[float], list[float]]:
        common = sorted(set(seeds[g_variant]) & set(seeds[g_base]))
        fix = lambda x: x if math.isfinite(x) else cap  # noqa: E731
        return [fix(seeds[g_variant][s]) for s in common], [fix(seeds[g_base][s]) for s in common]

    a = lower_is_better_effect(
        f"(a) best outside [{near[0]}, {near[1]}] (γ={g_out:g}) − best inside (γ={g_in:g})",
        *paired(g_in, g_out),
        hw_near,
    )
    b = lower_is_better_effect(f"(b) loss(γ={g_max:g}) − loss(γ=1)", *paired(1.0, g_max), hw_above)
    mean = {g: _mean(d) for g, d in seeds.items()}
    nums = {
        "loss_by_gamma": {f"{g:g}": (mean[g] if math.isfinite(mean[g]) else None) for g in sorted(mean)},
        "best_gamma": min(mean, key=mean.get),
        "seeds": {f"{g:g}": sorted(d) for g, d in sorted(seeds.items())},
    }
    notes = []
    k = min(len(set(seeds[g_in]) & set(seeds[g_out])), len(set(seeds[1.0]) & set(seeds[g_max])))
    if k == 2:
        notes.append("2 seeds: the t-interval has 1 degree of freedom (t = 12.7); ≥ 3 seeds make it useful")
    v = Verdict(combine([a.verdict, b.verdict]), [a, b], nums, notes)
    return at_budget(v, tokens_per_param, enough, "the γ sweep's runs")


def analyse_crossover(ctx: ClaimContext, xp: Any, x: dict[str, Any] | None) -> dict[str, Any]:
    """Claim 5 from its crossover (``cpu-long``): the same rule (:func:`judge`) on the annealed losses L(D_max) of
    each γ arm, by seed; a one-seed difference must exceed the claim-1 crossover's seed-noise floor; judged against
    the declared budget with the crossover's tokens per parameter at D_max."""
    from smallinit.experiments.crossover_plan import arm_settings, crossover_folder

    folder = crossover_folder(xp)
    if not x:
        return ctx.result("annealed loss L(D_max) by γ (crossover)", None, notes=[f"{folder} did not finish"])
    gammas = {a: float(s[0]) for a, s in arm_settings(xp).items()}
    losses = {
        g: {s: (v if is_finite(v) else math.inf) for s, v in ctx.final_losses_by_seed(x, a).items()} or {0: math.inf}
        for a, g in gammas.items()
    }
    one_seed = min(len(v) for v in losses.values()) < 2
    hw = ctx.crossover_noise_floor if one_seed else None
    tpp = ctx.largest_budget_tokens_per_param(x)
    v = judge(losses, hw, hw, tokens_per_param=tpp, enough=ctx.p.enough)
    if one_seed:
        v.notes.append(
            f"one seed per γ: a difference must exceed the claim-1 crossover's seed-noise floor "
            f"({fmt(ctx.crossover_noise_floor)} nats)"
        )
    D = x["budgets"][-1]["tokens"]
    lists = {g: [d[s] for s in sorted(d)] for g, d in losses.items()}
    plot = plot_gamma(ctx.out, "claim5_gamma.png", lists, title=f"Claim 5: annealed loss at D = {D:,} tokens vs γ")
    table = {
        "title": f"annealed validation loss L(D_max = {D:,} tokens) by γ (ε = 1e-12, gate)",
        "columns": ["γ", "L(D_max) per seed"],
        "rows": [[f"{g:g}", fmt(l)] for g, l in sorted(lists.items())],
    }
    measured = (
        f"annealed loss at the crossover's largest budget ({D:,} tokens, "
        f"{x['tokens_per_param'][-1]:.3g} tokens/param; declared {ctx.p.enough:g}) for each γ, ε = 1e-12 and "
        "the gate throughout"
    )
    return ctx.result(
        measured,
        v,
        plots=[plot, f"{folder}/crossover.png"],
        tables=[table],
        runs=[f"{folder}/runs/{a}" for a in gammas],
    )


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    extra = ctx.extra_crossovers(ID)
    if extra:
        return analyse_crossover(ctx, *extra[0])
    by_gamma = {float(g): a for g, a in ctx.roles.items()}  # roles are keyed by the γ as text ("1")
    losses = {g: ctx.losses_by_seed(a) or {0: math.inf} for g, a in by_gamma.items()}
    hw_near = hw_above = None
    chosen = pick(losses)
    if chosen is not None:
        g_in, g_out, g_max = chosen
        hw_near = ctx.loss_hw(by_gamma[g_in], by_gamma[g_out])
        if g_max != 1.0:
            hw_above = ctx.loss_hw(by_gamma[1.0], by_gamma[g_max])
    v = judge(losses, hw_near, hw_above, tokens_per_param=ctx.budget(*by_gamma.values()), enough=ctx.p.enough)
    lists = {g: [d[s] for s in sorted(d)] for g, d in losses.items()}
    plot = plot_gamma(ctx.out, "claim5_gamma.png", lists, title="Claim 5: final val loss vs γ")
    table = {
        "title": "final validation loss by γ (ε = 1e-12, gate), each at its chosen learning rate",
        "columns": ["γ", "learning rate", "val loss by seed"],
        "rows": [
            [
                f"{g:g}",
                fmt_lr(ctx.chosen.get(by_gamma[g].key) or math.nan),
                ", ".join(
                    f"s{s}: {fmt(x)}" if math.isfinite(x) else f"s{s}: diverged/failed"
                    for s, x in sorted(losses[g].items())
                ),
            ]
            for g in sorted(losses)
        ],
    }
    measured = (
        "final val loss at each γ of the sweep (ε = 1e-12 and the elementwise gate throughout), seeds paired by "
        f"number, judged at the declared budget of {ctx.p.enough:g} tokens per parameter"
    )
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(*by_gamma.values()))


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
    finish_axes(
        ax, "γ (σ = d_in^−γ)" + (" — dotted: diverged/failed" if bad else ""), "final val loss", title, legend=None
    )
    return save(fig, out, name)
