"""A crossover inside a reproduction: a preset's :class:`~smallinit.experiments.presets.CrossoverPlan` as a
:class:`~smallinit.experiments.crossover.CrossoverSpec`, its estimated time and plan lines, the budget D that fits
some hours, which of a preset's further crossovers (claims 2, 5, 10 in ``cpu-long``) fit after claim 1's, and
training them all (:func:`run_crossovers`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError
from smallinit.experiments.crossover import CrossoverSpec, arm_config, plan_jobs, run_crossover
from smallinit.experiments.crossover_tuning import tune_jobs
from smallinit.runs.rundir import read_json


def crossover_folder(xp: Any) -> str:
    """Where a preset's crossover lives under OUT: ``crossover`` for claim 1's, ``crossover-cK[-LABEL]`` for claim
    K's."""
    return "crossover" if xp.claim == 1 else f"crossover-c{xp.claim}" + (f"-{xp.label}" if xp.label else "")


def arm_settings(xp: Any) -> dict[str, tuple[float, float, str]]:
    """Arm name → (γ, norm ε, gate) of a :class:`~smallinit.experiments.presets.CrossoverPlan`: its own ``settings``
    first, then the named arms of :data:`~smallinit.experiments.presets.CROSSOVER_ARMS`."""
    from smallinit.experiments.presets import CROSSOVER_ARMS

    known = {**CROSSOVER_ARMS, **xp.settings}
    unknown = [a for a in xp.arms if a not in known]
    if unknown:
        raise ConfigError(f"crossover arm {unknown[0]!r} unknown; choose from {', '.join(known)}")
    return {a: known[a] for a in xp.arms}


def spec_from_preset(p: Any, corpus: str | os.PathLike, xp: Any = None) -> CrossoverSpec:
    """The :class:`CrossoverSpec` of a preset's :class:`~smallinit.experiments.presets.CrossoverPlan` (``xp``,
    default claim 1's) on ``corpus``: the preset's base config, its size's model shape (not its step count) and the
    plan's overrides; each arm's γ, ε and gate as typed fields (``model.gamma`` …) and the plan's learning rate
    (or the rates to tune). With ``tokens_per_param`` set, D = tokens_per_param × non-embedding parameters."""
    from smallinit.config import set_dotted

    xp = xp or p.crossover
    d = copy.deepcopy(p.base)
    for k, v in {**p.sizes[xp.size], **xp.overrides}.items():
        if k != "train.max_steps":
            set_dotted(d, k, v, what="preset key")
    set_dotted(d, "data.path", str(corpus))
    lr = xp.lr if xp.lr is not None else p.lrs[0]
    arms = {
        a: [f"model.gamma={g}", f"model.norm_eps={e}", f"model.gate={gate}", *([] if xp.lrs else [f"optim.lr={lr}"])]
        for a, (g, e, gate) in arm_settings(xp).items()
    }
    spec = CrossoverSpec(
        arms=arms,
        baseline=xp.arms[0],
        tokens=int(xp.tokens) or 1,
        base=f"preset {p.name}",
        seeds=list(range(xp.seeds)),
        fractions=list(xp.fractions),
        base_config=d,
        lrs=list(xp.lrs),
        tune_fraction=xp.tune_fraction,
        enough=p.enough,
    )
    if xp.tokens_per_param:
        cfg = arm_config(spec, spec.baseline, 0)
        vocab = (read_json(Path(corpus) / "meta.json") or {}).get("vocab_size")
        if vocab:
            cfg.model.vocab_size = int(vocab)
        spec.tokens = int(xp.tokens_per_param * cfg.model.num_params(non_embedding=True))
    return spec


def training_seconds(spec: CrossoverSpec, gflops: float) -> tuple[list[list[float]], list[str]]:
    """Estimated training seconds of every run, grouped in the batches the crossover trains one after another
    (tuning runs, trunks, branches; one process each at ``gflops`` GFLOP/s, counted as
    ModelConfig.flops_per_token), and one plan line per run: steps, tokens, tokens per parameter, time. The
    wall-clock is :func:`crossover_wall_seconds`; the machine time, the sum of all."""
    from smallinit.experiments.cost import fmt_seconds, model_cost

    trunks, branches, _ = plan_jobs(spec, Path("."))
    tunes = [j for a in spec.arms for lr in spec.lrs for j in tune_jobs(spec, Path("."), a, lr)]
    batches, lines = [], []
    for batch in (tunes, trunks, branches):
        batches.append([])
        for j in batch:
            c = model_cost(j.config)
            t = j.config.train
            per_step = t.batch_size * j.config.data.seq_len
            tokens = (t.max_steps - j.start) * per_step
            secs = c["flops_per_token"] * tokens / (gflops * 1e9)
            batches[-1].append(secs)
            end = t.max_steps * per_step
            tuning = j.kind == "tune" or (spec.lrs and j.seed == spec.tune_seed)
            what = f"lr {j.config.optim.lr:.3g}" if tuning else f"seed {j.seed}"
            kind = f"tune {j.run_dir.name}" if tuning and j.kind != "tune" else j.kind
            lines.append(
                f"  {j.arm:<11} {what:<8} {kind:<6} steps {j.start:>6}→{t.max_steps:<6} trains "
                f"{tokens / 1e6:8.2f}M tokens (ends at {end / c['non_embedding_params']:8.1f} tokens/param) "
                f"≈ {fmt_seconds(secs)}"
            )
    return batches, lines


def crossover_wall_seconds(spec: CrossoverSpec, gflops: float, jobs: int) -> float:
    """Estimated wall-clock of a crossover trained ``jobs`` runs at a time: the batches of :func:`training_seconds`
    one after another, each its :func:`~smallinit.experiments.cost.wall_seconds`, a batch of fewer runs than jobs
    sped up by sharing the cores (:func:`~smallinit.experiments.cost.sharing_speedup`, as
    :func:`~smallinit.experiments.crossover_runs.batch_threads` assigns them). The rates added when an edge rate
    wins are not counted."""
    from smallinit.experiments.cost import sharing_speedup, wall_seconds

    return sum(
        wall_seconds([s / sharing_speedup(len(batch), jobs) for s in batch], jobs)
        for batch in training_seconds(spec, gflops)[0]
    )


def tokens_for_seconds(spec: CrossoverSpec, seconds: float, gflops: float, jobs: int) -> int:
    """The largest budget D whose crossover trains in ``seconds`` with ``jobs`` runs at a time (the cost is linear
    in D: every run of the plan scales with it), rounded down to whole steps of the largest budget."""
    probe = copy.deepcopy(spec)
    probe.tokens = 1 << 24
    secs = crossover_wall_seconds(probe, gflops, jobs)
    return int(probe.tokens * max(0.0, seconds) / secs) if secs > 0 else 0


def choose_extras(p: Any, corpus: Path, seconds_left: float, gflops: float, jobs: int) -> tuple[list[Any], list[str]]:
    """The preset's ``extra_crossovers`` that fit ``seconds_left`` (wall-clock, ``jobs`` runs at a time), taken in
    the preset's order, each whole; a claim with several crossovers (claim 2's widths) runs only if all of them fit.
    Returns (the chosen plans, one line per claim: its time and whether it fits)."""
    from smallinit.experiments.cost import fmt_seconds

    by_claim: dict[int, list[Any]] = {}
    for xp in p.extra_crossovers:
        by_claim.setdefault(xp.claim, []).append(xp)
    chosen, lines = [], []
    for claim, plans in by_claim.items():
        secs = sum(crossover_wall_seconds(spec_from_preset(p, corpus, xp), gflops, jobs) for xp in plans)
        fits = secs <= seconds_left
        if fits:
            chosen += plans
            seconds_left -= secs
        lines.append(
            f"  claim {claim}: {len(plans)} crossover(s) ≈ {fmt_seconds(secs)} — "
            + ("fits" if fits else f"does not fit (≈ {fmt_seconds(secs - seconds_left)} more needed)")
        )
    return chosen, lines


def describe_crossovers(p: Any, xs: CrossoverSpec, corpus: Path, gflops: float, jobs: int) -> list[str]:
    """The plan's lines for a preset's crossovers: claim 1's (``xs``) run by run, then one line per further one;
    times at ``gflops`` GFLOP/s, ``jobs`` runs at a time."""
    from smallinit.experiments.cost import fmt_seconds

    batches, lines = training_seconds(xs, gflops)
    machine = sum(map(sum, batches))
    rates = ", ".join(f"{x:g}" for x in xs.lrs)
    head = (
        f"crossover (claim 1; claim 7 scores its largest budget): arms {', '.join(xs.arms)}, "
        f"{len(xs.seeds)} seed(s), D = {xs.tokens:,} tokens, budgets D × {', '.join(f'{f:g}' for f in xs.fractions)}"
        + (
            f", learning rate tuned per arm over {rates} ({xs.tune_fraction:g}·D "
            "WSD runs; the grid grows past a winning edge)"
            if xs.lrs
            else f", learning rate {xs.arms[xs.baseline][-1].split('=')[1]} for every arm (not tuned per arm)"
        )
    )
    out = [
        head,
        *lines,
        f"crossover ≈ {fmt_seconds(crossover_wall_seconds(xs, gflops, jobs))} wall-clock"
        + (f" (≈ {machine / 3600:,.0f} device-hours)" if p.name == "gpu" else ""),
    ]
    for xp in p.extra_crossovers:
        spec = spec_from_preset(p, corpus, xp)
        t = crossover_wall_seconds(spec, gflops, jobs)
        n = len(spec.arms) * len(spec.seeds)
        out.append(
            f"{crossover_folder(xp)} (claim {xp.claim}): {xp.size}, arms {', '.join(spec.arms)}, "
            f"{len(spec.seeds)} seed(s), D = {spec.tokens:,} tokens ({n} trunks"
            f"{f', rates tuned over {len(spec.lrs)} values' if spec.lrs else ''}) ≈ {fmt_seconds(t)}"
        )
    return out


def run_crossovers(
    p: Any,
    xs: CrossoverSpec,
    out: Path,
    corpus: Path,
    jobs: int,
    log: Callable[[str], None],
    launcher: Any = None,
    retry_failed: bool = False,
    gflops: float | None = None,
    inprocess: bool | None = None,
) -> None:
    """Train and analyse a reproduction's crossovers: claim 1's (``xs``) in ``OUT/crossover``, then the preset's
    further ones, each in its :func:`crossover_folder` (``inprocess``: every run in this process, as the preset's
    other runs)."""
    kw = {"workers": jobs, "log": log, "launcher": launcher, "retry_failed": retry_failed, "gflops": gflops}
    kw["inprocess"] = inprocess
    log(f"[reproduce] crossover: {len(xs.arms)} arms × {len(xs.seeds)} seed(s), D = {xs.tokens:,} tokens")
    run_crossover(xs, out / "crossover", **kw)
    for xp in p.extra_crossovers:
        log(f"[reproduce] {crossover_folder(xp)} (claim {xp.claim})")
        run_crossover(spec_from_preset(p, corpus, xp), out / crossover_folder(xp), **kw)
