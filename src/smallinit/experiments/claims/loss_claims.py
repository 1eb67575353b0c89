"""What the loss claims 1 and 10 share (claim 10 is claim 1 on an MoE model): the rule that the variant's final
validation loss is lower than the baseline's (:func:`judge_lower_loss`), the same claim read from a crossover
(:func:`from_crossover`), and the two analyses built on them — from final losses of short runs
(:func:`analyse_final_loss`) and from a crossover's loss against budget (:func:`analyse_crossover`). Claim modules
import this module, never each other.

Rule (:func:`judge_lower_loss`): effect = baseline loss − variant loss, with the interval of
:func:`~smallinit.experiments.claims.rules.lower_is_better_effect` (seed-paired t-interval, or with one seed the
bootstrap over windows widened to the preset's seed-noise floor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from smallinit.experiments.claims.context import ClaimContext, fmt_lr
from smallinit.experiments.claims.plots import plot_loss_curves
from smallinit.experiments.claims.rules import Effect, Verdict, lower_is_better_effect
from smallinit.experiments.crossover_report import lr_words, tuning_rows


def judge_lower_loss(
    variant: Sequence[float],
    baseline: Sequence[float],
    boot_hw: float | None,
    label: str = "val loss: baseline − variant",
) -> Verdict:
    """The variant's final val loss is lower than the baseline's (claims 1 and 10)."""
    e = lower_is_better_effect(label, variant, baseline, boot_hw)
    return Verdict(e.verdict, [e], {"variant": list(variant), "baseline": list(baseline)})


def from_crossover(x: dict[str, Any]) -> Verdict:
    """Claim 1 read from a crossover (DESIGN.md §2): the verdict of
    :func:`smallinit.analysis.crossing.loss_claim_verdict` for the paper arm against the baseline at the declared
    budget — supported when the seed-paired interval of G = L_baseline − L_paper lies above 0, not supported below 0,
    inconclusive when it holds 0, "inconclusive — not reached at this budget" only when the largest budget is below
    the declared one."""
    a = x["analyses"]["paper"]
    j = a.get("judged", len(x["budgets"]) - 1)
    g = a["gap"][j]
    D = x["budgets"][j]["tokens"]
    effects = [Effect(f"G(D = {D:,} tokens) = L(baseline) − L(paper)", g["value"], g["lo"], g["hi"], g["method"])]
    if "gamma-only" in x["analyses"]:
        gg = x["analyses"]["gamma-only"]["gap"][j]
        effects.append(
            Effect(
                f"(info) G(D = {D:,}) = L(baseline) − L(γ-only: γ 0.5, ε 1e-12, gate)",
                gg["value"],
                gg["lo"],
                gg["hi"],
                gg["method"],
            )
        )
    nums = {
        "answer": a["answer"],
        "gap_fit": a.get("gap_fit"),
        "crossing": a["crossing"],
        "gap_change": a["gap_change"],
        "budgets": [b["tokens"] for b in x["budgets"]],
        "tokens_per_param": x["tokens_per_param"],
        "declared_tokens_per_param": a.get("declared_tokens_per_param"),
    }
    return Verdict(a["verdict"], effects, nums, notes=[a["reason"]])


def analyse_final_loss(ctx: ClaimContext) -> dict[str, Any]:
    """Claim 1 (or 10) from short runs: the final validation loss of ``ctx.roles["baseline"]`` against
    ``ctx.roles["paper"]`` (:func:`judge_lower_loss`), the loss curves and a table of the final losses."""
    base, paper = ctx.roles["baseline"], ctx.roles["paper"]
    v = judge_lower_loss(
        ctx.losses(paper), ctx.losses(base), ctx.loss_hw(paper, base), "val loss: baseline − paper setting"
    )
    plot = plot_loss_curves(
        ctx.out,
        f"claim{ctx.claim_id}_loss.png",
        {f"baseline ({base.describe()})": ctx.runs(base), f"paper ({paper.describe()})": ctx.runs(paper)},
        title=f"Claim {ctx.claim_id}: validation loss",
    )
    measured = (
        f"final validation loss of the standard baseline ({base.describe()}) and the paper's setting "
        f"({paper.describe()}), {len(ctx.runs(paper))} seed(s) each, {ctx.lr_words()}; "
        "noise: spread over seeds and a paired bootstrap over validation tokens"
    )
    table = {
        "title": "final validation loss",
        "columns": ["arm", "learning rate", "seeds", "val losses"],
        "rows": [
            [
                n,
                fmt_lr(ctx.chosen.get(a.key) or math.nan),
                len(ctx.runs(a)),
                ", ".join(f"{x:.4f}" for x in ctx.losses(a)),
            ]
            for n, a in (("baseline", base), ("paper", paper))
        ],
    }
    return ctx.result(measured, v, plots=[plot], tables=[table], runs=ctx.names(base, paper))


def analyse_crossover(ctx: ClaimContext, x: dict[str, Any] | None = None, folder: str = "crossover") -> dict[str, Any]:
    """Claim 1 (or 10) from a crossover (default: the preset's claim-1 crossover): the one-line answer, L(D) and G(D)
    tables, the figure."""
    x = ctx.crossover() if x is None and folder == "crossover" else x
    if not x or "paper" not in (x.get("analyses") or {}):
        return ctx.result("loss against budget (crossover)", None, notes=["the crossover did not finish"])
    v = from_crossover(x)
    D = [b["tokens"] for b in x["budgets"]]
    arms_ = list(x["losses"])
    rows = []
    for j, d in enumerate(D):
        row = [f"{d:,}", f"{x['tokens_per_param'][j]:.3g}"]
        for a in arms_:
            vals = [s[j] for s in x["losses"][a].values() if s[j] is not None]
            row.append(", ".join(f"{y:.4f}" for y in vals) or "—")
        g = x["analyses"]["paper"]["gap"][j]
        row.append(f"{g['value']:+.4f}" if g["value"] is not None else "—")
        row.append(f"[{g['lo']:+.4f}, {g['hi']:+.4f}]" if g["lo"] is not None else "—")
        rows.append(row)
    table = {
        "title": "annealed validation loss L(D) per seed, and G(D) = L(baseline) − L(paper) (> 0: paper ahead)",
        "columns": ["D (tokens)", "tokens/param", *arms_, "G(D)", "95% t-interval"],
        "rows": rows,
    }
    spec = x["spec"]
    measured = (
        f"loss against training budget: one trunk per arm × seed ({len(spec['seeds'])} seed(s)) and cooldown "
        f"branches at D × {', '.join(f'{f:g}' for f in spec['fractions'])} (D = {D[-1]:,} tokens), "
        f"{lr_words(x)}; {v.numbers['answer']}"
    )
    tables = [table]
    if x.get("tuning"):
        cols, trows = tuning_rows(x)
        tables.append(
            {"title": "learning rate per arm: final validation loss of each tuning run", "columns": cols, "rows": trows}
        )
    return ctx.result(
        measured, v, plots=[f"{folder}/crossover.png"], tables=tables, runs=[f"{folder}/runs/{a}" for a in arms_]
    )


__all__ = ["analyse_crossover", "analyse_final_loss", "from_crossover", "judge_lower_loss"]
