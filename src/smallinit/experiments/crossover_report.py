"""Rendering of a crossover result (``crossover.json``): the L(D) / G(D) figure and the Markdown report."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from smallinit.core.figures import color, pyplot, save_png


def _fit_curve(fit: dict[str, Any] | None, D):
    import numpy as np

    if not fit:
        return None
    return fit["E"] + fit["A"] * np.power(np.asarray(D, dtype=float), -fit["alpha"])


def crossover_figure(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Left: L(D) per arm (each seed a dot, the seed mean a line, the fit L = E + B·D^(−β) dashed, log D).
    Right: G(D) = L_baseline − L_arm per arm with seed-paired 95% t-intervals, the gap fit c − a·D^(−b) (dashed)
    and the declared budget (dotted)."""
    import numpy as np

    plt = pyplot()
    D = np.array([b["tokens"] for b in result["budgets"]], dtype=float)
    grid = np.geomspace(D[0], D[-1] * 4, 200)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    base = result["spec"]["baseline"]
    fits = {k: v for a in result["analyses"].values() for k, v in a["fits"].items() if v}
    for i, (arm, per_seed) in enumerate(result["losses"].items()):
        rows = np.array([[np.nan if v is None else v for v in vals] for vals in per_seed.values()], dtype=float)
        if not np.isfinite(rows).any():
            continue  # no finished budget in this arm yet
        for r in rows:
            ax1.plot(D, r, "o", ms=3, color=color(i), alpha=0.5)
        ax1.plot(D, np.nanmean(rows, axis=0), "-", color=color(i), label=arm)
        y = _fit_curve(fits.get(arm), grid)
        if y is not None:
            ax1.plot(grid, y, "--", color=color(i), lw=0.8)
    ax1.set_xscale("log")
    ax1.set_xlim(D[0] / 1.5, D[-1] * 4)  # also when no budget has finished yet
    ax1.set_xlabel("training tokens D")
    ax1.set_ylabel("annealed validation loss L(D)")
    ax1.set_title("L(D): dots = seeds, dashed = E + B·D^(−β)", fontsize=9)
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=8)
    for i, (arm, a) in enumerate(result["analyses"].items(), start=1):
        g = [x["value"] for x in a["gap"]]
        lo = [x["lo"] if x["lo"] is not None else x["value"] for x in a["gap"]]
        hi = [x["hi"] if x["hi"] is not None else x["value"] for x in a["gap"]]
        ok = [v is not None for v in g]
        if not any(ok):
            continue
        d = D[ok]
        gv = np.array([v for v in g if v is not None])
        err = np.array([[v - l for v, l, k in zip(g, lo, ok) if k], [h - v for v, h, k in zip(g, hi, ok) if k]])
        ax2.errorbar(
            d,
            gv,
            yerr=err,
            fmt="o-",
            color=color(list(result["losses"]).index(arm)),
            capsize=3,
            label=f"{base} − {arm}",
        )
        gf = a.get("gap_fit") or {}
        if gf.get("c") is not None:
            ax2.plot(
                grid, gf["c"] - gf["a"] * grid ** -gf["b"], "--", color=color(list(result["losses"]).index(arm)), lw=0.8
            )
        if a.get("declared_tokens"):
            ax2.axvline(a["declared_tokens"], color="0.5", lw=0.8, ls=":")
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_xscale("log")
    ax2.set_xlim(D[0] / 1.5, D[-1] * 4)
    ax2.set_xlabel("training tokens D")
    ax2.set_ylabel(f"G(D) = L_{base} − L_arm  (> 0: arm ahead)")
    n_seeds = min((len(a["seeds"]) for a in result["analyses"].values()), default=0)
    ax2.set_title(
        "G(D) ± seed-paired 95% t; dashed = c − a·D^(−b); dotted = declared"
        if n_seeds >= 2
        else "G(D) (one seed: no interval); dashed = c − a·D^(−b)",
        fontsize=9,
    )
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    return save_png(fig, path)


def fmt_num(x: float | None, spec: str = ".4f") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def lr_words(result: dict[str, Any]) -> str:
    """How the arms' learning rates were set: tuned per arm (chosen rates, edge winners named) or one fixed rate."""
    tuning = result.get("tuning") or {}
    if tuning:
        spec = result["spec"]
        edge = [a for a, t in tuning.items() if t.get("at_edge")]
        seed = spec.get("tune_seed")
        who = (
            f"seed {seed}, reported by no run; judged on tune batches disjoint from the validation batches"
            if seed is not None
            else f"seed {spec['seeds'][0]}, a reported seed; judged on the validation batches"
        )
        how = (
            "at the judged budget D (each rate a whole trunk with its cooldown branches)"
            if spec.get("tune_fraction", 0) >= 1
            else f"on {spec['tune_fraction']:g}·D WSD runs"
        )
        rule = (
            " (the grid rate nearest the vertex of a quadratic in log η)"
            if any("vertex" in t for t in tuning.values())
            else " (the arg-min)"
        )
        return (
            f"learning rate tuned per arm {how} ({who}), the same grid for every arm: "
            + ", ".join(f"{a} {fmt_num(t['chosen'], '.3g')}" for a, t in tuning.items())
            + rule
            + (f" — still at the grid's edge for {', '.join(edge)}" if edge else "")
        )
    arm = next(iter(result["spec"]["arms"].values()))
    lr = next((o.split("=", 1)[1] for o in reversed(arm) if o.startswith("optim.lr=")), None)
    return f"learning rate {lr or 'of the base config'} for every arm (not tuned per arm)"


def tuning_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the tuning runs' final tune losses: one row per arm, one column per rate tried."""
    tuning = result.get("tuning") or {}
    rates = sorted({float(r) for t in tuning.values() for r in t["losses"]})
    cols = ["arm", *[f"lr {r:.3g}" for r in rates], "arg-min", "fit vertex", "chosen"]
    rows = [
        [
            arm,
            *[fmt_num(t["losses"].get(f"{r:.3g}")) if f"{r:.3g}" in t["losses"] else "" for r in rates],
            fmt_num(t.get("argmin", t["chosen"]), ".3g"),
            fmt_num(t.get("vertex"), ".3g"),
            fmt_num(t["chosen"], ".3g"),
        ]
        for arm, t in tuning.items()
    ]
    return cols, rows


def crossover_markdown(result: dict[str, Any], figure: str | None = None) -> str:
    """The report: one-line answers first, then L(D) per arm, G(D) per arm with intervals, the fits and verdicts."""
    lines = _overview_lines(result)
    if result.get("tuning"):
        lines += _tuning_lines(result)
    if figure:
        lines += [f"![L(D) and G(D)]({figure})", ""]
    lines += _loss_table_lines(result)
    for arm, a in result["analyses"].items():
        lines += _gap_section_lines(result, arm, a)
    return "\n".join(lines) + "\n"


def _overview_lines(result: dict[str, Any]) -> list[str]:
    """The answers and verdicts, the arms with their overrides, how a budget's loss is made, the learning rates."""
    spec = result["spec"]
    base = spec["baseline"]
    lines = ["# Crossover: loss against training budget", ""]
    if result.get("rejudged"):
        r = result["rejudged"]
        lines += [
            f"**Re-judged after the runs** at {r['enough']:g} tokens/param"
            + (f", δ = {r['effect']:.4f} nats" if r.get("effect") else "")
            + " by `smallinit crossover-rejudge` (declared before the runs: "
            + (f"{r['declared_enough']:g} tokens/param" if r.get("declared_enough") else "no budget")
            + (f", δ = {r['declared_effect']:.4f}" if r.get("declared_effect") else "")
            + f"). {r.get('note') or ''}".rstrip(),
            "",
        ]
    for arm, a in result["analyses"].items():
        lines.append(f"- **{arm} vs {base}**: {a['answer']}. Verdict: **{a['verdict']}** — {a['reason']}.")
    lines += [
        "",
        f"Arms ({len(spec['seeds'])} seed(s): {', '.join(map(str, spec['seeds']))}; base `{spec['base']}` "
        f"with `{' '.join(spec['overrides']) or '—'}`):",
        "",
    ]
    for arm, ov in spec["arms"].items():
        lines.append(f"- `{arm}`{' (baseline)' if arm == base else ''}: `{' '.join(ov) or '—'}`")
    lines += [
        "",
        f"Each budget's loss is the final validation loss of a cooldown branch (the last "
        f"{spec['cooldown']:g}·D_k of steps decaying linearly to 0) from the arm's constant-rate trunk; "
        f"tokens per parameter use {result['non_embedding_params']:,} non-embedding parameters.",
        "",
    ]
    return lines + [f"The {lr_words(result)}.", ""]


def _tuning_lines(result: dict[str, Any]) -> list[str]:
    """The table of the tuning runs (:func:`tuning_rows`) under its heading, then (tuned at D) each arm's
    loss-vs-rate profile at every budget."""
    cols, rows = tuning_rows(result)
    at = next((t["judged_tokens"] for t in (result.get("tuning") or {}).values() if t.get("judged_tokens")), None)
    lines = [
        "## Learning rate per arm (final tune_loss of each tuning run"
        + (f", at the judged budget D = {at:,})" if at else ")"),
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
    ]
    for arm, t in (result.get("tuning") or {}).items():
        if t.get("fit"):
            a, b, c = t["fit"]
            over = ", ".join(f"{r:.3g}" for r in t["fit_rates"])
            lines.append(
                f"- {arm}: ℓ(x) = {a:.4g}·x² {b:+.4g}·x {c:+.4g}, x = ln η, over {over}"
                + (f"; vertex η* = {t['vertex']:.3g}" if t.get("vertex") else "; not convex")
            )
    profiles = {a: t["profile"] for a, t in (result.get("tuning") or {}).items() if t.get("profile")}
    if profiles:
        tpp = dict(zip((str(b["tokens"]) for b in result["budgets"]), result["tokens_per_param"]))
        lines += ["", "Rate profile: tune_loss at every budget (best per row in bold).", ""]
        for arm, prof in profiles.items():
            rates = sorted({float(r) for row in prof.values() for r in row})
            lines += [
                f"| {arm}: D (tokens/param) | " + " | ".join(f"lr {r:.3g}" for r in rates) + " |",
                "|---|" + "---|" * len(rates),
            ]
            for d, row in prof.items():
                ok = {r: v for r, v in row.items() if v is not None}
                best = min(ok, key=ok.get) if ok else None
                cells = [
                    (f"**{fmt_num(row.get(f'{r:.3g}'))}**" if f"{r:.3g}" == best else fmt_num(row.get(f"{r:.3g}")))
                    for r in rates
                ]
                lines.append(f"| {int(d):,} ({fmt_num(tpp.get(d), '.3g')}) | " + " | ".join(cells) + " |")
            lines.append("")
    return lines


def tuning_figure(result: dict[str, Any], path: str | os.PathLike) -> Path | None:
    """Each arm's tune_loss against the peak rate, one line per budget (tuned at D; the rate sensitivity of each
    init); None without a profile."""
    profiles = {a: t["profile"] for a, t in (result.get("tuning") or {}).items() if t.get("profile")}
    if not profiles:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(profiles), figsize=(5.2 * len(profiles), 4), squeeze=False)
    tpp = dict(zip((str(b["tokens"]) for b in result["budgets"]), result["tokens_per_param"]))
    for ax, (arm, prof) in zip(axes[0], profiles.items()):
        for i, (d, row) in enumerate(prof.items()):
            pts = sorted((float(r), v) for r, v in row.items() if v is not None)
            if pts:
                ax.plot(*zip(*pts), "o-", color=color(i), ms=3, label=f"{fmt_num(tpp.get(d), '.3g')} tok/param")
        chosen = (result["tuning"][arm] or {}).get("chosen")
        if chosen:
            ax.axvline(chosen, color="0.5", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate η")
        ax.set_ylabel("tune_loss")
        ax.set_title(f"{arm}: loss vs rate at each budget (dotted: chosen)", fontsize=9)
        ax.legend(fontsize=7)
    return save_png(fig, path)


def _loss_table_lines(result: dict[str, Any]) -> list[str]:
    """L(D): one row per budget, one column per arm (the seed mean, each seed in brackets)."""
    D = [b["tokens"] for b in result["budgets"]]
    tpp = result["tokens_per_param"]
    arms = list(result["losses"])
    lines = [
        "## L(D): annealed validation loss (seed mean; seeds in brackets)",
        "",
        "| D (tokens) | tokens/param | " + " | ".join(arms) + " |",
        "|---|---|" + "---|" * len(arms),
    ]
    for j, d in enumerate(D):
        cells = []
        for arm in arms:
            vals = [v[j] for v in result["losses"][arm].values()]
            ok = [v for v in vals if v is not None]
            mean = sum(ok) / len(ok) if ok else None
            cells.append(f"{fmt_num(mean)} [{', '.join(fmt_num(v) for v in vals)}]" if len(vals) > 1 else fmt_num(mean))
        lines.append(f"| {d:,} | {tpp[j]:.3g} | " + " | ".join(cells) + " |")
    return lines


def _gap_section_lines(result: dict[str, Any], arm: str, a: dict[str, Any]) -> list[str]:
    """One arm's section: G(D) per budget, the declared budget, the change of the gap, the gap fit, the per-arm
    fits, the crossing and the notes."""
    base = result["spec"]["baseline"]
    D = [b["tokens"] for b in result["budgets"]]
    lines = [
        "",
        f"## G(D) = L({base}) − L({arm})  (> 0: {arm} ahead)",
        "",
        "| D (tokens) | G (nats) | 95% interval | interval |",
        "|---|---|---|---|",
    ]
    for d, g in zip(D, a["gap"]):
        lines.append(
            f"| {d:,} | {fmt_num(g['value'], '+.4f')} | [{fmt_num(g['lo'], '+.4f')}, {fmt_num(g['hi'], '+.4f')}] | "
            f"{g['method']} |"
        )
    lines += _judged_lines(D, a, rejudged=bool(result.get("rejudged")))
    if a.get("gap_fit"):
        lines += ["", _gap_fit_line(a["gap_fit"])]
    lines += _fit_table_lines(a, (base, arm))
    lines += ["", _crossing_line(a["crossing"])]
    for n in a.get("notes") or []:
        lines.append(f"- note: {n}")
    return lines


def _judged_lines(D: list[int], a: dict[str, Any], rejudged: bool = False) -> list[str]:
    """Where the verdict is read (the declared budget, when there is one) and the change of the gap up to it."""
    ch, j = a["gap_change"], a.get("judged", len(D) - 1)
    lines = []
    if a.get("declared_tokens"):
        lines += [
            "",
            f"Declared budget: {a['declared_tokens_per_param']:g} tokens/param = "
            f"{a['declared_tokens']:,.0f} tokens; judged at D = {D[j]:,}"
            + ("" if a.get("reached", True) else " (the largest budget: the declared one was not reached)")
            + ".",
        ]
    if a.get("effect") is not None:
        up, pw, need = a.get("upper_one_sided"), a.get("power"), a.get("seeds_for_power")
        lines += [
            "",
            f"Claimed effect δ = {a['effect']:.4f} nats "
            f"({'given when re-judging' if rejudged else 'declared with the budget'}); one-sided 95% upper bound of G "
            f"{fmt_num(up, '+.4f')}; "
            + (
                f"power of these {a.get('complete_pairs', len(a['seeds']))} seed pairs to find a true δ at the "
                f"measured spread: {pw * 100:.0f}%"
                if pw is not None
                else "no power figure (a spread needs ≥ 2 complete seed pairs)"
            )
            + (f"; {need} seeds give 80%" if need else "")
            + ".",
        ]
    if a.get("missing"):
        lines += ["", f"Seeds lost at the judged budget: {'; '.join(a['missing'])}."]
    ref = a.get("gap_change_from")
    return lines + [
        "",
        (
            f"Change of the gap from {ref:,.0f} to {D[j]:,} tokens ({D[j] / ref:.2f}×): "
            f"{fmt_num(ch['value'], '+.4f')} [{fmt_num(ch['lo'], '+.4f')}, {fmt_num(ch['hi'], '+.4f')}] nats "
            "(> 0 with the "
            "interval above 0: closing)."
            if ref
            else "Change of the gap over 4× of budget: not measured (no budget at a true 4× below)."
        ),
    ]


def _gap_fit_line(gf: dict[str, Any]) -> str:
    """The gap fit G(D) = c − a·D^(−b): its status, c with its interval, b, the residual, and D* when given."""
    return (
        f"Gap fit G(D) = c − a·D^(−b) ({gf['method']}): **{gf['status']}**"
        + (
            f"; c = {gf['c']:+.4f} [{gf['c_lo']:+.4f}, {gf['c_hi']:+.4f}], b = {gf['b']:.3g}, "
            f"rms residual {gf['rms']:.4f}"
            if gf.get("c") is not None
            else ""
        )
        + (
            f"; D* ≈ {gf['D_star']:.3g} tokens [{fmt_num(gf['D_lo'], '.3g')}, "
            f"{fmt_num(gf['D_hi'], '.3g') if gf['D_hi'] else '∞'}]"
            if gf.get("D_star")
            else ""
        )
        + "."
    )


def _fit_table_lines(a: dict[str, Any], names: tuple[str, str]) -> list[str]:
    """The secondary table of the per-arm fits L(D) = E + B·D^(−β) (the baseline's, then the arm's)."""
    lines = [
        "",
        "Secondary (decides nothing): per-arm fits and where they meet.",
        "",
        "| fit L(D) = E + B·D^(−β) | E | β | R² | residuals |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        fit = a["fits"].get(name)
        if fit:
            lines.append(
                f"| {name} | {fit['E']:.4f} | {fit['alpha']:.3f} | {fmt_num(fit.get('r2'), '.4f')} | "
                f"{', '.join(f'{r:+.4f}' for r in fit['residuals'])} |"
            )
        else:
            lines.append(f"| {name} | — | — | — | no fit |")
    return lines


def _crossing_line(c: dict[str, Any]) -> str:
    """Where the per-arm fits cross: status, D* with its bootstrap interval and share, and its caveats."""
    share = c.get("crossing_share")
    return (
        f"Crossing: {c['status']}"
        + (f", D* ≈ {c['D_star']:.3g} tokens" if c["D_star"] else "")
        + (
            f" [{fmt_num(c['lo'], '.3g')}, {fmt_num(c['hi'], '.3g') if c['hi'] else '∞'}]"
            if c["status"] == "crosses"
            else ""
        )
        + (f"; {share:.0%} of bootstrap draws cross below {c['horizon']:.3g} tokens" if share is not None else "")
        + (" — **extrapolated**" if c["extrapolated"] else "")
        + (f" — **not a prediction**: {c['degenerate']}" if c.get("degenerate") else "")
    )
