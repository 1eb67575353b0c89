"""Generation benchmarks: GSM8K and MATH500 (greedy decoding, answer extraction, exact match).

GSM8K. File ``gsm8k/test.jsonl``: JSON Lines with fields ``question`` and ``answer`` (a worked
solution ending in ``#### <number>``). Few-shot examples come from ``gsm8k/train.jsonl`` when that
file exists, otherwise from the test file excluding the item (drawn as in
``mc_scoring.fewshot_indices``). A demonstration is ``"Question: {q}\\nAnswer: {solution}"``
with the calculator annotations ``<<...>>`` removed; demonstrations and the prompt
``"Question: {q}\\nAnswer:"`` are joined by a blank line. Generation stops at ``"Question:"`` or a
blank line (``"\\n\\n"``), or after ``max_gen_toks`` tokens (default 256). The prediction is
``answers.extract_gsm8k_answer`` of the generation; the gold the number after ``####``.
Metric ``exact_match`` = mean[pred == gold] (canonical numbers). Default 5 shots.

MATH500. File ``math500/test.jsonl``: JSON Lines with fields ``problem``, ``solution`` and
optionally ``answer`` (otherwise the last ``\\boxed{}`` of the solution) and ``subject``.
Few-shot examples come from the file itself excluding the item. A demonstration is
``"Problem:\\n{problem}\\n\\nSolution: {solution}"`` (solutions end in ``\\boxed{...}``); the
prompt ``"Problem:\\n{problem}\\n\\nSolution:"``. Generation stops at ``"Problem:"`` or after
``max_gen_toks`` tokens (default 512). The prediction is ``answers.extract_math_answer`` (last
``\\boxed{}``); ``exact_match`` uses ``answers.math_equal``; ``subtasks`` give it per subject.
Default 4 shots.

``limit`` keeps the first N items.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.errors import DataError
from smallinit.eval.answers import extract_gsm8k_answer, extract_math_answer, gsm8k_equal, last_boxed, math_equal
from smallinit.eval.data import TaskResult, accuracy_stderr, read_jsonl
from smallinit.eval.mc_scoring import fewshot_indices, fewshot_prompt

GSM8K_FILE, GSM8K_TRAIN_FILE = "gsm8k/test.jsonl", "gsm8k/train.jsonl"
GSM8K_FORMAT = "JSON Lines with fields question, answer (solution ending in '#### <number>')"
GSM8K_SHOTS, GSM8K_MAX_GEN = 5, 256
MATH500_FILE = "math500/test.jsonl"
MATH500_FORMAT = "JSON Lines with fields problem, solution (with \\boxed{answer}) [, answer, subject]"
MATH500_SHOTS, MATH500_MAX_GEN = 4, 512


@dataclass
class GenItem:
    """A generation problem: the prompt without shots, its demonstration form, the gold answer."""

    prompt: str
    demonstration: str
    gold: str
    meta: dict[str, Any]


def load_gsm8k(path: Path) -> list[GenItem]:
    items = []
    for row in read_jsonl(path, GSM8K_FORMAT):
        q, sol = str(row.get("question", GSM8K_FORMAT)).strip(), str(row.get("answer", GSM8K_FORMAT)).strip()
        if "####" not in sol:
            raise DataError(f"{row.where}: answer has no '#### <number>' line; expected {GSM8K_FORMAT}")
        gold = extract_gsm8k_answer(sol)
        if gold is None:
            raise DataError(f"{row.where}: no number after '####'; expected {GSM8K_FORMAT}")
        prompt = f"Question: {q}\nAnswer:"
        items.append(GenItem(prompt, f"{prompt} {re.sub(r'<<.*?>>', '', sol)}", gold, {}))
    return items


def load_math500(path: Path) -> list[GenItem]:
    items = []
    for row in read_jsonl(path, MATH500_FORMAT):
        problem = str(row.get("problem", MATH500_FORMAT)).strip()
        sol = str(row.get("solution", MATH500_FORMAT)).strip()
        gold = row.data.get("answer")
        gold = str(gold) if gold is not None else last_boxed(sol)
        if gold is None:
            raise DataError(
                f"{row.where}: no 'answer' field and no \\boxed{{}} in the solution; expected {MATH500_FORMAT}"
            )
        prompt = f"Problem:\n{problem}\n\nSolution:"
        meta = {k: row.data[k] for k in ("subject", "level") if k in row.data}
        items.append(GenItem(prompt, f"{prompt} {sol}", gold, meta))
    return items


def score_generation(
    scorer: Any,
    name: str,
    items: list[GenItem],
    *,
    extract,
    equal,
    until: list[str],
    max_gen_toks: int,
    shots: int,
    pool: list[GenItem] | None = None,
    exclude_self: bool = True,
    subtask_key: str | None = None,
) -> TaskResult:
    """exact_match of ``extract(generation)`` against each item's gold under ``equal``."""
    pool = items if pool is None else pool
    requests, used = [], 0
    for i, item in enumerate(items):
        idx = fewshot_indices(len(pool), shots, i, exclude_self=exclude_self)
        used = max(used, len(idx))
        prompt = fewshot_prompt([pool[j].demonstration for j in idx], item.prompt)
        requests.append((prompt, {"until": until, "max_gen_toks": max_gen_toks}))
    gens = scorer.generate_until(requests) if requests else []
    records, hits, groups = [], [], {}
    for i, (item, gen) in enumerate(zip(items, gens)):
        pred = extract(gen)
        ok = bool(equal(pred, item.gold))
        hits.append(ok)
        if subtask_key and subtask_key in item.meta:
            groups.setdefault(str(item.meta[subtask_key]), []).append(ok)
        records.append({"index": i, **item.meta, "generation": gen, "pred": pred, "gold": item.gold, "correct": ok})
    em = float(np.mean(hits)) if hits else float("nan")
    metrics = {"exact_match": em, "exact_match_stderr": accuracy_stderr(em, len(hits)), "n": len(hits), "shots": used}
    subtasks = {g: {"exact_match": float(np.mean(v)), "n": len(v)} for g, v in sorted(groups.items())}
    return TaskResult(name, metrics, records, subtasks)


def score_gsm8k(
    scorer: Any,
    items: list[GenItem],
    *,
    shots: int = GSM8K_SHOTS,
    pool: list[GenItem] | None = None,
    exclude_self: bool = True,
    max_gen_toks: int = GSM8K_MAX_GEN,
) -> TaskResult:
    return score_generation(
        scorer,
        "gsm8k",
        items,
        extract=extract_gsm8k_answer,
        equal=gsm8k_equal,
        until=["Question:", "\n\n"],
        max_gen_toks=max_gen_toks,
        shots=shots,
        pool=pool,
        exclude_self=exclude_self,
    )


def score_math500(
    scorer: Any,
    items: list[GenItem],
    *,
    shots: int = MATH500_SHOTS,
    pool: list[GenItem] | None = None,
    exclude_self: bool = True,
    max_gen_toks: int = MATH500_MAX_GEN,
) -> TaskResult:
    return score_generation(
        scorer,
        "math500",
        items,
        extract=extract_math_answer,
        equal=math_equal,
        until=["Problem:"],
        max_gen_toks=max_gen_toks,
        shots=shots,
        pool=pool,
        exclude_self=exclude_self,
        subtask_key="subject",
    )
