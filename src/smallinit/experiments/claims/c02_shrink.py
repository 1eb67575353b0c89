"""Claim 2: without the two fixes (ε = 1e-5, no gate) the advantage of γ = 1 over γ = 0.5 shrinks as the model
grows; with them (ε = 1e-12, elementwise gate) it does not. Arms: γ ∈ {0.5, 1} × {no fix, fix} at every size of
the preset's ``shrink_sizes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_ci
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.figures import finish_axes
from smallinit.experiments.claims.rules import (INCONCLUSIVE, Effect, Verdict, combine, difference,
                                                lower_is_better_effect)
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 2
CLAIM = "Without the two fixes the advantage of γ = 1 shrinks as the model grows; with them it does not."


def arms(p: Preset) -> dict[str, Arm]:
    roles = {}
    for z in p.shrink_sizes:
        roles[f"{z}/nofix/0.5"] = arm(z, BASELINE)
        roles[f"{z}/nofix/1"] = arm(z, (1.0, 1e-5, "none"))
        roles[f"{z}/fix/0.5"] = arm(z, (0.5, 1e-12, "elementwise"))
        roles[f"{z}/fix/1"] = arm(z, PAPER)
    return roles


def judge(adv_nofix: dict[float, Effect], adv_fix: dict[float, Effect]) -> Verdict:
    """Claim 2. adv_*[N] = the advantage of γ = 1 over γ = 0.5 (loss(γ=0.5) − loss(γ=1)) at size N, without
    and with the two fixes. Parts: (a) without fixes the advantage shrinks from the smallest to the largest
    size: A_nofix(N_min) − A_nofix(N_max) > 0; (b) the fixes remove the shrinkage:
    [A_fix(N_max) − A_fix(N_min)] − [A_nofix(N_max) − A_nofix(N_min)] > 0."""
    sizes = sorted(set(adv_nofix) & set(adv_fix))
    if len(sizes) < 2:
        return Verdict(INCONCLUSIVE, notes=["needs at least two model sizes"])
    lo, hi = sizes[0], sizes[-1]
    shrink = difference("(a) without fixes: A(smallest) − A(largest)", adv_nofix[lo], adv_nofix[hi])
    trend_fix = difference("(info) with fixes: A(largest) − A(smallest)", adv_fix[hi], adv_fix[lo])
    trend_nofix = difference("without fixes: A(largest) − A(smallest)", adv_nofix[hi], adv_nofix[lo])
    removed = difference("(b) trend with fixes − trend without", trend_fix, trend_nofix)
    v = combine([shrink.verdict, removed.verdict])
    nums = {"sizes": sizes, "advantage_nofix": {str(n): adv_nofix[n].value for n in sizes},
            "advantage_fix": {str(n): adv_fix[n].value for n in sizes}}
    return Verdict(v, [shrink, removed, trend_fix], nums)


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    roles = ctx.roles
    adv = {"nofix": {}, "fix": {}}
    rows = []
    for z in ctx.p.shrink_sizes:
        n = ctx.cost(roles[f"{z}/fix/1"]).get("non_embedding_params")
        for setting in ("nofix", "fix"):
            a05, a1 = roles[f"{z}/{setting}/0.5"], roles[f"{z}/{setting}/1"]
            e = lower_is_better_effect(f"{z} {setting}: loss(γ=0.5) − loss(γ=1)", ctx.losses(a1), ctx.losses(a05),
                                       ctx.loss_hw(a1, a05))
            adv[setting][float(n)] = e
            rows.append([z, f"{n / 1e6:.2f}M", setting, fmt(ctx.losses(a05)), fmt(ctx.losses(a1)), fmt(e.value),
                         fmt_ci(e)])
    v = judge(adv["nofix"], adv["fix"])
    plot = plot_advantage(ctx.out, "claim2_advantage.png", adv, title="Claim 2: advantage of γ = 1 vs size")
    table = {"title": "advantage A = loss(γ=0.5) − loss(γ=1) by size",
             "columns": ["size", "non-emb params", "setting", "loss γ=0.5", "loss γ=1", "A", "interval"], "rows": rows}
    measured = ("advantage of γ = 1 over γ = 0.5 (final val loss difference) at each size, without the fixes "
                "(ε = 1e-5, no gate) and with them (ε = 1e-12, elementwise gate)")
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(*roles.values()))


def plot_advantage(out: Path, name: str, adv: dict[str, dict[float, Any]], title: str = "") -> str | None:
    """Advantage of γ = 1 (loss(γ=0.5) − loss(γ=1)) vs non-embedding parameters, with and without the fixes."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for i, (setting, label) in enumerate((("nofix", "without fixes (ε=1e-5, no gate)"),
                                          ("fix", "with fixes (ε=1e-12, gate)"))):
        pts = sorted((n, e) for n, e in adv.get(setting, {}).items() if e.value is not None)
        if not pts:
            continue
        xs = [n for n, _ in pts]
        ys = [e.value for _, e in pts]
        err = [((e.hi - e.lo) / 2 if e.lo is not None else 0) for _, e in pts]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label, color=f"C{i}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(0, color="k", lw=0.8)
    finish_axes(ax, "non-embedding parameters", "loss(γ=0.5) − loss(γ=1)", title, xscale="log")
    return save(fig, out, name)
