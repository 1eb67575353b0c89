"""Claim 4: small init raises the first-token attention share (the attention sink); the gate brings it down.
Arms at the probe size, ε = 1e-12: γ = 0.5 no gate ("std"), γ = 1 no gate ("small"), γ = 1 elementwise gate
("small_gate"); with ``sink_without_bos`` the same three again without a BOS token ("…/nobos").

Rule (:func:`judge`). Per run, the sink share of each layer averaged over the last quarter of the probed steps
(:func:`layer_sinks`), then averaged over layers: one number per arm and seed. Parts, each a 95% **t-interval over
seed-paired differences** (:func:`~smallinit.experiments.claims.rules.seed_paired_effect`; seed s of every arm sees
the same batches; seeds paired by number): (a) small init raises it, γ=1 − γ=0.5 (no gate); (b) the gate lowers it,
γ=1 no gate − γ=1 gate. A verdict needs ≥ :data:`MIN_SEEDS` = 3 seeds in the compared arms; with fewer, the parts
are inconclusive and a note says how many the preset ran. (The layers of one run are not independent units: a
bootstrap over the 2 layers of one run is the interval [min, max] and gave ≈ 25% false verdicts per part on null
data; the t-interval over seeds gives the nominal 5% — tested by simulation.)

A preset with ``early_arms`` (``cpu-0.1b``) reads its four shared arms: (a) B − A (γ = 1 vs γ = 0.5, both ε = 1e-5
and no gate) and (b) C − D (no gate vs the gate, both γ = 1 and ε = 1e-12); the same two differences are also given
per layer group (:func:`layer_groups`: first, middle and last third of the layers), reported beside the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.experiments.claims.rules import INCONCLUSIVE, Effect, Verdict, combine, is_finite, seed_paired_effect
from smallinit.experiments.presets import EARLY_ARMS, PAPER, Arm, Preset, arm
from smallinit.runs.rundir import summarize_probe_record

ID = 4
CLAIM = "Small init raises the first-token attention share; the gate brings it down."

MIN_SEEDS = 3
"""Seeds a verdict needs (the preset's ``seeds[4]``): a t-interval over seed-paired differences with k − 1 ≥ 2
degrees of freedom."""


def arms(p: Preset) -> dict[str, Arm]:
    s = p.probe_size
    roles = {"std": arm(s, (0.5, 1e-12, "none")), "small": arm(s, (1.0, 1e-12, "none")), "small_gate": arm(s, PAPER)}
    if p.early_arms:
        e = EARLY_ARMS
        roles = {
            "std": arm(s, e["A"]),
            "small": arm(s, e["B"]),
            "small_nogate": arm(s, e["C"]),
            "small_gate": arm(s, e["D"]),
        }
    if p.sink_without_bos:
        roles.update({f"{k}/nobos": replace(a, bos=False) for k, a in list(roles.items())})
    return roles


PerSeed = Mapping[int, Sequence[float]]
"""{seed: the sink share of each layer}."""


def _seeds(x: PerSeed | Sequence[Sequence[float]] | Sequence[float]) -> dict[int, list[float]]:
    """{seed: per-layer shares} from a mapping, a list of runs (seed = position) or one run's layers (seed 0)."""
    if isinstance(x, Mapping):
        return {int(k): list(v) for k, v in x.items()}
    x = list(x)
    if x and not isinstance(x[0], (int, float)):
        return {i: list(v) for i, v in enumerate(x)}
    return {0: x} if x else {}


def layer_mean(layers: Sequence[float]) -> float:
    v = [float(x) for x in layers if is_finite(x)]
    return float(np.mean(v)) if v else math.nan


def judge(
    sink_std: PerSeed | Sequence,
    sink_small: PerSeed | Sequence,
    sink_small_gate: PerSeed | Sequence,
    min_seeds: int = MIN_SEEDS,
    sink_small_nogate: PerSeed | Sequence | None = None,
) -> Verdict:
    """Claim 4. Per-layer first-token attention shares of the three arms (γ = 0.5 no gate, γ = 1 no gate, γ = 1
    with the gate), {seed: [layer shares]} (a list of runs is read as seeds 0, 1, …; one run's list of layers as
    seed 0). Each run counts as its layer mean; (a) γ=1 − γ=0.5 (no gate) and (b) γ=1 no gate − γ=1 gate are 95%
    t-intervals over the seed-paired differences, inconclusive with fewer than ``min_seeds`` pairs. Part (b)'s
    no-gate arm is ``sink_small_nogate`` when given (another ε than part (a)'s), else ``sink_small``."""
    nogate = sink_small if sink_small_nogate is None else sink_small_nogate
    m = {
        name: {s: layer_mean(v) for s, v in _seeds(x).items()}
        for name, x in (("std", sink_std), ("small", sink_small), ("gate", sink_small_gate), ("nogate", nogate))
    }
    raise_ = seed_paired_effect("(a) sink share: γ=1 − γ=0.5 (no gate)", m["small"], m["std"], min_seeds)
    gate = seed_paired_effect("(b) sink share: no gate − gate (γ=1)", m["nogate"], m["gate"], min_seeds)

    def mean(d: dict[int, float]) -> float | None:
        v = [x for x in d.values() if is_finite(x)]
        return float(np.mean(v)) if v else None

    nums = {
        "sink_gamma0.5": mean(m["std"]),
        "sink_gamma1": mean(m["small"]),
        "sink_gamma1_gate": mean(m["gate"]),
        "sink_gamma1_nogate_part_b": mean(m["nogate"]),
        "seeds": sorted(set(m["std"]) & set(m["small"]) & set(m["gate"])),
    }
    notes = []
    k = len(nums["seeds"])
    if k < min_seeds:
        notes.append(
            f"{k} seed(s) in all three arms: a verdict needs ≥ {min_seeds} (a t-interval over seed-paired "
            "differences; the layers of one run are not independent units)"
        )
    return Verdict(combine([raise_.verdict, gate.verdict]), [raise_, gate], nums, notes)


def layer_groups(n_layers: int, k: int = 3) -> list[range]:
    """The layers split into ``k`` consecutive groups as equal as possible (first, middle, last third for k = 3)."""
    k = max(1, min(k, n_layers))
    edges = [round(i * n_layers / k) for i in range(k + 1)]
    return [range(edges[i], edges[i + 1]) for i in range(k)]


def group_effects(claimed: PerSeed, other: PerSeed, label: str, k: int = 3) -> list[Effect]:
    """Per layer group (:func:`layer_groups`), the seed-paired difference of the group's mean sink share,
    claimed − other, with its 95% t-interval over seeds."""
    n = min((len(v) for v in [*claimed.values(), *other.values()]), default=0)
    out = []
    for g in layer_groups(n, k) if n else []:
        a = {s: layer_mean([v[i] for i in g]) for s, v in claimed.items()}
        b = {s: layer_mean([v[i] for i in g]) for s, v in other.items()}
        out.append(seed_paired_effect(f"{label}, layers {g.start}–{g.stop - 1}", a, b, MIN_SEEDS))
    return out


def layer_sinks(records: list[dict[str, Any]], tail: float = 0.25) -> list[float]:
    """Per-layer first-token attention share averaged over the last ``tail`` of the probed steps."""
    if not records:
        return []
    k = max(1, int(round(len(records) * tail)))
    recs = records[-k:]
    L = len(recs[-1].get("layers") or [])
    out = []
    for i in range(L):
        vals = [r["layers"][i].get("sink") for r in recs if len(r.get("layers") or []) > i]
        vals = [v for v in vals if v is not None]
        out.append(float(np.mean(vals)) if vals else math.nan)
    return out


def analyse(ctx: ClaimContext) -> dict[str, Any]:
    roles = ctx.roles
    variants = [("", "with BOS")] + ([("/nobos", "without BOS")] if ctx.p.sink_without_bos else [])
    verdicts, effects, tables, plots, nums, notes = [], [], [], [], {}, []
    for suffix, label in variants:
        arms_ = {k: roles[r + suffix] for k, r in (("std", "std"), ("small", "small"), ("gate", "small_gate"))}
        arms_["nogate"] = roles.get("small_nogate" + suffix, arms_["small"])
        per = {
            k: {s: ls for s, recs in ctx.probes_by_seed(a).items() if (ls := layer_sinks(recs))}
            for k, a in arms_.items()
        }
        if not all(per.values()):
            verdicts.append(INCONCLUSIVE)
            continue
        v = judge(per["std"], per["small"], per["gate"], sink_small_nogate=per["nogate"])
        verdicts.append(v.verdict)
        for e in v.effects:
            e.label = f"{label}: {e.label}"
            effects.append(e)
        notes += [f"{label}: {n}" for n in v.notes]
        nums[label] = v.numbers
        early = arms_["nogate"] is not arms_["small"]
        if early:
            groups = group_effects(per["small"], per["std"], "(a) γ=1 − γ=0.5") + group_effects(
                per["nogate"], per["gate"], "(b) no gate − gate"
            )
            tables.append(_group_table(groups, label))
            nums[label]["groups"] = [e.to_dict() for e in groups]
        cols = EARLY_COLUMNS if early else COLUMNS
        recs0 = ctx.probes(arms_["std"])
        uni = (recs0[-1] or {}).get("uniform_sink") if recs0 else None
        nums[label]["uniform_baseline"] = uni
        tables += _tables(per, cols, label, uni)
        plots.append(
            plot_sinks(
                ctx.out,
                f"claim4_sink{suffix.replace('/', '_')}.png",
                {name: ctx.probes(arms_[k]) for k, name in cols.items()},
                title=f"Claim 4: first-token attention share ({label})",
            )
        )
    verdict = Verdict(combine(verdicts), effects, nums, notes)
    eps = "ε = 1e-5 in (a), 1e-12 in (b)" if ctx.p.early_arms else "ε = 1e-12 all"
    measured = (
        "first-token attention share (mean over heads, batch and queries t ≥ 1 of the weight on position 0) "
        "per layer, averaged over the last quarter of training and then over layers, for γ = 0.5 and γ = 1 "
        f"without the gate and γ = 1 with it ({eps}); 95% t-interval over seed-paired differences "
        f"(a verdict needs ≥ {MIN_SEEDS} seeds)"
    )
    return ctx.result(measured, verdict, plots=plots, tables=tables, runs=ctx.names(*roles.values()))


COLUMNS = {"std": "γ=0.5, no gate", "small": "γ=1, no gate", "gate": "γ=1, gate"}
EARLY_COLUMNS = {
    "std": "A: γ=0.5, ε=1e-5",
    "small": "B: γ=1, ε=1e-5",
    "nogate": "C: γ=1, ε=1e-12",
    "gate": "D: γ=1, ε=1e-12, gate",
}


def _tables(per: dict[str, dict[int, list[float]]], cols: dict[str, str], label: str, uni: Any) -> list[dict]:
    """The per-layer table of the first seed and the layer-mean table per seed, one column per arm."""
    first = {k: per[k][min(per[k])] for k in cols}
    seeds = sorted(set().union(*(per[k] for k in cols)))
    return [
        {
            "title": (
                f"first-token attention share per layer, seed {min(per['std'])} ({label}; uniform "
                f"causal attention: {uni:.3f})"
                if uni
                else f"first-token attention share per layer ({label})"
            ),
            "columns": ["layer", *cols.values()],
            "rows": [[i, *(f"{x:.3f}" for x in row)] for i, row in enumerate(zip(*(first[k] for k in cols)))],
        },
        {
            "title": f"layer-mean share per seed ({label})",
            "columns": ["seed", *cols.values()],
            "rows": [[s, *(f"{layer_mean(per[k][s]):.3f}" if s in per[k] else "—" for k in cols)] for s in seeds],
        },
    ]


def _group_table(effects: list[Effect], label: str) -> dict[str, Any]:
    return {
        "title": f"sink share per layer group, seed-paired ({label}; reported: the verdict is on layer means)",
        "columns": ["difference", "value", "95% interval", "reads"],
        "rows": [[e.label, f"{e.value:+.4f}" if is_finite(e.value) else "—", _interval(e), e.verdict] for e in effects],
    }


def _interval(e: Effect) -> str:
    return f"[{e.lo:+.4f}, {e.hi:+.4f}]" if is_finite(e.lo) and is_finite(e.hi) else e.noise


def plot_sinks(out: Path, name: str, groups: dict[str, list[dict[str, Any]]], title: str = "") -> str | None:
    """Left: first-token attention share per layer at the end of training; right: its layer mean vs step.
    The dashed line is uniform causal attention."""
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    drawn, uni = False, None
    width = 0.8 / max(1, len(groups))
    for i, (label, recs) in enumerate(groups.items()):
        if not recs:
            continue
        uni = recs[-1].get("uniform_sink", uni)
        last = [l.get("sink") for l in recs[-1].get("layers") or []]
        xs = np.arange(len(last)) + i * width
        a1.bar(xs, [v if v is not None else 0 for v in last], width=width, label=label, color=f"C{i}")
        pts = [(r["step"], summarize_probe_record(r).get("sink")) for r in recs]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            a2.plot(*zip(*pts), marker=".", label=label, color=f"C{i}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax in (a1, a2):
        if uni:
            ax.axhline(uni, ls="--", color="gray", lw=1, label="uniform attention")
        ax.grid(alpha=0.3)
    a1.set_xlabel("layer")
    a1.set_ylabel("attention on position 0 (final)")
    a2.set_xlabel("step")
    a2.set_ylabel("mean over layers")
    a1.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save(fig, out, name)
