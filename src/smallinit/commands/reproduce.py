"""smallinit reproduce --preset demo|cpu|cpu-long|gpu --out DIR [--corpus PREPARED_DIR] [--seeds K] [--dry-run]:
a thin layer over :func:`smallinit.experiments.reproduce.reproduce` (presets: :mod:`smallinit.experiments.presets`)."""

from __future__ import annotations

import argparse

from smallinit.commands import cluster_options

HELP = "run the experiments behind each claim of the paper and write a report with verdicts (report.md, index.html)"


def _presets() -> str:
    """One line per preset from the presets themselves: claims and budget."""
    from smallinit.experiments.presets import PRESETS

    return "\n".join(f"  {name:<9} claims {', '.join(map(str, p.claims))}; {p.budget}" for name, p in PRESETS.items())


EPILOG = """\
presets (the plan of each: --dry-run; the full descriptions: smallinit/experiments/presets.py):
{presets}

The corpus: --corpus DIR uses a directory made by `smallinit prepare`, or prepares the built-in corpus
(builtin:stdlib) into DIR when it does not exist; without --corpus it goes to OUT/../data/. Rerunning the
same command resumes: finished runs are kept, interrupted ones continue from their last checkpoint.

examples:
  smallinit reproduce --preset demo --out out/demo --corpus data/stdlib
  smallinit reproduce --preset cpu --out out/cpu --corpus data/stdlib-bytes   # prepared as the preset says (bytes)
  smallinit reproduce --preset gpu --out out/gpu --corpus data/corpus --dry-run
  smallinit reproduce --preset gpu --out out/gpu --corpus data/corpus --launcher slurm --partition gpu \\
      --gpus-per-job 1 --cpus-per-job 16 --time 2880   # on a SLURM cluster: docs/reproduce.md
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    from smallinit.experiments.presets import PRESETS

    p.epilog = EPILOG.format(presets=_presets())
    p.add_argument(
        "--preset", required=True, metavar="{" + ",".join(PRESETS) + "}", help="budget and scope (see below)"
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (runs, report.md, index.html, claims.json)"
    )
    p.add_argument(
        "--corpus", metavar="PREPARED_DIR", help="prepared data directory (prepared from builtin:stdlib if missing)"
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="K",
        help="seeds for claims 1, 9, 10 and every claim the preset gives several (default: the preset's)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="runs at a time (default: the preset's; for the CPU presets one per core)",
    )
    p.add_argument(
        "--gflops",
        type=float,
        default=None,
        help="training GFLOP/s per job for the time estimates (default: measured here; gpu: 400000)",
    )
    p.add_argument(
        "--hours",
        type=float,
        default=None,
        metavar="H",
        help="size the crossover's token budget so that the whole plan fits H hours here (says what it chose)",
    )
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that exited with an error")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated cost; run nothing")
    cluster_options.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from smallinit.experiments.reproduce import reproduce

    launcher = cluster_options.launcher(args, args.out, args.jobs)  # None: here; checked before any work
    reproduce(
        args.preset,
        args.out,
        args.corpus,
        seeds=args.seeds,
        jobs=args.jobs,
        dry_run=args.dry_run,
        gflops=args.gflops,
        retry_failed=args.retry_failed,
        hours=args.hours,
        launcher=launcher,
    )
    return 0
