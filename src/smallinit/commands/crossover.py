"""smallinit crossover ARM ARM [ARM …] --tokens D --seeds K --out DIR: loss against budget, and where arms cross."""

from __future__ import annotations

import argparse

from smallinit.commands import cluster_options

HELP = "train arms × seeds once each with cooldown branches at D/16 … D; fit L(D), the gap and the crossing budget"

EPILOG = """\
An ARM is NAME:key=value[,key=value…] (dotted config overrides) or a YAML file with `name:` and `overrides:`
(a list of "key=value" or a mapping). The first arm is the baseline unless --baseline names another.
Same seed = same batches in every arm, so the gap G(D) = L_baseline(D) − L_arm(D) is paired by seed.

examples:
  smallinit crossover baseline:model.gamma=0.5,model.norm_eps=1e-5,model.gate=none \\
      paper:model.gamma=1.0,model.norm_eps=1e-12,model.gate=elementwise \\
      --config tiny --set data.path=data/en-bytes --enough 75 --seeds 5 --jobs 2 --out out/xover
  smallinit crossover ... --lrs 1e-3,3e-3,1e-2   # each arm's rate tuned first at D (own seed)
  smallinit crossover ... --dry-run      # the plan: runs, tokens, tokens per parameter, estimated time
  smallinit crossover ... --launcher slurm --partition gpu --gpus-per-job 1 --time 240   # one SLURM job per run
"""


def parse_tokens(text: str) -> int:
    """ "8M", "8e6", "500k", "1.5G" → an integer token count (> 0); argparse prints the error line."""
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}.get(t[-1:], 1.0)
    try:
        v = float(t[:-1] if t[-1:] and t[-1:] in "kmgb" else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r} (e.g. 8M, 8e6)") from None
    if not v >= 1 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite count >= 1 token, got {text!r}")
    return int(round(v))


def parse_positive(text: str) -> float:
    """A finite number > 0 ("75", "37.5"); argparse prints the error line."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def parse_fraction(text: str) -> float:
    """ "1/4", "0.25" → 0.25; argparse prints the error line."""
    from fractions import Fraction

    try:
        return float(Fraction(text.strip()))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r} (e.g. 1/4 or 0.25)") from None


def parse_arm(text: str) -> tuple[str, list[str]]:
    """NAME:key=value,… or a YAML file → (name, overrides)."""
    from pathlib import Path

    import yaml

    from smallinit.core.errors import ConfigError

    if text.endswith((".yaml", ".yml")):
        p = Path(text)
        if not p.is_file():
            raise ConfigError(f"arm file {text} does not exist")
        try:
            d = yaml.safe_load(p.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"arm file {text}: not valid YAML text ({str(e).splitlines()[0]})") from None
        if not isinstance(d, dict) or "name" not in d:
            raise ConfigError(f"arm file {text}: needs `name:` and `overrides:`")
        ov = d.get("overrides") or []
        if not isinstance(ov, (dict, list)):
            raise ConfigError(
                f"arm file {text}: `overrides:` must be a mapping or a list of key=value, not {type(ov).__name__}"
            )
        ov = [f"{k}={v}" for k, v in ov.items()] if isinstance(ov, dict) else [str(x) for x in ov]
        name = str(d["name"])
    else:
        name, sep, rest = text.partition(":")
        if not sep or not name:
            raise ConfigError(f"arm {text!r}: write NAME:key=value[,key=value…] or give a YAML file")
        ov = [x.strip() for x in rest.split(",") if x.strip()]
    bad = [x for x in ov if "=" not in x]
    if bad:
        raise ConfigError(f"arm {name!r}: {bad[0]!r} is not key=value")
    seen: dict[str, str] = {}
    for x in ov:  # model.gamma=0.5,model.gamma=1.0: the last would win silently
        key = x.split("=", 1)[0].strip()
        if key in seen:
            raise ConfigError(f"arm {name!r}: {key} is set twice ({seen[key]!r} and {x!r}); set it once")
        seen[key] = x
    return name, ov


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("arms", nargs="+", metavar="ARM", help="NAME:key=value,… or an arm YAML file (≥ 2 arms)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (new, empty, or this crossover's)")
    p.add_argument(
        "--tokens",
        type=parse_tokens,
        metavar="D",
        help="largest budget, e.g. 8M (default: --enough × the baseline's non-embedding parameters)",
    )
    p.add_argument(
        "--enough",
        type=parse_positive,
        metavar="K",
        help="the declared budget, in tokens per non-embedding parameter, fixed before the runs: the loss "
        "claim is judged there (supported / not supported / inconclusive); without it, at the "
        "largest budget",
    )
    p.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds 0..K-1 for every arm (default 1)")
    p.add_argument(
        "--config",
        default="tiny",
        metavar="CONFIG_OR_YAML",
        help="base run config: a name or a YAML file (default tiny)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every arm")
    p.add_argument("--baseline", help="the arm the others are compared with (default: the first)")
    p.add_argument(
        "--budgets",
        default="1/16,1/8,1/4,1/2,1",
        metavar="F,F,…",
        help="budgets as fractions of D (default 1/16,1/8,1/4,1/2,1)",
    )
    p.add_argument("--cooldown", type=float, default=0.2, help="decay over the last c of each budget (default 0.2)")
    p.add_argument(
        "--lrs",
        default="",
        metavar="LR,LR,…",
        help="tune each arm's learning rate over these values first (WSD runs of --tune-fraction·D; "
        "the grid grows past a winning edge value up to twice); default: no tuning",
    )
    p.add_argument(
        "--tune-fraction",
        type=parse_fraction,
        default=1.0,
        metavar="F",
        help="length of a tuning run as a fraction of D, at least 1/4 (default 1: every rate trains a whole trunk "
        "with its cooldown branches, so each arm runs at its best rate at the judged budget)",
    )
    p.add_argument(
        "--effect",
        type=parse_positive,
        metavar="NATS",
        help="the claimed effect δ in nats, declared with --enough before the runs: an interval holding 0 whose "
        "one-sided 95%% upper bound is below δ reads 'smaller than the claimed effect'",
    )
    p.add_argument(
        "--effect-from",
        nargs="+",
        metavar="RESULT",
        help="declare δ as the paper's 44%% effective size in nats at this N and D, from the baselines of finished "
        "crossovers at ≥ 3 widths that reach D (crossover.json or its folder); printed with its source",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="runs at a time (default: one per core on the CPU, 1 with CUDA)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per run (default: the cores shared by the runs trained at once)",
    )
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that exited with an error")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; run nothing")
    cluster_options.add_arguments(p)


def _fractions(text: str) -> list[float]:
    from fractions import Fraction

    from smallinit.core.errors import ConfigError

    try:
        return [float(Fraction(x.strip())) for x in text.split(",") if x.strip()]
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"--budgets: not a list of fractions: {text!r}") from None


def _rates(text: str) -> list[float]:
    from smallinit.core.errors import ConfigError

    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--lrs: not a list of numbers: {text!r}") from None


def _check_set(overrides: list[str]) -> None:
    """``--set`` of a key the crossover sets for every run (train.seed, train.max_steps, optim.schedule) is refused,
    as it is on an arm: it would be silently replaced."""
    from smallinit.core.errors import ConfigError
    from smallinit.experiments.crossover import CROSSOVER_SETS

    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in CROSSOVER_SETS:
            raise ConfigError(f"--set {o}: {key} is set by the crossover itself ({CROSSOVER_SETS[key]}); remove it")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from smallinit.core.errors import ConfigError
    from smallinit.experiments.cost import default_jobs, usable_cores
    from smallinit.experiments.crossover import CrossoverSpec, preflight, run_crossover, tokens_for_enough

    if args.seeds < 1 or (args.jobs is not None and args.jobs < 1) or args.threads < 0:
        raise ConfigError("--seeds and --jobs must be >= 1 and --threads >= 0")
    launcher = cluster_options.launcher(args, args.out, args.jobs)  # None: here; checked before any work
    arms = dict(parse_arm(a) for a in args.arms)
    if len(arms) != len(args.arms):
        raise ConfigError("two arms share a name")
    if args.tokens is None and args.enough is None:
        raise ConfigError("give --tokens D, --enough K (tokens per non-embedding parameter), or both")
    _check_set(args.set)
    if args.effect is not None and args.effect_from:
        raise ConfigError("give --effect or --effect-from, not both")
    spec = CrossoverSpec(
        arms=arms,
        baseline=args.baseline or next(iter(arms)),
        tokens=args.tokens or 1,
        base=args.config,
        overrides=list(args.set),
        seeds=list(range(args.seeds)),
        fractions=_fractions(args.budgets),
        cooldown=args.cooldown,
        lrs=_rates(args.lrs),
        tune_fraction=args.tune_fraction,
        enough=args.enough,
        effect=args.effect,
    )
    if args.tokens is None:
        spec.tokens = tokens_for_enough(spec)
    if args.effect_from:
        spec.effect = declared_effect(spec, args.effect_from)
    spec.validate()
    if args.dry_run:  # estimated at the widest stage: arms × seeds trunks (× rates while tuning)
        preflight(spec, Path(args.out))  # what the real run would refuse, the dry run refuses (nothing written)
        jobs = args.jobs or default_jobs(len(arms) * args.seeds * max(1, len(spec.lrs or ())))
        print_plan(spec, Path(args.out), args.threads or max(1, usable_cores() // jobs), jobs)
        return 0
    # each batch (tuning runs, trunks, branches) runs up to --jobs at a time, the cores shared among them
    result = run_crossover(
        spec,
        args.out,
        workers=args.jobs or default_jobs(),
        threads=args.threads,
        launcher=launcher,
        retry_failed=args.retry_failed,
    )
    for arm, a in result["analyses"].items():
        print(f"{arm} vs {spec.baseline}: {a['answer']}\n  verdict: {a['verdict']} — {a['reason']}")
    print(f"report: {Path(args.out) / 'crossover.md'}")
    return 0


def declared_effect(spec, sources: list[str]) -> float:
    """δ at the baseline's N and the largest budget D from the baselines of the finished crossovers ``sources``
    (:func:`smallinit.experiments.crossover_rejudge.effect_from_results`); printed with where it came from."""
    from smallinit.core.errors import ConfigError
    from smallinit.experiments.crossover_jobs import baseline_non_embedding_params
    from smallinit.experiments.crossover_rejudge import effect_from_results, read_crossover_result

    if spec.enough is None:
        raise ConfigError("--effect-from declares δ with the budget: give --enough K too")
    results = [read_crossover_result(r) for r in sources]
    try:
        ce = effect_from_results(results, baseline_non_embedding_params(spec), spec.tokens)
    except ValueError as e:
        raise ConfigError(f"--effect-from: {e}") from None
    print(f"claimed effect: {ce.describe()} (from {', '.join(sources)})")
    return ce.effect


def print_plan(spec, out, threads: int, jobs: int) -> None:
    """Every run's steps, tokens, tokens per parameter and estimated time at a throughput measured here."""
    from smallinit.experiments.cost import fmt_seconds, measure_gflops
    from smallinit.experiments.crossover import plan_jobs
    from smallinit.experiments.crossover_plan import crossover_wall_seconds, training_seconds

    trunks, branches, budgets = plan_jobs(spec, out)
    gflops = measure_gflops(trunks[0].config, threads=threads)
    _, lines = training_seconds(spec, gflops)
    tuning = (
        f"{len(spec.arms) * len(spec.lrs)} tuning runs (up to {len(spec.arms) * spec.tune_extend} more if an "
        "edge rate wins) + "
        if spec.lrs
        else ""
    )
    print(
        f"{tuning}{len(trunks)} trunks + {len(branches)} branches; budgets "
        f"{', '.join(f'{b.tokens:,}' for b in budgets)} tokens (time at {gflops:.1f} GFLOP/s per run, {threads} "
        f"thread(s), {jobs} at a time)"
    )
    print("\n".join(lines))
    print(
        f"total ≈ {fmt_seconds(crossover_wall_seconds(spec, gflops, jobs))} with {jobs} at a time (training only; "
        "evaluations add a few %)"
    )
