"""``smallinit scaling RUN... --baseline KEY=VALUE --out DIR``: how much model is a variant worth?

A thin layer over :func:`smallinit.analysis.scaling.analyse`: runs whose resolved config has KEY == VALUE form the
baseline family; the others are variants.
L(N) = E + A·N^(−α) is fitted to the baseline's final validation losses (N = non-embedding
parameters), and each variant of size N with loss L_v is worth N_eff = (A/(L_v − E))^(1/α) baseline
parameters, gain = N_eff/N − 1 (DESIGN.md §2, "Effective model size"). Writes ``scaling.json`` and
``scaling.png`` (both families and the fitted curve, log-x) into DIR and prints a table.

Fewer than 3 baseline sizes is an error (no number is made up); a variant whose loss is at or below
the fitted E gets a note instead of a number; an N_eff outside the fitted size range is flagged.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HELP = "fit L(N) = E + A·N^-α to a baseline family of runs and give each variant's effective size and gain"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (config.yaml + summary.json)")
    p.add_argument(
        "--baseline",
        required=True,
        metavar="KEY=VALUE",
        help="config field that marks the baseline family, e.g. model.gamma=0.5; every other run is a variant",
    )
    p.add_argument(
        "--label",
        default=None,
        metavar="KEY[,KEY...]",
        help="config fields that name (and group) the variants (default: the --baseline key)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (scaling.json, scaling.png)")


def run(args: argparse.Namespace) -> int:
    from smallinit.analysis.scaling import analyse, parse_baseline, report_text, runs_table
    from smallinit.core.errors import ConfigError
    from smallinit.core.figures import plot_scaling
    from smallinit.core.io import atomic_write_json, json_safe
    from smallinit.core.outputs import check_out_dir

    seen: dict[str, str] = {}
    for r in args.runs:  # a run given twice would count twice in the fit
        key_ = os.path.realpath(r)
        if key_ in seen:
            raise ConfigError(f"run {r} is given twice (also as {seen[key_]}); each run is one point of the fit")
        seen[key_] = r
    check_out_dir(args.out, "scaling", inputs=args.runs, can_continue=True, verb="scaling")
    key, value = parse_baseline(args.baseline)
    label_keys = [k.strip() for k in args.label.split(",") if k.strip()] if args.label else None
    res = analyse(runs_table(args.runs), key, value, label_keys)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = {
        name: [(v["N"], v["loss"], v["gain"]) for v in res["variants"] if v["label"] == name] for name in res["groups"]
    }
    plot_scaling(
        out / "scaling.png",
        [(r["N"], r["loss"]) for r in res["baseline"]["runs"]],
        variants,
        res["fit"],
        baseline_label=f"baseline {res['baseline']['key']}={res['baseline']['value']!r}",
    )
    res["plot"] = "scaling.png"
    atomic_write_json(out / "scaling.json", json_safe(res))
    print(report_text(res))
    print(f"\nwrote {out / 'scaling.json'}, {out / 'scaling.png'}")
    return 0
