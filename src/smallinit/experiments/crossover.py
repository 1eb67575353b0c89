"""Loss against budget for several training settings ("arms"), from one run per arm × seed plus cooldown branches.

DESIGN.md §2, "Budgets and the crossing". Every arm × seed trains one **trunk** at the peak learning rate after
warmup (the stable phase of warmup–stable–decay). For each budget D_k (default D/16, D/8, D/4, D/2, D) a
**cooldown branch** starts from the trunk's checkpoint at s_k = (1 − c)·S_k steps (S_k = D_k / tokens per step,
c = 0.2) and decays the rate linearly to 0 at S_k: its final validation loss is the annealed L(D_k). The branch's
schedule is WSD with ``max_steps = S_k`` (:func:`smallinit.train.schedule.wsd_decay_start`), so a branch is the same
run as WSD trained from step 0 — bit for bit, since batches depend on (seed, step) only.

Layout of ``OUT``::

    crossover.spec.json            what was asked (a rerun with another spec is refused)
    runs/ARM/seedS/trunk/          the stable-phase run (checkpoints at every s_k kept)
    runs/ARM/seedS/D<tokens>/      one cooldown branch per budget (an ordinary, resumable run directory)
    crossover.json  crossover.md  crossover.png

Runs are ordinary run directories, trained as jobs of the one job runner (:mod:`.crossover_runs`): a rerun skips
finished ones and resumes interrupted ones; a failed one (``failed.json``) is run again only when asked
(``retry_failed``). What a crossover refuses before it trains is in :mod:`.crossover_checks`.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from smallinit.analysis.crossing import CrossoverAnalysis, analyse_crossover
from smallinit.core.errors import ConfigError, RunDirError
from smallinit.core.io import atomic_write_json, atomic_write_text
from smallinit.experiments.crossover_checks import SPEC_FILE, check_data, check_output, check_reuse, check_same_data
from smallinit.experiments.crossover_jobs import (  # noqa: F401 - the plan's names, re-exported
    Budget,
    arm_config,
    arm_seed_jobs,
    baseline_non_embedding_params,
    branch_config,
    plan_budgets,
    plan_jobs,
    tokens_for_enough,
    trunk_config,
)
from smallinit.experiments.crossover_runs import CrossoverJob, execute
from smallinit.experiments.crossover_tuning import collect_tuning, tune_learning_rates

DEFAULT_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
TUNE_SEED = 1_000_003
"""The seed of every tuning run: never a reported seed (a crossover refuses it in ``seeds``), so no reported loss is
the winner of the selection it took part in (DESIGN.md §2, "Learning rates")."""
RETRY = "rerun with --retry-failed to run them again; the error and log are in each run's failed.json"
MIN_TUNE_FRACTION = 0.25
"""A tuning run is at least D/4 long (DESIGN.md §2): a rate judged on a shorter horizon favours fast starters."""


@dataclass
class CrossoverSpec:
    """What ``smallinit crossover`` runs."""

    arms: dict[str, list[str]]
    """Arm name → dotted overrides (``model.gamma=1.0`` …) applied on top of ``base`` and ``overrides``."""
    baseline: str
    """The arm every other arm is compared with: G(D) = L_baseline(D) − L_arm(D)."""
    tokens: int
    """The largest budget D (training tokens per arm × seed)."""
    base: str = "tiny"
    """Config name or YAML path of the run config every arm starts from."""
    overrides: list[str] = field(default_factory=list)
    """Dotted overrides for every arm (data path, batch, learning rate …)."""
    seeds: list[int] = field(default_factory=lambda: [0])
    fractions: list[float] = field(default_factory=lambda: list(DEFAULT_FRACTIONS))
    """Budgets as fractions of ``tokens`` (increasing, last = 1)."""
    cooldown: float = 0.2
    """c: a branch decays over the last c·S_k steps of its budget."""
    base_config: dict[str, Any] | None = None
    """A nested config mapping used instead of ``base`` (``reproduce`` passes its preset's resolved base)."""
    lrs: list[float] = field(default_factory=list)
    """Learning rates tuned per arm before the trunks (empty: every arm keeps its own ``optim.lr``). At each value every
    arm trains at ``tune_seed``: a whole trunk with its cooldown branches when ``tune_fraction`` is 1, else one WSD run
    of ``tune_fraction``·D tokens (:mod:`~smallinit.experiments.crossover_tuning`)."""
    tune_fraction: float = 1.0
    """Length of a tuning run as a fraction of D: 1 (the default) tunes at the judged budget with a rate profile at
    every budget; ≥ 1/4 is accepted (a rate judged early favours fast starters and can bias the gap)."""
    tune_extend: int = 2
    """How many times the (shared) grid may grow by one step past an edge value that wins for any arm."""
    tune_seed: int = TUNE_SEED
    """Seed of the tuning runs; never one of ``seeds`` (the selection would bias that seed's losses)."""
    effect: float | None = None
    """The claimed effect δ (nats), declared with K before the runs: the gain the claim predicts at D_K. An interval of
    G that holds 0 with its one-sided 95% upper bound below δ reads *smaller than the claimed effect*
    (:func:`smallinit.analysis.crossing.loss_claim_verdict`); seeds are planned for 80% power at δ."""
    enough: float | None = None
    """The declared budget K in tokens per non-embedding parameter (of the baseline arm), fixed before the runs:
    a loss claim is judged at the budget nearest K·N (:func:`smallinit.analysis.crossing.loss_claim_verdict`);
    None: judged at the largest budget, declared as whatever that is."""

    def validate(self) -> None:
        if len(self.arms) < 2:
            raise ConfigError(f"a crossover needs at least 2 arms, got {len(self.arms)}")
        if self.baseline not in self.arms:
            raise ConfigError(f"baseline {self.baseline!r} is not one of the arms ({', '.join(self.arms)})")
        if self.tokens <= 0:
            raise ConfigError(f"--tokens must be > 0, got {self.tokens}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ConfigError(f"seeds must be distinct integers >= 0, got {self.seeds}")
        f = self.fractions
        if not f or any(b <= a for a, b in zip(f, f[1:])) or f[0] <= 0 or abs(f[-1] - 1.0) > 1e-9:
            raise ConfigError(f"budget fractions must increase from > 0 to 1, got {f}")
        if not 0 < self.cooldown < 1:
            raise ConfigError(f"cooldown fraction must be in (0, 1), got {self.cooldown}")
        if any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs) or len(set(self.lrs)) != len(self.lrs):
            raise ConfigError(f"tuning learning rates must be distinct and > 0, got {self.lrs}")
        if self.lrs and not MIN_TUNE_FRACTION - 1e-9 <= self.tune_fraction <= 1:
            raise ConfigError(
                f"--tune-fraction must be in [1/4, 1] (a rate judged before D/4 favours the fast "
                f"starter), got {self.tune_fraction:g}"
            )
        if self.lrs and self.tune_seed in self.seeds:
            raise ConfigError(
                f"the tuning seed {self.tune_seed} is one of the reported seeds; a reported seed must "
                "not take part in the rate selection"
            )
        if self.enough is not None and not (self.enough > 0 and math.isfinite(self.enough)):
            raise ConfigError(f"--enough must be a finite number of tokens per parameter > 0, got {self.enough}")
        if self.effect is not None and not (self.effect > 0 and math.isfinite(self.effect)):
            raise ConfigError(f"--effect must be a finite number of nats > 0, got {self.effect}")
        if self.effect is not None and self.enough is None:
            raise ConfigError("--effect is declared with a budget: give --enough K too")
        if self.tune_extend < 0:
            raise ConfigError(f"tune_extend must be >= 0, got {self.tune_extend}")
        for name, overrides in self.arms.items():
            if not name or "/" in name or name.startswith("."):
                raise ConfigError(f"bad arm name {name!r} (used as a folder name)")
            for o in overrides:  # an arm's own; the shared --set ones (older specs carry train.max_steps) apply to all
                key = str(o).split("=", 1)[0].strip()
                if key in CROSSOVER_SETS:
                    raise ConfigError(f"{key} is set by the crossover itself ({CROSSOVER_SETS[key]}); remove {o!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CROSSOVER_SETS = {
    "train.seed": "one run per --seeds value",
    "train.max_steps": "from --tokens and the budgets",
    "optim.schedule": "WSD trunks with cooldown branches",
}
"""Keys a crossover sets for every run: an arm that sets one is refused (it would be silently replaced)."""


def seed_major(trunks: list[CrossoverJob], branches: list[CrossoverJob]) -> list[CrossoverJob]:
    """The runs in the order they are taken: seed by seed, every arm's trunk then their branches (a branch waits for its
    own trunk only). Complete seed pairs so accumulate from the start: a crossover stopped after k seeds can be
    analysed over k pairs (``--seeds k``), where trunks-first would have left no pair complete until the end."""
    order: list[CrossoverJob] = []
    for seed in dict.fromkeys(t.seed for t in trunks):
        order += [t for t in trunks if t.seed == seed]
        order += [b for b in branches if b.seed == seed]
    return order


def preflight(spec: CrossoverSpec, out: Path) -> tuple[list[CrossoverJob], list[CrossoverJob], list[Budget], dict]:
    """Everything a crossover refuses before any work, for the run and its dry run alike: the spec, the plan (config
    errors), arms on different data, an output folder holding something else or other declarations, data that is
    missing or tokenized otherwise. Returns (trunks, branches, budgets, the data settings frozen in the spec)."""
    spec.validate()
    trunks, branches, budgets = plan_jobs(spec, out)  # config errors surface before any folder exists
    data = check_same_data(trunks)
    check_output(out, spec, inputs=tuple(sorted({j.config.data.path for j in trunks})), data=data)
    check_data(trunks)
    return trunks, branches, budgets, data


def run_crossover(
    spec: CrossoverSpec,
    out_dir: str | os.PathLike,
    workers: int = 1,
    threads: int = 0,
    log: Callable[[str], None] | None = None,
    n_boot: int = 300,
    launcher: Any = None,
    retry_failed: bool = False,
    gflops: float | None = None,
    inprocess: bool | None = None,
) -> dict[str, Any]:
    """Plan, train (tuning runs, trunks, then branches; ``workers`` processes at a time, each with ``threads`` torch
    threads — 0: the cores shared by the runs of each batch, see ``crossover_runs.batch_threads``), analyse and write
    the report; returns the crossover.json content. ``launcher``: the runs are cluster jobs (experiments.launcher);
    ``retry_failed``: runs that failed earlier are run again; ``gflops``: the throughput behind the time estimates;
    ``inprocess``: every run in this process (default: when ``workers`` is 1)."""
    from smallinit.train.loop import RunLock

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    out = Path(out_dir)
    trunks, branches, budgets, data = preflight(spec, out)
    if not spec.lrs:
        check_reuse(trunks, branches)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        atomic_write_json(out / SPEC_FILE, {**spec.to_dict(), "data": data})
        run = {"retry_failed": retry_failed, "gflops": gflops, "inprocess": inprocess}
        if spec.lrs:
            chosen = tune_learning_rates(spec, out, workers, threads, log, launcher, **run)
            log("[crossover] learning rates: " + ", ".join(f"{a} {lr:.3g}" for a, lr in chosen.items()))
            trunks, branches, budgets = plan_jobs(spec, out, lrs=chosen)
            check_reuse(trunks, branches)
        done = execute(seed_major(trunks, branches), workers, log, threads, launcher, **run)
        result = analyse(spec, out, budgets, n_boot=n_boot)
        write_report(result, out)
    failed = [f"{p.relative_to(out)}: {r[1]}" for p, r in done.items() if r[0] == "failed"]
    if failed:
        raise RunDirError(f"{len(failed)} run(s) failed ({RETRY}); first: {failed[0]}")
    return result


def collect_losses(
    spec: CrossoverSpec, out: Path, budgets: list[Budget]
) -> tuple[dict[str, dict[int, list[float | None]]], dict[str, dict[int, list[str | None]]]]:
    """(L, why): L[arm][seed] = the branches' final validation losses at each budget, None where there is no finite
    one; why[arm][seed] = the reason for each None ("non-finite (diverged)", "failed: …", "did not finish", "not
    run"), None beside a loss."""
    from smallinit.runs.rundir import collect_run

    losses: dict[str, dict[int, list[float | None]]] = {}
    why: dict[str, dict[int, list[str | None]]] = {}
    for arm in spec.arms:
        for seed in spec.seeds:
            row, reasons = [], []
            for b in budgets:
                run_dir = out / "runs" / arm / f"seed{seed}" / f"D{b.tokens}"
                run = collect_run(run_dir)
                v = run.get("final_val_loss") if run["state"] == "done" else None
                ok = v is not None and math.isfinite(v)
                row.append(v if ok else None)
                if ok:
                    reasons.append(None)
                elif v is not None or (run_dir / "diverged.json").is_file():
                    reasons.append("non-finite (diverged)")
                elif run.get("error"):
                    reasons.append(f"failed: {str(run['error'])[:80]}")
                else:
                    reasons.append("not run" if run["state"] == "new" else "did not finish")
            losses.setdefault(arm, {})[seed] = row
            why.setdefault(arm, {})[seed] = reasons
    return losses, why


def analyse(
    spec: CrossoverSpec, out: Path, budgets: list[Budget], n_boot: int = 300, noise_floor: float | None = None
) -> dict[str, Any]:
    """Every non-baseline arm against the baseline (:func:`smallinit.analysis.crossing.analyse_crossover`)."""
    n_non_emb = baseline_non_embedding_params(spec)
    losses, why = collect_losses(spec, out, budgets)
    D = [b.tokens for b in budgets]
    analyses: dict[str, CrossoverAnalysis] = {}
    for arm in spec.arms:
        if arm != spec.baseline:
            analyses[arm] = analyse_crossover(
                D,
                losses,
                spec.baseline,
                arm,
                non_embedding_params=n_non_emb,
                n_boot=n_boot,
                noise_floor=noise_floor,
                enough_tokens_per_param=spec.enough,
                effect=spec.effect,
                problems=why,
            )
    return {
        "spec": spec.to_dict(),
        "tuning": collect_tuning(spec, out, budgets) if spec.lrs else {},
        "budgets": [asdict(b) for b in budgets],
        "non_embedding_params": n_non_emb,
        "tokens_per_param": [d / n_non_emb for d in D],
        "losses": {a: {str(s): v for s, v in r.items()} for a, r in losses.items()},
        "problems": {a: {str(s): v for s, v in r.items()} for a, r in why.items()},  # crossover-rejudge reads them
        "analyses": {a: x.to_dict() for a, x in analyses.items()},
    }


def write_report(result: dict[str, Any], out: Path) -> None:
    """crossover.json, crossover.md and crossover.png (:mod:`smallinit.experiments.crossover_report`)."""
    from smallinit.experiments.crossover_report import crossover_figure, crossover_markdown, tuning_figure

    atomic_write_json(out / "crossover.json", result)
    crossover_figure(result, out / "crossover.png")
    tuning_figure(result, out / "tuning.png")
    atomic_write_text(out / "crossover.md", crossover_markdown(result, figure="crossover.png"))
