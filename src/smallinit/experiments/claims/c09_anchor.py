"""Claim 9: on the anchor-function task (DESIGN §2), held-out anchor-pair accuracy — composing single-anchor rules
rather than memorising pairs — is higher under γ = 1 than under γ = 0.5. Arms: two anchor-task arms (γ = 1,
γ = 0.5), each trained at every ``anchor_lrs`` of the preset and selected on its in-distribution tune set."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.anchor import ANSWER_KINDS
from smallinit.experiments.claims.context import ClaimContext, anchor_name, fmt_lr
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.figures import finish_axes
from smallinit.experiments.claims.rules import Verdict, higher_is_better_effect, proportion_gap_ci
from smallinit.experiments.presets import AnchorArm, Preset

ID = 9
CLAIM = "Held-out anchor-pair accuracy (reasoning vs memorization) is higher under γ = 1 than γ = 0.5."


def arms(p: Preset) -> dict[str, AnchorArm]:
    return {"gamma1": AnchorArm(1.0), "gamma0.5": AnchorArm(0.5)}


def judge(acc_small: Sequence[float], acc_std: Sequence[float],
                    correct_small: Sequence[int] | None = None, correct_std: Sequence[int] | None = None) -> Verdict:
    """Claim 9. Held-out-pair accuracy per seed under γ = 1 and γ = 0.5; effect = mean difference, noise =
    max(seed spread, bootstrap over test examples of the first seeds' per-example correctness)."""
    hw = proportion_gap_ci(correct_small, correct_std) if correct_small is not None and correct_std is not None else None
    e = higher_is_better_effect("held-out accuracy: γ=1 − γ=0.5", acc_small, acc_std, hw)
    return Verdict(e.verdict, [e], {"heldout_acc_gamma1": list(acc_small), "heldout_acc_gamma0.5": list(acc_std)})


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    per = {a.gamma: ctx.anchor_results(a) for a in (ctx.roles["gamma1"], ctx.roles["gamma0.5"])}
    if not per[1.0] or not per[0.5]:
        return ctx.result("anchor task", None)
    acc = {g: [r["final"]["heldout_acc"] for r in rs] for g, rs in per.items()}
    corr = {g: [int(c) for c in rs[0]["heldout_correct"]] for g, rs in per.items()}
    v = judge(acc[1.0], acc[0.5], corr[1.0], corr[0.5])
    plots = [plot_anchor_curves(ctx.out, "claim9_anchor.png", {f"γ={g:g}": rs for g, rs in per.items()}),
             plot_anchor_answers(ctx.out, "claim9_answers.png", {f"γ={g:g}": rs for g, rs in per.items()})]
    rows = []
    for g, rs in per.items():
        for s, r in enumerate(rs):
            f = r["final"]
            rows.append([f"{g:g}", s, fmt_lr(r["config"]["lr"]), f"{f['in_acc']:.3f}", f"{f['heldout_acc']:.3f}",
                         *[f"{f['answers'][k]:.3f}" for k in ANSWER_KINDS]])
    table = {"title": "anchor task: accuracies and the kinds of held-out answers",
             "columns": ["γ", "seed", "lr", "in-dist acc", "held-out acc", *ANSWER_KINDS], "rows": rows}
    cfg = per[1.0][0]["config"]
    measured = (f"anchor-function task (DESIGN §2): {cfg['n_layers']}-layer d{cfg['d_model']} transformer, "
                f"{cfg['steps']} steps on {cfg['n_train']} sequences; pairs (3,4) and (4,3) never trained. "
                "Held-out accuracy and the share of held-out answers equal to the inferential x + s(a1) + s(a2) "
                "vs the other candidates; noise: seeds and a bootstrap over test sequences")
    names = [anchor_name(g, r["config"]["lr"], s) for g, rs in per.items() for s, r in enumerate(rs)]
    return ctx.result(measured, v, plots=plots, tables=[table], runs=names)


def plot_anchor_curves(out: Path, name: str, groups: dict[str, list[dict[str, Any]]]) -> str | None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, results) in enumerate(groups.items()):
        for j, r in enumerate(results):
            h = r.get("history") or []
            if not h:
                continue
            st = [x["step"] for x in h]
            ax.plot(st, [x["heldout_acc"] for x in h], color=f"C{i}", lw=2, label=f"{label} held-out" if j == 0 else None)
            ax.plot(st, [x["in_acc"] for x in h], color=f"C{i}", lw=1, ls="--",
                    label=f"{label} in-distribution" if j == 0 else None)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_ylim(-0.02, 1.02)
    finish_axes(ax, "step", "accuracy", "Claim 9: anchor task accuracy (held-out pairs (3,4), (4,3))")
    return save(fig, out, name)


def plot_anchor_answers(out: Path, name: str, groups: dict[str, list[dict[str, Any]]]) -> str | None:
    plt = pyplot()
    labels, fracs = [], []
    for label, results in groups.items():
        for s, r in enumerate(results):
            labels.append(f"{label} s{s}")
            fracs.append([r["final"]["answers"].get(k, 0.0) for k in ANSWER_KINDS])
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.6 * len(labels) + 1.6))
    left = np.zeros(len(labels))
    arr = np.asarray(fracs)
    for k, kind in enumerate(ANSWER_KINDS):
        ax.barh(labels, arr[:, k], left=left, label=kind, color=f"C{k}")
        left += arr[:, k]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of held-out answers")
    ax.set_title("Claim 9: what the models answer on held-out pairs", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return save(fig, out, name)
