"""Multiple choice by log-likelihood: the item (:class:`MCItem`), its few-shot prompt and its metrics — the
task files are read by :mod:`smallinit.eval.multiple_choice`.

Scoring, exactly as lm-evaluation-harness (``ConfigurableTask.process_results``, multiple_choice). Each item
is a prompt and k choices; the scored continuation is ``delimiter + choice_j`` (the harness's
``target_delimiter``, one space by default) and ll_j = log p(delimiter + choice_j | prompt) (see
``LMScorer.loglikelihood``). ``acc`` = mean[argmax_j ll_j == gold]; ``acc_norm`` = mean[argmax_j ll_j / chars_j ==
gold] with chars_j = ``len(choice_j)`` in Unicode characters **without** the delimiter (the harness's
``completion_len``); ``acc_bytes`` = the same with the UTF-8 byte length of choice_j (delimiter excluded, the
harness's ``byte_length``). Ties go to the lowest index (``np.argmax``). ``*_stderr`` = sqrt(p (1 - p) / (n - 1)).

Partial scoring (WinoGrande-style; the harness's ``multiple_input``): when the *context* varies with the choice
and the continuation is shared, an item carries ``contexts`` (one prompt per choice) and one ``target``;
ll_j = log p(delimiter + target | context_j), and chars_j = len(target) for every j (so acc_norm = acc, as in the
harness).

Few-shot (``shots`` = K > 0, ``with_shots``): K demonstrations "prompt + gold continuation", joined
by a blank line, are put before the prompt. They are drawn with ``random.Random(1234 + item_index)``
from the task's few-shot pool (CMMLU's ``dev`` split, a YAML task's ``fewshot_file``) or else from the
whole file the item comes from, excluding the item itself; the draw is deterministic and does not
depend on ``limit``. K is capped at the pool size (the metrics record the ``shots`` actually used).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from smallinit.eval.data import TaskResult, accuracy_stderr

FEWSHOT_SEED = 1234


@dataclass
class MCItem:
    """One multiple-choice question: prompt, scored continuations, index of the right one."""

    prompt: str
    choices: list[str]
    """The choice texts, without the delimiter (the harness's ``doc_to_choice``)."""
    gold: int
    meta: dict[str, Any] = field(default_factory=dict)
    delimiter: str = " "
    """Put between the prompt and every choice when scoring (the harness's ``target_delimiter``)."""
    contexts: list[str] | None = None
    """Partial scoring: one context per choice (the prompt is then the shared few-shot prefix, usually "")."""
    target: str | None = None
    """Partial scoring: the continuation scored after every context."""

    def requests(self) -> list[tuple[str, str]]:
        """(context, continuation) pairs scored for this item, one per choice."""
        if self.contexts is not None:
            return [(self.prompt + c, self.delimiter + (self.target or "")) for c in self.contexts]
        return [(self.prompt, self.delimiter + c) for c in self.choices]

    def lengths(self) -> tuple[list[int], list[int]]:
        """(characters, UTF-8 bytes) per choice, delimiter excluded: the harness's acc_norm / acc_bytes divisors."""
        texts = [self.target or ""] * len(self.choices) if self.contexts is not None else self.choices
        return [len(t) for t in texts], [len(t.encode("utf-8")) for t in texts]

    def demonstration(self) -> str:
        if self.contexts is not None:
            return self.contexts[self.gold] + self.delimiter + (self.target or "")
        return self.prompt + self.delimiter + self.choices[self.gold]


# ----------------------------------------------------------------------------- few-shot


def fewshot_indices(pool_size: int, k: int, item_index: int, exclude_self: bool) -> list[int]:
    """K pool indices drawn with ``random.Random(1234 + item_index)``, excluding ``item_index`` when
    the pool is the evaluated file itself. Capped at the number of candidates."""
    if k <= 0 or pool_size == 0:
        return []
    n_candidates = pool_size - (1 if exclude_self and item_index < pool_size else 0)
    k = min(k, n_candidates)
    rng = random.Random(FEWSHOT_SEED + item_index)
    draw = rng.sample(range(pool_size), min(k + 1, pool_size))
    if exclude_self:
        draw = [j for j in draw if j != item_index]
    return draw[:k]


def fewshot_prompt(demos: list[str], prompt: str, sep: str = "\n\n") -> str:
    """Demonstrations then the prompt, separated by ``sep``."""
    return sep.join([*demos, prompt])


# ----------------------------------------------------------------------------- scoring


def with_shots(
    items: list[MCItem], shots: int, pool: list[MCItem] | None = None, exclude_self: bool = True
) -> tuple[list[MCItem], int]:
    """Items whose prompts carry ``shots`` demonstrations from ``pool`` (default ``items``), and the
    number of shots used. With ``exclude_self`` the pool is the items' own file, item i sits at
    index i of it and is never its own example."""
    pool = items if pool is None else pool
    out, used = [], 0
    for i, item in enumerate(items):
        idx = fewshot_indices(len(pool), shots, i, exclude_self=exclude_self)
        used = max(used, len(idx))
        prompt = fewshot_prompt([pool[j].demonstration() for j in idx], item.prompt)
        if item.contexts is not None:  # the demonstrations go before every per-choice context
            prefix = fewshot_prompt([pool[j].demonstration() for j in idx], "") if idx else ""
            out.append(
                MCItem(
                    item.prompt,
                    item.choices,
                    item.gold,
                    item.meta,
                    item.delimiter,
                    [prefix + c for c in item.contexts],
                    item.target,
                )
            )
            continue
        out.append(MCItem(prompt, item.choices, item.gold, item.meta, item.delimiter))
    return out, used


def mc_predictions(ll: np.ndarray, chars: list[int], nbytes: list[int]) -> tuple[int, int, int]:
    """(pred, pred_norm, pred_bytes) = argmax of ll, ll / chars, ll / bytes, exactly as lm-evaluation-harness
    (a zero length divides to ±inf or nan there too; numpy's argmax picks the first maximum, nan first)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            int(np.argmax(ll)),
            int(np.argmax(ll / np.asarray(chars, dtype=np.float64))),
            int(np.argmax(ll / np.asarray(nbytes, dtype=np.float64))),
        )


def score_mc(scorer: Any, name: str, items: list[MCItem], shots: int = 0) -> TaskResult:
    """acc / acc_norm / acc_bytes of ``items`` (module docstring; prompts as given; ``shots`` is only recorded)."""
    requests, spans = [], []
    for item in items:
        reqs = item.requests()
        spans.append((len(requests), len(reqs)))
        requests += reqs
    results = scorer.loglikelihood(requests) if requests else []
    records, correct, correct_norm, correct_bytes = [], [], [], []
    for i, (item, (start, k)) in enumerate(zip(items, spans)):
        ll = np.array([results[start + j][0] for j in range(k)], dtype=np.float64)
        chars, nbytes = item.lengths()
        pred, pred_norm, pred_bytes = mc_predictions(ll, chars, nbytes)
        correct.append(pred == item.gold)
        correct_norm.append(pred_norm == item.gold)
        correct_bytes.append(pred_bytes == item.gold)
        records.append(
            {
                "index": i,
                **item.meta,
                "gold": item.gold,
                "pred": pred,
                "pred_norm": pred_norm,
                "pred_bytes": pred_bytes,
                "loglikelihoods": ll.tolist(),
                "correct": pred == item.gold,
                "correct_norm": pred_norm == item.gold,
            }
        )
    return TaskResult(name, _acc_metrics(correct, correct_norm, shots, correct_bytes), records)


def _acc_metrics(
    correct: list[bool], correct_norm: list[bool], shots: int, correct_bytes: list[bool] | None = None
) -> dict[str, float]:
    n = len(correct)
    acc = float(np.mean(correct)) if n else float("nan")
    acc_norm = float(np.mean(correct_norm)) if n else float("nan")
    out = {
        "acc": acc,
        "acc_stderr": accuracy_stderr(acc, n),
        "acc_norm": acc_norm,
        "acc_norm_stderr": accuracy_stderr(acc_norm, n),
    }
    if correct_bytes is not None:
        acc_bytes = float(np.mean(correct_bytes)) if n else float("nan")
        out.update(acc_bytes=acc_bytes, acc_bytes_stderr=accuracy_stderr(acc_bytes, n))
    return {**out, "n": n, "shots": shots}
