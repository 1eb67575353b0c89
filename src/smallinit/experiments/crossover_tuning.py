"""Each arm's learning rate at the judged budget (docs/definitions.md §2, "Learning rates").

Every arm trains the same grid of rates at the tuning seed (no reported seed uses it), judged on ``tune_loss``: the
``data.tune_batches`` validation windows that follow, and never overlap, the ``data.val_batches`` behind every
reported loss.

- **At D** (``tune_fraction`` = 1, the default): a tuning run is a whole arm × seed of the crossover — a trunk to
  (1 − c)·D and a cooldown branch at every budget — so the loss-vs-rate curve exists at D *and* at every smaller
  budget (the rate profile), from the same runs.
- **Shorter** (``tune_fraction`` < 1, the older protocol, kept to re-read earlier results): one WSD run of
  ``tune_fraction``·D tokens per rate.

The choice (:func:`choose_rate`): a quadratic in log η fitted to the losses of the (up to) five grid rates around the
arg-min, ℓ(x) = a·x² + b·x + c with x = log η; the arm runs at the grid rate nearest the vertex x* = −b / 2a (the
arg-min when the fit is not convex or has < 3 points). When any arm's arg-min or vertex lies at or beyond an edge of
the grid, the grid grows by one step there *for every arm* (up to ``tune_extend`` times): the same grid and the same
number of tries for every arm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.errors import RunDirError

FIT_POINTS = 5
"""The quadratic is fitted to at most this many grid rates, centred on the arg-min."""
FLAT = 1e-9
"""A fit whose rise over the fitted rates is below this (relative to the losses) is flat, not convex: its "vertex" is
rounding noise (equal losses), so the arm runs at the arg-min."""


def lr_name(lr: float) -> str:
    """A rate's folder name: ``lr0.003``."""
    return f"lr{lr:.3g}"


def tunes_at_budget(spec: Any) -> bool:
    """Whether the tuning runs go to the full budget D with cooldown branches (``tune_fraction`` = 1)."""
    return spec.tune_fraction >= 1.0 - 1e-9


def tune_config(spec: Any, arm: str, lr: float) -> Any:
    """The config of ``arm`` at rate ``lr`` and the tuning seed, with tune batches (as many as the validation
    batches when unset)."""
    from smallinit.experiments.crossover_jobs import arm_config

    cfg = arm_config(spec, arm, spec.tune_seed)
    cfg.optim.lr = lr
    if cfg.data.tune_batches <= 0:
        cfg.data.tune_batches = cfg.data.val_batches
    return cfg


def tune_jobs(spec: Any, out: Path, arm: str, lr: float) -> list[Any]:
    """The runs that tune ``arm`` at ``lr``: at D a trunk and its branches under ``runs/ARM/tune/lrX/``
    (:func:`~smallinit.experiments.crossover.arm_seed_jobs`); shorter, one WSD run ``runs/ARM/tune/lrX`` of
    S = round(tune_fraction·D / (B·T)) steps with the cooldown fraction c."""
    from smallinit.experiments.crossover_jobs import Budget, arm_seed_jobs, branch_config
    from smallinit.experiments.crossover_runs import crossover_job

    cfg = tune_config(spec, arm, lr)
    home = out / "runs" / arm / "tune" / lr_name(lr)
    if tunes_at_budget(spec):
        trunk, branches, _ = arm_seed_jobs(spec, cfg, arm, spec.tune_seed, home, tuning=True)
        return [trunk, *branches]
    steps = max(2, int(round(spec.tune_fraction * spec.tokens / (cfg.train.batch_size * cfg.data.seq_len))))
    c = branch_config(cfg, Budget(steps, 0, 0), spec.cooldown)
    return [crossover_job("tune", arm, spec.tune_seed, home, c)]


def tune_job(spec: Any, out: Path, arm: str, lr: float) -> Any:
    """The tuning run whose ``tune_loss`` decides (the branch at D, or the one shorter run)."""
    return tune_jobs(spec, out, arm, lr)[-1]


def grid_step(lrs: list[float]) -> float:
    """The grid's geometric step (max/min)^(1/(n−1)); 10^0.5 for a single value."""
    g = sorted(lrs)
    return (g[-1] / g[0]) ** (1 / (len(g) - 1)) if len(g) > 1 else math.sqrt(10)


def choose_rate(losses: dict[float, float | None]) -> dict[str, Any]:
    """The rate an arm runs at, from its loss at each grid rate (None: failed or non-finite).

    Fits ℓ(x) = a·x² + b·x + c (x = ln η, least squares) to the finite losses of the up to :data:`FIT_POINTS` grid
    rates centred on the arg-min; the chosen rate is the finite grid rate nearest x* = −b / 2a when a > 0 (not flat to
    rounding, :data:`FLAT`; at equal distance the lower loss, then the smaller rate), else the arg-min.
    Returns {"argmin", "chosen", "vertex" (η at x*, None without a convex fit), "fit" ([a, b, c] or None),
    "fit_rates" (the rates fitted), "at_edge" (the arg-min or x* at or past the smallest/largest rate tried, when that
    rate has a finite loss: "low" | "high" | None)}."""
    tried = sorted(losses)
    ok = [lr for lr in tried if losses[lr] is not None and math.isfinite(losses[lr])]
    if not ok:
        return {"argmin": None, "chosen": None, "vertex": None, "fit": None, "fit_rates": [], "at_edge": None}
    argmin = min(ok, key=lambda lr: losses[lr])
    i = ok.index(argmin)
    lo = max(0, min(i - FIT_POINTS // 2, len(ok) - FIT_POINTS))
    pts = ok[lo : lo + FIT_POINTS]
    chosen, vertex, fit = argmin, None, None
    if len(pts) >= 3:
        x = np.log(np.asarray(pts, dtype=np.float64))
        y = np.asarray([losses[p] for p in pts], dtype=np.float64)
        a, b, c = (float(v) for v in np.polyfit(x, y, 2))
        fit = [a, b, c]
        if a * float(np.ptp(x)) ** 2 > FLAT * max(1.0, float(np.abs(y).max())):  # convex, not flat to rounding
            xv = -b / (2 * a)
            vertex = math.exp(xv)
            # nearest in ln η; halfway between two rates: the lower measured loss, then the smaller rate
            chosen = min(ok, key=lambda lr: (round(abs(math.log(lr) - xv), 9), losses[lr]))
    edge = None
    lo_x, hi_x = math.log(tried[0]), math.log(tried[-1])
    if len(tried) > 1:  # past a rate that failed or diverged the grid does not grow: the best lies inside
        if tried[0] in ok and (argmin == tried[0] or (vertex is not None and math.log(vertex) <= lo_x)):
            edge = "low"
        elif tried[-1] in ok and (argmin == tried[-1] or (vertex is not None and math.log(vertex) >= hi_x)):
            edge = "high"
    return {"argmin": argmin, "chosen": chosen, "vertex": vertex, "fit": fit, "fit_rates": pts, "at_edge": edge}


def _final_loss(run_dir: Path) -> float | None:
    """A finished run's ``final_tune_loss`` (``final_val_loss`` for runs written before tune batches existed)."""
    from smallinit.runs.rundir import collect_run

    run = collect_run(run_dir)
    if run["state"] != "done":
        return None
    v = run.get("final_tune_loss")
    v = run.get("final_val_loss") if v is None else v
    return v if v is not None and math.isfinite(v) else None


def _diverged(job: Any) -> bool:
    """Whether a tuning run stopped on a non-finite or diverged loss (its ``diverged.json``, or its trunk's for a
    branch left blocked): that rate has no loss, and the choice is made without it."""
    dirs = [job.run_dir, getattr(job, "trunk_dir", None)]
    return any(d is not None and (Path(d) / "diverged.json").is_file() for d in dirs)


def _rate_of(d: Path) -> float:
    from smallinit.runs.rundir import read_config

    cfg = read_config(d / "trunk") if (d / "trunk").is_dir() else read_config(d)
    return float(((cfg or {}).get("optim") or {}).get("lr", d.name[2:]))


def judged_index(spec: Any, budgets: list[Any]) -> int:
    """The index of the budget a claim is judged at (:func:`~smallinit.analysis.loss_verdict.judged_budget`): the
    one nearest above K·N with ``--enough K``, else the largest. The rates are chosen there, not at D when D > K·N."""
    from smallinit.analysis.loss_verdict import judged_budget
    from smallinit.experiments.crossover_jobs import baseline_non_embedding_params

    if spec.enough is None:
        return len(budgets) - 1
    return judged_budget([b.tokens for b in budgets], spec.enough * baseline_non_embedding_params(spec))[0]


def collect_tuning(spec: Any, out: Path, budgets: list[Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per arm, from the tuning runs under ``OUT/runs/ARM/tune``: {"losses": {rate: tune_loss at the judged budget
    (:func:`judged_index`; of the shorter run) or None}, "profile": {budget tokens: {rate: tune_loss}} and
    "judged_tokens" (at D only), the fields of :func:`choose_rate`}."""
    res: dict[str, dict[str, Any]] = {}
    at_budget = tunes_at_budget(spec) and budgets
    judged = budgets[judged_index(spec, budgets)] if at_budget else None
    for arm in spec.arms:
        home = out / "runs" / arm / "tune"
        losses: dict[float, float | None] = {}
        profile: dict[str, dict[str, float | None]] = {}
        for d in sorted(home.iterdir()) if home.is_dir() else []:
            if not d.is_dir() or not d.name.startswith("lr"):
                continue
            lr = _rate_of(d)
            if at_budget:
                for b in budgets:
                    profile.setdefault(str(b.tokens), {})[f"{lr:.3g}"] = _final_loss(d / f"D{b.tokens}")
                losses[lr] = _final_loss(d / f"D{judged.tokens}")
            else:
                losses[lr] = _final_loss(d)
        if not losses:
            continue
        choice = choose_rate(losses)
        res[arm] = {
            "losses": {f"{lr:.3g}": losses[lr] for lr in sorted(losses)},
            **({"profile": profile, "judged_tokens": judged.tokens} if at_budget else {}),
            **choice,
        }
    return res


def tune_learning_rates(
    spec: Any, out: Path, workers: int, threads: int, log: Callable[[str], None], launcher: Any = None, **run: Any
) -> dict[str, float]:
    """Each arm's learning rate: every arm trains the same grid (``spec.lrs``, :func:`tune_jobs`) and runs at the
    rate :func:`choose_rate` picks; when any arm's choice lies at an edge of the grid, the grid grows by one step
    there for *every* arm, up to ``tune_extend`` times. Finished tuning runs are reused on a rerun. ``run``:
    :func:`~smallinit.experiments.crossover_runs.execute`'s ``retry_failed``, ``gflops`` and ``inprocess``.
    Returns arm → rate."""
    from smallinit.experiments.crossover_checks import check_reuse
    from smallinit.experiments.crossover_jobs import plan_budgets
    from smallinit.experiments.crossover_runs import execute

    step = grid_step(spec.lrs)
    grid = sorted(spec.lrs)
    budgets = plan_budgets(spec, tune_config(spec, spec.baseline, grid[0])) if tunes_at_budget(spec) else None
    extended = 0
    while True:
        jobs = [j for arm in spec.arms for lr in grid for j in tune_jobs(spec, out, arm, lr)]
        if budgets:
            check_reuse([j for j in jobs if j.kind == "trunk"], [j for j in jobs if j.kind == "branch"])
        done = execute(jobs, workers, log, threads, launcher, **run)
        stopped = [j for j in jobs if done.get(j.run_dir, ("done",))[0] in ("failed", "blocked")]
        failed = [j.run_dir for j in stopped if not _diverged(j)]  # a diverged rate is a result: no loss there
        if len(failed) < len(stopped):
            log(f"[crossover] {len(stopped) - len(failed)} tuning run(s) diverged: no loss at their rate")
        if failed:
            raise RunDirError(
                f"tuning run {failed[0].relative_to(out)} failed: {done[failed[0]][1]} (rerun with --retry-failed "
                "to run it again; the error and log are in its failed.json)"
            )
        tuned = collect_tuning(spec, out, budgets)
        grow: set[float] = set()
        for arm in spec.arms:
            t = tuned.get(arm)
            if t is None or t["chosen"] is None:
                raise RunDirError(f"no tuning run of arm {arm!r} reached a finite validation loss; lower the rates")
            if t["at_edge"] == "low":
                grow.add(float(f"{grid[0] / step:.3g}"))
            elif t["at_edge"] == "high":
                grow.add(float(f"{grid[-1] * step:.3g}"))
        if not grow or extended >= spec.tune_extend:
            break
        extended += 1
        grid = sorted({*grid, *grow})
        log(f"[crossover] a best rate at the grid's edge: every arm also tries {', '.join(f'{v:.3g}' for v in grow)}")
    return {arm: t["chosen"] for arm, t in collect_tuning(spec, out, budgets).items()}


__all__ = [
    "FIT_POINTS",
    "FLAT",
    "choose_rate",
    "collect_tuning",
    "grid_step",
    "judged_index",
    "lr_name",
    "tune_config",
    "tune_job",
    "tune_jobs",
    "tune_learning_rates",
    "tunes_at_budget",
]
