"""The contexts where A gains most and loses most against B (``top_contexts``) and their markdown
(``contexts_markdown``, written as contexts.md by ``smallinit compare``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from smallinit.analysis.compare.bins import delta_sym_from_logp
from smallinit.analysis.compare.scoring import TokenScores


def _decode(tokenizer: Any, ids: np.ndarray) -> str:
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def top_contexts(
    scores: TokenScores, val_tokens: np.ndarray, tokenizer: Any, k: int = 10, context: int = 24, bos_text: str = ""
) -> dict[str, list[dict]]:
    """The positions where A gains most over B and where it loses most, with decoded contexts.

    Ranked by ℓ_B − ℓ_A = log p_A − log p_B (Δ_sym = tanh of half of it, so the order is the same).
    A position is kept only if it lies more than ``context`` tokens from every position already
    kept on the same side, so one repeated passage does not fill the list. Each entry gives the
    last ``context`` tokens of what the models saw (never crossing the start of the scoring window;
    ``bos_text`` marks a window start under BOS), the true next token, p_A, p_B, ℓ_A, ℓ_B, Δ_sym,
    source and position.

    Returns {"gains": [...], "losses": [...]}, each at most ``k`` entries, best first.
    """
    diff = scores.logp_a - scores.logp_b  # ℓ_B − ℓ_A
    dsym = delta_sym_from_logp(scores.logp_a, scores.logp_b)
    bos = bool(scores.info.get("bos", False))

    def entry(i: int) -> dict:
        pos = int(scores.positions[i])
        ws = int(scores.window_starts[i])
        lo = max(ws, pos - int(context))
        ctx = _decode(tokenizer, np.asarray(val_tokens[lo:pos]))
        if bos and lo == ws:
            ctx = bos_text + ctx
        return {
            "position": pos,
            "source": str(scores.sources[i]),
            "context": ctx,
            "target": _decode(tokenizer, np.asarray(val_tokens[pos : pos + 1])),
            "p_a": float(np.exp(scores.logp_a[i])),
            "p_b": float(np.exp(scores.logp_b[i])),
            "loss_a": float(-scores.logp_a[i]),
            "loss_b": float(-scores.logp_b[i]),
            "loss_gain": float(diff[i]),
            "delta_sym": float(dsym[i]),
        }

    def pick(order: np.ndarray) -> list[dict]:
        kept: list[int] = []
        for i in order:
            p = scores.positions[i]
            if all(abs(int(p) - int(scores.positions[j])) > context for j in kept):
                kept.append(int(i))
                if len(kept) >= k:
                    break
        return [entry(i) for i in kept]

    order = np.argsort(-diff, kind="stable")
    return {"gains": pick(order), "losses": pick(order[::-1])}


def _md_cell(text: str, limit: int = 120) -> str:
    t = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "ˋ").replace("\r", "").replace("\n", "↵")
    t = t.replace("\t", "→")
    if len(t) > limit:
        t = "…" + t[-limit:]
    return t


def contexts_markdown(top: dict, setup: dict) -> str:
    """Two markdown tables: top gains and top losses of A against B, with the decoded context."""
    out = [
        "# Where A gains and loses most",
        "",
        f"A = `{setup['run_a']['path']}` (step {setup['run_a']['step']}), "
        f"B = `{setup['run_b']['path']}` (step {setup['run_b']['step']}); data `{setup['data']}` (val), "
        f"seq_len {setup['seq_len']}. Ranked by ℓ_B − ℓ_A (nats). The context is what precedes the target "
        "in its window (↵ = newline); the target token is in **bold**.",
    ]
    for side, title in (("gains", "A gains most"), ("losses", "A loses most")):
        out += [
            "",
            f"## {title}",
            "",
            "| # | context → **target** | p_A | p_B | ℓ_B − ℓ_A | Δ_sym | source | position |",
            "|---:|---|---:|---:|---:|---:|---|---:|",
        ]
        for i, e in enumerate(top[side], 1):
            tgt = _md_cell(e["target"], 40) or "∅"
            out.append(
                f"| {i} | {_md_cell(e['context'])} → **{tgt}** | {e['p_a']:.3g} | {e['p_b']:.3g} | "
                f"{e['loss_gain']:+.3f} | {e['delta_sym']:+.3f} | {e['source']} | {e['position']} |"
            )
    return "\n".join(out) + "\n"
