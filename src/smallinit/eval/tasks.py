"""The task registry, ``run_tasks`` and the markdown summary.

A task is a function ``fn(scorer, data_dir, opts) -> TaskResult`` that reads its files under
``data_dir`` (layout and formats in the modules named below), scores them with the scorer's
``loglikelihood`` / ``generate_until`` requests and returns metrics and per-item records.

    hellaswag, arc_easy, arc_challenge, cmmlu   multiple_choice.py (acc, acc_norm)
    lambada                                     lambada.py         (acc, ppl)
    blimp                                       blimp.py           (acc, per paradigm)
    gsm8k, math500                              generation.py      (exact_match)

Any task name ending in ``.yaml``/``.yml`` is a path to a YAML multiple-choice task
(``multiple_choice.YamlMCTask``). The default data directory is ``smallinit.core.paths.shared_data_dir()``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, DataError
from smallinit.eval import blimp as _blimp
from smallinit.eval import generation as _gen
from smallinit.eval import lambada as _lambada
from smallinit.eval import multiple_choice as _mc
from smallinit.eval.data import TaskResult
from smallinit.eval.mc_scoring import score_mc, with_shots


@dataclass
class TaskOptions:
    """Options shared by every task. ``shots=None`` = the task's default (0 except GSM8K 5, MATH500 4)."""

    limit: int | None = None
    shots: int | None = None
    max_gen_toks: int | None = None


def _take(items: list, limit: int | None) -> list:
    return items if limit is None else items[:limit]


def _mc_task(scorer, name: str, full: list, o: TaskOptions, pool: list | None = None) -> TaskResult:
    items, used = with_shots(_take(full, o.limit), o.shots or 0, pool or full, exclude_self=pool is None)
    return score_mc(scorer, name, items, used)


def _zero_shot_limit(o: TaskOptions) -> int | None:
    """Without few-shot examples only the first ``limit`` records need reading."""
    return o.limit if not o.shots else None


def _hellaswag(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    return _mc_task(scorer, "hellaswag", _mc.load_hellaswag(data_dir / _mc.HELLASWAG_FILE, _zero_shot_limit(o)), o)


def _arc(name: str) -> Callable[..., TaskResult]:
    def run(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
        return _mc_task(scorer, name, _mc.load_arc(data_dir / _mc.ARC_FILES[name], _zero_shot_limit(o)), o)

    run.__name__ = f"_{name}"
    return run


def _cmmlu(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    """All subjects scored in one call (better batching); few-shot pool = the subject's dev file."""
    items, subjects, used = [], [], 0
    for subject, (test, dev) in _mc.load_cmmlu(data_dir / _mc.CMMLU_DIR, _zero_shot_limit(o)).items():
        shot_items, n = with_shots(_take(test, o.limit), o.shots or 0, dev or test, exclude_self=dev is None)
        items += shot_items
        subjects += [subject] * len(shot_items)
        used = max(used, n)
    res = score_mc(scorer, "cmmlu", items, used)
    groups: dict[str, list[dict]] = {}
    for rec, subject in zip(res.records, subjects):
        groups.setdefault(subject, []).append(rec)
        rec["index"] = len(groups[subject]) - 1
    res.subtasks = {
        s: {
            "acc": sum(r["correct"] for r in g) / len(g),
            "acc_norm": sum(r["correct_norm"] for r in g) / len(g),
            "n": len(g),
        }
        for s, g in groups.items()
    }
    res.metrics["acc_macro"] = sum(v["acc"] for v in res.subtasks.values()) / len(res.subtasks)
    return res


def _lambada_task(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    return _lambada.score_lambada(scorer, _lambada.load_lambada(data_dir / _lambada.LAMBADA_FILE, o.limit))


def _blimp_task(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    return _blimp.score_blimp(scorer, _blimp.load_blimp(data_dir / _blimp.BLIMP_DIR, o.limit))


def _gsm8k(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    full = _gen.load_gsm8k(data_dir / _gen.GSM8K_FILE)
    train = data_dir / _gen.GSM8K_TRAIN_FILE
    pool = _gen.load_gsm8k(train) if train.is_file() else full
    return _gen.score_gsm8k(
        scorer,
        _take(full, o.limit),
        shots=_gen.GSM8K_SHOTS if o.shots is None else o.shots,
        pool=pool,
        exclude_self=pool is full,
        max_gen_toks=o.max_gen_toks or _gen.GSM8K_MAX_GEN,
    )


def _math500(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
    full = _gen.load_math500(data_dir / _gen.MATH500_FILE)
    return _gen.score_math500(
        scorer,
        _take(full, o.limit),
        shots=_gen.MATH500_SHOTS if o.shots is None else o.shots,
        pool=full,
        max_gen_toks=o.max_gen_toks or _gen.MATH500_MAX_GEN,
    )


def _yaml_task(path: Path) -> Callable[..., TaskResult]:
    def run(scorer, data_dir: Path, o: TaskOptions) -> TaskResult:
        task = _mc.YamlMCTask.from_yaml(path)
        full, pool = task.load()
        return _mc_task(scorer, task.name, full, o, pool)

    return run


TASKS: dict[str, Callable[..., TaskResult]] = {
    "hellaswag": _hellaswag,
    "arc_easy": _arc("arc_easy"),
    "arc_challenge": _arc("arc_challenge"),
    "cmmlu": _cmmlu,
    "lambada": _lambada_task,
    "blimp": _blimp_task,
    "gsm8k": _gsm8k,
    "math500": _math500,
}

# the headline metric of each task (first column of the markdown table)
_HEADLINE = ("acc", "acc_norm", "ppl", "exact_match", "acc_macro")


def parse_tasks(tasks: str | Iterable[str]) -> list[str]:
    """Task names from "a,b" or a list; each a registered name or a path to a YAML task (read and checked here, so
    a bad task file fails before any model is loaded). Two tasks that would report under one name are refused."""
    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip()]
    if not names:
        raise ConfigError("no tasks given")
    seen: dict[str, str] = {}
    for t in names:
        if t not in TASKS and not t.endswith((".yaml", ".yml")):
            raise ConfigError(f"unknown task '{t}'; known: {', '.join(TASKS)} (or a path to a .yaml task)")
        name = t if t in TASKS else _mc.YamlMCTask.from_yaml(Path(t)).name
        if name in seen:
            raise ConfigError(f"tasks {seen[name]} and {t} both report as '{name}'; give one a `name:`")
        seen[name] = t
    return names


def needs_data_dir(names: Iterable[str]) -> bool:
    """Whether any task reads the benchmark data folder (YAML tasks name their own files)."""
    return any(n in TASKS for n in names)


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    if data_dir is not None:
        path = Path(data_dir)
        if not path.is_dir():
            raise DataError(f"{path}: data directory not found")
        return path
    from smallinit.core.paths import shared_data_dir

    path = shared_data_dir()
    if path is None:
        raise DataError(
            "no benchmark data: pass --data-dir DIR (or set SMALLINIT_DATA); "
            "expected DIR/<task>/... files as documented in smallinit.eval"
        )
    return path


def run_tasks(
    scorer: Any,
    tasks: str | Iterable[str],
    data_dir: str | Path | None = None,
    limit: int | None = None,
    shots: int | None = None,
    progress: bool = True,
    max_gen_toks: int | None = None,
    records: bool = True,
) -> dict[str, Any]:
    """Run each task and collect ``{"tasks": {name: {metrics, config, [subtasks], [records]}}, "config": ...}``.

    ``shots=None`` uses each task's default; ``limit`` keeps the first N items (per paradigm /
    subject for BLiMP and CMMLU).
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    if shots is not None and shots < 0:
        raise ConfigError(f"shots must be >= 0, got {shots}")
    names = parse_tasks(tasks)
    root = resolve_data_dir(data_dir) if needs_data_dir(names) else Path(data_dir or ".")
    opts = TaskOptions(limit=limit, shots=shots, max_gen_toks=max_gen_toks)
    out: dict[str, Any] = {
        "tasks": {},
        "config": {"data_dir": str(root), "limit": limit, "shots": shots, "max_gen_toks": max_gen_toks},
    }
    for name in names:
        fn = TASKS.get(name) or _yaml_task(Path(name))
        with _progress(scorer, progress, name):
            t0 = time.perf_counter()
            result = fn(scorer, root, opts)
            result.config.update({"limit": limit, "seconds": round(time.perf_counter() - t0, 3)})
        out["tasks"][result.name if name not in TASKS else name] = result.to_dict(records=records)
    return out


@contextlib.contextmanager
def _progress(scorer: Any, on: bool, desc: str):
    """Switch a scorer's progress bar (if it has one) for the duration of one task."""
    if not hasattr(scorer, "progress"):
        yield
        return
    old = (scorer.progress, getattr(scorer, "progress_desc", None))
    scorer.progress, scorer.progress_desc = on, desc
    try:
        yield
    finally:
        scorer.progress, scorer.progress_desc = old


def results_markdown(results: dict[str, Any]) -> str:
    """A markdown table: one row per task and metric (stderr beside its metric when known)."""
    lines = ["| task | metric | value | ± stderr | n | shots |", "|---|---|---:|---:|---:|---:|"]
    for name, res in results.get("tasks", {}).items():
        m = res.get("metrics", {})
        for key in [k for k in _HEADLINE if k in m]:
            err = m.get(f"{key}_stderr")
            lines.append(
                f"| {name} | {key} | {_fmt(m[key])} | {_fmt(err) if err is not None else ''} "
                f"| {m.get('n', '')} | {m.get('shots', '')} |"
            )
    return "\n".join(lines)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.4f}" if abs(x) < 1e5 else f"{x:.4g}"
    return str(x)


__all__ = ["TASKS", "TaskOptions", "parse_tasks", "resolve_data_dir", "run_tasks", "results_markdown"]
