"""smallinit plot RUN_DIR [RUN_DIR ...] --out DIR: loss curves and probe plots of runs, overlaid, plus index.html."""

from __future__ import annotations

import argparse

HELP = (
    "plot runs overlaid (loss, stable rank, condensation, heatmaps, sinks, norm saturation, flow) into DIR/index.html"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (labelled by their config differences)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files and index.html")


def run(args: argparse.Namespace) -> int:
    from smallinit.probes.plots import make_report

    index = make_report(args.run_dirs, args.out)
    n = index.read_text().count("<img ")
    print(f"wrote {n} figures and {index}")
    return 0
