"""Planning a reproduction: which runs each claim's arms need, their typed configs, their cost, and the corpus.

Phase 1 trains every LM arm at every learning rate of the preset (seed 0) and every anchor arm at every
``anchor_lrs`` (seed 0); phase 2 adds the extra seeds at each arm's chosen learning rate (an arm runs as many
seeds as the most any claim using it asks for). LM runs live in ``OUT/runs/<arm>-lr<lr>-s<seed>``, anchor runs in
``OUT/anchor/anchor-g<γ>-lr<lr>-s<seed>``, deduplicated across claims.

An arm's settings reach the run as fields of the typed :class:`~smallinit.config.RunConfig` (γ →
``model.gamma``, ε → ``model.norm_eps``, gate → ``model.gate``, BOS → ``data.bos``) or of the
:class:`~smallinit.experiments.anchor.AnchorConfig`; the preset's ``base`` and size overrides are its data.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.config import RunConfig, load_config, set_dotted
from smallinit.core.errors import DataError
from smallinit.experiments.claims import registry
from smallinit.experiments.claims.context import anchor_name, fmt_lr, run_name
from smallinit.experiments.cost import default_threads, fmt_seconds, model_cost, sharing_speedup, wall_seconds
from smallinit.experiments.job import Job
from smallinit.experiments.presets import AnchorArm, Arm, Preset
from smallinit.train.precision import pin_for_claims


def claim_arms(p: Preset) -> dict[int, dict[str, Arm | AnchorArm]]:
    """{claim: {role: arm}} for the claims the preset runs (those whose ``arms(preset)`` is not None)."""
    out = {}
    mods = registry()
    for c in p.claims:
        roles = mods[c].arms(p) if c in mods else None
        if roles is not None:
            out[c] = roles
    return out


def seeds_of_arm(p: Preset, a: Arm | AnchorArm, arms: dict[int, dict[str, Any]]) -> int:
    """Seeds an arm needs: the most any claim that uses it asks for."""
    return max([p.n_seeds(c) for c, roles in arms.items() if a in roles.values()] or [1])


def lm_config(p: Preset, a: Arm, lr: float, seed: int, corpus: Path | str) -> RunConfig:
    """The typed config of one LM run: the preset's base and the size's overrides (data), then the arm's
    settings, the learning rate, the seed and the corpus set on the typed fields."""
    over = dict(p.sizes[a.size])
    steps = int(over.get("train.max_steps", p.base.get("train", {}).get("max_steps", 1000)))
    if "probe.every" not in over and p.base.get("probe", {}).get("every"):
        over["probe.every"] = max(1, int(p.base["probe"]["every"]))
    over.setdefault("train.eval_every", min(steps, int(p.base.get("train", {}).get("eval_every", steps))))
    over.setdefault("train.ckpt_every", min(steps, int(p.base.get("train", {}).get("ckpt_every", steps))))
    d = copy.deepcopy(p.base)
    for k, v in over.items():
        set_dotted(d, k, v, what="preset key")
    cfg = pin_for_claims(load_config(None, [], base=d))  # "auto" → float32 until bf16's parity is shown
    if p.bf16_where_native:
        from smallinit.train.precision import bf16_where_native

        cfg.train.dtype = bf16_where_native(cfg.train.device)[0]
    r = dataclasses.replace
    cfg = r(
        cfg,
        model=r(cfg.model, gamma=a.gamma, norm_eps=a.eps, gate=a.gate),
        data=r(cfg.data, bos=a.bos, path=str(corpus)),
        optim=r(cfg.optim, lr=lr, eps=cfg.optim.eps if a.adam_eps is None else a.adam_eps),
        train=r(cfg.train, seed=seed),
    )
    cfg.validate()
    return cfg


def lm_job(
    p: Preset, out: Path, a: Arm, lr: float, seed: int, corpus: Path | str, parallel: int, gflops: float | None
) -> Job:
    from smallinit.experiments.sweep import train_job

    name = run_name(a, lr, seed)
    return train_job(
        name, lm_config(p, a, lr, seed, corpus), out / "runs", parallel=parallel, gflops=gflops, label=name
    )


def anchor_config(p: Preset, gamma: float, lr: float, seed: int, parallel: int = 1):
    """The AnchorConfig of one anchor run: the preset's ``anchor`` settings with γ, learning rate and seed."""
    from smallinit.experiments.anchor import AnchorConfig

    cfg = AnchorConfig(**{**p.anchor, "gamma": gamma, "lr": lr, "seed": seed})
    if parallel > 1 and not cfg.threads:
        cfg.threads = default_threads(parallel)
    cfg.validate()
    return cfg


def anchor_job(p: Preset, out: Path, a: AnchorArm, lr: float, seed: int, gflops: float | None, parallel: int) -> Job:
    from smallinit.experiments.anchor import anchor_flops

    cfg = anchor_config(p, a.gamma, lr, seed, parallel)
    name = anchor_name(a.gamma, lr, seed)
    est = anchor_flops(cfg) / (gflops * 1e9) if gflops else 0.0
    return Job(name, out / "anchor" / name, "anchor", cfg, est_seconds=est, total_steps=cfg.steps, label=name)


@dataclass
class Plan:
    """Phase 1 (every arm × every learning rate, seed 0) and the size of phase 2 (extra seeds)."""

    preset: Preset
    arms: dict[int, dict[str, Any]]
    lm_arms: list[Arm]
    anchor_arms: list[AnchorArm]
    seeds: dict[str, int]  # arm key -> seeds
    phase1: list[Job]
    phase2_estimates: list[float]  # planned seconds of each phase-2 run (extra seeds), in the order they run
    costs: dict[str, dict[str, float]]  # run name -> model_cost
    gflops: float | None
    anchor_gflops: float | None

    @property
    def phase2_count(self) -> int:
        return len(self.phase2_estimates)

    @property
    def phase2_seconds(self) -> float:
        """Machine seconds of phase 2 (the sum of its runs' estimates)."""
        return sum(self.phase2_estimates)


def phase_wall_seconds(estimates: list[float], jobs: int) -> float:
    """Estimated wall-clock of one phase's runs trained ``jobs`` at a time in order: their makespan
    (:func:`~smallinit.experiments.cost.wall_seconds`), a phase of fewer runs than jobs sharing the cores (as
    :meth:`Reproduction.plan` and ``run`` assign them, :func:`~smallinit.experiments.cost.sharing_speedup`)."""
    return wall_seconds([s / sharing_speedup(len(estimates), jobs) for s in estimates], jobs)


def plan_wall_seconds(plan: Plan, jobs: int) -> float:
    """Estimated wall-clock of phase 1 then phase 2 (:func:`phase_wall_seconds` each)."""
    return phase_wall_seconds([j.est_seconds for j in plan.phase1], jobs) + phase_wall_seconds(
        plan.phase2_estimates, jobs
    )


def make_plan(
    p: Preset, out: Path, corpus: Path, gflops: float | None, anchor_gflops: float | None, parallel: int
) -> Plan:
    arms = claim_arms(p)
    lm_arms: list[Arm] = []
    anchor_arms: list[AnchorArm] = []
    for roles in arms.values():
        for a in roles.values():
            group = anchor_arms if isinstance(a, AnchorArm) else lm_arms
            if a not in group:
                group.append(a)
    seeds = {a.key: seeds_of_arm(p, a, arms) for a in [*lm_arms, *anchor_arms]}
    jobs: list[Job] = []
    costs: dict[str, dict[str, float]] = {}
    phase2: list[float] = []  # phase 2 runs the arms' extra seeds in this order (phase2_jobs)
    for a in lm_arms:
        for lr in p.lrs:
            job = lm_job(p, out, a, lr, 0, corpus, parallel, gflops)
            costs[job.name] = model_cost(job.config)
            jobs.append(job)
        phase2 += [jobs[-1].est_seconds] * (seeds[a.key] - 1)
    for a in anchor_arms:
        for lr in p.anchor_lrs:
            jobs.append(anchor_job(p, out, a, lr, 0, anchor_gflops, parallel))
        phase2 += [jobs[-1].est_seconds] * (seeds[a.key] - 1)
    return Plan(p, arms, lm_arms, anchor_arms, seeds, jobs, phase2, costs, gflops, anchor_gflops)


def phase2_jobs(plan: Plan, out: Path, chosen: dict[str, float | None], corpus: Path, parallel: int) -> list[Job]:
    """The extra seeds (1, 2, ...) of every arm at its chosen learning rate (arms with none chosen skipped)."""
    p, jobs = plan.preset, []
    for a in plan.lm_arms:
        lr = chosen.get(a.key)
        if lr is not None:
            jobs += [lm_job(p, out, a, lr, s, corpus, parallel, plan.gflops) for s in range(1, plan.seeds[a.key])]
    for a in plan.anchor_arms:
        lr = chosen.get(a.key)
        if lr is not None:
            jobs += [anchor_job(p, out, a, lr, s, plan.anchor_gflops, parallel) for s in range(1, plan.seeds[a.key])]
    return jobs


def describe_plan(plan: Plan, jobs: int) -> str:
    """The plan in words: claims, learning rates, every phase-1 run with its size, tokens and cost, the estimate."""
    p = plan.preset
    lines = [
        f"reproduce --preset {p.name}: {p.description}",
        f"budget: {p.budget}",
        f"claims run: {', '.join(map(str, p.claims))}; not run: "
        f"{', '.join(str(c) for c in registry() if c not in p.claims) or 'none'}",
        f"learning rates per arm: {', '.join(map(fmt_lr, p.lrs))}"
        f"{' (chosen on tune_loss)' if len(p.lrs) > 1 else ' (fixed, not tuned)'}",
        "",
        f"phase 1: {len(plan.phase1)} runs",
    ]
    total_s, total_flops = 0.0, 0.0
    # tok/param: tokens per non-embedding parameter, the unit of the declared budget (Preset.enough) and the claims
    lines.append(f"  {'run':<46} {'params':>9} {'tokens':>9} {'tok/param':>9} {'PFLOP':>8} {'est':>8}")
    for j in plan.phase1:
        c = plan.costs.get(j.name)
        if c:
            total_flops += c["flops"]
            lines.append(
                f"  {j.name:<46} {c['params'] / 1e6:8.2f}M {c['tokens'] / 1e6:8.2f}M "
                f"{c['tokens'] / c['non_embedding_params']:9.2f} {c['flops'] / 1e15:8.3f} "
                f"{fmt_seconds(j.est_seconds):>8}"
            )
        else:
            lines.append(f"  {j.name:<46} {'':>9} {'':>9} {'':>9} {'':>8} {fmt_seconds(j.est_seconds):>8}")
        total_s += j.est_seconds
    lines.append(
        f"phase 2: {plan.phase2_count} more runs (extra seeds at each arm's chosen learning rate), "
        f"≈ {fmt_seconds(plan.phase2_seconds)}"
    )
    total_s += plan.phase2_seconds
    wall = plan_wall_seconds(plan, jobs)
    gpu_h = total_s / 3600
    lines += [
        "",
        f"throughput assumed: {plan.gflops:,.1f} GFLOP/s per job (LM), "
        f"{(plan.anchor_gflops or 0):,.1f} (anchor); {jobs} job(s) at a time",
        f"estimated cost: {total_flops / 1e18:.3g} EFLOP for phase 1 LM runs; "
        f"≈ {fmt_seconds(wall)} wall-clock" + (f" (≈ {gpu_h:,.0f} device-hours)" if p.name == "gpu" else ""),
    ]
    return "\n".join(lines)


# ---- the corpus -------------------------------------------------------------------------------------------


def check_corpus_path(p: Preset, corpus: str | os.PathLike | None, out: Path, planning: bool = False) -> Path:
    """The data directory a reproduction will use (``corpus``, or ``OUT/../data/<name>``), refused before any work
    when it is a file, a folder that is not a prepared one and not empty, or (unless only ``planning``: a dry run
    prints the plan without data) missing for a preset with no corpus of its own."""
    path = Path(corpus) if corpus else Path(out).parent / "data" / p.corpus.get("name", "stdlib")
    if (path / "meta.json").is_file():
        return path
    if path.exists() and not path.is_dir():
        raise DataError(f"--corpus {path}: a file, not a prepared data directory")
    if path.is_dir() and any(path.iterdir()):
        raise DataError(f"{path} exists but is not a prepared data directory (no meta.json)")
    if not p.corpus.get("inputs") and not planning:
        raise DataError(
            f"preset {p.name} has no default corpus: prepare one with `smallinit prepare` and pass --corpus"
        )
    return path


def ensure_corpus(p: Preset, corpus: str | os.PathLike | None, out: Path, log: Callable[[str], None]) -> Path:
    """The prepared data directory to train on: ``corpus`` if it is one; else prepare the preset's default
    corpus (builtin:stdlib) into ``corpus`` or, when not given, into ``OUT/../data/<name>``."""
    path = check_corpus_path(p, corpus, out)
    if (path / "meta.json").is_file():
        return path
    from smallinit.data import prepare_corpus

    tokenizer = p.corpus.get("tokenizer", "bpe")
    what = f"BPE {p.corpus.get('vocab_size', 8192)}" if tokenizer == "bpe" else tokenizer
    log(
        f"[reproduce] preparing {', '.join(p.corpus['inputs'])} into {path} ({what}"
        f"{', first %.0f MB' % (p.corpus['max_bytes'] / 1e6) if p.corpus.get('max_bytes') else ''}) ..."
    )
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_corpus(
            list(p.corpus["inputs"]),
            path,
            tokenizer=tokenizer,
            vocab_size=int(p.corpus.get("vocab_size", 8192)),
            val_fraction=float(p.corpus.get("val_fraction", 0.02)),
            progress=False,
            max_bytes=p.corpus.get("max_bytes"),
            weights=p.corpus.get("weights"),
            text_field=p.corpus.get("text_field", "text"),
        )
    log(f"[reproduce] corpus ready in {fmt_seconds(time.time() - t0)}")
    return path


def check_corpus(p: Preset, corpus: Path) -> dict[str, Any]:
    """Refuse a corpus whose validation split cannot hold the val + tune batches (and the comparison tokens)."""
    from smallinit.data import TokenData, val_offsets

    td = TokenData(corpus)
    d, t = p.base["data"], p.base["train"]
    T = int(d["seq_len"])
    batches = int(d.get("val_batches", 8)) + int(d.get("tune_batches", 0))
    need = batches * int(t["batch_size"])
    have = len(val_offsets(len(td.val), T, td.bos_id if d.get("bos") else None))
    if have < need:
        raise DataError(
            f"{corpus}: the val split holds {have} windows of {T} tokens; preset {p.name} needs {need} "
            f"({batches} val+tune batches of {t['batch_size']}); prepare it with a larger --val-fraction"
        )
    return {
        "path": str(corpus),
        "vocab_size": td.vocab_size,
        "train_tokens": int(len(td.train)),
        "val_tokens": int(len(td.val)),
        "sources": [s.get("name") for s in td.meta.get("sources", [])],
    }


def corpus_note(p: Preset, corpus: Path) -> str | None:
    """A note when ``corpus`` was tokenized otherwise than the preset's own corpus (``cpu`` is sized for bytes: with
    BPE 8192 its LM head becomes about half of the FLOPs); None when they agree or the preset names no corpus."""
    from smallinit.data import TokenData

    wanted = p.corpus.get("tokenizer", "bpe") if p.corpus.get("inputs") else None
    kind = (TokenData(corpus).meta.get("tokenizer") or {}).get("kind")
    if wanted is None or kind is None or kind == wanted:
        return None
    return (
        f"note: preset {p.name} is sized for a {wanted} corpus; {corpus} is {kind} (vocabulary "
        f"{TokenData(corpus).vocab_size:,}), so its runs cost what the plan below says, not the preset's "
        "stated time"
    )


__all__ = [
    "Plan",
    "anchor_config",
    "anchor_job",
    "check_corpus",
    "check_corpus_path",
    "claim_arms",
    "corpus_note",
    "describe_plan",
    "ensure_corpus",
    "lm_config",
    "lm_job",
    "make_plan",
    "phase2_jobs",
    "phase_wall_seconds",
    "plan_wall_seconds",
    "seeds_of_arm",
]
