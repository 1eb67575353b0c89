"""``smallinit crossover-rejudge RESULT --enough K [--effect NATS | --effect-from R R R] --out DIR``.

A thin layer over :func:`smallinit.experiments.crossover_rejudge.rejudge`: reads a finished crossover's
``crossover.json`` (a run folder or its committed compact result) and judges its losses at another budget or claimed
effect than the ones declared before its runs. Writes ``crossover.json``, ``crossover.md`` (headed "re-judged after
the runs", with what was declared) and ``crossover.png`` into DIR; the runs are not touched.
"""

from __future__ import annotations

import argparse

HELP = "judge a finished crossover's losses at another budget or claimed effect (the report says it was re-judged)"

EPILOG = """\
examples:
  smallinit crossover-rejudge docs/results/claim1-d64 --enough 75 --effect 0.0205 --out out/d64-rejudged \\
      --note "rates tuned at D/4"
  smallinit crossover-rejudge docs/results/claim1-d64 --enough 75 --out out/d64-rejudged \\
      --effect-from docs/results/claim1-d48 docs/results/claim1-d64 docs/results/claim1-d96
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from smallinit.commands.crossover import parse_positive

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("result", metavar="RESULT", help="a crossover folder or its crossover.json")
    p.add_argument("--enough", type=parse_positive, required=True, metavar="K", help="tokens per parameter to judge at")
    p.add_argument("--effect", type=parse_positive, metavar="NATS", help="the claimed effect δ in nats")
    p.add_argument(
        "--effect-from",
        nargs="+",
        metavar="RESULT",
        help="δ from the baseline of crossovers at ≥ 3 widths (the paper's 44%% effective size at this N and D)",
    )
    p.add_argument("--note", default="", help="a sentence for the report (e.g. how the rates were set)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (new, empty, or an earlier re-judging)")


def run(args: argparse.Namespace) -> int:
    from smallinit.core.errors import ConfigError
    from smallinit.core.io import atomic_write_json, atomic_write_text, json_safe
    from smallinit.core.outputs import OutputPlan, check_out_dir, staged_dir
    from smallinit.experiments.crossover_rejudge import effect_from_results, rejudge
    from smallinit.experiments.crossover_report import crossover_figure, crossover_markdown

    if args.effect is not None and args.effect_from:
        raise ConfigError("give --effect or --effect-from, not both")
    from smallinit.experiments.crossover_rejudge import read_crossover_result as read_result

    sources = [args.result, *(args.effect_from or [])]
    plan = check_out_dir(args.out, "rejudge", inputs=sources, can_continue=True, verb="crossover-rejudge")
    result = read_result(args.result)
    effect, note = args.effect, args.note
    if args.effect_from:
        tokens = args.enough * result["non_embedding_params"]
        try:
            ce = effect_from_results([read_result(r) for r in args.effect_from], result["non_embedding_params"], tokens)
        except ValueError as e:
            raise ConfigError(f"--effect-from: {e}") from None
        effect = ce.effect
        note = (note + " " if note else "") + f"Claimed effect: {ce.describe()}."
    res = rejudge(result, args.enough, effect, note=note)
    with staged_dir(OutputPlan(plan.path, "rejudge", "replace" if plan.state == "continue" else plan.state)) as out:
        crossover_figure(res, out / "crossover.png")
        atomic_write_text(out / "crossover.md", crossover_markdown(res, figure="crossover.png"))
        atomic_write_json(out / "crossover.json", json_safe(res))
    for arm, a in res["analyses"].items():
        print(f"{arm} vs {res['spec']['baseline']}: {a['verdict']} — {a['reason']}")
    print(f"wrote {plan.path / 'crossover.md'} (re-judged after the runs), crossover.json, crossover.png")
    return 0
