"""``smallinit scaling RUN... --baseline KEY=VALUE --out DIR``: how much model is a variant worth?

Runs whose resolved config has KEY == VALUE form the baseline family; the others are variants.
L(N) = E + A·N^(−α) is fitted to the baseline's final validation losses (N = non-embedding
parameters), and each variant of size N with loss L_v is worth N_eff = (A/(L_v − E))^(1/α) baseline
parameters, gain = N_eff/N − 1 (DESIGN.md §2, "Effective model size"). Writes ``scaling.json`` and
``scaling.png`` (both families and the fitted curve, log-x) into DIR and prints a table.

Fewer than 3 baseline sizes is an error (no number is made up); a variant whose loss is at or below
the fitted E gets a note instead of a number; an N_eff outside the fitted size range is flagged.
"""

from __future__ import annotations

import argparse
import io
import math
from pathlib import Path
from typing import Any

HELP = "fit L(N) = E + A·N^-α to a baseline family of runs and give each variant's effective size and gain"

# config keys that do not change what a run learns (ignored when listing how a variant differs)
BOOKKEEPING = ("train.progress", "train.threads", "train.device", "train.tensorboard", "train.log_every",
               "train.eval_every", "train.ckpt_every", "train.keep_ckpts", "probe.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (config.yaml + summary.json)")
    p.add_argument("--baseline", required=True, metavar="KEY=VALUE",
                   help="config field that marks the baseline family, e.g. model.gamma=0.5; every other run is a variant")
    p.add_argument("--label", default=None, metavar="KEY[,KEY...]",
                   help="config fields that name (and group) the variants (default: the --baseline key)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (scaling.json, scaling.png)")


def parse_baseline(text: str) -> tuple[str, Any]:
    """``model.gamma=0.5`` → ("model.gamma", 0.5); the value is parsed like a config override (YAML)."""
    from smallinit.errors import ConfigError
    from smallinit.train.config import parse_value

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ConfigError(f"--baseline {text!r} must look like section.key=value, e.g. model.gamma=0.5")
    return key, parse_value(raw.strip())


def values_equal(a: Any, b: Any) -> bool:
    """Config values equal (numbers within a relative 1e-9; booleans only equal booleans)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _fmt_n(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def analyse(points: list, key: str, value: Any, label_keys: list[str] | None = None) -> dict:
    """Baseline fit and variant effective sizes from :class:`~smallinit.scaling.RunPoint` s (the scaling.json dict).

    Raises ConfigError when a run lacks ``key``; ScalingError when no run is a baseline or the baseline
    family has fewer than 3 distinct sizes with a finite loss.
    """
    from smallinit.errors import ConfigError
    from smallinit.scaling import ScalingError, config_value, effective_size, fit_scaling_law, predict
    from smallinit.train.config import config_diff

    label_keys = label_keys or [key]
    notes: list[str] = []
    excluded: list[dict] = []
    base, var = [], []
    seen = []
    for p in points:
        try:
            v = config_value(p.config, key)
        except KeyError:
            raise ConfigError(f"{p.run}: config has no key {key!r} (check the --baseline field name)") from None
        seen.append(v)
        if p.note:
            notes.append(f"{p.run}: {p.note}")
        if p.loss is None or not math.isfinite(p.loss):
            excluded.append({"run": p.run, "reason": "no finite validation loss (diverged or never evaluated)"})
            continue
        (base if values_equal(v, value) else var).append(p)
    if not base:
        shown = ", ".join(sorted({repr(s) for s in seen}))
        raise ScalingError(f"no run with a finite loss has {key} == {value!r} (values seen: {shown})")
    try:
        fit = fit_scaling_law([p.N for p in base], [p.loss for p in base])
    except ScalingError as e:
        raise ScalingError(f"baseline {key}={value!r}: {e}") from None
    if fit.n_sizes == 3:
        notes.append("the baseline has exactly 3 sizes: the 3-parameter law passes through them, so the residuals "
                     "cannot test its form")

    def label(p) -> str:
        parts = []
        for k in label_keys:
            try:
                parts.append(f"{k}={config_value(p.config, k)!r}")
            except KeyError:
                parts.append(f"{k}=?")
        return ", ".join(parts)

    def differs(p) -> dict[str, list[Any]] | None:
        same = [b for b in base if b.N == p.N]
        if not same:
            return None
        d = config_diff(p.config, same[0].config)
        return {k: [a, b] for k, (a, b) in d.items() if not k.startswith(BOOKKEEPING)}

    variants = []
    for p in var:
        es = effective_size(fit, p.N, p.loss)
        row = {"run": p.run, "label": label(p), "N": p.N, "loss": p.loss, "baseline_loss_at_N": predict(fit, p.N),
               "N_eff": es.N_eff, "gain": es.gain, "extrapolated": es.extrapolated, "note": es.note,
               "step": p.step, "completed": p.completed, "differs_from_baseline": differs(p)}
        variants.append(row)
        if es.gain is None:
            notes.append(f"{p.run}: {es.note}")
    groups: dict[str, dict] = {}
    for v in variants:
        g = groups.setdefault(v["label"], {"runs": [], "gains": []})
        g["runs"].append(v["run"])
        g["gains"].append(v["gain"])
    for g in groups.values():
        defined = [x for x in g["gains"] if x is not None]
        g["mean_gain"] = sum(defined) / len(defined) if defined and len(defined) == len(g["gains"]) else None
        if defined and len(defined) < len(g["gains"]):
            g["note"] = "some runs of this group have no defined gain (loss at or below E): no mean is given"

    residuals = dict(zip([p.run for p in base], fit.residuals))
    return {
        "formula": "L(N) = E + A * N^(-alpha); N_eff = (A / (L_v - E))^(1/alpha); gain = N_eff / N - 1",
        "N": "non-embedding parameters",
        "baseline": {
            "key": key,
            "value": value,
            "runs": [{"run": p.run, "N": p.N, "loss": p.loss, "fit_loss": predict(fit, p.N), "residual": residuals[p.run],
                      "step": p.step, "completed": p.completed} for p in base],
        },
        "fit": fit.to_dict(),
        "variants": variants,
        "groups": groups,
        "excluded": excluded,
        "notes": notes,
    }


def plot_scaling(res: dict, path: Path) -> None:
    """Baseline points, the fitted curve and E, and every variant group (log-x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from smallinit.io import atomic_write_bytes

    f = res["fit"]
    base = res["baseline"]["runs"]
    allN = [r["N"] for r in base] + [v["N"] for v in res["variants"]]
    grid = np.geomspace(min(allN) / 1.5, max(allN) * 1.5, 200)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.plot(grid, f["E"] + f["A"] * grid ** (-f["alpha"]), color="C0", lw=1.2,
            label=f"fit: {f['E']:.3f} + {f['A']:.3g}·N^-{f['alpha']:.3f}")
    ax.axhline(f["E"], color="C0", lw=0.8, ls=":", label=f"E = {f['E']:.3f}")
    ax.scatter([r["N"] for r in base], [r["loss"] for r in base], color="C0", zorder=3,
               label=f"baseline {res['baseline']['key']}={res['baseline']['value']!r}")
    markers = "s^Dv<>PX*"
    for i, (name, g) in enumerate(res["groups"].items()):
        vs = [v for v in res["variants"] if v["label"] == name]
        ax.scatter([v["N"] for v in vs], [v["loss"] for v in vs], marker=markers[i % len(markers)],
                   color=f"C{i + 1}", zorder=3, label=name)
        for v in vs:
            txt = "N_eff undefined" if v["gain"] is None else f"{v['gain']:+.0%}"
            ax.annotate(txt, (v["N"], v["loss"]), textcoords="offset points", xytext=(5, 4), fontsize=7,
                        color=f"C{i + 1}")
    ax.set_xscale("log")
    ax.set_xlabel("N (non-embedding parameters)")
    ax.set_ylabel("final validation loss (nats)")
    ax.set_title("scaling fit on the baseline; labels: gain = N_eff/N − 1", fontsize=10)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def report(res: dict) -> str:
    """Plain-text summary: the fit, a markdown table of variants, the notes."""
    f = res["fit"]
    b = res["baseline"]
    r2 = "n/a" if f["r2"] is None else f"{f['r2']:.4f}"
    lines = [
        f"baseline {b['key']}={b['value']!r}: {f['n_points']} runs at {f['n_sizes']} sizes "
        f"({_fmt_n(f['N_range'][0])}–{_fmt_n(f['N_range'][1])} non-embedding params)",
        f"fit L(N) = E + A·N^-α: E = {f['E']:.4f}, A = {f['A']:.4g}, α = {f['alpha']:.4f}; "
        f"R² = {r2}, rmse = {f['rmse']:.2e}, residuals {', '.join(f'{x:+.1e}' for x in f['residuals'])}",
        "",
        "| run | variant | N | loss | baseline L(N) | N_eff | gain |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in res["variants"]:
        gain = "–" if v["gain"] is None else f"{v['gain']:+.1%}" + (" (extrapolated)" if v["extrapolated"] else "")
        lines.append(f"| {v['run']} | {v['label']} | {_fmt_n(v['N'])} | {v['loss']:.4f} | "
                     f"{v['baseline_loss_at_N']:.4f} | {_fmt_n(v['N_eff'])} | {gain} |")
    if not res["variants"]:
        lines.append("| (no variant runs) | | | | | | |")
    for name, g in res["groups"].items():
        if g["mean_gain"] is not None:
            lines.append(f"\nmean gain of {name}: {g['mean_gain']:+.1%} over {len(g['runs'])} run(s)")
    for e in res["excluded"]:
        lines.append(f"excluded {e['run']}: {e['reason']}")
    for n in res["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


from smallinit.io import json_safe as _finite  # noqa: E402  (shared helper)


def run(args: argparse.Namespace) -> int:
    from smallinit.io import atomic_write_json
    from smallinit.scaling import runs_table

    key, value = parse_baseline(args.baseline)
    label_keys = [k.strip() for k in args.label.split(",") if k.strip()] if args.label else None
    points = runs_table(args.runs)
    res = analyse(points, key, value, label_keys)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_scaling(res, out / "scaling.png")
    res["plot"] = "scaling.png"
    atomic_write_json(out / "scaling.json", _finite(res))
    print(report(res))
    print(f"\nwrote {out / 'scaling.json'}, {out / 'scaling.png'}")
    return 0
