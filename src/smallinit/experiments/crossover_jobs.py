"""The runs of a crossover as a plan (:mod:`smallinit.experiments.crossover`): the budgets D_k and the trunk step
each cooldown branch starts from, each arm's resolved config, and the trunk and branch jobs of one arm × seed — for
the reported seeds and the tuning runs alike (:mod:`smallinit.experiments.crossover_tuning`)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.config import RunConfig, load_config
from smallinit.core.errors import ConfigError
from smallinit.experiments.crossover_runs import CrossoverJob, crossover_job
from smallinit.train.schedule import wsd_decay_start


@dataclass(frozen=True)
class Budget:
    """One budget: S = steps to the end of its cooldown, start = the trunk step its branch starts from."""

    steps: int
    start: int
    tokens: int


def arm_config(spec: Any, arm: str, seed: int) -> RunConfig:
    """The resolved config of ``arm`` at ``seed`` (base, then the spec's overrides, then the arm's); ``train.dtype``
    "auto" is float32 for claim runs (:func:`smallinit.train.precision.pin_for_claims`)."""
    from smallinit.train.precision import pin_for_claims

    if spec.base_config is not None:
        return pin_for_claims(
            load_config(
                None, [*spec.overrides, *spec.arms[arm], f"train.seed={seed}"], base=copy.deepcopy(spec.base_config)
            )
        )
    return pin_for_claims(load_config(spec.base, [*spec.overrides, *spec.arms[arm], f"train.seed={seed}"]))


def baseline_non_embedding_params(spec: Any) -> int:
    """N: the baseline arm's non-embedding parameters (the model as trained on its data), the N of every
    tokens-per-parameter figure of a crossover."""
    cfg = arm_config(spec, spec.baseline, spec.seeds[0])
    vocab = _data_vocab(cfg)
    if vocab:
        cfg.model.vocab_size = vocab
    cfg.model.max_seq_len = max(cfg.model.max_seq_len, cfg.data.seq_len)
    return cfg.model.num_params(non_embedding=True)


def tokens_for_enough(spec: Any) -> int:
    """D_max = ⌈K·N⌉ for the declared budget K (``spec.enough``) and the baseline's N."""
    if spec.enough is None:
        raise ConfigError("no declared budget (--enough) to size D from")
    return int(math.ceil(spec.enough * baseline_non_embedding_params(spec)))


def plan_budgets(spec: Any, cfg: RunConfig) -> list[Budget]:
    """S_k = round(f_k · D / (B·T)); start s_k = wsd_decay_start(S_k) with decay_fraction = c. Refuses budgets whose
    cooldown would be empty or start inside the warmup."""
    per_step = cfg.train.batch_size * cfg.data.seq_len
    probe = copy.deepcopy(cfg.optim)
    probe.decay_fraction = spec.cooldown
    out = []
    for f in spec.fractions:
        S = int(round(f * spec.tokens / per_step))
        start = wsd_decay_start(S, probe)
        if S < 2 or start < 1 or start != S - max(1, round(spec.cooldown * S)):  # the warmup would eat the cooldown
            raise ConfigError(
                f"budget {f:g}·D = {S} steps of {per_step} tokens is too small for a cooldown after "
                f"{cfg.optim.warmup_steps} warmup steps; raise --tokens or lower optim.warmup_steps"
            )
        out.append(Budget(S, start, S * per_step))
    if len({b.steps for b in out}) != len(out):
        raise ConfigError(f"budgets {[b.steps for b in out]} (steps) are not distinct; raise --tokens")
    return out


def trunk_config(cfg: RunConfig, budgets: list[Budget]) -> RunConfig:
    c = copy.deepcopy(cfg)
    c.optim.schedule = "constant"
    c.train.max_steps = budgets[-1].start
    c.train.ckpt_steps = sorted({b.start for b in budgets})
    c.train.progress = False
    return c


def branch_config(cfg: RunConfig, b: Budget, cooldown: float) -> RunConfig:
    c = copy.deepcopy(cfg)
    c.optim.schedule, c.optim.decay_fraction, c.optim.min_lr_ratio = "wsd", cooldown, 0.0
    c.train.max_steps = b.steps
    c.train.ckpt_steps = []
    c.train.progress = False
    return c


def arm_seed_jobs(
    spec: Any, cfg: RunConfig, arm: str, seed: int, home: Path, tuning: bool = False
) -> tuple[CrossoverJob, list[CrossoverJob], list[Budget]]:
    """(trunk, branches, budgets) of one arm × seed trained with ``cfg`` in ``home`` (``home/trunk``,
    ``home/D<tokens>``); ``tuning``: the runs are labelled as a tuning run of ``cfg``'s rate."""
    b = plan_budgets(spec, cfg)
    trunk = crossover_job("trunk", arm, seed, home / "trunk", trunk_config(cfg, b), tuning=tuning)
    branches = [
        crossover_job(
            "branch", arm, seed, home / f"D{x.tokens}", branch_config(cfg, x, spec.cooldown), trunk, x.start, tuning
        )
        for x in b
    ]
    return trunk, branches, b


def plan_jobs(
    spec: Any, out: Path, lrs: dict[str, float] | None = None
) -> tuple[list[CrossoverJob], list[CrossoverJob], list[Budget]]:
    """(trunks, branches, budgets) for every arm × seed. ``lrs`` (arm → rate, from
    :func:`~smallinit.experiments.crossover_tuning.tune_learning_rates`) replaces the arms' ``optim.lr``. Each run's
    torch threads are set when it is trained (:func:`~smallinit.experiments.crossover_runs.execute`)."""
    trunks, branches = [], []
    budgets: list[Budget] | None = None
    for arm in spec.arms:
        for seed in spec.seeds:
            cfg = arm_config(spec, arm, seed)
            if lrs and arm in lrs:
                cfg.optim.lr = lrs[arm]
            trunk, bs, b = arm_seed_jobs(spec, cfg, arm, seed, out / "runs" / arm / f"seed{seed}")
            if budgets is not None and [x.tokens for x in b] != [x.tokens for x in budgets]:
                raise ConfigError(
                    f"arm {arm!r} has another batch or sequence length than the others: "
                    "budgets must be the same token counts in every arm"
                )
            budgets = b
            trunks.append(trunk)
            branches += bs
    assert budgets is not None
    return trunks, branches, budgets


def _data_vocab(cfg: RunConfig) -> int | None:
    from smallinit.runs.rundir import read_json

    v = (read_json(Path(cfg.data.path) / "meta.json") or {}).get("vocab_size")
    return int(v) if v else None


__all__ = [
    "Budget",
    "arm_config",
    "arm_seed_jobs",
    "baseline_non_embedding_params",
    "branch_config",
    "plan_budgets",
    "plan_jobs",
    "tokens_for_enough",
    "trunk_config",
]
