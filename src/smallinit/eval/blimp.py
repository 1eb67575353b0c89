"""BLiMP: linguistic minimal pairs.

Files ``blimp/<paradigm>.jsonl`` (one file per paradigm, any number of files): JSON Lines with
fields ``sentence_good`` and ``sentence_bad``. Each sentence is scored whole, from an empty context
(log p(sentence | eot), ``LMScorer.loglikelihood`` with context ""); a pair is right when
log p(good) > log p(bad) (a tie counts as wrong).

Metrics: ``acc`` over all pairs (micro average; equal to the mean over paradigms when every
paradigm has the same size, as in BLiMP), ``acc_macro`` (mean of the per-paradigm accuracies) and
per-paradigm ``acc`` in ``subtasks``. ``limit`` keeps the first N pairs of each paradigm; ``shots``
is ignored (zero-shot task).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.errors import DataError
from smallinit.eval.data import TaskResult, accuracy_stderr, read_jsonl

BLIMP_DIR = "blimp"
BLIMP_FORMAT = "a folder of <paradigm>.jsonl files, JSON Lines with fields sentence_good, sentence_bad"


def load_blimp(root: Path, limit: int | None = None) -> dict[str, list[tuple[str, str]]]:
    """{paradigm (file stem): [(sentence_good, sentence_bad)]} (the first ``limit`` pairs of each)."""
    root = Path(root)
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else []
    if not files:
        raise DataError(f"{root}: no .jsonl files; expected {BLIMP_FORMAT}")
    return {
        f.stem: [
            (str(r.get("sentence_good", BLIMP_FORMAT)), str(r.get("sentence_bad", BLIMP_FORMAT)))
            for r in read_jsonl(f, BLIMP_FORMAT, limit)
        ]
        for f in files
    }


def score_blimp(scorer: Any, paradigms: dict[str, list[tuple[str, str]]], name: str = "blimp") -> TaskResult:
    requests, owners = [], []
    for paradigm, pairs in paradigms.items():
        for i, (good, bad) in enumerate(pairs):
            requests += [("", good), ("", bad)]
            owners.append((paradigm, i))
    results = scorer.loglikelihood(requests) if requests else []
    records, by_paradigm = [], {p: [] for p in paradigms}
    for k, (paradigm, i) in enumerate(owners):
        good, bad = results[2 * k][0], results[2 * k + 1][0]
        ok = good > bad
        by_paradigm[paradigm].append(ok)
        records.append({"paradigm": paradigm, "index": i, "loglik_good": good, "loglik_bad": bad, "correct": ok})
    all_ok = [r["correct"] for r in records]
    acc = float(np.mean(all_ok)) if all_ok else float("nan")
    subtasks = {p: {"acc": float(np.mean(v)), "n": len(v)} for p, v in by_paradigm.items() if v}
    metrics = {
        "acc": acc,
        "acc_stderr": accuracy_stderr(acc, len(all_ok)),
        "acc_macro": float(np.mean([s["acc"] for s in subtasks.values()])) if subtasks else float("nan"),
        "n": len(all_ok),
        "shots": 0,
    }
    return TaskResult(name, metrics, records, subtasks)
