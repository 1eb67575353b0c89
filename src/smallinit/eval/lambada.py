"""LAMBADA: predict the last word of a passage.

File ``lambada/lambada_openai.jsonl``: JSON Lines with fields ``context`` (the passage without its
last word) and ``continuation`` (the last word). The target is ``" " + continuation`` (no space is
added when the context already ends with whitespace), scored with ``LMScorer.loglikelihood``.

Metrics (as lm-evaluation-harness's ``lambada_openai``):
  acc = mean[greedy decoding of the target's tokens reproduces the target exactly]
  ppl = exp(-mean_i log p(target_i | context_i))   (a per-word perplexity of the last word)
``limit`` keeps the first N items; ``shots`` is ignored (zero-shot task).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from smallinit.eval.data import TaskResult, accuracy_stderr, read_jsonl
from smallinit.eval.scorer import perplexity

LAMBADA_FILE = "lambada/lambada_openai.jsonl"
LAMBADA_FORMAT = "JSON Lines with fields context (passage minus last word), continuation (last word)"


def load_lambada(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    """[(context, target)] with target = " " + last word (the first ``limit`` items)."""
    out = []
    for row in read_jsonl(path, LAMBADA_FORMAT, limit):
        ctx, word = str(row.get("context", LAMBADA_FORMAT)), str(row.get("continuation", LAMBADA_FORMAT))
        sep = "" if ctx[-1:].isspace() or word[:1].isspace() else " "
        out.append((ctx, sep + word))
    return out


def score_lambada(scorer: Any, items: list[tuple[str, str]], name: str = "lambada") -> TaskResult:
    results = scorer.loglikelihood(items)
    lls = [r[0] for r in results]
    hits = [bool(r[1]) for r in results]
    acc = float(np.mean(hits)) if hits else float("nan")
    records = [
        {"index": i, "target": t, "loglikelihood": ll, "correct": h}
        for i, ((_, t), ll, h) in enumerate(zip(items, lls, hits))
    ]
    metrics = {
        "acc": acc,
        "acc_stderr": accuracy_stderr(acc, len(hits)),
        "ppl": perplexity(lls, len(lls)),
        "n": len(hits),
        "shots": 0,
    }
    return TaskResult(name, metrics, records)
