"""``smallinit crossover-widths RESULT RESULT … --out DIR``: claim 1 at several widths, in tokens per parameter.

A thin layer over :func:`smallinit.experiments.claims.c01_loss.across_widths`: each RESULT is a finished crossover
folder (or its ``crossover.json``) of the same arms on the same data at another model width. Writes
``widths.json``, ``widths.md`` and ``widths.png`` (G against tokens per parameter, one line per width) into DIR.
"""

from __future__ import annotations

import argparse
import os

HELP = "compare crossovers of several widths at equal tokens per parameter: verdicts, D*/N, the gap by D/N"

EPILOG = """\
example (the claim-1 width check, issue 34 5c):
  smallinit crossover-widths docs/results/claim1-d48 docs/results/claim1-d64 docs/results/claim1-d96 --out out/widths
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results", nargs="+", metavar="RESULT", help="crossover folders (or their crossover.json), one per width"
    )
    p.add_argument("--variant", default="paper", help="the arm compared with each crossover's baseline (default paper)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (widths.json, widths.md, widths.png)")
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _read(result: str, variant: str) -> dict:
    from smallinit.core.errors import ConfigError
    from smallinit.experiments.crossover_rejudge import read_crossover_json

    path, x = read_crossover_json(result)
    if not isinstance(x, dict) or variant not in (x.get("analyses") or {}):
        raise ConfigError(f"{path}: holds no analysis of the arm {variant!r} (a finished crossover has one per arm)")
    return x


def run(args: argparse.Namespace) -> int:
    from smallinit.core.errors import ConfigError
    from smallinit.core.io import atomic_write_json, atomic_write_text, json_safe
    from smallinit.core.outputs import check_out_dir, staged_dir
    from smallinit.experiments.claims.c01_loss import across_widths, plot_gap_by_tokens_per_param, widths_markdown

    seen: dict[str, str] = {}
    for r in args.results:
        key = os.path.realpath(r if os.path.isdir(r) else os.path.dirname(r) or ".")
        if key in seen:
            raise ConfigError(f"{r}: given twice (also as {seen[key]}); each crossover is one width")
        seen[key] = r
    plan = check_out_dir(args.out, "widths", inputs=args.results, can_continue=True, verb="crossover-widths")
    results = [_read(r, args.variant) for r in args.results]
    try:
        res = across_widths(results, args.variant)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    res["sources"] = [str(r) for r in args.results]
    from smallinit.core.outputs import OutputPlan

    with staged_dir(OutputPlan(plan.path, "widths", "replace" if plan.state == "continue" else plan.state)) as out:
        plot_gap_by_tokens_per_param(res, out / "widths.png")
        atomic_write_text(out / "widths.md", widths_markdown(res, "widths.png"))
        atomic_write_json(out / "widths.json", json_safe(res))
    for r in res["widths"]:
        g = r["gap"][r["judged"]]
        print(
            f"{r['label']:>10}  N {r['non_embedding_params']:>9,.0f}  {r['seeds']} seeds  at "
            f"{r['tokens_per_param'][r['judged']]:.3g} tokens/param: G = {g['value']:+.4f}  → {r['verdict']};"
            f"  gap fit: {r['gap_fit_status']}"
        )
    print(res["scaling"])
    print(f"wrote {plan.path / 'widths.md'}, widths.json, widths.png")
    return 0
