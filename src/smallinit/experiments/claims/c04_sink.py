"""Claim 4: small init raises the first-token attention share (the attention sink); the gate brings it down.
Arms at the probe size, ε = 1e-12: γ = 0.5 no gate ("std"), γ = 1 no gate ("small"), γ = 1 elementwise gate
("small_gate"); with ``sink_without_bos`` the same three again without a BOS token ("…/nobos")."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from smallinit.experiments.claims.context import ClaimContext
from smallinit.experiments.claims.plots import pyplot, save
from smallinit.experiments.claims.rules import INCONCLUSIVE, Verdict, combine, paired_effect
from smallinit.experiments.presets import PAPER, Arm, Preset, arm
from smallinit.rundir import summarize_probe_record

ID = 4
CLAIM = "Small init raises the first-token attention share; the gate brings it down."


def arms(p: Preset) -> dict[str, Arm]:
    s = p.probe_size
    roles = {"std": arm(s, (0.5, 1e-12, "none")), "small": arm(s, (1.0, 1e-12, "none")), "small_gate": arm(s, PAPER)}
    if p.sink_without_bos:
        roles.update({f"{k}/nobos": replace(a, bos=False) for k, a in list(roles.items())})
    return roles


def judge(sink_std: Sequence[float], sink_small: Sequence[float], sink_small_gate: Sequence[float]) -> Verdict:
    """Claim 4. Per-layer first-token attention shares of three runs: γ = 0.5 no gate, γ = 1 no gate, γ = 1
    with the gate. Parts (paired bootstrap over layers): (a) small init raises it: γ=1 − γ=0.5 (no gate);
    (b) the gate lowers it: γ=1 no gate − γ=1 gate."""
    raise_ = paired_effect("(a) sink share: γ=1 − γ=0.5 (no gate)", sink_small, sink_std, "layers")
    gate = paired_effect("(b) sink share: no gate − gate (γ=1)", sink_small, sink_small_gate, "layers")
    nums = {"sink_gamma0.5": float(np.mean(sink_std)), "sink_gamma1": float(np.mean(sink_small)),
            "sink_gamma1_gate": float(np.mean(sink_small_gate))}
    return Verdict(combine([raise_.verdict, gate.verdict]), [raise_, gate], nums)


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
    verdicts, effects, tables, plots, nums = [], [], [], [], {}
    for suffix, label in variants:
        std, small, gate = roles["std" + suffix], roles["small" + suffix], roles["small_gate" + suffix]
        s_std, s_small, s_gate = (layer_sinks(ctx.probes(a)) for a in (std, small, gate))
        if not (s_std and s_small and s_gate):
            verdicts.append(INCONCLUSIVE)
            continue
        v = judge(s_std, s_small, s_gate)
        verdicts.append(v.verdict)
        for e in v.effects:
            e.label = f"{label}: {e.label}"
            effects.append(e)
        nums[label] = v.numbers
        uni = (ctx.probes(std)[-1] or {}).get("uniform_sink")
        nums[label]["uniform_baseline"] = uni
        tables.append({"title": f"first-token attention share per layer ({label}; uniform causal attention: "
                                f"{uni:.3f})" if uni else f"first-token attention share per layer ({label})",
                       "columns": ["layer", "γ=0.5, no gate", "γ=1, no gate", "γ=1, gate"],
                       "rows": [[i, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}"]
                                for i, (a, b, c) in enumerate(zip(s_std, s_small, s_gate))]})
        plots.append(plot_sinks(ctx.out, f"claim4_sink{suffix.replace('/', '_')}.png",
                                {"γ=0.5, no gate": ctx.probes(std), "γ=1, no gate": ctx.probes(small),
                                 "γ=1, gate": ctx.probes(gate)}, title=f"Claim 4: first-token attention share ({label})"))
    verdict = Verdict(combine(verdicts), effects, nums)
    measured = ("first-token attention share (mean over heads, batch and queries t ≥ 1 of the weight on position 0) "
                "per layer, averaged over the last quarter of training, for γ = 0.5 and γ = 1 without the gate and "
                "γ = 1 with it (ε = 1e-12 all); paired bootstrap over layers")
    return ctx.result(measured, verdict, plots=plots, tables=tables, runs=ctx.names(*roles.values()))


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
