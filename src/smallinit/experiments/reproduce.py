"""``smallinit reproduce``: run the experiments behind each claim of the paper and judge them.

A **preset** fixes the budget: which claims run, the model sizes, steps, learning rates, seeds and the
corpus. ``demo`` (≤ 15 min on a 2-core CPU: claims 1, 4, 6, 7, 9), ``cpu`` (≤ 2 h on a 2-core CPU, every
claim, learning rates swept) and ``gpu`` (the paper-sized plan; use ``--dry-run`` to print it and its cost).

Every experiment is a set of **arms** (a model setting: size, γ, ε, gate, BOS, MoE). Each arm is trained at
every learning rate of the preset (seed 0); where the preset has several learning rates (``cpu``, ``gpu``),
each arm keeps the one with the lowest ``tune_loss`` — validation batches disjoint from those behind the
reported ``val_loss`` — so that no arm is judged at a learning rate tuned for another init scale. Extra
seeds (claims 1, 9, 10) then run at the chosen rate. The anchor task (claim 9) is selected the same way, on
its in-distribution tune set. All runs live in ``OUT/runs/`` (anchor runs in ``OUT/anchor/``), deduplicated
across claims; the whole thing is built on :class:`~smallinit.experiments.sweep.JobRunner`, so rerunning the
same command resumes where it stopped.

Analysis (``OUT/compare/`` caches token-level comparisons) and verdicts (rules in
:mod:`smallinit.experiments.claims`) go to ``OUT/claims.json``, ``OUT/report.md`` and ``OUT/index.html``
with PNG plots beside them (:mod:`smallinit.experiments.report`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from smallinit.errors import ConfigError, DataError
from smallinit.experiments import claims as C
from smallinit.experiments.sweep import (Job, JobRunner, collect_run, default_threads, fmt_seconds, measure_gflops,
                                         model_cost, read_json, read_jsonl, resolve_config, run_state, train_job)
from smallinit.io import atomic_write_json

PAPER_REGIME = {"params": "0.1B–1.5B", "tokens": "~1T", "tokens_per_param": "≈ 670–10,000"}
BASELINE = (0.5, 1e-5, "none")
PAPER = (1.0, 1e-12, "elementwise")


# ---- arms and presets -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arm:
    """A model setting of an experiment (the learning rate and the seed come later)."""

    size: str
    gamma: float
    eps: float
    gate: str
    bos: bool = True
    moe: bool = False

    @property
    def key(self) -> str:
        moe = "-moe" if self.moe and "moe" not in self.size else ""
        return (f"{self.size}{moe}-g{self.gamma:g}-e{self.eps:g}-{self.gate}"
                f"{'' if self.bos else '-nobos'}")

    def describe(self) -> str:
        return (f"γ={self.gamma:g}, ε={self.eps:g}, gate={self.gate}, {self.size}{' MoE' if self.moe else ''}"
                f"{'' if self.bos else ', no BOS'}")


def arm(size: str, setting: tuple[float, float, str], **kw) -> Arm:
    return Arm(size, setting[0], setting[1], setting[2], **kw)


@dataclass
class Preset:
    """What one ``reproduce --preset`` runs (see the module docstring)."""

    name: str
    budget: str
    claims: tuple[int, ...]
    base: dict[str, Any]
    """Nested config shared by every LM run (data.path is filled in with the corpus)."""
    sizes: dict[str, dict[str, Any]]
    """Size label → dotted overrides (model shape, train.max_steps, probe.every ...)."""
    main_size: str
    """Claims 1, 3, 5, 7 (and the largest size of 2)."""
    probe_size: str
    """Claims 4 and 6."""
    shrink_sizes: tuple[str, ...] = ()
    """Claim 2 (≥ 2 sizes, ascending)."""
    scaling_sizes: tuple[str, ...] = ()
    """Claim 8 (≥ 3 sizes)."""
    moe_size: str | None = None
    """Claim 10: a size label whose overrides include the MoE settings."""
    lrs: tuple[float, ...] = (3e-3,)
    seeds: dict[int, int] = field(default_factory=dict)
    gammas: tuple[float, ...] = ()
    anchor: dict[str, Any] = field(default_factory=dict)
    anchor_lrs: tuple[float, ...] = (1e-3,)
    corpus: dict[str, Any] = field(default_factory=dict)
    compare_tokens: int = 32768
    sink_without_bos: bool = False
    jobs: int = 1
    gflops: float | None = None
    """Assumed training GFLOP/s for the estimates (None: measured on this machine)."""
    anchor_gflops: float | None = None
    inprocess: bool = False
    description: str = ""

    def n_seeds(self, claim: int) -> int:
        return max(1, int(self.seeds.get(claim, 1)))


def _shape(d: int, layers: int, heads: int, ff: int, steps: int, **extra) -> dict[str, Any]:
    return {"model.d_model": d, "model.n_layers": layers, "model.n_heads": heads, "model.d_ff": ff,
            "train.max_steps": steps, **extra}


DEMO = Preset(
    name="demo",
    budget="≤ 15 minutes on a 2-core CPU",
    description="tiny models (d 128, 4 layers) on the built-in corpus; one learning rate (not tuned), one seed",
    claims=(1, 4, 6, 7, 9),
    base={"model": {"preset": "tiny", "max_seq_len": 128},
          "data": {"seq_len": 128, "val_batches": 8, "bos": True},
          "optim": {"lr": 3e-3, "warmup_steps": 30},
          "train": {"batch_size": 16, "log_every": 10, "eval_every": 100, "ckpt_every": 100, "keep_ckpts": 1},
          "probe": {"every": 20}},
    sizes={"d128": _shape(128, 4, 4, 384, 500)},
    main_size="d128", probe_size="d128",
    lrs=(3e-3,),
    anchor={"steps": 700, "eval_every": 100},
    anchor_lrs=(1e-3,),
    corpus={"inputs": ["builtin:stdlib"], "vocab_size": 8192, "max_bytes": 12_000_000, "val_fraction": 0.05,
            "name": "stdlib-demo"},
    compare_tokens=32768,
    jobs=2,
)

CPU_STEPS = 240
"""Steps per `cpu` run: 27 d512 runs of 240 steps (plus the smaller widths) fill the 2-hour budget on 2 cores."""

CPU = Preset(
    name="cpu",
    budget="≤ 2 hours on a 2-core CPU",
    description=("widths 128/256/512 at depth 2, ~0.25M tokens per run (240 steps of 8×128); learning rate swept "
                 "over 3 values for every arm, chosen on tune_loss; 2 seeds for claims 1 and 9"),
    claims=tuple(range(1, 11)),
    base={"model": {"preset": "tiny", "max_seq_len": 128},
          "data": {"seq_len": 128, "val_batches": 8, "tune_batches": 8, "bos": True},
          "optim": {"warmup_steps": 30},
          "train": {"batch_size": 8, "log_every": 10, "eval_every": 100, "ckpt_every": 100, "keep_ckpts": 1},
          "probe": {"every": 25}},
    sizes={"d128": _shape(128, 2, 2, 384, CPU_STEPS), "d256": _shape(256, 2, 4, 704, CPU_STEPS),
           "d512": _shape(512, 2, 8, 1408, CPU_STEPS),
           "d128-moe": _shape(128, 2, 2, 384, CPU_STEPS, **{"model.moe.n_experts": 4, "model.moe.top_k": 2,
                                                       "model.moe.d_expert": 192, "probe.heatmaps": ["blocks.0.attn.q"]})},
    main_size="d512", probe_size="d128", shrink_sizes=("d128", "d256", "d512"),
    scaling_sizes=("d128", "d256", "d512"), moe_size="d128-moe",
    lrs=(1e-3, 3e-3, 1e-2),
    seeds={1: 2, 9: 2},
    gammas=(0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
    anchor={"steps": 700, "eval_every": 100},
    anchor_lrs=(3e-4, 1e-3, 3e-3),
    corpus={"inputs": ["builtin:stdlib"], "vocab_size": 8192, "val_fraction": 0.02, "name": "stdlib"},
    compare_tokens=32768,
    sink_without_bos=True,
    jobs=1,
)

GPU = Preset(
    name="gpu",
    budget="paper-sized: for accelerators (estimate below at the assumed throughput)",
    description=("the paper's sizes 0.1B–1.5B (and the 0.5B MoE) at ~20 tokens per parameter, seq 2048, "
                 "0.5M tokens per step, bf16; learning rate swept over 3 values per arm; 2 seeds for claims 1, 9"),
    claims=tuple(range(1, 11)),
    base={"model": {"preset": "0.1b"},
          "data": {"seq_len": 2048, "val_batches": 32, "tune_batches": 32, "bos": True},
          "optim": {"warmup_steps": 2000, "schedule": "wsd"},
          "train": {"batch_size": 256, "micro_batch_size": 16, "dtype": "bf16", "compile": True, "log_every": 10,
                    "eval_every": 1000, "ckpt_every": 2000, "keep_ckpts": 2},
          "probe": {"every": 500}},
    sizes={"0.1b": {"model.preset": "0.1b", "train.max_steps": 4000},
           "0.3b": {"model.preset": "0.3b", "train.max_steps": 12000},
           "0.7b": {"model.preset": "0.7b", "train.max_steps": 27000},
           "1.5b": {"model.preset": "1.5b", "train.max_steps": 57000},
           "0.5b-moe": {"model.preset": "0.5b-moe", "train.max_steps": 12000,
                        "probe.heatmaps": ["blocks.0.attn.q"]}},
    main_size="0.1b", probe_size="0.1b", shrink_sizes=("0.1b", "0.3b", "0.7b", "1.5b"),
    scaling_sizes=("0.1b", "0.3b", "0.7b", "1.5b"), moe_size="0.5b-moe",
    lrs=(1.5e-3, 3e-3, 6e-3),
    seeds={1: 2, 9: 2},
    gammas=(0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
    anchor={"steps": 3000, "d_model": 256, "n_layers": 4, "n_heads": 4, "d_ff": 1024, "eval_every": 200},
    anchor_lrs=(3e-4, 1e-3, 3e-3),
    corpus={"inputs": [], "name": "corpus"},
    compare_tokens=262144,
    sink_without_bos=True,
    gflops=400_000.0,
    anchor_gflops=20_000.0,
)

TEST = Preset(  # hidden: fixture-sized, in-process, for the test suite
    name="test",
    budget="seconds (test only)",
    description="fixture-sized models for the test suite",
    claims=tuple(range(1, 11)),
    base={"model": {"preset": "tiny", "max_seq_len": 32},
          "data": {"seq_len": 32, "val_batches": 2, "tune_batches": 1, "bos": True},
          "optim": {"warmup_steps": 2},
          "train": {"batch_size": 4, "log_every": 2, "eval_every": 4, "ckpt_every": 8, "keep_ckpts": 1, "threads": 1},
          "probe": {"every": 2, "heatmaps": ["blocks.0.attn.q"]}},
    sizes={"d16": _shape(16, 1, 2, 32, 8), "d32": _shape(32, 1, 2, 64, 8), "d48": _shape(48, 1, 2, 96, 8),
           "d32-moe": _shape(32, 1, 2, 64, 8, **{"model.moe.n_experts": 2, "model.moe.top_k": 1,
                                                  "model.moe.d_expert": 32})},
    main_size="d32", probe_size="d32", shrink_sizes=("d16", "d32"), scaling_sizes=("d16", "d32", "d48"),
    moe_size="d32-moe",
    lrs=(3e-3, 1e-2),
    seeds={1: 2, 9: 2},
    gammas=(0.5, 1.0, 1.5),
    anchor={"steps": 20, "n_train": 256, "n_test": 64, "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
            "eval_every": 10, "threads": 1},
    anchor_lrs=(1e-3, 3e-3),
    corpus={"inputs": ["builtin:stdlib"], "vocab_size": 512, "max_bytes": 400_000, "val_fraction": 0.1, "name": "test"},
    compare_tokens=256,
    gflops=5.0,
    anchor_gflops=1.0,
    inprocess=True,
)

PRESETS: dict[str, Preset] = {"demo": DEMO, "cpu": CPU, "gpu": GPU, "test": TEST}
PUBLIC_PRESETS = ("demo", "cpu", "gpu")


def get_preset(name: str, seeds: int | None = None) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown reproduce preset {name!r}; choose one of {', '.join(PUBLIC_PRESETS)}")
    p = copy.deepcopy(PRESETS[name])
    if seeds is not None:
        if seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {seeds}")
        p.seeds = {k: seeds for k in sorted({*p.seeds, 1, 9, 10})}
    return p


# ---- which arms each claim needs -------------------------------------------------------------------------

def claim_arms(p: Preset) -> dict[int, dict[str, Arm]]:
    """{claim: {role: Arm}} for the claims the preset runs (roles are what the analysis reads)."""
    m, s = p.main_size, p.probe_size
    out: dict[int, dict[str, Arm]] = {}
    for c in p.claims:
        if c == 1:
            out[1] = {"baseline": arm(m, BASELINE), "paper": arm(m, PAPER)}
        elif c == 2:
            roles = {}
            for z in p.shrink_sizes:
                roles[f"{z}/nofix/0.5"] = arm(z, BASELINE)
                roles[f"{z}/nofix/1"] = arm(z, (1.0, 1e-5, "none"))
                roles[f"{z}/fix/0.5"] = arm(z, (0.5, 1e-12, "elementwise"))
                roles[f"{z}/fix/1"] = arm(z, PAPER)
            out[2] = roles
        elif c == 3:
            out[3] = {"eps_large": arm(m, (1.0, 1e-5, "elementwise")), "eps_small": arm(m, PAPER)}
        elif c == 4:
            roles = {"std": arm(s, (0.5, 1e-12, "none")), "small": arm(s, (1.0, 1e-12, "none")),
                     "small_gate": arm(s, PAPER)}
            if p.sink_without_bos:
                roles.update({f"{k}/nobos": replace(a, bos=False) for k, a in list(roles.items())})
            out[4] = roles
        elif c == 5:
            out[5] = {f"{g:g}": arm(m, (g, 1e-12, "elementwise")) for g in p.gammas}
        elif c == 6:
            out[6] = {"small": arm(s, (1.0, 1e-12, "none")), "std": arm(s, (0.5, 1e-12, "none"))}
        elif c == 7:
            out[7] = {"baseline": arm(m, BASELINE), "paper": arm(m, PAPER)}
        elif c == 8:
            roles = {}
            for z in p.scaling_sizes:
                roles[f"{z}/baseline"] = arm(z, BASELINE)
                roles[f"{z}/paper"] = arm(z, PAPER)
            out[8] = roles
        elif c == 9:
            out[9] = {}  # anchor task: see anchor_arms
        elif c == 10 and p.moe_size:
            out[10] = {"baseline": arm(p.moe_size, BASELINE, moe=True), "paper": arm(p.moe_size, PAPER, moe=True)}
    return out


def seeds_of_arm(p: Preset, a: Arm, arms: dict[int, dict[str, Arm]]) -> int:
    """Seeds an arm needs: the most any claim that uses it asks for."""
    return max([p.n_seeds(c) for c, roles in arms.items() if a in roles.values()] or [1])


# ---- runs -------------------------------------------------------------------------------------------------

def fmt_lr(lr: float) -> str:
    return f"{lr:g}"


def run_name(a: Arm, lr: float, seed: int) -> str:
    return f"{a.key}-lr{fmt_lr(lr)}-s{seed}"


def lm_config(p: Preset, a: Arm, lr: float, seed: int, corpus: Path) -> dict[str, Any]:
    """The resolved config of one LM run."""
    over = dict(p.sizes[a.size])
    over.update({"model.gamma": a.gamma, "model.norm_eps": a.eps, "model.gate": a.gate, "data.bos": a.bos,
                 "optim.lr": lr, "train.seed": seed, "data.path": str(corpus)})
    steps = int(over.get("train.max_steps", p.base.get("train", {}).get("max_steps", 1000)))
    if "probe.every" not in over and p.base.get("probe", {}).get("every"):
        over["probe.every"] = max(1, int(p.base["probe"]["every"]))
    over.setdefault("train.eval_every", min(steps, int(p.base.get("train", {}).get("eval_every", steps))))
    over.setdefault("train.ckpt_every", min(steps, int(p.base.get("train", {}).get("ckpt_every", steps))))
    return resolve_config(p.base, over)


def anchor_settings(p: Preset, gamma: float, lr: float, seed: int) -> dict[str, Any]:
    return {**p.anchor, "gamma": gamma, "lr": lr, "seed": seed}


def anchor_name(gamma: float, lr: float, seed: int) -> str:
    return f"anchor-g{gamma:g}-lr{fmt_lr(lr)}-s{seed}"


def anchor_job(p: Preset, out: Path, gamma: float, lr: float, seed: int, gflops: float | None, parallel: int) -> Job:
    from smallinit.experiments.anchor import AnchorConfig, anchor_flops

    settings = anchor_settings(p, gamma, lr, seed)
    if parallel > 1 and not settings.get("threads"):
        settings["threads"] = default_threads(parallel)
    cfg = AnchorConfig(**settings)
    cfg.validate()
    name = anchor_name(gamma, lr, seed)
    argv = ["anchor", "--out", str(out / "anchor" / name)]
    for k, v in cfg.to_dict().items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    est = anchor_flops(cfg) / (gflops * 1e9) if gflops else 0.0
    return Job(name, out / "anchor" / name, argv, None, est_seconds=est, total_steps=cfg.steps, label=name)


@dataclass
class Plan:
    """Phase 1 (every arm × every learning rate, seed 0; anchor likewise) and phase 2 (extra seeds)."""

    preset: Preset
    arms: dict[int, dict[str, Arm]]
    lm_arms: list[Arm]
    phase1: list[Job]
    phase2_count: int
    phase2_seconds: float
    costs: dict[str, dict[str, float]]  # run name -> model_cost
    gflops: float | None
    anchor_gflops: float | None


def make_plan(p: Preset, out: Path, corpus: Path, gflops: float | None, anchor_gflops: float | None,
              parallel: int, write: bool = True) -> Plan:
    arms = claim_arms(p)
    lm_arms: list[Arm] = []
    for roles in arms.values():
        for a in roles.values():
            if a not in lm_arms:
                lm_arms.append(a)
    jobs: list[Job] = []
    costs: dict[str, dict[str, float]] = {}
    phase2_count, phase2_secs = 0, 0.0
    for a in lm_arms:
        for lr in p.lrs:
            name = run_name(a, lr, 0)
            cfg = lm_config(p, a, lr, 0, corpus)
            job = train_job(name, cfg, out / "runs", parallel=parallel, gflops=gflops, label=name, write=write)
            costs[name] = model_cost(job.expected_config)
            jobs.append(job)
        extra = seeds_of_arm(p, a, arms) - 1
        phase2_count += extra
        phase2_secs += extra * jobs[-1].est_seconds
    if 9 in p.claims:
        for g in (1.0, 0.5):
            for lr in p.anchor_lrs:
                jobs.append(anchor_job(p, out, g, lr, 0, anchor_gflops, parallel))
            extra = p.n_seeds(9) - 1
            phase2_count += extra
            phase2_secs += extra * jobs[-1].est_seconds
    return Plan(p, arms, lm_arms, jobs, phase2_count, phase2_secs, costs, gflops, anchor_gflops)


def select_lr(runs: dict[float, Path], metric: str = "final_tune_loss") -> tuple[float | None, list[dict[str, Any]]]:
    """The learning rate whose run has the lowest ``metric`` (failed or diverged runs excluded; with one
    learning rate that one, if it finished). Returns (lr, table rows)."""
    rows, best, best_v = [], None, math.inf
    for lr, rd in sorted(runs.items()):
        info = collect_run(rd)
        v = info.get(metric) if info.get(metric) is not None else info.get("final_val_loss")
        ok = info["state"] == "done" and v is not None and math.isfinite(v)
        rows.append({"lr": lr, "state": info["state"] if not info.get("error") else f"failed: {info['error']}",
                     "tune_loss": info.get("final_tune_loss"), "val_loss": info.get("final_val_loss"), "run": rd.name})
        if ok and v < best_v:
            best, best_v = lr, v
    for r in rows:
        r["chosen"] = r["lr"] == best
    return best, rows


def select_anchor_lr(runs: dict[float, Path]) -> tuple[float | None, list[dict[str, Any]]]:
    rows, best, best_v = [], None, math.inf
    for lr, rd in sorted(runs.items()):
        s = read_json(rd / "summary.json") or {}
        v = s.get("final_val_loss")
        ok = bool(s.get("completed")) and v is not None and math.isfinite(v)
        rows.append({"lr": lr, "state": run_state(rd), "tune_loss": v, "heldout_acc": s.get("heldout_acc"),
                     "run": rd.name})
        if ok and v < best_v:
            best, best_v = lr, v
    for r in rows:
        r["chosen"] = r["lr"] == best
    return best, rows


# ---- the corpus -------------------------------------------------------------------------------------------

def ensure_corpus(p: Preset, corpus: str | os.PathLike | None, out: Path, log: Callable[[str], None]) -> Path:
    """The prepared data directory to train on: ``corpus`` if it is one; else prepare the preset's default
    corpus (builtin:stdlib) into ``corpus`` or, when not given, into ``OUT/../data/<name>``."""
    path = Path(corpus) if corpus else out.parent / "data" / p.corpus.get("name", "stdlib")
    if (path / "meta.json").is_file():
        return path
    if path.exists() and any(path.iterdir()):
        raise DataError(f"{path} exists but is not a prepared data directory (no meta.json)")
    if not p.corpus.get("inputs"):
        raise DataError(f"preset {p.name} has no default corpus: prepare one with `smallinit prepare` and pass --corpus")
    from smallinit.data import prepare_corpus

    log(f"[reproduce] preparing {', '.join(p.corpus['inputs'])} into {path} (BPE {p.corpus.get('vocab_size', 8192)}"
        f"{', first %.0f MB' % (p.corpus['max_bytes'] / 1e6) if p.corpus.get('max_bytes') else ''}) ...")
    t0 = time.time()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_corpus(list(p.corpus["inputs"]), path, tokenizer="bpe", vocab_size=int(p.corpus.get("vocab_size", 8192)),
                       val_fraction=float(p.corpus.get("val_fraction", 0.02)), progress=False,
                       max_bytes=p.corpus.get("max_bytes"))
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
        raise DataError(f"{corpus}: the val split holds {have} windows of {T} tokens; preset {p.name} needs {need} "
                        f"({batches} val+tune batches of {t['batch_size']}); prepare it with a larger --val-fraction")
    return {"path": str(corpus), "vocab_size": td.vocab_size, "train_tokens": int(len(td.train)),
            "val_tokens": int(len(td.val)), "sources": [s.get("name") for s in td.meta.get("sources", [])]}


# ---- running ----------------------------------------------------------------------------------------------

class Reproduction:
    """One reproduction: plan, run (phases), analyse, report. ``run()`` returns the claims list."""

    def __init__(self, preset: Preset, out: str | os.PathLike, corpus: str | os.PathLike | None = None, *,
                 jobs: int | None = None, gflops: float | None = None, log: Callable[[str], None] | None = None,
                 retry_failed: bool = False, inprocess: bool | None = None):
        self.p = preset
        self.out = Path(out)
        self.corpus_arg = corpus
        self.jobs = jobs or preset.jobs
        self.inprocess = preset.inprocess if inprocess is None else inprocess
        self.gflops = gflops or preset.gflops
        self.anchor_gflops = preset.anchor_gflops
        self.log = log or (lambda s: print(s, flush=True))
        self.retry_failed = retry_failed
        self.timings: dict[str, float] = {}

    # -- set-up
    def _calibrate(self, corpus: Path | None) -> None:
        if self.gflops is None:
            a = arm(self.p.main_size, PAPER)
            cfg = lm_config(self.p, a, self.p.lrs[0], 0, corpus) if corpus else None
            if cfg is not None:
                meta = read_json(corpus / "meta.json") or {}
                cfg["model"]["vocab_size"] = int(meta.get("vocab_size", cfg["model"]["vocab_size"]))
            self.gflops = measure_gflops(cfg, threads=default_threads(self.jobs))
            self.log(f"[reproduce] measured {self.gflops:.1f} GFLOP/s training the {self.p.main_size} model here "
                     f"(for the time estimates)")
        if self.anchor_gflops is None and 9 in self.p.claims:
            self.anchor_gflops = _measure_anchor_gflops(self.p, default_threads(self.jobs))

    def plan(self, corpus: Path, write: bool = True) -> Plan:
        return make_plan(self.p, self.out, corpus, self.gflops, self.anchor_gflops, self.jobs, write)

    def describe_plan(self, plan: Plan) -> str:
        p = self.p
        lines = [f"reproduce --preset {p.name}: {p.description}", f"budget: {p.budget}",
                 f"claims run: {', '.join(map(str, p.claims))}; not run: "
                 f"{', '.join(str(c) for c in C.CLAIMS if c not in p.claims) or 'none'}",
                 f"learning rates per arm: {', '.join(map(fmt_lr, p.lrs))}"
                 f"{' (chosen on tune_loss)' if len(p.lrs) > 1 else ' (fixed, not tuned)'}",
                 "", f"phase 1: {len(plan.phase1)} runs"]
        total_s, total_flops = 0.0, 0.0
        lines.append(f"  {'run':<46} {'params':>9} {'tokens':>9} {'tok/param':>9} {'PFLOP':>8} {'est':>8}")
        for j in plan.phase1:
            c = plan.costs.get(j.name)
            if c:
                total_flops += c["flops"]
                lines.append(f"  {j.name:<46} {c['params'] / 1e6:8.2f}M {c['tokens'] / 1e6:8.2f}M "
                             f"{c['tokens'] / c['params']:9.2f} {c['flops'] / 1e15:8.3f} {fmt_seconds(j.est_seconds):>8}")
            else:
                lines.append(f"  {j.name:<46} {'':>9} {'':>9} {'':>9} {'':>8} {fmt_seconds(j.est_seconds):>8}")
            total_s += j.est_seconds
        lines.append(f"phase 2: {plan.phase2_count} more runs (extra seeds at each arm's chosen learning rate), "
                     f"≈ {fmt_seconds(plan.phase2_seconds)}")
        total_s += plan.phase2_seconds
        wall = total_s / max(1, self.jobs)
        gpu_h = total_s / 3600
        lines += ["", f"throughput assumed: {plan.gflops:,.1f} GFLOP/s per job (LM), "
                      f"{(plan.anchor_gflops or 0):,.1f} (anchor); {self.jobs} job(s) at a time",
                  f"estimated cost: {total_flops / 1e18:.3g} EFLOP for phase 1 LM runs; "
                  f"≈ {fmt_seconds(wall)} wall-clock" + (f" (≈ {gpu_h:,.0f} device-hours)" if p.name == "gpu" else "")]
        return "\n".join(lines)

    # -- the run
    def run(self, dry_run: bool = False) -> list[dict[str, Any]] | None:
        t0 = time.time()
        if dry_run:
            corpus = Path(self.corpus_arg) if self.corpus_arg else self.out.parent / "data" / self.p.corpus.get("name", "data")
            self._calibrate(corpus if (corpus / "meta.json").is_file() else None)
            plan = self.plan(corpus, write=False)
            self.log(self.describe_plan(plan))
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        corpus = ensure_corpus(self.p, self.corpus_arg, self.out, self.log)
        self.timings["prepare"] = time.time() - t0
        corpus_info = check_corpus(self.p, corpus)
        self._calibrate(corpus)
        plan = self.plan(corpus)
        self.log(self.describe_plan(plan))
        atomic_write_json(self.out / "plan.json", {"preset": self.p.name, "corpus": corpus_info,
                                                   "phase1": [j.name for j in plan.phase1],
                                                   "phase2_count": plan.phase2_count})
        n_total = len(plan.phase1) + plan.phase2_count
        t1 = time.time()
        self.log(f"[reproduce] phase 1/2: {len(plan.phase1)} runs")
        JobRunner(plan.phase1, self.jobs, inprocess=self.inprocess, retry_failed=self.retry_failed, log=self.log,
                  title=f"reproduce {self.p.name}", index_offset=0, total=n_total,
                  later_seconds=plan.phase2_seconds).run()
        chosen, lr_tables = self._choose_lrs(plan)
        phase2 = self._phase2_jobs(plan, chosen, corpus)
        if phase2:
            self.log(f"[reproduce] phase 2/2: {len(phase2)} runs (extra seeds at the chosen learning rates)")
            JobRunner(phase2, self.jobs, inprocess=self.inprocess, retry_failed=self.retry_failed, log=self.log,
                      title=f"reproduce {self.p.name}", index_offset=len(plan.phase1), total=n_total).run()
        self.timings["training"] = time.time() - t1
        t2 = time.time()
        self.log("[reproduce] analysing ...")
        from smallinit.experiments.report import write_report

        ctx = Context(self, plan, chosen, lr_tables, corpus)
        results = analyse(ctx)
        self.timings["analysis"] = time.time() - t2
        self.timings["this invocation"] = time.time() - t0
        history = (read_json(self.out / "timings.json") or {}).get("invocations", [])
        history.append({"time": time.time(), **self.timings})
        atomic_write_json(self.out / "timings.json", {"invocations": history})
        self.timings["all invocations"] = sum(h.get("this invocation", 0.0) for h in history)
        regime = regime_rows(ctx)
        self.timings["sum of run wall times"] = sum(r.get("wall_time") or 0.0 for r in regime)
        write_report(self.out, preset=self.p, claims=results, lr_tables=lr_tables, regime=regime,
                     corpus=corpus_info, timings=self.timings, plan_text=self.describe_plan(plan))
        self.log(claims_table_text(results))
        self.log(f"[reproduce] report: {self.out / 'report.md'} and {self.out / 'index.html'} "
                 f"(this invocation {fmt_seconds(time.time() - t0)})")
        return results

    def _choose_lrs(self, plan: Plan):
        chosen: dict[str, float | None] = {}
        tables: dict[str, dict[str, Any]] = {}
        for a in plan.lm_arms:
            runs = {lr: self.out / "runs" / run_name(a, lr, 0) for lr in self.p.lrs}
            lr, rows = select_lr(runs)
            chosen[a.key] = lr
            tables[a.key] = {"arm": a.describe(), "rows": rows, "chosen": lr}
        if 9 in self.p.claims:
            for g in (1.0, 0.5):
                runs = {lr: self.out / "anchor" / anchor_name(g, lr, 0) for lr in self.p.anchor_lrs}
                lr, rows = select_anchor_lr(runs)
                chosen[f"anchor-g{g:g}"] = lr
                tables[f"anchor-g{g:g}"] = {"arm": f"anchor task, γ={g:g}", "rows": rows, "chosen": lr}
        return chosen, tables

    def _phase2_jobs(self, plan: Plan, chosen: dict[str, float | None], corpus: Path) -> list[Job]:
        jobs = []
        for a in plan.lm_arms:
            lr = chosen.get(a.key)
            if lr is None:
                continue
            for s in range(1, seeds_of_arm(self.p, a, plan.arms)):
                name = run_name(a, lr, s)
                jobs.append(train_job(name, lm_config(self.p, a, lr, s, corpus), self.out / "runs", parallel=self.jobs,
                                      gflops=self.gflops, label=name))
        if 9 in self.p.claims:
            for g in (1.0, 0.5):
                lr = chosen.get(f"anchor-g{g:g}")
                if lr is None:
                    continue
                for s in range(1, self.p.n_seeds(9)):
                    jobs.append(anchor_job(self.p, self.out, g, lr, s, self.anchor_gflops, self.jobs))
        return jobs


def _measure_anchor_gflops(p: Preset, threads: int) -> float:
    """GFLOP/s of the anchor model's training steps on this machine (a few steps, counted like anchor_flops)."""
    import torch
    import torch.nn.functional as F

    from smallinit.experiments.anchor import AnchorConfig, build_model, make_data, train_pairs

    cfg = AnchorConfig(**{**p.anchor, "gamma": 1.0})
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        model = build_model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = make_data(cfg.batch_size, train_pairs(cfg.held_out), cfg, torch.Generator().manual_seed(0))

        def step():
            loss = F.cross_entropy(model(data.tokens)[:, -1, :], data.targets)
            loss.backward()
            opt.step()
            opt.zero_grad()

        step()
        t0 = time.perf_counter()
        n = 5
        for _ in range(n):
            step()
        dt = (time.perf_counter() - t0) / n
        return model.flops_per_token(cfg.seq_len) * cfg.batch_size * cfg.seq_len / dt / 1e9
    finally:
        torch.set_num_threads(old)


# ---- analysis ---------------------------------------------------------------------------------------------

@dataclass
class Context:
    rep: Reproduction
    plan: Plan
    chosen: dict[str, float | None]
    lr_tables: dict[str, dict[str, Any]]
    corpus: Path

    @property
    def out(self) -> Path:
        return self.rep.out

    @property
    def p(self) -> Preset:
        return self.rep.p

    def runs(self, a: Arm) -> list[Path]:
        """The finished runs of an arm at its chosen learning rate (seed 0 first)."""
        lr = self.chosen.get(a.key)
        if lr is None:
            return []
        out = []
        for s in range(seeds_of_arm(self.p, a, self.plan.arms)):
            rd = self.out / "runs" / run_name(a, lr, s)
            if run_state(rd) == "done":
                out.append(rd)
        return out

    def losses(self, a: Arm) -> list[float]:
        return [v for v in (collect_run(rd).get("final_val_loss") for rd in self.runs(a))
                if v is not None and math.isfinite(v)]

    def compare(self, variant: Arm, baseline: Arm) -> dict[str, Any] | None:
        """Token-level comparison of the two arms' seed-0 runs (cached in OUT/compare/)."""
        ra, rb = self.runs(variant), self.runs(baseline)
        if not ra or not rb:
            return None
        path = self.out / "compare" / f"{ra[0].name}__vs__{rb[0].name}.json"
        newest_run = max((r / "summary.json").stat().st_mtime for r in (ra[0], rb[0]))
        if path.is_file() and path.stat().st_mtime >= newest_run:
            cached = read_json(path)
            if cached is not None:
                return cached
        from smallinit.compare import compare_models

        try:
            res = compare_models(ra[0], rb[0], tokens=self.p.compare_tokens, n_boot=1000)
        except Exception as e:  # noqa: BLE001 - a failed comparison makes the claim inconclusive, not the report
            self.rep.log(f"[reproduce] compare {ra[0].name} vs {rb[0].name} failed: {e}")
            return None
        atomic_write_json(path, res)
        return res

    def loss_hw(self, variant: Arm, baseline: Arm) -> float | None:
        """Half-width of the paired bootstrap 95% interval of the token-level loss gain between two arms."""
        res = self.compare(variant, baseline)
        ci = (((res or {}).get("overall") or {}).get("loss_gain") or {}).get("ci95")
        return (ci[1] - ci[0]) / 2 if ci else None

    def probes(self, a: Arm) -> list[dict[str, Any]]:
        rs = self.runs(a)
        return read_jsonl(rs[0] / "probes.jsonl") if rs else []


def _result(cid: int, measured: str, verdict: C.Verdict | None, *, ran: bool = True, plots: list[str] | None = None,
            tables: list[dict[str, Any]] | None = None, notes: list[str] | None = None,
            runs: list[str] | None = None) -> dict[str, Any]:
    if not ran:
        return {"id": cid, "claim": C.CLAIMS[cid], "verdict": C.NOT_RUN, "measured": measured, "effects": [],
                "numbers": {}, "plots": [], "tables": [], "notes": notes or [], "runs": []}
    v = verdict or C.Verdict(C.INCONCLUSIVE, notes=["runs missing or failed"])
    return {"id": cid, "claim": C.CLAIMS[cid], "verdict": v.verdict, "measured": measured,
            "effects": [e.to_dict() for e in v.effects], "numbers": v.numbers, "plots": plots or [],
            "tables": tables or [], "notes": (v.notes or []) + (notes or []), "runs": runs or [], "rule": C.RULE}


def analyse(ctx: Context) -> list[dict[str, Any]]:
    """Every claim's result (not-run claims included), in order."""
    from smallinit.experiments import report as R

    fns = {1: _claim1, 2: _claim2, 3: _claim3, 4: _claim4, 5: _claim5, 6: _claim6, 7: _claim7, 8: _claim8,
           9: _claim9, 10: _claim10}
    out = []
    for cid in C.CLAIMS:
        if cid not in ctx.p.claims or (cid == 10 and not ctx.p.moe_size):
            out.append(_result(cid, "", None, ran=False))
            continue
        try:
            out.append(fns[cid](ctx, R))
        except Exception as e:  # noqa: BLE001 - one broken analysis must not lose the whole report
            ctx.rep.log(f"[reproduce] claim {cid}: analysis failed: {type(e).__name__}: {e}")
            out.append(_result(cid, "analysis failed", C.Verdict(C.INCONCLUSIVE, notes=[f"{type(e).__name__}: {e}"])))
    atomic_write_json(ctx.out / "claims.json", {"preset": ctx.p.name, "rule": C.RULE, "claims": out})
    return out


def _names(ctx: Context, *arms: Arm) -> list[str]:
    return [rd.name for a in arms for rd in ctx.runs(a)]


def _claim1(ctx: Context, R, cid: int = 1) -> dict[str, Any]:
    roles = ctx.plan.arms[cid]
    base, paper = roles["baseline"], roles["paper"]
    v = C.judge_lower_loss(ctx.losses(paper), ctx.losses(base), ctx.loss_hw(paper, base),
                           "val loss: baseline − paper setting")
    plot = R.plot_loss_curves(ctx.out, f"claim{cid}_loss.png", {
        f"baseline ({base.describe()})": ctx.runs(base), f"paper ({paper.describe()})": ctx.runs(paper)},
        title=f"Claim {cid}: validation loss")
    measured = (f"final validation loss of the standard baseline ({base.describe()}) and the paper's setting "
                f"({paper.describe()}), {len(ctx.runs(paper))} seed(s) each, {_lr_words(ctx)}; "
                "noise: spread over seeds and a paired bootstrap over validation tokens")
    table = {"title": "final validation loss", "columns": ["arm", "learning rate", "seeds", "val losses"],
             "rows": [[n, fmt_lr(ctx.chosen.get(a.key) or math.nan), len(ctx.runs(a)),
                       ", ".join(f"{x:.4f}" for x in ctx.losses(a))] for n, a in (("baseline", base), ("paper", paper))]}
    return _result(cid, measured, v, plots=[plot] if plot else [], tables=[table], runs=_names(ctx, base, paper))


def _lr_words(ctx: Context) -> str:
    if len(ctx.p.lrs) > 1:
        return f"each at the learning rate it does best with among {', '.join(map(fmt_lr, ctx.p.lrs))} (tune_loss)"
    return f"both at learning rate {fmt_lr(ctx.p.lrs[0])} (fixed in this preset, not tuned per arm)"


def _claim10(ctx: Context, R) -> dict[str, Any]:
    r = _claim1(ctx, R, cid=10)
    r["measured"] = "MoE: " + r["measured"]
    return r


def _claim2(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[2]
    adv = {"nofix": {}, "fix": {}}
    rows, sizes = [], []
    for z in ctx.p.shrink_sizes:
        n = ctx.plan.costs.get(run_name(roles[f"{z}/fix/1"], ctx.p.lrs[0], 0), {}).get("non_embedding_params")
        for setting in ("nofix", "fix"):
            a05, a1 = roles[f"{z}/{setting}/0.5"], roles[f"{z}/{setting}/1"]
            e = C.lower_is_better_effect(f"{z} {setting}: loss(γ=0.5) − loss(γ=1)", ctx.losses(a1), ctx.losses(a05),
                                         ctx.loss_hw(a1, a05))
            adv[setting][float(n)] = e
            rows.append([z, f"{n / 1e6:.2f}M", setting, _f(ctx.losses(a05)), _f(ctx.losses(a1)), _f(e.value),
                         _ci(e)])
        sizes.append((z, n))
    v = C.judge_shrinking_advantage(adv["nofix"], adv["fix"])
    plot = R.plot_advantage(ctx.out, "claim2_advantage.png", adv, title="Claim 2: advantage of γ = 1 vs size")
    table = {"title": "advantage A = loss(γ=0.5) − loss(γ=1) by size",
             "columns": ["size", "non-emb params", "setting", "loss γ=0.5", "loss γ=1", "A", "interval"], "rows": rows}
    measured = ("advantage of γ = 1 over γ = 0.5 (final val loss difference) at each size, without the fixes "
                "(ε = 1e-5, no gate) and with them (ε = 1e-12, elementwise gate)")
    return _result(2, measured, v, plots=[plot] if plot else [], tables=[table],
                   runs=_names(ctx, *roles.values()))


def _norm_saturations(records: list[dict[str, Any]]) -> dict[str, float]:
    """{norm name: saturation averaged over the probed steps}."""
    acc: dict[str, list[float]] = {}
    for rec in records:
        for l in rec.get("layers") or []:
            for n in ("attn_norm", "mlp_norm"):
                s = (l.get(n) or {}).get("saturation")
                if s is not None:
                    acc.setdefault(f"{l.get('layer')}.{n}", []).append(s)
        s = (rec.get("final_norm") or {}).get("saturation")
        if s is not None:
            acc.setdefault("final_norm", []).append(s)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def _claim3(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[3]
    big, small = roles["eps_large"], roles["eps_small"]
    pb, ps = ctx.probes(big), ctx.probes(small)
    sb, ss = _norm_saturations(pb), _norm_saturations(ps)
    names = [n for n in sb if n in ss]
    loss = C.lower_is_better_effect("val loss: ε=1e-5 − ε=1e-12 (γ=1)", ctx.losses(small), ctx.losses(big),
                                    ctx.loss_hw(small, big))
    v = C.judge_saturation([sb[n] for n in names], [ss[n] for n in names], loss)
    plot = R.plot_probe_series(ctx.out, "claim3_saturation.png", {"ε=1e-5": pb, "ε=1e-12": ps},
                               "saturation_min", "lowest RMSNorm saturation", title="Claim 3: RMSNorm saturation (γ = 1)")
    table = {"title": "RMSNorm saturation ms/(ms+ε), averaged over training, per norm",
             "columns": ["norm", "ε = 1e-5", "ε = 1e-12"], "rows": [[n, f"{sb[n]:.3f}", f"{ss[n]:.3f}"] for n in names]}
    measured = ("RMSNorm saturation s = ms/(ms+ε) of every norm input, averaged over probed steps, and final val loss, "
                f"under γ = 1 with ε = 1e-5 vs ε = 1e-12 (elementwise gate both)")
    return _result(3, measured, v, plots=[plot] if plot else [], tables=[table], runs=_names(ctx, big, small))


def _layer_sinks(records: list[dict[str, Any]], tail: float = 0.25) -> list[float]:
    """Per-layer first-token attention share averaged over the last ``tail`` of the probed steps."""
    if not records:
        return []
    k = max(1, int(round(len(records) * tail)))
    recs = records[-k:]
    L = len(recs[-1].get("layers") or [])
    out = []
    for i in range(L):
        vals = [r["layers"][i].get("sink") for r in recs if len(r.get("layers") or []) > i]
        vals = [v for v in vals if v is not None]
        out.append(float(np.mean(vals)) if vals else math.nan)
    return out


def _claim4(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[4]
    variants = [("", "with BOS")] + ([("/nobos", "without BOS")] if ctx.p.sink_without_bos else [])
    verdicts, effects, tables, plots, nums = [], [], [], [], {}
    for suffix, label in variants:
        std, small, gate = roles["std" + suffix], roles["small" + suffix], roles["small_gate" + suffix]
        s_std, s_small, s_gate = (_layer_sinks(ctx.probes(a)) for a in (std, small, gate))
        if not (s_std and s_small and s_gate):
            verdicts.append(C.INCONCLUSIVE)
            continue
        v = C.judge_sink(s_std, s_small, s_gate)
        verdicts.append(v.verdict)
        for e in v.effects:
            e.label = f"{label}: {e.label}"
            effects.append(e)
        nums[label] = v.numbers
        uni = (ctx.probes(std)[-1] or {}).get("uniform_sink")
        nums[label]["uniform_baseline"] = uni
        tables.append({"title": f"first-token attention share per layer ({label}; uniform causal attention: "
                                f"{uni:.3f})" if uni else f"first-token attention share per layer ({label})",
                       "columns": ["layer", "γ=0.5, no gate", "γ=1, no gate", "γ=1, gate"],
                       "rows": [[i, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}"]
                                for i, (a, b, c) in enumerate(zip(s_std, s_small, s_gate))]})
        p = R.plot_sinks(ctx.out, f"claim4_sink{suffix.replace('/', '_')}.png",
                         {"γ=0.5, no gate": ctx.probes(std), "γ=1, no gate": ctx.probes(small),
                          "γ=1, gate": ctx.probes(gate)}, title=f"Claim 4: first-token attention share ({label})")
        if p:
            plots.append(p)
    verdict = C.Verdict(C.combine(verdicts), effects, nums)
    measured = ("first-token attention share (mean over heads, batch and queries t ≥ 1 of the weight on position 0) "
                "per layer, averaged over the last quarter of training, for γ = 0.5 and γ = 1 without the gate and "
                "γ = 1 with it (ε = 1e-12 all); paired bootstrap over layers")
    return _result(4, measured, verdict, plots=plots, tables=tables, runs=_names(ctx, *roles.values()))


def _claim5(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[5]
    losses = {float(g): ctx.losses(a) or [math.inf] for g, a in roles.items()}
    finite = {g: np.mean(v) for g, v in losses.items() if all(math.isfinite(x) for x in v)}
    hw_near = hw_above = None
    if finite and 1.0 in roles:
        inside = [g for g in finite if 0.75 <= g <= 1.25]
        outside = [g for g in finite if not 0.75 <= g <= 1.25]
        if inside and outside:
            gi, go = min(inside, key=finite.get), min(outside, key=finite.get)
            hw_near = ctx.loss_hw(roles[f"{gi:g}"], roles[f"{go:g}"])
        gmax = max(losses)
        if gmax in finite and gmax != 1.0:
            hw_above = ctx.loss_hw(roles["1"], roles[f"{gmax:g}"])
    v = C.judge_gamma_sweep(losses, hw_near, hw_above)
    plot = R.plot_gamma(ctx.out, "claim5_gamma.png", losses, title="Claim 5: final val loss vs γ")
    table = {"title": "final validation loss by γ (ε = 1e-12, gate), each at its chosen learning rate",
             "columns": ["γ", "learning rate", "val loss"],
             "rows": [[f"{g:g}", fmt_lr(ctx.chosen.get(roles[f'{g:g}'].key) or math.nan),
                       _f(v_) if all(math.isfinite(x) for x in v_) else "diverged/failed"] for g, v_ in sorted(losses.items())]}
    measured = "final val loss at each γ of the sweep (ε = 1e-12 and the elementwise gate throughout)"
    return _result(5, measured, v, plots=[plot] if plot else [], tables=[table], runs=_names(ctx, *roles.values()))


def _srank_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for rec in records:
        for name, m in (rec.get("matrices") or {}).items():
            if name.startswith("blocks.") and m.get("srank") is not None:
                out.setdefault(name, []).append(float(m["srank"]))
    return out


def _claim6(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[6]
    small, std = roles["small"], roles["std"]
    ps, pt = ctx.probes(small), ctx.probes(std)
    v = C.judge_condensation(_srank_series(ps), _srank_series(pt))
    plots = [p for p in (
        R.plot_srank(ctx.out, "claim6_srank.png", {"γ=1": ps, "γ=0.5": pt},
                     title="Claim 6: stable rank / its initial value (mean over block matrices)"),
        R.plot_probe_series(ctx.out, "claim6_condensation.png", {"γ=1": ps, "γ=0.5": pt}, "cond_mean",
                            "condensation index (mean |cos| between rows)", title="Claim 6: condensation index"),
        R.plot_heatmaps(ctx.out, "claim6_heatmaps.png", {"γ=1": ctx.runs(small), "γ=0.5": ctx.runs(std)}),
    ) if p]
    measured = ("stable rank ||W||_F²/||W||_2² of every block matrix over training (probes), its drop from init to "
                "its minimum (condensation) and its rise from the minimum to the end (expansion), γ = 1 vs γ = 0.5 "
                "(ε = 1e-12, no gate); paired bootstrap over matrices")
    return _result(6, measured, v, plots=plots, runs=_names(ctx, small, std))


def _claim7(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[7]
    res = ctx.compare(roles["paper"], roles["baseline"])
    if res is None:
        return _result(7, "token-level comparison", None)
    bins = res.get("bins") or []
    v = C.judge_token_bins(bins)
    plot = R.plot_bins(ctx.out, "claim7_bins.png", bins, title="Claim 7: Δ_sym by token difficulty (paper vs baseline)")
    table = {"title": f"per difficulty bin ({res.get('n_tokens')} validation tokens; Δ_sym > 0: the paper's setting "
                      "gives the true token more probability)",
             "columns": ["bin", "difficulty", "tokens", "mean Δ_sym", "95% CI", "mean ℓ_B − ℓ_A"],
             "rows": [[b["name"], f"{b['difficulty'][0]:.2f}–{b['difficulty'][1]:.2f}", b["count"],
                       _f(b["delta_sym"]["mean"]), _ci_pair(b["delta_sym"]["ci95"]), _f(b["loss_gain"]["mean"])]
                      for b in bins]}
    measured = ("Δ_sym = (p_A − p_B)/(p_A + p_B) per validation token (A = paper setting, B = baseline), by quantile "
                "bins of difficulty (ℓ_A + ℓ_B)/2; bootstrap 95% intervals per bin")
    notes = []
    ov = (res.get("overall") or {}).get("loss_gain") or {}
    if ov.get("ci95") and ov["ci95"][1] < 0:
        notes.append(f"Overall the paper setting is worse here (mean ℓ_B − ℓ_A = {ov['mean']:+.4f}, 95% CI "
                     f"[{ov['ci95'][0]:+.4f}, {ov['ci95'][1]:+.4f}]): the bins show where it loses least, not where "
                     "gains concentrate.")
    return _result(7, measured, v, plots=[plot] if plot else [], tables=[table], notes=notes,
                   runs=_names(ctx, roles["paper"], roles["baseline"]))


def _claim8(ctx: Context, R) -> dict[str, Any]:
    roles = ctx.plan.arms[8]
    base_pts, var_pts, rows = [], [], []
    for z in ctx.p.scaling_sizes:
        b, p = roles[f"{z}/baseline"], roles[f"{z}/paper"]
        nb = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(b)]
        np_ = [collect_run(rd).get("non_embedding_params") for rd in ctx.runs(p)]
        lb, lp = ctx.losses(b), ctx.losses(p)
        if lb and nb and nb[0]:
            base_pts.append((float(nb[0]), float(np.mean(lb))))
        if lp and np_ and np_[0]:
            var_pts.append((float(np_[0]), float(np.mean(lp)), ctx.loss_hw(p, b)))
        rows.append([z, f"{(nb[0] or 0) / 1e6:.2f}M" if nb else "", _f(lb), _f(lp)])
    v = C.judge_effective_size(base_pts, var_pts)
    plot = R.plot_scaling(ctx.out, "claim8_scaling.png", base_pts, var_pts, v.numbers.get("fit"),
                          title="Claim 8: scaling fit of the baseline, paper setting beside it")
    tables = [{"title": "final validation loss by size", "columns": ["size", "non-emb params", "baseline", "paper"],
               "rows": rows}]
    if v.numbers.get("variants"):
        tables.append({"title": f"effective size of the paper setting (paper reports +{v.numbers['paper_gain']:.0%})",
                       "columns": ["N", "loss", "N_eff", "gain", "gain interval", "extrapolated"],
                       "rows": [[f"{r['N'] / 1e6:.2f}M", f"{r['loss']:.4f}",
                                 f"{r['N_eff'] / 1e6:.2f}M" if r["N_eff"] else "undefined",
                                 f"{r['gain']:+.0%}" if r["gain"] is not None else "undefined",
                                 _ci_pair(r.get("gain_interval"), pct=True), "yes" if r["extrapolated"] else "no"]
                                for r in v.numbers["variants"]]})
    measured = ("L(N) = E + A·N^(−α) fitted to the baseline's final val losses over the sizes (N = non-embedding "
                "parameters); effective size N_eff of the paper setting at each size and gain = N_eff/N − 1")
    return _result(8, measured, v, plots=[plot] if plot else [], tables=tables, runs=_names(ctx, *roles.values()))


def _claim9(ctx: Context, R) -> dict[str, Any]:
    per: dict[float, list[dict[str, Any]]] = {}
    for g in (1.0, 0.5):
        lr = ctx.chosen.get(f"anchor-g{g:g}")
        per[g] = []
        if lr is None:
            continue
        for s in range(ctx.p.n_seeds(9)):
            r = read_json(ctx.out / "anchor" / anchor_name(g, lr, s) / "result.json")
            if r:
                per[g].append(r)
    if not per[1.0] or not per[0.5]:
        return _result(9, "anchor task", None)
    acc = {g: [r["final"]["heldout_acc"] for r in rs] for g, rs in per.items()}
    corr = {g: [int(c) for c in rs[0]["heldout_correct"]] for g, rs in per.items()}
    v = C.judge_reasoning(acc[1.0], acc[0.5], corr[1.0], corr[0.5])
    plots = [p for p in (
        R.plot_anchor_curves(ctx.out, "claim9_anchor.png", {f"γ={g:g}": rs for g, rs in per.items()}),
        R.plot_anchor_answers(ctx.out, "claim9_answers.png", {f"γ={g:g}": rs for g, rs in per.items()}),
    ) if p]
    from smallinit.experiments.anchor import ANSWER_KINDS

    rows = []
    for g, rs in per.items():
        for s, r in enumerate(rs):
            f = r["final"]
            rows.append([f"{g:g}", s, fmt_lr(r["config"]["lr"]), f"{f['in_acc']:.3f}", f"{f['heldout_acc']:.3f}",
                         *[f"{f['answers'][k]:.3f}" for k in ANSWER_KINDS]])
    table = {"title": "anchor task: accuracies and the kinds of held-out answers",
             "columns": ["γ", "seed", "lr", "in-dist acc", "held-out acc", *ANSWER_KINDS], "rows": rows}
    cfg = per[1.0][0]["config"]
    measured = (f"anchor-function task (DESIGN §2): {cfg['n_layers']}-layer d{cfg['d_model']} transformer, "
                f"{cfg['steps']} steps on {cfg['n_train']} sequences; pairs (3,4) and (4,3) never trained. "
                "Held-out accuracy and the share of held-out answers equal to the inferential x + s(a1) + s(a2) "
                "vs the other candidates; noise: seeds and a bootstrap over test sequences")
    names = [anchor_name(g, r["config"]["lr"], s) for g, rs in per.items() for s, r in enumerate(rs)]
    return _result(9, measured, v, plots=plots, tables=[table], runs=names)


def _f(x: Any) -> str:
    if isinstance(x, (list, tuple)):
        return ", ".join(_f(v) for v in x) if x else "—"
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def _ci(e: C.Effect) -> str:
    return f"[{e.lo:+.4f}, {e.hi:+.4f}]" if e.lo is not None and e.hi is not None else "—"


def _ci_pair(ci: Any, pct: bool = False) -> str:
    if not ci or any(v is None for v in ci):
        return "—"
    if pct:
        return "[" + ", ".join(f"{v:+.0%}" if math.isfinite(v) else ("+∞" if v > 0 else "−∞") for v in ci) + "]"
    return f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


def regime_rows(ctx: Context) -> list[dict[str, Any]]:
    """Each reported run's width, depth, parameters, tokens and tokens per parameter."""
    rows = []
    for a in ctx.plan.lm_arms:
        for rd in ctx.runs(a):
            cfg = read_json(rd / "summary.json") or {}
            import yaml

            try:
                rc = yaml.safe_load((rd / "config.yaml").read_text())
            except OSError:
                continue
            params = cfg.get("params") or 0
            rows.append({"run": rd.name, "d_model": rc["model"]["d_model"], "n_layers": rc["model"]["n_layers"],
                         "params": params, "non_embedding_params": cfg.get("non_embedding_params"),
                         "tokens": cfg.get("tokens"), "tokens_per_param": (cfg.get("tokens") or 0) / params if params else None,
                         "wall_time": cfg.get("wall_time")})
    return rows


def claims_table_text(results: list[dict[str, Any]]) -> str:
    """The plain-text claims table printed at the end of a reproduction."""
    from smallinit.experiments.report import deciding_effect

    lines = ["", f"{'#':>2}  {'verdict':<22}  claim / deciding effect [interval]"]
    for r in results:
        eff = deciding_effect(r)
        detail = ""
        if eff and eff.get("value") is not None:
            lo, hi = eff.get("lo"), eff.get("hi")
            iv = f" [{lo:+.4g}, {hi:+.4g}]" if lo is not None and hi is not None else ""
            detail = f"\n{'':>28}{eff['label']}: {eff['value']:+.4g}{iv}"
        lines.append(f"{r['id']:>2}  {r['verdict']:<22}  {r['claim']}{detail}")
    return "\n".join(lines)


def reproduce(preset: str, out: str | os.PathLike, corpus: str | os.PathLike | None = None, *,
              seeds: int | None = None, jobs: int | None = None, dry_run: bool = False, gflops: float | None = None,
              log: Callable[[str], None] | None = None, retry_failed: bool = False):
    """Run (or resume, or with ``dry_run`` only print) a reproduction; returns the claims list (None for a dry run)."""
    p = get_preset(preset, seeds)
    return Reproduction(p, out, corpus, jobs=jobs, gflops=gflops, log=log, retry_failed=retry_failed).run(dry_run)


__all__ = ["Arm", "BASELINE", "CPU", "DEMO", "GPU", "PAPER", "PAPER_REGIME", "PRESETS", "Plan", "Preset", "Reproduction",
           "claim_arms", "claims_table_text", "ensure_corpus", "get_preset", "make_plan", "reproduce", "select_lr"]
