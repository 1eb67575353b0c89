"""Run labels and headline numbers for the plot report (no matplotlib): :func:`run_labels` names each run by
the config keys that differ among the runs, :func:`summary_numbers` picks one run's headline numbers (stable rank,
attention sink, norm saturation, final losses). Re-exported by ``smallinit.probes.plots``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from smallinit.runs.rundir import RunData, compared_diff, config_get

__all__ = ["run_labels", "summary_numbers"]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Dotted config keys whose values differ among the runs (the ignored keys of smallinit.runs.rundir left out)."""
    keys: set[str] = set()
    for c in configs[1:]:
        keys |= set(compared_diff(configs[0], c))
    return sorted(keys)


def run_labels(configs: list[dict[str, Any]], names: list[str] | None = None) -> list[str]:
    """One label per run from the config keys whose values differ among the runs, e.g. ``gamma=0.5, gate=none``.

    A key is shortened to its last part when that is unambiguous (``model.gamma`` → ``gamma``).
    Runs with identical configs (or a single run) are labelled by ``names``; repeated labels get the
    name appended.
    """
    names = names or [f"run{i}" for i in range(len(configs))]
    keys = _differing_keys(configs)
    last = [k.rsplit(".", 1)[-1] for k in keys]
    short = {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}
    labels = [", ".join(f"{short[k]}={_fmt(config_get(c, k))}" for k in keys) or n for c, n in zip(configs, names)]
    return [f"{l} ({n})" if labels.count(l) > 1 and l != n else l for l, n in zip(labels, names)]


# ---- numbers ---------------------------------------------------------------------------------------


def _nearest(records: list[dict[str, Any]], step: float) -> dict[str, Any] | None:
    return min(records, key=lambda r: (abs(r["step"] - step), r["step"])) if records else None


def summary_numbers(run: RunData, matrix: str = "blocks.0.attn.q") -> dict[str, Any]:
    """Headline numbers of one run: ``matrix``'s stable rank at init, at 10% and at the end of the probed
    steps; mean (over layers) attention-sink share and the uniform baseline at init and at the end; the
    lowest RMSNorm saturation at the end; final training and validation loss."""
    out: dict[str, Any] = {"label": run.label or run.name, "path": str(run.path)}
    pr = run.probes
    if pr:
        last = pr[-1]
        marks = {"init": pr[0], "10%": _nearest(pr, 0.1 * last["step"]), "end": last}
        out["srank_matrix"] = matrix
        out["srank"] = {
            k: {"step": r["step"], "value": r.get("matrices", {}).get(matrix, {}).get("srank")}
            for k, r in marks.items()
        }

        def mean_sink(r):
            vals = [l.get("sink") for l in r.get("layers", []) if l.get("sink") is not None]
            return float(np.mean(vals)) if vals else None

        out["sink"] = {
            "init": mean_sink(pr[0]),
            "end": mean_sink(last),
            "per_layer_end": [l.get("sink") for l in last.get("layers", [])],
            "uniform": last.get("uniform_sink"),
        }
        sats = [
            l[n]["saturation"]
            for l in last.get("layers", [])
            for n in ("attn_norm", "mlp_norm")
            if isinstance(l.get(n), dict) and l[n].get("saturation") is not None
        ]
        if isinstance(last.get("final_norm"), dict) and last["final_norm"].get("saturation") is not None:
            sats.append(last["final_norm"]["saturation"])
        out["min_saturation_end"] = min(sats) if sats else None
        out["max_act_end"] = (
            max((l.get("max_act") or 0.0) for l in last.get("layers", [])) if last.get("layers") else None
        )
    if run.metrics:
        out["final_loss"] = run.metrics[-1].get("loss")
        vals = [m["val_loss"] for m in run.metrics if m.get("val_loss") is not None]
        out["final_val_loss"] = vals[-1] if vals else None
        out["steps"] = run.metrics[-1]["step"]
    return out
