"""smallinit doctor RUN_DIR [--json]: check a run directory and say how to recover from what is wrong."""

from __future__ import annotations

import argparse

HELP = "check a run directory (config, checkpoint checksums, metrics/probes logs, lock, summary) and say how to recover"

EPILOG = """\
exit status: 0 healthy, 1 problems found, 2 not a run directory.

examples:
  smallinit doctor out/tiny
  smallinit doctor out/tiny --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (as written by smallinit train)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from smallinit.runs.doctor import check_run

    report = check_run(args.run_dir)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0 if report.healthy else 1
