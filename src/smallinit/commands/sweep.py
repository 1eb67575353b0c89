"""smallinit sweep SWEEP.yaml --out DIR [--jobs N]: a grid or list of training runs, resumable, one summary table."""

from __future__ import annotations

import argparse

from smallinit.commands import cluster_options

HELP = "run a grid (or list) of training runs from a sweep YAML, resumably; writes DIR/summary.csv and summary.md"

EPILOG = """\
A sweep file has `base:` (config name, YAML path, or nested config), optional `overrides:` for every run,
and either `grid:` (dotted key -> list of values; cartesian product) or `runs:` (list of override mappings).
Example: src/smallinit/configs/sweeps/example.yaml. Rerunning the same command skips finished runs and
resumes interrupted ones from their last checkpoint.

examples:
  smallinit sweep src/smallinit/configs/sweeps/example.yaml --out out/gamma-eps --jobs 2
  smallinit sweep my_sweep.yaml --out out/sweep --dry-run
  smallinit sweep my_sweep.yaml --out out/sweep --launcher slurm --partition gpu --gpus-per-job 1
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep file")
    p.add_argument("--out", required=True, metavar="DIR", help="sweep directory (one run directory per run inside)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="runs at a time (each gets cores/N torch threads unless train.threads is set; default: one "
        "per core on the CPU, 1 with CUDA)",
    )
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that exited with an error")
    p.add_argument(
        "--gflops",
        type=float,
        default=None,
        help="this machine's training GFLOP/s for time estimates (default: measured in a few seconds)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the runs, their cost and the estimate; run nothing")
    cluster_options.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from smallinit.core.errors import ConfigError
    from smallinit.experiments.cost import (
        check_gflops,
        default_jobs,
        default_threads,
        fmt_seconds,
        measure_gflops,
        model_cost,
        wall_seconds,
    )
    from smallinit.experiments.sweep import load_sweep, run_sweep
    from smallinit.runs.rundir import run_state

    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    check_gflops(args.gflops)
    launcher = cluster_options.launcher(args, args.out, args.jobs)  # None: here; checked before any work
    spec = load_sweep(args.sweep)
    jobs = args.jobs or default_jobs(len(spec.runs))
    if args.dry_run:
        gflops = args.gflops or measure_gflops(spec.runs[0].config, threads=default_threads(jobs))
        estimates = []
        print(
            f"{len(spec.runs)} runs (time at {gflops:.1f} GFLOP/s"
            f"{f' in {gflops.dtype}' if hasattr(gflops, 'dtype') else ''}, {jobs} at a time):"
        )
        for r in spec.runs:
            c = model_cost(r.config)
            secs = c["flops"] / (gflops * 1e9)
            estimates.append(secs)
            state = run_state(Path(args.out) / r.name)
            print(
                f"  {r.name:<40} {state:<8} params {c['params'] / 1e6:8.2f}M  tokens {c['tokens'] / 1e6:8.2f}M  "
                f"≈ {fmt_seconds(secs)}"
            )
        print(f"total ≈ {fmt_seconds(wall_seconds(estimates, jobs))}")
        return 0
    results = run_sweep(spec, args.out, jobs, retry_failed=args.retry_failed, gflops=args.gflops, launcher=launcher)
    return 0 if all(r.state == "done" for r in results.values()) else 1
