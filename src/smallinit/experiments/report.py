"""The reproduction report: ``report.md`` and a self-contained ``index.html``, rendered from what the claims
returned (their results as in ``claims.json``: verdict, effects, tables, plot file names, notes, runs) and the
run-level tables (learning-rate selection, regime, timings, plan).

The report is built once as a list of blocks — ("h1"|"h2"|"h3", text[, anchor]), ("p", text), ("verdict", v),
("pre", text), ("table", columns, rows), ("img", file, caption), ("list", items) — and rendered twice, to
Markdown (:func:`render_md`) and to HTML (:func:`render_html`, through :func:`smallinit.core.figures.html_page`), so
both always say the same. Nothing here computes a number or draws a figure.
"""

from __future__ import annotations

import html
import math
import time
from pathlib import Path
from typing import Any

from smallinit.core.figures import html_page
from smallinit.core.io import atomic_write_text
from smallinit.experiments.claims.rules import RULE
from smallinit.experiments.cost import fmt_seconds
from smallinit.experiments.presets import PAPER_REGIME

VERDICT_COLORS = {
    "supported": "#1a7f37",
    "not supported": "#cf222e",
    "inconclusive": "#9a6700",
    "inconclusive — not reached at this budget": "#9a6700",
    "smaller than the claimed effect": "#0969da",
    "not run in this preset": "#6e7781",
}


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def render_md(blocks: list[tuple]) -> str:
    out = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            out.append(f"# {b[1]}\n")
        elif kind == "h2":
            out.append(f"## {b[1]}\n")
        elif kind == "h3":
            out.append(f"### {b[1]}\n")
        elif kind == "p":
            out.append(f"{b[1]}\n")
        elif kind == "verdict":
            out.append(f"**Verdict: {b[1]}**\n")
        elif kind == "pre":
            out.append("```\n" + b[1] + "\n```\n")
        elif kind == "table":
            cols, rows = b[1], b[2]
            out.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
            out.append("|" + "|".join("---" for _ in cols) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
            out.append("")
        elif kind == "img":
            out.append(f"![{b[2]}]({b[1]})\n")
        elif kind == "list":
            out += [f"- {x}" for x in b[1]]
            out.append("")
    return "\n".join(out) + "\n"


def _badge(v: str, part: bool = False) -> str:
    """A verdict as a filled badge (a claim's verdict) or, for one part's result in a table, an outlined one in the
    same colour, so that no part reads as the claim's verdict."""
    c = VERDICT_COLORS.get(v, "#6e7781")
    if part:
        return f'<span class="part" style="border-color:{c};color:{c}">part: {html.escape(v)}</span>'
    return f'<span class="verdict" style="background:{c}">{html.escape(v)}</span>'


def render_html(blocks: list[tuple], title: str) -> str:
    e = html.escape
    out = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            anchor = f' id="{b[2]}"' if len(b) > 2 else ""
            out.append(f"<{kind}{anchor}>{e(b[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{e(b[1])}</p>")
        elif kind == "verdict":
            out.append(f"<p>Verdict: {_badge(b[1])}</p>")
        elif kind == "pre":
            out.append(f"<pre>{e(b[1])}</pre>")
        elif kind == "table":
            cols, rows = b[1], b[2]
            out.append("<table><tr>" + "".join(f"<th>{e(str(c))}</th>" for c in cols) + "</tr>")
            for r in rows:
                cells = []
                for c in r:
                    s = str(c)
                    cells.append(f"<td>{_badge(s, part=True) if s in VERDICT_COLORS else e(s)}</td>")
                out.append("<tr>" + "".join(cells) + "</tr>")
            out.append("</table>")
        elif kind == "img":
            out.append(f'<figure><img src="{e(b[1])}" alt="{e(b[2])}"><figcaption>{e(b[2])}</figcaption></figure>')
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{e(str(x))}</li>" for x in b[1]) + "</ul>")
    return html_page(title, out)


def _effect_rows(effects: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for ef in effects:
        v, lo, hi = ef.get("value"), ef.get("lo"), ef.get("hi")
        iv = f"[{lo:+.4g}, {hi:+.4g}]" if lo is not None and hi is not None else "—"
        verdict = "(not part of the verdict)" if ef["label"].startswith("(info)") else ef["verdict"]
        rows.append([ef["label"], f"{v:+.4g}" if v is not None else "—", iv, ef.get("noise", ""), verdict])
    return rows


def build_blocks(
    *,
    preset,
    claims: list[dict[str, Any]],
    lr_tables: dict[str, dict[str, Any]],
    regime: list[dict[str, Any]],
    corpus: dict[str, Any],
    timings: dict[str, float],
    plan_text: str,
    lr_plot: str | None,
) -> list[tuple]:
    """The report's blocks, section by section: title and corpus, the claims table, each claim, learning rates,
    the regime beside the paper's, the wall-clock times and the plan."""
    B: list[tuple] = [("h1", f"smallinit reproduction — preset {preset.name}")]
    B += _intro_blocks(preset, corpus)
    B += _summary_blocks(claims)
    for c in claims:
        B += _claim_blocks(c, preset)
    B += _lr_blocks(preset, lr_tables, lr_plot)
    B += _regime_blocks(regime)
    B += _time_blocks(timings)
    B.append(("h2", "Plan", "plan"))
    B.append(("pre", plan_text))
    return B


def _intro_blocks(preset, corpus: dict[str, Any]) -> list[tuple]:
    """The paragraph under the title: the paper, the preset's scale, when, and on which corpus."""
    return [
        (
            "p",
            f"Small Initialization Matters for Large Language Models (Hang et al., 2026): every claim tested at "
            f"the scale of this preset ({preset.description}; budget {preset.budget}). Generated "
            f"{time.strftime('%Y-%m-%d %H:%M')} on corpus {corpus.get('path')} "
            f"({corpus.get('train_tokens', 0):,} train / {corpus.get('val_tokens', 0):,} val tokens, "
            f"vocabulary {corpus.get('vocab_size')}).",
        )
    ]


def _summary_blocks(claims: list[dict[str, Any]]) -> list[tuple]:
    """The "Claims" section: one row per claim (verdict and deciding effect) and the verdict rule."""
    rows = []
    for c in claims:
        ef = deciding_effect(c)
        main = ""
        if ef and ef.get("value") is not None:
            iv = f" [{ef['lo']:+.3g}, {ef['hi']:+.3g}]" if ef.get("lo") is not None and ef.get("hi") is not None else ""
            main = f"{ef['label']}: {ef['value']:+.4g}{iv}"
        rows.append([c["id"], c["claim"], c["verdict"], main])
    return [
        ("h2", "Claims", "claims"),
        ("table", ["#", "claim", "verdict", "deciding effect [interval]"], rows),
        (
            "p",
            f"Verdict rule (computed, never hand-written): {RULE} Multi-part claims need every part; "
            "each claim's rule is judge() in its module under smallinit/experiments/claims/.",
        ),
    ]


def _claim_blocks(c: dict[str, Any], preset) -> list[tuple]:
    """One claim's section: verdict, what was measured, its effects, tables, plots, notes and runs."""
    B: list[tuple] = [("h2", f"Claim {c['id']}: {c['claim']}", f"claim{c['id']}"), ("verdict", c["verdict"])]
    if c["verdict"] == "not run in this preset":
        B.append(
            (
                "p",
                f"Not run in the {preset.name} preset; the cpu preset (smallinit reproduce --preset cpu) runs "
                "every claim.",
            )
        )
        return B
    if c.get("measured"):
        B.append(("p", "Measured: " + c["measured"] + "."))
    if c.get("effects"):
        B.append(
            (
                "table",
                ["effect (> 0 = as the paper says)", "value", "interval", "noise estimate", "verdict"],
                _effect_rows(c["effects"]),
            )
        )
    for t in c.get("tables") or []:
        B.append(("h3", t["title"]))
        B.append(("table", t["columns"], t["rows"]))
    for p in c.get("plots") or []:
        B.append(("img", p, f"claim {c['id']}: {p}"))
    if c.get("notes"):
        B.append(("list", c["notes"]))
    if c.get("runs"):
        B.append(("p", "Runs: " + ", ".join(c["runs"])))
    return B


def _lr_blocks(preset, lr_tables: dict[str, dict[str, Any]], lr_plot: str | None) -> list[tuple]:
    """The "Learning rates" section: how rates were chosen, the sweep's figure and every arm's tried rates."""
    B: list[tuple] = [("h2", "Learning rates", "lr"), ("p", _lr_words(preset))]
    if lr_plot:
        B.append(("img", lr_plot, "learning-rate sweep"))
    lr_rows = []
    for key, t in lr_tables.items():
        for r in t["rows"]:
            lr_rows.append(
                [
                    t["arm"],
                    f"{r['lr']:g}",
                    _num(r.get("tune_loss")),
                    _num(r.get("val_loss", r.get("heldout_acc"))),
                    r["state"],
                    "✓" if r.get("chosen") else "",
                ]
            )
    B.append(("table", ["arm", "lr", "tune_loss", "val_loss / held-out acc", "state", "chosen"], lr_rows))
    return B


def _lr_words(preset) -> str:
    """How the preset sets learning rates: a sweep with selection on tune_loss, or one fixed rate."""
    if len(preset.lrs) > 1:
        return (
            "Every arm was trained at each learning rate below and keeps the one with the lowest tune_loss "
            "(validation batches disjoint from those behind the reported val_loss); the anchor task selects "
            "on its in-distribution tune set, never on the held-out pairs."
        )
    if len(preset.anchor_lrs) > 1:
        anchor = (
            "; the anchor task's arms each keep the best of "
            + ", ".join(f"{x:g}" for x in preset.anchor_lrs)
            + " on their in-distribution tune set"
        )
    elif preset.anchor_lrs and preset.anchor_lrs[0] != preset.lrs[0]:
        anchor = f"; the anchor task's arms all train at {preset.anchor_lrs[0]:g}"
    else:
        anchor = "; the anchor task's arms train at the same rate"
    return (
        f"This preset uses one learning rate ({preset.lrs[0]:g}) for every language-model arm, not "
        f"tuned per arm (the cpu and gpu presets sweep it){anchor}."
    )


def _regime_blocks(regime: list[dict[str, Any]]) -> list[tuple]:
    """The "Regime" section: each run's size and tokens per parameter, the paper's last."""
    rows = [
        [
            r["run"],
            r["d_model"],
            r["n_layers"],
            _m(r["params"]),
            _m(r["non_embedding_params"]),
            _m(r["tokens"]),
            _num(r["tokens_per_param"], 3),
            fmt_seconds(r.get("wall_time")),
        ]
        for r in regime
    ]
    paper = [
        "paper",
        "—",
        "—",
        PAPER_REGIME["params"],
        "—",
        PAPER_REGIME["tokens"],
        PAPER_REGIME["tokens_per_param"],
        "—",
    ]
    cols = ["run", "d_model", "layers", "params", "non-emb params", "tokens", "tokens/param (all params)", "wall time"]
    return [
        ("h2", "Regime: these runs beside the paper's", "regime"),
        (
            "p",
            f"The paper trains {PAPER_REGIME['params']} parameters on {PAPER_REGIME['tokens']} tokens "
            f"({PAPER_REGIME['tokens_per_param']} tokens per parameter). The runs here are far smaller and "
            "far shorter; a claim that is not supported here may still hold at the paper's scale.",
        ),
        ("table", cols, [*rows, paper]),
    ]


def _time_blocks(timings: dict[str, float]) -> list[tuple]:
    """The "Time" section: wall-clock time per stage."""
    return [
        ("h2", "Time", "time"),
        (
            "p",
            "Wall-clock times of the latest invocation (a resumed reproduction skips finished runs), of all "
            "invocations together, and the sum of the reported LM runs' own training times (runs may overlap "
            "when several run at a time).",
        ),
        ("table", ["stage", "wall time"], [[k, fmt_seconds(v)] for k, v in timings.items()]),
    ]


def deciding_effect(claim: dict[str, Any]) -> dict[str, Any] | None:
    """The effect that decides a claim's verdict: the first part with the claim's own verdict (e.g. the reversed
    part of a claim that is not supported), else the first part."""
    effects = [e for e in claim.get("effects") or [] if not e["label"].startswith("(info)")]
    for e in effects:
        if e.get("verdict") == claim.get("verdict"):
            return e
    return effects[0] if effects else None


def _num(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _m(x: Any) -> str:
    if not x:
        return "—"
    return f"{x / 1e6:.2f}M"


def write_report(
    out: str | Path,
    *,
    preset,
    claims: list[dict[str, Any]],
    lr_tables: dict[str, dict[str, Any]],
    regime: list[dict[str, Any]],
    corpus: dict[str, Any],
    timings: dict[str, float],
    plan_text: str,
    lr_plot: str | None = None,
) -> None:
    """Write OUT/report.md and OUT/index.html from the same blocks (images: the PNGs the claims reference and
    ``lr_plot``, all already in OUT)."""
    out = Path(out)
    blocks = build_blocks(
        preset=preset,
        claims=claims,
        lr_tables=lr_tables,
        regime=regime,
        corpus=corpus,
        timings=timings,
        plan_text=plan_text,
        lr_plot=lr_plot,
    )
    atomic_write_text(out / "report.md", render_md(blocks))
    atomic_write_text(out / "index.html", render_html(blocks, f"smallinit reproduction — {preset.name}"))


__all__ = ["VERDICT_COLORS", "build_blocks", "deciding_effect", "render_html", "render_md", "write_report"]
