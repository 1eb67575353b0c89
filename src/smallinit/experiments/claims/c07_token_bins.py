"""Claim 7: token-level gains of the paper's setting over the baseline concentrate in the moderate-to-very-hard
difficulty bins. Arms: claim 1's (main size) and, for presets that cannot give a symmetric reference, a
**reference** model from neither family (the γ = 0.5, ε = 1e-12, no-gate arm of the same size).

Measured with :func:`smallinit.analysis.compare.compare_models` for **every seed s** that both arms finished (paired by
seed number): Δ_sym = (p_A − p_B)/(p_A + p_B) per validation token of A = paper seed s vs B = baseline seed s, intervals
by a **bootstrap over windows**, **primary bins by a reference symmetric in A and B** (DESIGN.md §2, "Token bins by an
independent reference"): the mean per-token loss of *another seed of each arm*, ℓ_ref = (ℓ_{A,s'} + ℓ_{B,s'})/2 with
s' the next seed (cyclically). Why symmetric: binning by a second seed of the *baseline* alone shares the baseline's
per-token errors (its family), so on null data — two equal families — the bins correlate with ℓ_B − ℓ_A and a trend
appears (−0.04 … +0.02; tested); the mean of one seed of each family correlates with neither side. With fewer than
two seeds per arm the reference is a model from neither family (the γ-only arm of a crossover, or the reference
arm). The (ℓ_A + ℓ_B)/2 bins stay in the report as a secondary table with their caveat.

Rule (:func:`judge`): with M the mean Δ_sym over the inner bins (moderate … very hard), parts (a) M − Δ_sym(easy) > 0
and (b) M − Δ_sym(extreme) > 0. One seed pair: half-widths from the per-bin bootstrap intervals (sqrt of summed
squares). k ≥ 2 seed pairs: each part per pair, then a 95% t-interval over the k pairs (k − 1 degrees of freedom),
never narrower than the pairs' combined bootstrap half-width sqrt(Σ h_k²)/k. A loss claim: from runs below the
declared budget (``Preset.enough``) it reads *inconclusive — not reached at this budget*, never *not supported* —
a model still behind overall shows where it loses least, not where its gains concentrate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.figures import plot_delta_by_bin
from smallinit.experiments.claims.context import ClaimContext, fmt, fmt_ci, fmt_ci_pair
from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    Effect,
    Verdict,
    at_budget,
    combine,
    difference,
    half_width,
    interval_effect,
    is_finite,
)
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 7
CLAIM = "Token-level gains concentrate in the moderate-to-very-hard difficulty bins."


def arms(p: Preset) -> dict[str, Arm]:
    if p.crossover is not None:  # scores the crossover's largest-budget runs (claim 1's); a reference if needed
        if p.crossover.seeds >= 2 or "gamma-only" in p.crossover.arms:
            return {}
        return {"reference": arm(p.crossover.size, (0.5, 1e-12, "none"))}
    return {
        "baseline": arm(p.main_size, BASELINE),
        "paper": arm(p.main_size, PAPER),
        "reference": arm(p.main_size, (0.5, 1e-12, "none")),
    }


def parts(bins: list[dict[str, Any]]) -> tuple[Effect, Effect] | None:
    """(a) M − Δ_sym(easy) and (b) M − Δ_sym(extreme) of one comparison's bins (easy → extreme), half-widths from
    the per-bin bootstrap intervals; None when a bin has no value or no interval."""

    def eff(b):
        d = b.get("delta_sym") or {}
        m, ci = d.get("mean"), d.get("ci95")
        hw = (ci[1] - ci[0]) / 2 if ci and all(is_finite(x) for x in ci) else None
        return interval_effect(b.get("name", str(b.get("bin"))), m, hw, "bootstrap 95% over windows")

    effs = [eff(b) for b in bins]
    inner = effs[1:-1]
    hws = [half_width(e) for e in inner]
    if any(e.value is None for e in effs) or any(h is None for h in hws):
        return None
    M = interval_effect(
        "inner bins (mean Δ_sym)",
        float(np.mean([e.value for e in inner])),
        math.sqrt(sum(h * h for h in hws)) / len(inner),
        "bootstrap 95%, combined",
    )
    return (
        difference("(a) Δ_sym: inner bins − easy", M, effs[0]),
        difference("(b) Δ_sym: inner bins − extreme", M, effs[-1]),
    )


def judge(
    bins: list[dict[str, Any]] | Sequence[list[dict[str, Any]]],
    tokens_per_param: float | None = None,
    enough: float | None = None,
) -> Verdict:
    """Claim 7. ``bins`` from compare (easy → extreme), each with ``delta_sym`` {"mean", "ci95"} — one comparison,
    or a list of them, one per seed pair (paired by seed). Parts and noise as in the module docstring. A loss claim
    (its gains are per-token loss differences): compared runs below the declared budget ``enough`` (tokens per
    non-embedding parameter) read *inconclusive — not reached* (:func:`~.rules.at_budget`)."""
    return at_budget(_judge_bins(bins), tokens_per_param, enough, "the compared runs")


def _judge_bins(bins: list[dict[str, Any]] | Sequence[list[dict[str, Any]]]) -> Verdict:
    from smallinit.core.stats import t_quantile

    sets = [bins] if bins and isinstance(bins[0], dict) else [list(b) for b in bins]
    if not sets or any(len(b) < 3 for b in sets):
        return Verdict(INCONCLUSIVE, notes=["needs at least 3 difficulty bins"])
    per = [parts(b) for b in sets]
    if any(x is None for x in per):
        return Verdict(INCONCLUSIVE, notes=["a bin has no tokens or no interval"])
    nums: dict[str, Any] = {
        "delta_sym_by_bin": {b.get("name", str(b.get("bin"))): b["delta_sym"]["mean"] for b in sets[0]},
        "seed_pairs": len(sets),
    }
    if len(sets) == 1:
        a, b = per[0]
        return Verdict(combine([a.verdict, b.verdict]), [a, b], nums)
    k = len(sets)
    nums["delta_sym_by_bin_mean"] = {
        b.get("name", str(b.get("bin"))): float(np.mean([s[i]["delta_sym"]["mean"] for s in sets]))
        for i, b in enumerate(sets[0])
    }
    out = []
    for j in (0, 1):
        vals = np.array([p[j].value for p in per])
        boot = math.sqrt(sum(half_width(p[j]) ** 2 for p in per)) / k
        t_half = t_quantile(k - 1) * float(vals.std(ddof=1)) / math.sqrt(k)
        half = max(t_half, boot)
        note = f"95% t-interval over {k} seed pairs (±{t_half:.3g})" + (
            f", widened to the combined bootstrap ±{boot:.3g}" if boot > t_half else ""
        )
        out.append(interval_effect(per[0][j].label, float(vals.mean()), half, note))
    return Verdict(combine([e.verdict for e in out]), out, nums)


def references(
    runs_a: dict[int, Path], runs_b: dict[int, Path], fallback: tuple[Path | None, str]
) -> list[tuple[int, Path, Path, list[Path], str]]:
    """The comparisons of claim 7: (seed s, A_s, B_s, reference runs, words) for every seed both arms finished.
    With ≥ 2 such seeds the reference of seed s is (A_{s'}, B_{s'}), s' the next common seed (cyclically): symmetric
    in A and B. With one, ``fallback`` = (a model from neither family, its words), or nothing when that is None."""
    common = sorted(set(runs_a) & set(runs_b))
    if len(common) >= 2:
        return [
            (
                s,
                runs_a[s],
                runs_b[s],
                [runs_a[n], runs_b[n]],
                f"the mean per-token loss of seed {n} of each arm (symmetric in A and B)",
            )
            for s, n in zip(common, common[1:] + common[:1])
        ]
    ref, words = fallback
    if not common or ref is None:
        return []
    s = common[0]
    return [(s, runs_a[s], runs_b[s], [ref], words)]


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    runs_a, runs_b, fallback, where = _arm_runs(ctx)
    comps = references(runs_a, runs_b, fallback)
    if not comps:
        return ctx.result("token-level comparison", None, notes=["a run or the reference model did not finish"])
    results = []
    for s, ra, rb, refs, words in comps:
        res = ctx.compare_runs(ra, rb, reference=refs)
        if res is None:
            return ctx.result("token-level comparison", None, notes=[f"the comparison of seed {s} failed"])
        results.append((s, res, refs, words))
    v = judge([r.get("bins") or [] for _, r, _, _ in results], _tokens_per_param(ctx), ctx.p.enough)
    for s, _, refs, words in results:
        v.notes.append(f"seed {s}: bins by {words} ({', '.join(_run_name(r) for r in refs)})")
    s0, res, refs0, ref_words = results[0]
    plot = plot_delta_by_bin(
        res,
        ctx.out / "claim7_bins.png",
        title=f"Claim 7: Δ_sym by token difficulty (A = paper setting, B = baseline; seed {s0})",
    )
    measured = (
        "Δ_sym = (p_A − p_B)/(p_A + p_B) per validation token (A = paper setting, B = baseline, the same seed), "
        f"by quantile bins of the loss of an independent reference ({ref_words}); bootstrap 95% intervals over "
        f"windows; {len(results)} seed pair(s)"
        + (", the parts' intervals a t-interval over the pairs" if len(results) > 1 else "")
    )
    notes = []
    ov = (res.get("overall") or {}).get("loss_gain") or {}
    if ov.get("ci95") and ov["ci95"][1] < 0:
        notes.append(
            f"Overall the paper setting is worse here (mean ℓ_B − ℓ_A = {ov['mean']:+.4f}, 95% CI "
            f"[{ov['ci95'][0]:+.4f}, {ov['ci95'][1]:+.4f}]): the bins show where it loses least, not where "
            "gains concentrate."
        )
    runs = []
    for _, ra, rb, refs, _ in comps:
        runs += [str(r.relative_to(ctx.out)) for r in (ra, rb, *refs) if str(r.relative_to(ctx.out)) not in runs]
    tables = _tables(res, results)
    return ctx.result(measured + where, v, plots=[plot.name if plot else None], tables=tables, notes=notes, runs=runs)


def _arm_runs(ctx: ClaimContext) -> tuple[dict[int, Path], dict[int, Path], tuple[Path | None, str], str]:
    """(paper runs by seed, baseline runs by seed, the fallback reference with its words, where they come from):
    the crossover's largest-budget runs when the preset has a crossover, else the claim's own arms."""
    ref_arm = ctx.roles.get("reference")
    rr = ctx.runs_by_seed(ref_arm) if ref_arm else {}
    neither = (rr.get(0), f"the {ref_arm.describe()} model (neither A nor B)") if ref_arm else (None, "")
    if ctx.p.crossover is None:
        return ctx.runs_by_seed(ctx.roles["paper"]), ctx.runs_by_seed(ctx.roles["baseline"]), neither, ""
    seeds = range(ctx.p.crossover.seeds)
    runs_a = {s: rd for s in seeds if (rd := ctx.crossover_run("paper", s)) is not None}
    runs_b = {s: rd for s in seeds if (rd := ctx.crossover_run("baseline", s)) is not None}
    g = ctx.crossover_run("gamma-only")
    fallback = (g, "the γ-only arm (γ 0.5, ε 1e-12, gate; a model from neither family)") if g else neither
    return runs_a, runs_b, fallback, " (the crossover's largest budget)"


def _tokens_per_param(ctx: ClaimContext) -> float | None:
    """Tokens per non-embedding parameter of the compared runs: the crossover's largest budget, else the arms'."""
    if ctx.p.crossover is None:
        return ctx.budget(ctx.roles["paper"], ctx.roles["baseline"])
    return ctx.largest_budget_tokens_per_param(ctx.crossover())


def _run_name(r: Path) -> str:
    """A reference run's name in the notes: a crossover branch by its arm, seed and budget, else its folder."""
    return "/".join(r.parts[-3:]) if r.parent.parent.parent.name == "runs" else r.name


_BIN_COLUMNS = ("bin", "difficulty", "tokens", "mean Δ_sym", "95% CI", "mean ℓ_B − ℓ_A")


def _bin_rows(bins: list[dict[str, Any]]) -> list[list[Any]]:
    """One table row per difficulty bin (columns :data:`_BIN_COLUMNS`)."""
    return [
        [
            b["name"],
            f"{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}",
            b["count"],
            fmt(b["delta_sym"]["mean"]),
            fmt_ci_pair(b["delta_sym"]["ci95"]),
            fmt(b["loss_gain"]["mean"]),
        ]
        for b in bins
    ]


def _tables(res: dict[str, Any], results: list[tuple]) -> list[dict[str, Any]]:
    """The bins of the first seed pair by the reference, the secondary (ℓ_A + ℓ_B)/2 bins when present, and the
    parts per seed pair when there are several."""
    tables = [
        {
            "title": f"per difficulty bin of the reference's loss ({res.get('n_tokens')} validation tokens; Δ_sym > 0: "
            "the paper's setting gives the true token more probability)",
            "columns": list(_BIN_COLUMNS),
            "rows": _bin_rows(res.get("bins") or []),
        }
    ]
    second = res.get("bins_mean_difficulty") or []
    if second:
        tables.append(
            {
                "title": "secondary: bins by (ℓ_A + ℓ_B)/2 — " + res.get("bins_mean_difficulty_caveat", ""),
                "columns": list(_BIN_COLUMNS),
                "rows": _bin_rows(second),
            }
        )
    if len(results) > 1:
        tables.append(
            {
                "title": "the parts per seed pair (A = paper seed s, B = baseline seed s)",
                "columns": ["seed", "reference", "(a) inner − easy", "(b) inner − extreme"],
                "rows": [
                    [s, w, *(fmt_ci(e) if e else "—" for e in (parts(r.get("bins") or []) or (None, None)))]
                    for s, r, _, w in results
                ],
            }
        )
    return tables
