"""Claim 1: the paper's setting (γ = 1, ε = 1e-12, elementwise gate) gives lower validation loss than the standard
baseline (γ = 0.5, ε = 1e-5, no gate), at the preset's main size.

Rule (:func:`judge`): effect = mean(baseline loss) − mean(paper loss) over seeds; interval = effect ± max(seed
spread, paired-bootstrap 95% half-width of the token-level loss gain of the seed-0 runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.loss_claims import analyse_crossover, analyse_final_loss, judge_lower_loss
from smallinit.experiments.presets import BASELINE, PAPER, Arm, Preset, arm

ID = 1
CLAIM = "γ = 1 with ε = 1e-12 and the gate gives lower validation loss than the standard γ = 0.5, ε = 1e-5, no gate."


def arms(p: Preset) -> dict[str, Arm]:
    if p.crossover is not None:
        return {}  # the crossover (OUT/crossover/) trains this claim's runs
    return {"baseline": arm(p.main_size, BASELINE), "paper": arm(p.main_size, PAPER)}


judge = judge_lower_loss
"""Claim 1's rule: the paper setting's final val loss is lower than the baseline's (shared with claim 10:
:func:`~smallinit.experiments.claims.loss_claims.judge_lower_loss`)."""


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    """From the preset's claim-1 crossover when it has one, else from the final losses of the short runs."""
    if ctx.p.crossover is not None:
        return analyse_crossover(ctx)
    return analyse_final_loss(ctx)


# ---- claim 1 across widths, in tokens per parameter (issue 34, 5c) ---------------------------------------------

MATCH_TOLERANCE = 0.02
"""Two budgets of different widths are "the same tokens per parameter" when their ratio is within 2%."""
PAPER_SIZES = (1e8, 3e8, 7e8, 1.5e9)
"""Non-embedding parameter counts at which the per-width crossing is restated as a token count (a prediction)."""


def _override(spec: dict[str, Any], key: str) -> str | None:
    found = [o.split("=", 1)[1] for o in spec.get("overrides", []) if o.split("=", 1)[0] == key]
    return found[-1] if found else None


def width_row(x: dict[str, Any], variant: str = "paper") -> dict[str, Any]:
    """One crossover's claim-1 answer in tokens per non-embedding parameter N: G(D) at D/N with its t-interval, the
    verdict at the declared budget, and the gap fit's crossing as D*/N = (a/c)^(1/b) / N with its interval, or
    its status when the fit cannot say ("cannot tell", "never crosses", …)."""
    spec, a = x["spec"], x["analyses"][variant]
    n = float(x["non_embedding_params"])
    d, layers = _override(spec, "model.d_model"), _override(spec, "model.n_layers")
    gf = a.get("gap_fit") or {}
    per_n = (
        None
        if not gf.get("D_star")
        else {
            "value": gf["D_star"] / n,
            "lo": gf["D_lo"] / n if gf.get("D_lo") else None,
            "hi": gf["D_hi"] / n if gf.get("D_hi") else None,
        }
    )
    return {
        "label": f"d {d} × {layers}" if d and layers else spec.get("base", "?"),
        "d_model": int(d) if d else None,
        "n_layers": int(layers) if layers else None,
        "non_embedding_params": n,
        "seeds": len(a["seeds"]),
        "declared": a.get("declared_tokens_per_param"),
        "judged": a.get("judged", len(x["budgets"]) - 1),
        "tokens_per_param": list(x["tokens_per_param"]),
        "gap": a["gap"],
        "gap_change": a["gap_change"],
        "verdict": a["verdict"],
        "reason": a["reason"],
        "gap_fit_status": gf.get("status", "no fit"),
        "c": gf.get("c"),
        "c_lo": gf.get("c_lo"),
        "c_hi": gf.get("c_hi"),
        "crossing_per_param": per_n,
        "data": _override(spec, "data.path"),
        "arms": spec["arms"],
    }


def matched_gaps(
    rows: Sequence[dict[str, Any]],
    x_by_label: dict[str, dict[str, Any]],
    variant: str = "paper",
    tol: float = MATCH_TOLERANCE,
) -> list[dict[str, Any]]:
    """For each pair of widths and each pair of budgets at the same tokens per parameter (ratio within ``tol``):
    G_i − G_j with a Welch 95% interval over the two widths' per-seed gaps (different models: unpaired). An
    interval holding 0 at every matched budget means the gap is, within seed noise, a function of D/N alone."""
    from smallinit.core.stats import welch_t_interval

    out = []
    for i, ri in enumerate(rows):
        for rj in rows[i + 1 :]:
            for bi, ti in enumerate(ri["tokens_per_param"]):
                for bj, tj in enumerate(rj["tokens_per_param"]):
                    if abs(ti / tj - 1) > tol:
                        continue
                    gi, gj = (_seed_gaps(x_by_label[r["label"]], b, variant) for r, b in ((ri, bi), (rj, bj)))
                    diff = welch_t_interval(gi, gj)
                    out.append(
                        {
                            "tokens_per_param": (ti + tj) / 2,
                            "a": ri["label"],
                            "b": rj["label"],
                            "G_a": sum(gi) / len(gi),
                            "G_b": sum(gj) / len(gj),
                            "diff": diff.to_dict(),
                        }
                    )
    return out


def _seed_gaps(x: dict[str, Any], j: int, variant: str) -> list[float]:
    base, var = x["losses"][x["spec"]["baseline"]], x["losses"][variant]
    return [
        base[s][j] - var[s][j] for s in sorted(set(base) & set(var)) if base[s][j] is not None and var[s][j] is not None
    ]


def across_widths(results: Sequence[dict[str, Any]], variant: str = "paper") -> dict[str, Any]:
    """Claim 1 at several widths (crossover results on the same data and arms): per width the verdict at its
    declared budget and D*/N or "cannot tell"; the gaps compared at equal tokens per parameter
    (:func:`matched_gaps`); and, only where a width's gap fit predicts a crossing, D* = (D*/N)·N restated for the
    paper's sizes (:data:`PAPER_SIZES`) — a prediction from small models, never a result."""
    if not results:
        raise ValueError("no crossover results")
    pairs = sorted(((width_row(x, variant), x) for x in results), key=lambda p: p[0]["non_embedding_params"])
    rows = [r for r, _ in pairs]
    first = rows[0]
    for r in rows[1:]:
        if r["data"] != first["data"]:
            raise ValueError(
                f"{r['label']} was trained on other data than {first['label']} "
                f"({r['data']} vs {first['data']}): its gaps are not comparable"
            )
        if r["arms"] != first["arms"]:
            keys = sorted(k for k in set(r["arms"]) | set(first["arms"]) if r["arms"].get(k) != first["arms"].get(k))
            raise ValueError(
                f"{r['label']} has other arms than {first['label']} (arm {', '.join(map(repr, keys))}: "
                f"{[r['arms'].get(k) for k in keys]} vs {[first['arms'].get(k) for k in keys]}): its gaps are not "
                "comparable"
            )
    labels = [r["label"] for r in rows]
    if len(set(labels)) < len(labels):
        raise ValueError(
            f"two results have the same width ({', '.join(labels)}): analyse their losses together "
            "with smallinit.analysis.crossing.analyse_crossover instead"
        )
    matched = matched_gaps(rows, {r["label"]: x for r, x in pairs}, variant)
    differ = [m for m in matched if m["diff"]["lo"] is not None and (m["diff"]["lo"] > 0 or m["diff"]["hi"] < 0)]
    if not matched:
        scaling = "no two widths share a budget in tokens per parameter: nothing to compare"
    elif not differ:
        scaling = (
            f"at all {len(matched)} matched budgets the gaps of different widths agree within seed noise "
            "(Welch 95% intervals of the difference hold 0): within what these runs resolve, the gap is a "
            "function of tokens per parameter"
        )
    else:
        scaling = (
            f"at {len(differ)} of {len(matched)} matched budgets the gaps of different widths differ beyond "
            "seed noise: tokens per parameter alone does not carry the gap"
        )
    predictions = []
    for r in rows:
        c = r["crossing_per_param"]
        if c is not None:
            predictions.append(
                {
                    "label": r["label"],
                    "per_param": c,
                    "tokens": {
                        f"{n:.3g}": {k: (v * n if v is not None else None) for k, v in c.items()} for n in PAPER_SIZES
                    },
                }
            )
    return {"variant": variant, "widths": rows, "matched": matched, "scaling": scaling, "predictions": predictions}


def widths_markdown(res: dict[str, Any], figure: str | None = None) -> str:
    """The across-widths report: per width the verdict and D*/N, the gap table by tokens per parameter, the
    matched-budget comparison, and the restatement at the paper's sizes (only where a crossing is predicted)."""
    from smallinit.experiments.crossover_report import fmt_num

    f = lambda v, spec="+.4f": fmt_num(v, spec)  # noqa: E731
    lines = [
        "# Claim 1 across widths: the gap by tokens per non-embedding parameter",
        "",
        "G = L(baseline) − L(paper) (> 0: the paper's setting ahead), seed-paired 95% t-intervals; each width "
        "is judged at its own declared budget by the rule of DESIGN.md §2.",
        "",
        "| width | N (non-emb.) | seeds | declared (tokens/param) | G there | 95% interval | verdict | "
        "gap fit | D*/N |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["widths"]:
        g = r["gap"][r["judged"]]
        c = r["crossing_per_param"]
        cross = (
            ("cannot tell" if r["gap_fit_status"] == "cannot tell" else r["gap_fit_status"])
            if c is None
            else (f"{c['value']:.3g} [{f(c['lo'], '.3g')}, {f(c['hi'], '.3g') if c['hi'] else '∞'}]")
        )
        lines.append(
            f"| {r['label']} | {r['non_embedding_params']:,.0f} | {r['seeds']} | {f(r['declared'], 'g')} | "
            f"{f(g['value'])} | [{f(g['lo'])}, {f(g['hi'])}] | {r['verdict']} | "
            f"c = {f(r['c'])} [{f(r['c_lo'])}, {f(r['c_hi'])}] | {cross} |"
        )
    lines += [
        "",
        "## G by tokens per parameter",
        "",
        "| width | " + " | ".join(["tokens/param: G [95%]"]) + " |",
        "|---|---|",
    ]
    for r in res["widths"]:
        cells = [
            f"{t:.3g}: {f(g['value'])} [{f(g['lo'])}, {f(g['hi'])}]" for t, g in zip(r["tokens_per_param"], r["gap"])
        ]
        lines.append(f"| {r['label']} | " + "; ".join(cells) + " |")
    if figure:
        lines += ["", f"![G by tokens per parameter]({figure})"]
    lines += ["", "## Equal tokens per parameter, different widths", "", res["scaling"] + ".", ""]
    if res["matched"]:
        lines += ["| tokens/param | widths | G | G | difference [Welch 95%] |", "|---|---|---|---|---|"]
        for m in res["matched"]:
            d = m["diff"]
            lines.append(
                f"| {m['tokens_per_param']:.3g} | {m['a']} vs {m['b']} | {m['G_a']:+.4f} | {m['G_b']:+.4f} | "
                f"{f(d['value'])} [{f(d['lo'])}, {f(d['hi'])}] |"
            )
    lines += ["", "## What this implies at the paper's sizes (a prediction, not a result)", ""]
    if not res["predictions"]:
        lines.append(
            "No width's gap fit predicts a crossing (the asymptote's interval holds 0 or lies below it), so "
            "these runs give no crossing budget to carry to 0.1B–1.5B parameters; what they do say is the "
            "sign and size of the gap at the tokens per parameter measured above, which a model of any size "
            "would reach at D = (tokens/param)·N if the gap depends on D/N alone."
        )
    for p in res["predictions"]:
        c = p["per_param"]
        cells = ", ".join(
            f"{n} params: {f(v['value'], '.3g')} tokens [{f(v['lo'], '.3g')}, {f(v['hi'], '.3g') if v['hi'] else '∞'}]"
            for n, v in p["tokens"].items()
        )
        lines.append(
            f"- from {p['label']} (D*/N = {c['value']:.3g}): {cells} — valid only if the crossing is a "
            "property of tokens per parameter (see the comparison above) and the data, tokenizer and "
            "schedule transfer."
        )
    return "\n".join(lines) + "\n"


def plot_gap_by_tokens_per_param(res: dict[str, Any], path: Any) -> Any:
    """G against tokens per parameter (log x), one line per width with its 95% t-interval bars; the declared budget
    of each width marked; G = 0 dashed."""
    from smallinit.core.figures import color, finish_axes, pyplot, save_png

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, r in enumerate(res["widths"]):
        t = r["tokens_per_param"]
        g = [x["value"] for x in r["gap"]]
        lo = [x["value"] - x["lo"] if x["lo"] is not None else 0 for x in r["gap"]]
        hi = [x["hi"] - x["value"] if x["hi"] is not None else 0 for x in r["gap"]]
        ax.errorbar(
            t,
            g,
            yerr=[lo, hi],
            marker="o",
            ms=4,
            capsize=3,
            color=color(i),
            label=f"{r['label']} (N = {r['non_embedding_params'] / 1e3:,.0f}k, {r['seeds']} seeds)",
        )
        j = r["judged"]
        ax.plot([t[j]], [g[j]], marker="s", ms=9, mfc="none", color=color(i))
    ax.axhline(0, color="k", lw=0.8, ls="--")
    finish_axes(
        ax,
        "tokens per non-embedding parameter (D/N)",
        "G = L(baseline) − L(paper)  [nats]",
        "Claim 1 by width: the gap at equal tokens per parameter (□ = declared budget)",
        xscale="log",
    )
    out = save_png(fig, path)
    plt.close(fig)
    return out
