"""The ``--launcher`` options shared by ``reproduce``, ``crossover`` and ``sweep`` (not a verb): where the runs go,
and the :class:`~smallinit.experiments.launcher.Launcher` they ask for."""

from __future__ import annotations

import argparse

FLAGS = ("partition", "gpus_per_job", "cpus_per_job", "time", "account", "qos", "sbatch")
"""The options that only mean something with ``--launcher slurm``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "on a SLURM cluster (one job per run, through submitit; `smallinit status OUT` shows them)"
    )
    g.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: on this machine (default); slurm: submit every run as a SLURM job (job arrays; a "
        "branch after its trunk) and wait for them; rerunning the command skips finished runs and "
        "resumes the others",
    )
    g.add_argument("--partition", metavar="NAME", help="SLURM partition of every job")
    g.add_argument("--gpus-per-job", type=int, metavar="N", help="GPUs per job (default 0)")
    g.add_argument(
        "--cpus-per-job",
        type=int,
        metavar="N",
        help="CPU cores per job, also each run's torch threads (default: the partition's)",
    )
    g.add_argument(
        "--time",
        type=int,
        metavar="MINUTES",
        help="time limit of each job (default 1440); a run needing longer stops at a checkpoint 5 minutes "
        "before it: rerun the same command to continue",
    )
    g.add_argument("--account", metavar="NAME", help="SLURM account to charge")
    g.add_argument("--qos", metavar="NAME", help="SLURM quality of service")
    g.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further #SBATCH --KEY=VALUE line for every job, repeatable (e.g. --sbatch constraint=h100 "
        "--sbatch mem=200G; KEY alone for a flag)",
    )


def launcher(args: argparse.Namespace, out: str, jobs: int | None = None):
    """The :class:`~smallinit.experiments.launcher.Launcher` the options ask for (None: ``--launcher local``); ``jobs``
    (an explicit ``--jobs``): at most that many jobs running at once. ConfigError for a cluster option without
    ``--launcher slurm``, a bad value, or a machine that cannot submit (no submitit, no sbatch) — before any work."""
    from smallinit.core.errors import ConfigError
    from smallinit.experiments.launcher import DEFAULT_MINUTES, ClusterOptions, Launcher, parse_sbatch

    given = [f"--{f.replace('_', '-')}" for f in FLAGS if getattr(args, f) not in (None, [])]
    if args.launcher == "local":
        if given:
            raise ConfigError(f"{given[0]} is an option of cluster jobs: add --launcher slurm")
        return None
    options = ClusterOptions(
        partition=args.partition,
        time=DEFAULT_MINUTES if args.time is None else args.time,
        gpus_per_job=args.gpus_per_job or 0,
        cpus_per_job=args.cpus_per_job,
        account=args.account,
        qos=args.qos,
        sbatch=parse_sbatch(args.sbatch),
        max_running=jobs,
    )
    return Launcher(options, out)
