"""Claim 6: under γ = 1 weight matrices condense (stable rank ||W||_F²/||W||_2² drops) and then expand again; under
γ = 0.5 much less. Arms at the probe size, ε = 1e-12, no gate: γ = 1 ("small") and γ = 0.5 ("std"), **trained at the
same learning rate** (:meth:`~smallinit.experiments.claims.context.ClaimContext.common_lr`: the γ = 1 arm's chosen
rate, at which the γ = 0.5 arm also ran seed 0) — a pair that differs in γ only.

Rule (:func:`judge`, statistics from :func:`condensation_stats`), per block matrix with stable rank r(t) at the
steps probed in both arms (the training probes add the log-spaced early steps 1, 2, 5, 10, 20, 50, … below
``probe.every``, :func:`smallinit.probes.training.early_probe_steps`, so the first updates are seen):

- t_end = the last common step; t_c = the common step strictly between 0 and t_end nearest, in log-steps, to
  √(t_1 · t_end) (t_1 = the first common step after 0): the middle of the run on the log-step axis, fixed by the
  schedule before any stable rank is read (never the minimum of the data, which would make the expansion ≥ 0 by
  construction);
- condensation c = log r(0) − log r(t_c), measured **from step 0**;  expansion x = log r(t_end) − log r(t_c)
  (signed: a monotone decrease gives x < 0, a flat trajectory x ≈ 0).

AdamW's first updates are ≈ lr per entry whatever the init, so any matrix's stable rank moves in the first steps;
the control for that is the **same matrix under γ = 0.5 at the same steps and the same learning rate**: part (a)
is the drop under γ = 1 beyond the drop under γ = 0.5. Parts:

(a) c(γ=1) − c(γ=0.5) > 0;   (b) x(γ=1) > 0;   (c) x(γ=1) − x(γ=0.5) > 0.

Noise: with k ≥ 2 seeds in both arms each statistic is averaged over matrices per seed and the part is a 95%
t-interval over the k seed-paired values (:func:`~smallinit.experiments.claims.rules.seed_paired_effect`; seeds
paired by number); with one seed, a bootstrap 95% interval over matrices paired by name (matrices of one run share
its training noise, so this interval is a lower bound of the noise — the notes say so). Supported when all three
parts are, not supported when any is below 0 (rules.combine).

**Where (b) and (c) can show** (:func:`can_show_expansion`): "later expand" needs a horizon long enough to reach the
expansion. The `cpu` preset's 240-step runs saw γ = 1's stable rank still falling at their end, while the 1,562-step
trunks of the same width saw it rise; from runs that end before :data:`EXPANSION_MIN_STEPS` steps, (b) and (c) read
"inconclusive — not reached" unless the horizon shows the expansion (the part is supported). Stable rank is a
function of the weights alone, so there is no probe-batch noise to add.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from smallinit.core.figures import finish_axes
from smallinit.experiments.claims.context import ClaimContext, fmt_lr
from smallinit.experiments.claims.plots import plot_probe_series, plot_row_cosine_heatmaps, pyplot, save
from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    NOT_REACHED,
    SUPPORTED,
    Effect,
    Verdict,
    combine,
    is_finite,
    paired_effect,
    seed_paired_effect,
)
from smallinit.experiments.presets import EARLY_ARMS, Arm, Preset, arm
from smallinit.runs.rundir import config_get, read_config, read_probes

ID = 6
CLAIM = "Weights condense (stable rank drops) then expand under γ = 1, not under γ = 0.5."


CROSSOVER_PAIR = ("paper", "gamma-only")
"""With a crossover that has both arms, probes on and **one learning rate for every arm** (no per-arm tuning), the
claim reads their trunks: γ = 1 vs γ = 0.5, both with ε = 1e-12 and the gate, at the same rate — the pair differs
in γ only, and trains D tokens instead of a short run. A crossover that tunes each arm's rate (``lrs``) trains the
pair at different rates (1e-3 vs 3e-3 in a ``cpu`` run): the claim then trains its own pair of short runs."""


def uses_crossover(p: Preset) -> bool:
    x = p.crossover
    return (
        x is not None
        and 1 in p.claims
        and all(a in x.arms for a in CROSSOVER_PAIR)
        and not x.lrs
        and int(x.overrides.get("probe.every", p.base.get("probe", {}).get("every", 0)) or 0) > 0
    )


def arms(p: Preset) -> dict[str, Arm]:
    if uses_crossover(p):
        return {}  # the crossover's trunks (claim 1's runs) carry the probe logs
    s = p.probe_size
    if p.early_arms:
        return {"small": arm(s, EARLY_ARMS["B"]), "std": arm(s, EARLY_ARMS["A"])}
    return {"small": arm(s, (1.0, 1e-12, "none")), "std": arm(s, (0.5, 1e-12, "none"))}


EXPANSION_MIN_STEPS = 1000
"""Runs that end before this step cannot show parts (b) and (c) unless they do: between the 240 steps at which γ = 1's
stable rank was still falling and the 1,562 at which it had risen (d 128, `cpu` preset, 2026-12)."""


def can_show_expansion(end_step: float | None, min_steps: int = EXPANSION_MIN_STEPS) -> tuple[bool, str]:
    """Whether runs that end at ``end_step`` can show the expansion (parts (b), (c)), and the words why not."""
    if end_step is None or end_step >= min_steps:
        return True, ""
    return False, (
        f"the runs end at step {end_step:g}, before the {min_steps:,} steps an expansion needs to show "
        "(240-step runs saw the stable rank still falling, 1,562-step trunks saw it rise)"
    )


def preset_horizon(p: Preset) -> int | None:
    """The steps of a preset's claim-6 runs: its probe size's ``train.max_steps`` (None with the crossover's trunks)."""
    if uses_crossover(p):
        return None
    steps = p.sizes.get(p.probe_size, {}).get("train.max_steps", p.base.get("train", {}).get("max_steps"))
    return None if steps is None else int(steps)


def trajectory_stats(srank: Sequence[float]) -> dict[str, float]:
    """The OLD statistics, kept for comparison only (not used by :func:`judge`): drop = 1 − min r / r(0) from init
    and rebound = r(end) / min r − 1, which is ≥ 0 for any trajectory (0 for a monotone one)."""
    r = [x for x in srank if is_finite(x) and x > 0]
    if len(r) < 2:
        return {"drop": math.nan, "rebound": math.nan}
    m = min(r)
    return {"drop": 1 - m / r[0], "rebound": r[-1] / m - 1}


def reference_steps(steps: Sequence[float]) -> tuple[float, float, float] | None:
    """(0, t_c, t_end) of a probe schedule: t_end = the last step, t_c = the step strictly between 0 and t_end
    nearest √(t_1·t_end) in log-steps (t_1 = the first step after 0; the earlier on a tie). None when the schedule
    lacks step 0 or has fewer than three steps after it."""
    st = sorted({float(t) for t in steps if is_finite(t) and t >= 0})
    after = [t for t in st if t > 0]
    if not st or st[0] != 0 or len(after) < 3:
        return None
    t1, t_end = after[0], after[-1]
    mid = 0.5 * (math.log(t1) + math.log(t_end))
    t_c = min(after[:-1], key=lambda t: (abs(math.log(t) - mid), t))
    return 0.0, t_c, t_end


def condensation_stats(
    steps: Sequence[float], srank: Sequence[float], ref: tuple[float, float, float] | None = None
) -> dict[str, float]:
    """One matrix's trajectory r(t) at ``steps`` (aligned) → condensation = log r(0) − log r(t_c) and expansion =
    log r(t_end) − log r(t_c), at ``ref`` = (0, t_c, t_end) (default :func:`reference_steps` of ``steps``). NaN when
    a reference step is missing, or its rank is non-finite or ≤ 0."""
    r = {float(t): float(x) for t, x in zip(steps, srank) if is_finite(t) and is_finite(x) and x > 0}
    ref = ref if ref is not None else reference_steps(steps)
    nan = {
        "condensation": math.nan,
        "expansion": math.nan,
        "ref_step": math.nan,
        "mid_step": math.nan,
        "end_step": math.nan,
    }
    if ref is None or any(t not in r for t in ref):
        return nan
    t0, t_c, t_end = ref
    return {
        "condensation": math.log(r[t0]) - math.log(r[t_c]),
        "expansion": math.log(r[t_end]) - math.log(r[t_c]),
        "ref_step": t0,
        "mid_step": t_c,
        "end_step": t_end,
    }


Trajectories = Mapping[str, Sequence[float]]
"""{matrix name: stable rank at each probed step}."""


def _as_seeds(x: Any) -> dict[int, Any]:
    """One run ({matrix: ranks}) → {0: it}; already {seed: ...} → itself."""
    if x and all(isinstance(k, int) for k in x):
        return dict(x)
    return {0: x}


def judge(
    small: Trajectories | Mapping[int, Trajectories],
    std: Trajectories | Mapping[int, Trajectories],
    steps_small: Sequence[float] | Mapping[int, Sequence[float]] | None = None,
    steps_std: Sequence[float] | Mapping[int, Sequence[float]] | None = None,
    expansion_min_steps: int | None = None,
) -> Verdict:
    """Claim 6. Stable-rank trajectories of the γ = 1 (``small``) and γ = 0.5 (``std``) arms, same architecture and
    learning rate: one run each ({matrix: ranks}) or several ({seed: {matrix: ranks}}, paired by seed);
    ``steps_*`` = the probed steps the ranks are aligned with (one list, or {seed: list}; default 0, 1, 2, …). The
    reference steps (0, t_c, t_end) come from the steps both arms probed (:func:`reference_steps`); parts (a)–(c)
    and their noise as in the module docstring; with ``expansion_min_steps``, (b) and (c) from runs that end before
    it are not reached unless supported (:func:`can_show_expansion`)."""
    per_seed, refs = _per_seed_stats(_as_seeds(small), _as_seeds(std), steps_small, steps_std)
    if not per_seed:
        return Verdict(
            INCONCLUSIVE,
            notes=["no seed with common matrices and ≥ 3 commonly probed steps after step 0 (and step 0 itself)"],
        )
    seeds = sorted(per_seed)
    a, b, c = _seed_paired_parts(per_seed) if len(seeds) >= 2 else _matrix_paired_parts(per_seed[seeds[0]])
    notes = []
    if len(seeds) < 2:
        notes.append(
            "one seed: the intervals are a bootstrap over the matrices of one run, which share its training "
            "noise — a lower bound of the noise; ≥ 2 seeds give a t-interval over seeds"
        )
    every = {
        (a_, k): [x for s in seeds for x in _column(per_seed[s], a_, k)]
        for a_ in ("small", "std")
        for k in ("condensation", "expansion")
    }
    ref = refs[seeds[0]]
    shows, why = (True, "") if expansion_min_steps is None else can_show_expansion(ref[2], expansion_min_steps)
    verdicts = [a.verdict, b.verdict, c.verdict]
    if not shows:
        verdicts[1:] = [v if v == SUPPORTED else NOT_REACHED for v in verdicts[1:]]
        notes.append(f"parts (b), (c) not reached: {why} (they read '{b.verdict}', '{c.verdict}')")
    nums = {
        "condensation_gamma1": _mean(every[("small", "condensation")]),
        "condensation_gamma0.5": _mean(every[("std", "condensation")]),
        "expansion_gamma1": _mean(every[("small", "expansion")]),
        "expansion_gamma0.5": _mean(every[("std", "expansion")]),
        "matrices": len(per_seed[seeds[0]]["small"]),
        "seeds": seeds,
        "steps_gamma1": {"ref_step": ref[0], "mid_step": ref[1], "end_step": ref[2]},
    }
    nums["parts"] = verdicts
    return Verdict(combine(verdicts), [a, b, c], nums, notes)


_PerSeed = dict[int, dict[str, dict[str, dict[str, float]]]]
"""{seed: {"small" | "std": {matrix: :func:`condensation_stats`}}}."""

_LABELS = (
    "(a) condensation log r(0) − log r(t_c): γ=1 − γ=0.5 at the same steps",
    "(b) expansion log r(t_end) − log r(t_c) under γ=1",
    "(c) expansion: γ=1 − γ=0.5 (null: the other arm)",
)


def _steps_of(steps: Any, seed: int, series: Trajectories) -> list[float]:
    """The probed steps of one seed's trajectories (``steps``: one list or {seed: list}; None: 0, 1, 2, …)."""
    if steps is None:
        return list(range(max((len(v) for v in series.values()), default=0)))
    st = steps.get(seed) if isinstance(steps, Mapping) else steps
    return [float(t) for t in st] if st is not None else []


def _per_seed_stats(
    S: dict[int, Trajectories], T: dict[int, Trajectories], steps_small: Any, steps_std: Any
) -> tuple[_PerSeed, dict[int, tuple[float, float, float]]]:
    """(each common seed's condensation statistics of the matrices both arms have, its reference steps), at the
    steps both arms probed; seeds without common matrices or reference steps are left out."""
    per_seed: _PerSeed = {}
    refs = {}
    for seed in sorted(set(S) & set(T)):
        names = [n for n in S[seed] if n in T[seed]]
        ss, ts = _steps_of(steps_small, seed, S[seed]), _steps_of(steps_std, seed, T[seed])
        ref = reference_steps(sorted(set(ss) & set(ts)))
        if not names or ref is None:
            continue
        refs[seed] = ref
        per_seed[seed] = {
            "small": {n: condensation_stats(ss, S[seed][n], ref) for n in names},
            "std": {n: condensation_stats(ts, T[seed][n], ref) for n in names},
        }
    return per_seed, refs


def _mean(v: list[float]) -> float | None:
    f = [x for x in v if is_finite(x)]
    return float(np.mean(f)) if f else None


def _column(stats: dict[str, dict[str, dict[str, float]]], arm_: str, key: str) -> list[float]:
    """One statistic of every matrix of one arm (one seed's entry of :data:`_PerSeed`)."""
    d = stats[arm_]
    return [d[n][key] for n in d]


def _seed_paired_parts(per_seed: _PerSeed) -> tuple[Effect, Effect, Effect]:
    """Parts (a)–(c) with k ≥ 2 seeds: each statistic averaged over matrices per seed, a t-interval over seeds."""
    seeds = sorted(per_seed)
    m = {
        (s, a_, k): _mean(_column(per_seed[s], a_, k))
        for s in seeds
        for a_ in ("small", "std")
        for k in ("condensation", "expansion")
    }

    def sv(a_: str, k: str) -> dict[int, float]:
        return {s: m[(s, a_, k)] for s in seeds if m[(s, a_, k)] is not None}

    return (
        seed_paired_effect(_LABELS[0], sv("small", "condensation"), sv("std", "condensation")),
        seed_paired_effect(_LABELS[1], sv("small", "expansion"), {s: 0.0 for s in seeds}),
        seed_paired_effect(_LABELS[2], sv("small", "expansion"), sv("std", "expansion")),
    )


def _matrix_paired_parts(stats: dict[str, dict[str, dict[str, float]]]) -> tuple[Effect, Effect, Effect]:
    """Parts (a)–(c) with one seed: a bootstrap over the matrices, paired by name."""
    xs = _column(stats, "small", "expansion")
    return (
        paired_effect(
            _LABELS[0], _column(stats, "small", "condensation"), _column(stats, "std", "condensation"), "matrices"
        ),
        paired_effect(_LABELS[1], xs, [0.0] * len(xs), "matrices"),
        paired_effect(_LABELS[2], xs, _column(stats, "std", "expansion"), "matrices"),
    )


def srank_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """{block matrix name: its stable rank at each probed step}."""
    out: dict[str, list[float]] = {}
    for rec in records:
        for name, m in (rec.get("matrices") or {}).items():
            if name.startswith("blocks.") and m.get("srank") is not None:
                out.setdefault(name, []).append(float(m["srank"]))
    return out


def srank_table(records: list[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]]]:
    """(probed steps, {block matrix name: its stable rank at each of those steps, NaN where a record lacks it})."""
    steps = [float(r.get("step", i)) for i, r in enumerate(records)]
    names = sorted(
        {
            n
            for r in records
            for n, m in (r.get("matrices") or {}).items()
            if n.startswith("blocks.") and m.get("srank") is not None
        }
    )
    out = {
        n: [float(((r.get("matrices") or {}).get(n) or {}).get("srank") or math.nan) for r in records] for n in names
    }
    return steps, out


def run_lr(rd: Path) -> float | None:
    """The learning rate a run trained at (its config.yaml's optim.lr; None when unreadable)."""
    try:
        v = config_get(read_config(rd), "optim.lr")
    except Exception:  # noqa: BLE001 - a missing or damaged config: the rate is unknown
        return None
    return float(v) if is_finite(v) else None


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    crossover = uses_crossover(ctx.p)
    pair = _crossover_pair(ctx) if crossover else _own_pair(ctx)
    if isinstance(pair, str):
        what = "stable rank over the crossover's trunks" if crossover else "stable rank, γ = 1 vs γ = 0.5"
        return ctx.result(what, None, notes=[pair])
    run_dirs, common = pair.run_dirs, pair.common
    recs = {a_: {s: read_probes(rd) for s, rd in d.items()} for a_, d in run_dirs.items()}
    tables = {a_: {s: srank_table(r) for s, r in d.items() if r} for a_, d in recs.items()}
    v = judge(
        {s: t[1] for s, t in tables["small"].items()},
        {s: t[1] for s, t in tables["std"].items()},
        {s: t[0] for s, t in tables["small"].items()},
        {s: t[0] for s, t in tables["std"].items()},
        expansion_min_steps=EXPANSION_MIN_STEPS,
    )
    v.notes += pair.notes
    s0 = common[0]
    ps, pt = recs["small"].get(s0, []), recs["std"].get(s0, [])
    plots = [
        plot_srank(
            ctx.out,
            "claim6_srank.png",
            {"γ=1": ps, "γ=0.5": pt},
            title=f"Claim 6: stable rank / its initial value (mean over block matrices, seed {s0})",
        ),
        plot_probe_series(
            ctx.out,
            "claim6_condensation.png",
            {"γ=1": ps, "γ=0.5": pt},
            "cond_mean",
            "condensation index (mean |cos| between rows)",
            title="Claim 6: condensation index",
        ),
        plot_row_cosine_heatmaps(
            ctx.out, "claim6_heatmaps.png", {"γ=1": [run_dirs["small"][s0]], "γ=0.5": [run_dirs["std"][s0]]}
        ),
    ]
    ref = v.numbers.get("steps_gamma1") or {}
    at = (
        f" (t_c = {ref['mid_step']:g}, t_end = {ref['end_step']:g})"
        if is_finite(ref.get("mid_step")) and is_finite(ref.get("end_step"))
        else ""
    )
    measured = (
        "stable rank r = ||W||_F²/||W||_2² of every block matrix over training (probes, log-spaced early "
        "steps); condensation = log r(0) − log r(t_c), expansion = log r(t_end) − log r(t_c), t_c the middle "
        f"of the run in log-steps{at}; condensation counts beyond the same matrix's drop under γ = 0.5 at the "
        f"same steps; {pair.words}; {len(common)} seed(s), paired by seed"
    )
    return ctx.result(measured, v, plots=plots, runs=pair.runs)


class _Pair(NamedTuple):
    """The γ = 1 / γ = 0.5 runs claim 6 reads, both at one learning rate."""

    run_dirs: dict[str, dict[int, Path]]  # {"small" | "std": {seed: run}}
    common: list[int]  # the seeds both arms have
    words: str  # the arms, in the "measured" line
    runs: list[str]  # the runs, as listed in the report
    notes: list[str]


def _crossover_pair(ctx: ClaimContext) -> _Pair | str:
    """The crossover's paper and γ-only trunks (:data:`CROSSOVER_PAIR`); why not, in words, when they did not
    finish or trained at different or unknown rates."""
    seeds = range(ctx.p.crossover.seeds)
    trunks = {a: {s: rd for s in seeds if (rd := ctx.crossover_trunk(a, s)) is not None} for a in CROSSOVER_PAIR}
    common = sorted(set(trunks["paper"]) & set(trunks["gamma-only"]))
    if not common:
        return "the crossover's paper and γ-only trunks did not finish"
    lrs = {run_lr(trunks[a][s]) for a in CROSSOVER_PAIR for s in common}
    if len(lrs) != 1 or None in lrs:
        return (
            "the trunks trained at different or unknown learning rates "
            f"({', '.join(map(str, sorted(lrs, key=str)))}):"
            " condensation is compared only between arms at the same rate"
        )
    lr = lrs.pop()
    return _Pair(
        {"small": {s: trunks["paper"][s] for s in common}, "std": {s: trunks["gamma-only"][s] for s in common}},
        common,
        f"the crossover's trunks, paper (γ = 1) vs γ-only (γ = 0.5), both ε = 1e-12 with the gate, "
        f"constant rate {fmt_lr(lr)} for both, to {ctx.crossover_trunk_tokens():,} tokens",
        [f"crossover/runs/{a}/seed{s}/trunk" for a in CROSSOVER_PAIR for s in common],
        [],
    )


def _own_pair(ctx: ClaimContext) -> _Pair | str:
    """The claim's own "small" and "std" arms at the rate both finished a run at (:meth:`ClaimContext.common_lr`);
    why not, in words, when there is none."""
    small, std = ctx.roles["small"], ctx.roles["std"]
    lr = ctx.common_lr(small, std)
    if lr is None:
        return "no learning rate at which both arms finished a run"
    a_s, a_t = ctx.runs_by_seed(small, lr), ctx.runs_by_seed(std, lr)
    common = sorted(set(a_s) & set(a_t))
    run_dirs = {"small": {s: a_s[s] for s in common}, "std": {s: a_t[s] for s in common}}
    notes = []
    if ctx.chosen.get(small.key) != ctx.chosen.get(std.key):
        notes.append(
            f"the arms' own chosen rates differ ({fmt_lr(ctx.chosen.get(small.key) or math.nan)} vs "
            f"{fmt_lr(ctx.chosen.get(std.key) or math.nan)}): both are read at {fmt_lr(lr)}, the seeds "
            "both ran there"
        )
    return _Pair(
        run_dirs,
        common,
        f"γ = 1 vs γ = 0.5 (ε = 1e-12, no gate), both at learning rate {fmt_lr(lr)}",
        [rd.name for d in run_dirs.values() for rd in d.values()],
        notes,
    )


def plot_srank(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], title: str = "") -> str | None:
    """Stable rank divided by its value at step 0, averaged over block matrices (thick) and per matrix type
    (thin), vs step."""
    from smallinit.probes.training import matrix_kind

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    drawn = False
    for i, (label, recs) in enumerate(groups.items()):
        if not recs:
            continue
        first = {k: v.get("srank") for k, v in (recs[0].get("matrices") or {}).items() if k.startswith("blocks.")}
        steps, mean, kinds = [], [], {}
        for r in recs:
            rel = {
                k: v["srank"] / first[k]
                for k, v in (r.get("matrices") or {}).items()
                if k in first and first[k] and v.get("srank") is not None
            }
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
    finish_axes(
        ax, "step", "stable rank / stable rank at init", title + "\n(thin lines: one matrix type each)", title_size=9
    )
    return save(fig, out, name)
