"""Claim 7: token-level gains of the paper's setting over the baseline concentrate in the moderate-to-very-hard
difficulty bins. Arms: claim 1's (main size) and a **reference** model that is neither of them (DESIGN.md §2,
"Token bins by an independent reference"): a second seed of the baseline when the preset trains one, else the
γ = 0.5, ε = 1e-12, no-gate arm of the same size (claim 6's arm when the sizes agree: no extra run).

Measured with :func:`smallinit.compare.compare_models` on the seed-0 runs: Δ_sym = (p_A − p_B)/(p_A + p_B) per
validation token, **primary bins by the reference's loss** quantiles (binning by (ℓ_A + ℓ_B)/2 correlates the bin
with ℓ_B − ℓ_A whenever one model's per-token losses are noisier: two models of equal mean loss then show a
spurious trend — tested), intervals by a **bootstrap over windows** (tokens of one window share their context).
The (ℓ_A + ℓ_B)/2 bins stay in the report as a secondary table with that caveat."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_ci_pair
from smallinit.experiments.claims.rules import (INCONCLUSIVE, Verdict, combine, difference, half_width, interval_effect,
                                                is_finite)
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm
from smallinit.figures import plot_delta_by_bin

ID = 7
CLAIM = "Token-level gains concentrate in the moderate-to-very-hard difficulty bins."


def arms(p: Preset) -> dict[str, Arm]:
    if p.crossover is not None:  # scores the crossover's largest-budget runs (claim 1's); a reference if needed
        if p.crossover.seeds >= 2 or "gamma-only" in p.crossover.arms:
            return {}
        return {"reference": arm(p.crossover.size, (0.5, 1e-12, "none"))}
    return {"baseline": arm(p.main_size, BASELINE), "paper": arm(p.main_size, PAPER),
            "reference": arm(p.main_size, (0.5, 1e-12, "none"))}


def judge(bins: list[dict[str, Any]]) -> Verdict:
    """Claim 7. ``bins`` from compare (easy → extreme), each with ``delta_sym`` {"mean", "ci95"}. With M the
    mean Δ_sym over the inner bins (moderate … very hard), parts: (a) M − Δ_sym(easy) > 0 and (b)
    M − Δ_sym(extreme) > 0; half-widths from the per-bin bootstrap intervals, sqrt of summed squares."""
    if len(bins) < 3:
        return Verdict(INCONCLUSIVE, notes=["needs at least 3 difficulty bins"])

    def eff(b):
        d = b.get("delta_sym") or {}
        m, ci = d.get("mean"), d.get("ci95")
        hw = (ci[1] - ci[0]) / 2 if ci and all(is_finite(x) for x in ci) else None
        return interval_effect(b.get("name", str(b.get("bin"))), m, hw, "bootstrap 95% over windows")

    effs = [eff(b) for b in bins]
    inner = effs[1:-1]
    hws = [half_width(e) for e in inner]
    if any(e.value is None for e in effs) or any(h is None for h in hws):
        return Verdict(INCONCLUSIVE, notes=["a bin has no tokens or no interval"])
    M = interval_effect("inner bins (mean Δ_sym)", float(np.mean([e.value for e in inner])),
                        math.sqrt(sum(h * h for h in hws)) / len(inner), "bootstrap 95%, combined")
    a = difference("(a) Δ_sym: inner bins − easy", M, effs[0])
    b = difference("(b) Δ_sym: inner bins − extreme", M, effs[-1])
    nums = {"delta_sym_by_bin": {e.label: e.value for e in effs}}
    return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    if ctx.p.crossover is not None:
        run_a, run_b = ctx.crossover_run("paper"), ctx.crossover_run("baseline")
        ref_arm = ctx.roles.get("reference")
        rr = ctx.runs(ref_arm) if ref_arm else []
        cands = [(ctx.crossover_run("baseline", 1), "a second seed of the baseline"),
                 (ctx.crossover_run("gamma-only"), "the γ-only arm (γ 0.5, ε 1e-12, gate; neither A nor B)"),
                 ((rr or [None])[0], f"the {ref_arm.describe() if ref_arm else ''} model (neither A nor B)")]
        where = " (the crossover's largest budget)"
    else:
        paper, base = ctx.roles["paper"], ctx.roles["baseline"]
        ra, rb, rr = ctx.runs(paper), ctx.runs(base), ctx.runs(ctx.roles["reference"])
        run_a, run_b = (ra or [None])[0], (rb or [None])[0]
        cands = [(rb[1] if len(rb) >= 2 else None, "a second seed of the baseline"),
                 ((rr or [None])[0], f"the {ctx.roles['reference'].describe()} model (neither A nor B)")]
        where = ""
    reference, ref_words = next(((r, w) for r, w in cands if r is not None), (None, ""))
    if run_a is None or run_b is None or reference is None:
        return ctx.result("token-level comparison", None, notes=["a run or the reference model did not finish"])
    res = ctx.compare_runs(run_a, run_b, reference=reference)
    if res is None:
        return ctx.result("token-level comparison", None)
    bins = res.get("bins") or []
    v = judge(bins)
    v.notes.append(f"bins by the loss of {ref_words} ({reference.name})")
    plot = plot_delta_by_bin(res, ctx.out / "claim7_bins.png",
                             title="Claim 7: Δ_sym by token difficulty (A = paper setting, B = baseline)")
    table = {"title": f"per difficulty bin of the reference's loss ({res.get('n_tokens')} validation tokens; Δ_sym > 0: "
                      "the paper's setting gives the true token more probability)",
             "columns": ["bin", "difficulty", "tokens", "mean Δ_sym", "95% CI", "mean ℓ_B − ℓ_A"],
             "rows": [[b["name"], f"{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}", b["count"],
                       fmt(b["delta_sym"]["mean"]), fmt_ci_pair(b["delta_sym"]["ci95"]), fmt(b["loss_gain"]["mean"])]
                      for b in bins]}
    tables = [table]
    second = res.get("bins_mean_difficulty") or []
    if second:
        tables.append({"title": "secondary: bins by (ℓ_A + ℓ_B)/2 — " + res.get("bins_mean_difficulty_caveat", ""),
                       "columns": ["bin", "difficulty", "tokens", "mean Δ_sym", "95% CI", "mean ℓ_B − ℓ_A"],
                       "rows": [[b["name"], f"{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}", b["count"],
                                 fmt(b["delta_sym"]["mean"]), fmt_ci_pair(b["delta_sym"]["ci95"]),
                                 fmt(b["loss_gain"]["mean"])] for b in second]})
    measured = ("Δ_sym = (p_A − p_B)/(p_A + p_B) per validation token (A = paper setting, B = baseline), by quantile "
                f"bins of the loss of an independent reference ({ref_words}); bootstrap 95% intervals over windows")
    notes = []
    ov = (res.get("overall") or {}).get("loss_gain") or {}
    if ov.get("ci95") and ov["ci95"][1] < 0:
        notes.append(f"Overall the paper setting is worse here (mean ℓ_B − ℓ_A = {ov['mean']:+.4f}, 95% CI "
                     f"[{ov['ci95'][0]:+.4f}, {ov['ci95'][1]:+.4f}]): the bins show where it loses least, not where "
                     "gains concentrate.")
    return ctx.result(measured + where, v, plots=[plot.name if plot else None], tables=tables, notes=notes,
                      runs=[str(r.relative_to(ctx.out)) for r in (run_a, run_b, reference)])
