"""Reading a finished crossover at another budget or claimed effect than the one declared before its runs.

A crossover's declarations (``--enough K``, ``--effect δ``) are frozen by its first run
(:func:`~smallinit.experiments.crossover_checks.check_output`); judging the same losses elsewhere is this separate,
explicit step, and its report says so ("re-judged after the runs", with what was declared). It reads only
``crossover.json`` — the compact result committed under ``docs/results/`` — and re-runs
:func:`~smallinit.analysis.crossing.analyse_crossover` on its per-seed losses. :func:`effect_from_results` turns
crossovers of the baseline at ≥ 3 widths into the paper's claimed effect in nats (:mod:`smallinit.analysis.effect`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from smallinit.analysis.crossing import analyse_crossover
from smallinit.analysis.effect import ClaimedEffect, claimed_effect, loss_at_budget


def read_crossover_json(result: str) -> tuple[Any, Any]:
    """(path, content) of a finished crossover's ``crossover.json`` — ``result`` names it or its folder; one
    ConfigError line when there is none."""
    from pathlib import Path

    from smallinit.core.errors import ConfigError
    from smallinit.runs.rundir import read_json

    path = Path(result)
    if path.is_dir():
        path = path / "crossover.json"
    if not path.is_file():
        raise ConfigError(f"{result}: no crossover.json there (is it a finished crossover folder?)")
    return path, read_json(path, strict=True)


def declared(result: dict[str, Any]) -> tuple[float | None, float | None]:
    """(K, δ) as declared before the runs of ``result``."""
    spec = result.get("spec") or {}
    return spec.get("enough"), spec.get("effect")


def rejudge(
    result: dict[str, Any], enough: float | None, effect: float | None = None, note: str = "", n_boot: int = 300
) -> dict[str, Any]:
    """``result`` (a crossover.json) with every arm's analysis redone at K = ``enough`` tokens/param and claimed
    effect δ = ``effect``; ``rejudged`` records both, what was declared before the runs and ``note`` (e.g. "rates
    were tuned at D/4")."""
    out = copy.deepcopy(result)
    spec = out["spec"]
    D = [float(b["tokens"]) for b in out["budgets"]]
    losses = {arm: {int(s): list(v) for s, v in per.items()} for arm, per in out["losses"].items()}
    problems = {arm: {int(s): list(v) for s, v in per.items()} for arm, per in (out.get("problems") or {}).items()}
    was_k, was_d = declared(result)
    out["analyses"] = {
        arm: analyse_crossover(
            D,
            losses,
            spec["baseline"],
            arm,
            non_embedding_params=out["non_embedding_params"],
            n_boot=n_boot,
            enough_tokens_per_param=enough,
            effect=effect,
            problems=problems or None,  # why a loss is missing: a diverged arm stays failed when re-judged
        ).to_dict()
        for arm in losses
        if arm != spec["baseline"]
    }
    out["rejudged"] = {
        "enough": enough,
        "effect": effect,
        "declared_enough": was_k,
        "declared_effect": was_d,
        "note": note,
    }
    return out


def read_crossover_result(path: str) -> dict:
    """A crossover.json (or the one in a folder), refused with one line when it is not a finished crossover's."""
    from smallinit.core.errors import ConfigError

    p, x = read_crossover_json(path)
    if not isinstance(x, dict) or not {"spec", "losses", "budgets", "non_embedding_params"} <= set(x):
        raise ConfigError(f"{p}: not a crossover result (needs spec, losses, budgets, non_embedding_params)")
    bad = crossover_result_problem(x)
    if bad:
        raise ConfigError(f"{p}: not a crossover result ({bad})")
    return x


def crossover_result_problem(x: dict) -> str | None:
    """What is wrong with the shape of a crossover.json, in words; None when it can be judged."""
    num = (int, float)
    spec, losses, budgets = x["spec"], x["losses"], x["budgets"]
    if (
        not isinstance(budgets, list)
        or not budgets
        or not all(isinstance(b, dict) and isinstance(b.get("tokens"), num) for b in budgets)
    ):
        return "budgets must be a list of {tokens: …}"
    if not isinstance(x["non_embedding_params"], num) or not x["non_embedding_params"] > 0:
        return "non_embedding_params must be a number > 0"
    if not isinstance(losses, dict):
        return "losses must map arms to {seed: [loss per budget]}"
    if not isinstance(spec, dict) or spec.get("baseline") not in losses:
        return "spec.baseline must name an arm of losses"
    if len(losses) < 2:
        return "losses must hold the baseline and at least one other arm"
    for arm, per in losses.items():
        ok = isinstance(per, dict) and per and all(str(s).isdigit() for s in per)
        if not ok or not all(
            isinstance(v, list) and len(v) == len(budgets) and all(y is None or isinstance(y, num) for y in v)
            for v in per.values()
        ):
            return f"losses.{arm} must map seeds to one loss (or null) per budget"
    return None


def baseline_curve(result: dict[str, Any], arm: str | None = None) -> tuple[list[float], list[float | None]]:
    """(budgets, seed-mean loss at each) of ``arm`` (default: the baseline) in a crossover.json."""
    arm = arm or result["spec"]["baseline"]
    D = [float(b["tokens"]) for b in result["budgets"]]
    rows = [[np.nan if v is None else v for v in vals] for vals in result["losses"][arm].values()]
    mean = np.nanmean(np.asarray(rows, dtype=float), axis=0)
    return D, [float(m) if np.isfinite(m) else None for m in mean]


def effect_from_results(
    results: Sequence[dict[str, Any]], params: float, tokens: float, arm: str | None = None
) -> ClaimedEffect:
    """The paper's claimed effect in nats at (``params``, ``tokens``) from the baseline arm of crossovers at ≥ 3
    widths: each read at ``tokens`` (:func:`~smallinit.analysis.effect.loss_at_budget`), then
    :func:`~smallinit.analysis.effect.claimed_effect`. ValueError when a width does not reach ``tokens``."""
    sizes, losses = [], []
    for r in results:
        D, L = baseline_curve(r, arm)
        sizes.append(float(r["non_embedding_params"]))
        losses.append(loss_at_budget(D, L, tokens))
    return claimed_effect(sizes, losses, params, tokens)


__all__ = [
    "baseline_curve",
    "crossover_result_problem",
    "declared",
    "effect_from_results",
    "read_crossover_json",
    "read_crossover_result",
    "rejudge",
]
