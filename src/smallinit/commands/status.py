"""smallinit status OUT: each job of a cluster run (``--launcher slurm``) as pending, running, done or failed."""

from __future__ import annotations

import argparse

HELP = "show each job of a reproduce, crossover or sweep run with --launcher slurm: pending, running, done or failed"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="OUT", help="the --out folder of a reproduce, crossover or sweep run on a cluster")


def run(args: argparse.Namespace) -> int:
    from smallinit.experiments.launcher import check_available

    check_available("local")  # reading job states needs submitit (not sbatch)
    from smallinit.experiments.cluster_status import format_status, job_states

    statuses, source = job_states(args.out)
    print(format_status(args.out, statuses, source))
    return 0
