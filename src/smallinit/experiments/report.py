"""The reproduction report: ``report.md``, a self-contained ``index.html`` and PNG plots beside them.

The report is built once as a list of blocks (heading, paragraph, table, image) and rendered twice, to
Markdown and to HTML, so both always say the same. Every plot function writes ``OUT/<name>.png`` and
returns the file name (relative, as the report references it), or None when there is nothing to draw.
"""

from __future__ import annotations

import html
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.experiments.sweep import fmt_seconds, read_jsonl, summarize_probe_record

VERDICT_COLORS = {"supported": "#1a7f37", "not supported": "#cf222e", "inconclusive": "#9a6700",
                  "not run in this preset": "#6e7781"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> str:
    from smallinit.io import atomic_write_bytes
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    atomic_write_bytes(Path(out) / name, buf.getvalue())
    return name


# ---- plots ------------------------------------------------------------------------------------------------

def plot_loss_curves(out: Path, name: str, groups: dict[str, list[Path]], title: str = "") -> str | None:
    """Validation loss (solid) and training loss (faint) vs tokens, one colour per group, one line per seed."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, runs) in enumerate(groups.items()):
        color = f"C{i}"
        for j, rd in enumerate(runs):
            m = read_jsonl(Path(rd) / "metrics.jsonl")
            tr = [(r["tokens"], r["loss"]) for r in m if r.get("loss") is not None]
            va = [(r["tokens"], r["val_loss"]) for r in m if r.get("val_loss") is not None]
            if tr:
                ax.plot(*zip(*tr), color=color, alpha=0.25, lw=0.8)
            if va:
                ax.plot(*zip(*va), color=color, marker="o", ms=3, label=label if j == 0 else None)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss (val: markers; train: faint)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_advantage(out: Path, name: str, adv: dict[str, dict[float, Any]], title: str = "") -> str | None:
    """Advantage of γ = 1 (loss(γ=0.5) − loss(γ=1)) vs non-embedding parameters, with and without the fixes."""
    plt = _plt()
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
    ax.set_xscale("log")
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("loss(γ=0.5) − loss(γ=1)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_probe_series(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], key: str, ylabel: str,
                      title: str = "") -> str | None:
    """One summarized probe value (see ``summarize_probe_record``) vs step, one line per run."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    drawn = False
    for i, (label, recs) in enumerate(groups.items()):
        pts = [(r["step"], summarize_probe_record(r).get(key)) for r in recs]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            ax.plot(*zip(*pts), marker=".", label=label, color=f"C{i}")
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_sinks(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], title: str = "") -> str | None:
    """Left: first-token attention share per layer at the end of training; right: its layer mean vs step.
    The dashed line is uniform causal attention."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    drawn, uni = False, None
    width = 0.8 / max(1, len(groups))
    for i, (label, recs) in enumerate(groups.items()):
        if not recs:
            continue
        uni = recs[-1].get("uniform_sink", uni)
        last = [l.get("sink") for l in recs[-1].get("layers") or []]
        xs = np.arange(len(last)) + i * width
        a1.bar(xs, [v if v is not None else 0 for v in last], width=width, label=label, color=f"C{i}")
        pts = [(r["step"], summarize_probe_record(r).get("sink")) for r in recs]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            a2.plot(*zip(*pts), marker=".", label=label, color=f"C{i}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax in (a1, a2):
        if uni:
            ax.axhline(uni, ls="--", color="gray", lw=1, label="uniform attention")
        ax.grid(alpha=0.3)
    a1.set_xlabel("layer")
    a1.set_ylabel("attention on position 0 (final)")
    a2.set_xlabel("step")
    a2.set_ylabel("mean over layers")
    a1.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, out, name)


def plot_gamma(out: Path, name: str, losses: dict[float, list[float]], title: str = "") -> str | None:
    plt = _plt()
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
    ax.set_xlabel("γ (σ = d_in^−γ)" + (" — dotted: diverged/failed" if bad else ""))
    ax.set_ylabel("final val loss")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_srank(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], title: str = "") -> str | None:
    """Stable rank divided by its value at step 0, averaged over block matrices (thick) and per matrix type
    (thin), vs step."""
    from smallinit.probes.training import matrix_kind

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, recs) in enumerate(groups.items()):
        if not recs:
            continue
        first = {k: v.get("srank") for k, v in (recs[0].get("matrices") or {}).items() if k.startswith("blocks.")}
        steps, mean, kinds = [], [], {}
        for r in recs:
            rel = {k: v["srank"] / first[k] for k, v in (r.get("matrices") or {}).items()
                   if k in first and first[k] and v.get("srank") is not None}
            if not rel:
                continue
            steps.append(r["step"])
            mean.append(float(np.mean(list(rel.values()))))
            for k, v in rel.items():
                kinds.setdefault(matrix_kind(k), {}).setdefault(r["step"], []).append(v)
        if not steps:
            continue
        ax.plot(steps, mean, color=f"C{i}", lw=2.2, label=f"{label} (mean)")
        for kind, by_step in kinds.items():
            ss = sorted(by_step)
            ax.plot(ss, [np.mean(by_step[s]) for s in ss], color=f"C{i}", lw=0.7, alpha=0.45)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("step")
    ax.set_ylabel("stable rank / stable rank at init")
    ax.set_title(title + "\n(thin lines: one matrix type each)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_heatmaps(out: Path, name: str, groups: dict[str, list[Path]], max_cols: int = 5) -> str | None:
    """Row-cosine heatmaps of the first saved matrix at log-spaced steps, one row of panels per run
    (rows ordered by their projection on the leading singular vector, so aligned rows form blocks)."""
    from smallinit.probes.training import read_heatmaps

    plt = _plt()
    maps = {}
    for label, runs in groups.items():
        if runs:
            h = read_heatmaps(runs[0])
            if h:
                maps[label] = h
    if not maps:
        return None
    matrix = sorted(next(iter(next(iter(maps.values())).values())).keys())[0]
    steps_all = sorted(set.intersection(*[set(h) for h in maps.values()]))
    if not steps_all:
        return None
    pick = sorted({steps_all[int(round(i))] for i in np.linspace(0, len(steps_all) - 1, min(max_cols, len(steps_all)))})
    fig, axes = plt.subplots(len(maps), len(pick), figsize=(2.2 * len(pick), 2.3 * len(maps)), squeeze=False)
    im = None
    for r, (label, h) in enumerate(maps.items()):
        for c, s in enumerate(pick):
            ax = axes[r][c]
            d = h[s].get(matrix)
            ax.set_xticks([])
            ax.set_yticks([])
            if d is None:
                continue
            o = d["order"]
            cos = d["cos"].astype(np.float32)[np.ix_(o, o)]
            im = ax.imshow(cos, vmin=-1, vmax=1, cmap="RdBu_r", interpolation="nearest")
            if r == 0:
                ax.set_title(f"step {s}", fontsize=8)
            if c == 0:
                ax.set_ylabel(label, fontsize=9)
    fig.suptitle(f"row cosine similarity of {matrix}", fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.7)
    return _save(fig, out, name)


def plot_bins(out: Path, name: str, bins: list[dict[str, Any]], title: str = "") -> str | None:
    plt = _plt()
    rows = [b for b in bins if (b.get("delta_sym") or {}).get("mean") is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.8))
    means = [b["delta_sym"]["mean"] for b in rows]
    lo = [b["delta_sym"]["mean"] - b["delta_sym"]["ci95"][0] for b in rows]
    hi = [b["delta_sym"]["ci95"][1] - b["delta_sym"]["mean"] for b in rows]
    ax.bar([b["name"] for b in rows], means, yerr=[lo, hi], capsize=4,
           color=["C2" if m > 0 else "C3" for m in means])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("mean Δ_sym (> 0: variant better)")
    ax.set_xlabel("token difficulty (quantile bins of mean loss)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, out, name)


def plot_scaling(out: Path, name: str, base: list[tuple[float, float]], variant: list[tuple], fit: dict | None,
                 title: str = "") -> str | None:
    plt = _plt()
    if not base:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*sorted(base)), "o", color="C0", label="baseline")
    if variant:
        ax.plot([v[0] for v in variant], [v[1] for v in variant], "s", color="C1", label="paper setting")
    if fit and fit.get("A") is not None:
        ns = np.geomspace(min(n for n, _ in base) / 2, max(n for n, _ in base) * 4, 100)
        ax.plot(ns, fit["E"] + fit["A"] * ns ** (-fit["alpha"]), color="C0", lw=1,
                label=f"fit E={fit['E']:.3g}, α={fit['alpha']:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("non-embedding parameters N")
    ax.set_ylabel("final val loss")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_anchor_curves(out: Path, name: str, groups: dict[str, list[dict[str, Any]]]) -> str | None:
    plt = _plt()
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
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Claim 9: anchor task accuracy (held-out pairs (3,4), (4,3))", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


def plot_anchor_answers(out: Path, name: str, groups: dict[str, list[dict[str, Any]]]) -> str | None:
    from smallinit.experiments.anchor import ANSWER_KINDS

    plt = _plt()
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
    return _save(fig, out, name)


def plot_lr_sweep(out: Path, name: str, lr_tables: dict[str, dict[str, Any]]) -> str | None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for i, (key, t) in enumerate(lr_tables.items()):
        if key.startswith("anchor"):
            continue
        pts = [(r["lr"], r["tune_loss"] if r["tune_loss"] is not None else r["val_loss"]) for r in t["rows"]]
        pts = [(a, b) for a, b in pts if b is not None and math.isfinite(b)]
        if len(pts) < 2:
            continue
        ax.plot(*zip(*pts), marker="o", lw=1, label=key, color=f"C{i % 10}", ls="-" if i < 10 else "--")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final tune_loss")
    ax.set_title("learning-rate sweep (each arm keeps its minimum)", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    return _save(fig, out, name)


# ---- blocks → markdown / html ---------------------------------------------------------------------------

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


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1050px;margin:2em auto;padding:0 1em;
color:#1f2328;line-height:1.45}
h1{border-bottom:1px solid #d0d7de;padding-bottom:.3em}h2{margin-top:2em;border-bottom:1px solid #eaeef2}
table{border-collapse:collapse;margin:.8em 0;font-size:.88em}th,td{border:1px solid #d0d7de;padding:.3em .6em;
text-align:left}th{background:#f6f8fa}tr:nth-child(even) td{background:#fbfcfd}
.verdict{display:inline-block;padding:.15em .6em;border-radius:1em;color:#fff;font-weight:600;font-size:.9em}
img{max-width:100%;border:1px solid #eaeef2;margin:.5em 0}pre{background:#f6f8fa;padding:.8em;overflow-x:auto;
font-size:.8em}figure{margin:.6em 0}figcaption{font-size:.85em;color:#57606a}
"""


def _badge(v: str) -> str:
    return f'<span class="verdict" style="background:{VERDICT_COLORS.get(v, "#6e7781")}">{html.escape(v)}</span>'


def render_html(blocks: list[tuple], title: str) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{CSS}</style></head><body>"]
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
                    cells.append(f"<td>{_badge(s) if s in VERDICT_COLORS else e(s)}</td>")
                out.append("<tr>" + "".join(cells) + "</tr>")
            out.append("</table>")
        elif kind == "img":
            out.append(f'<figure><img src="{e(b[1])}" alt="{e(b[2])}"><figcaption>{e(b[2])}</figcaption></figure>')
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{e(str(x))}</li>" for x in b[1]) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _effect_rows(effects: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for ef in effects:
        v, lo, hi = ef.get("value"), ef.get("lo"), ef.get("hi")
        iv = (f"[{lo:+.4g}, {hi:+.4g}]" if lo is not None and hi is not None else "—")
        verdict = "(not part of the verdict)" if ef["label"].startswith("(info)") else ef["verdict"]
        rows.append([ef["label"], f"{v:+.4g}" if v is not None else "—", iv, ef.get("noise", ""), verdict])
    return rows


def build_blocks(*, preset, claims: list[dict[str, Any]], lr_tables: dict[str, dict[str, Any]],
                 regime: list[dict[str, Any]], corpus: dict[str, Any], timings: dict[str, float], plan_text: str,
                 lr_plot: str | None) -> list[tuple]:
    from smallinit.experiments.claims import RULE
    from smallinit.experiments.reproduce import PAPER_REGIME

    B: list[tuple] = [("h1", f"smallinit reproduction — preset {preset.name}")]
    B.append(("p", f"Small Initialization Matters for Large Language Models (Hang et al., 2026): every claim tested at "
                   f"the scale of this preset ({preset.description}; budget {preset.budget}). Generated "
                   f"{time.strftime('%Y-%m-%d %H:%M')} on corpus {corpus.get('path')} "
                   f"({corpus.get('train_tokens', 0):,} train / {corpus.get('val_tokens', 0):,} val tokens, "
                   f"vocabulary {corpus.get('vocab_size')})."))
    B.append(("h2", "Claims", "claims"))
    rows = []
    for c in claims:
        ef = deciding_effect(c)
        main = ""
        if ef and ef.get("value") is not None:
            iv = f" [{ef['lo']:+.3g}, {ef['hi']:+.3g}]" if ef.get("lo") is not None and ef.get("hi") is not None else ""
            main = f"{ef['label']}: {ef['value']:+.4g}{iv}"
        rows.append([c["id"], c["claim"], c["verdict"], main])
    B.append(("table", ["#", "claim", "verdict", "deciding effect [interval]"], rows))
    B.append(("p", f"Verdict rule (computed, never hand-written): {RULE} Multi-part claims need every part; "
                   "see smallinit/experiments/claims.py."))
    for c in claims:
        B.append(("h2", f"Claim {c['id']}: {c['claim']}", f"claim{c['id']}"))
        B.append(("verdict", c["verdict"]))
        if c["verdict"] == "not run in this preset":
            B.append(("p", f"Not run in the {preset.name} preset; the cpu preset (smallinit reproduce --preset cpu) runs "
                           "every claim."))
            continue
        if c.get("measured"):
            B.append(("p", "Measured: " + c["measured"] + "."))
        if c.get("effects"):
            B.append(("table", ["effect (> 0 = as the paper says)", "value", "interval", "noise estimate", "verdict"],
                      _effect_rows(c["effects"])))
        for t in c.get("tables") or []:
            B.append(("h3", t["title"]))
            B.append(("table", t["columns"], t["rows"]))
        for p in c.get("plots") or []:
            B.append(("img", p, f"claim {c['id']}: {p}"))
        if c.get("notes"):
            B.append(("list", c["notes"]))
        if c.get("runs"):
            B.append(("p", "Runs: " + ", ".join(c["runs"])))
    B.append(("h2", "Learning rates", "lr"))
    if len(preset.lrs) > 1:
        B.append(("p", "Every arm was trained at each learning rate below and keeps the one with the lowest tune_loss "
                       "(validation batches disjoint from those behind the reported val_loss); the anchor task selects "
                       "on its in-distribution tune set, never on the held-out pairs."))
    else:
        B.append(("p", f"This preset uses one learning rate ({preset.lrs[0]:g}) for every arm — not tuned per arm; "
                       "the cpu and gpu presets sweep it."))
    if lr_plot:
        B.append(("img", lr_plot, "learning-rate sweep"))
    lr_rows = []
    for key, t in lr_tables.items():
        for r in t["rows"]:
            lr_rows.append([t["arm"], f"{r['lr']:g}", _num(r.get("tune_loss")), _num(r.get("val_loss", r.get("heldout_acc"))),
                            r["state"], "✓" if r.get("chosen") else ""])
    B.append(("table", ["arm", "lr", "tune_loss", "val_loss / held-out acc", "state", "chosen"], lr_rows))
    B.append(("h2", "Regime: these runs beside the paper's", "regime"))
    B.append(("p", f"The paper trains {PAPER_REGIME['params']} parameters on {PAPER_REGIME['tokens']} tokens "
                   f"({PAPER_REGIME['tokens_per_param']} tokens per parameter). The runs here are far smaller and "
                   "far shorter; a claim that is not supported here may still hold at the paper's scale."))
    B.append(("table", ["run", "d_model", "layers", "params", "non-emb params", "tokens", "tokens/param", "wall time"],
              [[r["run"], r["d_model"], r["n_layers"], _m(r["params"]), _m(r["non_embedding_params"]), _m(r["tokens"]),
                _num(r["tokens_per_param"], 3), fmt_seconds(r.get("wall_time"))] for r in regime]
              + [["paper", "—", "—", PAPER_REGIME["params"], "—", PAPER_REGIME["tokens"], PAPER_REGIME["tokens_per_param"],
                  "—"]]))
    B.append(("h2", "Time", "time"))
    B.append(("p", "Wall-clock times of the latest invocation (a resumed reproduction skips finished runs), of all "
                   "invocations together, and the sum of the reported LM runs' own training times (runs may overlap "
                   "when several run at a time)."))
    B.append(("table", ["stage", "wall time"], [[k, fmt_seconds(v)] for k, v in timings.items()]))
    B.append(("h2", "Plan", "plan"))
    B.append(("pre", plan_text))
    return B


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


def write_report(out: str | Path, *, preset, claims: list[dict[str, Any]], lr_tables: dict[str, dict[str, Any]],
                 regime: list[dict[str, Any]], corpus: dict[str, Any], timings: dict[str, float], plan_text: str) -> None:
    """Write OUT/report.md and OUT/index.html (images are the PNGs the claims reference, plus the LR sweep)."""
    from smallinit.io import atomic_write_text

    out = Path(out)
    lr_plot = plot_lr_sweep(out, "lr_sweep.png", lr_tables) if len(preset.lrs) > 1 else None
    blocks = build_blocks(preset=preset, claims=claims, lr_tables=lr_tables, regime=regime, corpus=corpus,
                          timings=timings, plan_text=plan_text, lr_plot=lr_plot)
    atomic_write_text(out / "report.md", render_md(blocks))
    atomic_write_text(out / "index.html", render_html(blocks, f"smallinit reproduction — {preset.name}"))


__all__ = ["build_blocks", "plot_advantage", "plot_anchor_answers", "plot_anchor_curves", "plot_bins", "plot_gamma",
           "plot_heatmaps", "plot_loss_curves", "plot_lr_sweep", "plot_probe_series", "plot_scaling", "plot_sinks",
           "plot_srank", "render_html", "render_md", "write_report"]
