"""Reproduction presets: what ``smallinit reproduce --preset NAME`` runs, as data.

A :class:`Preset` fixes the budget: which claims run, the model sizes (size label → dotted overrides of the
shared ``base`` config, whose ``model.preset`` key names a model size of :data:`smallinit.model.config.SIZES`),
steps, learning rates, seeds, the anchor task's settings and the default corpus.
Which *arms* (model settings: size, γ, ε, gate, BOS, MoE) a claim needs for a preset is the claim's own
business (``arms(preset)`` in its module under :mod:`smallinit.experiments.claims`); a claim reads the sizes
by role: ``main_size`` (claims 1, 3, 5, 7), ``probe_size`` (4, 6), ``shrink_sizes`` (2), ``scaling_sizes`` (8),
``moe_size`` (10).

``demo`` (≤ 15 min on a 2-core CPU: claims 1, 4, 6, 7, 9), ``cpu`` (≤ 2 h on a 2-core CPU, every claim,
learning rates swept) and ``gpu`` (the paper-sized plan; print it with ``--dry-run``). A test suite builds its
own fixture-sized :class:`Preset` and passes it to :func:`smallinit.experiments.reproduce.reproduce`.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from smallinit.core.errors import ConfigError

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
    adam_eps: float | None = None
    """AdamW's ε (``optim.eps``); None = the config's (1e-8)."""

    @property
    def key(self) -> str:
        moe = "-moe" if self.moe and "moe" not in self.size else ""
        return (
            f"{self.size}{moe}-g{self.gamma:g}-e{self.eps:g}-{self.gate}"
            f"{'' if self.bos else '-nobos'}{'' if self.adam_eps is None else f'-ae{self.adam_eps:g}'}"
        )

    def describe(self) -> str:
        return (
            f"γ={self.gamma:g}, ε={self.eps:g}, gate={self.gate}, {self.size}{' MoE' if self.moe else ''}"
            f"{'' if self.bos else ', no BOS'}{'' if self.adam_eps is None else f', Adam ε={self.adam_eps:g}'}"
        )


@dataclass(frozen=True)
class AnchorArm:
    """An arm of the anchor task (claim 9): a γ; trained at every ``anchor_lrs`` of the preset."""

    gamma: float

    @property
    def key(self) -> str:
        return f"anchor-g{self.gamma:g}"

    def describe(self) -> str:
        return f"anchor task, γ={self.gamma:g}"


def arm(size: str, setting: tuple[float, float, str], **kw) -> Arm:
    return Arm(size, setting[0], setting[1], setting[2], **kw)


GAMMA_ONLY = (0.5, 1e-12, "elementwise")
"""The paper's ε and gate at the standard γ: separates γ's own effect from the gate's and the ε's."""
CROSSOVER_ARMS: dict[str, tuple[float, float, str]] = {"baseline": BASELINE, "paper": PAPER, "gamma-only": GAMMA_ONLY}
SHRINK_ARMS: dict[str, tuple[float, float, str]] = {
    "nofix-0.5": BASELINE,
    "nofix-1": (1.0, 1e-5, "none"),
    "fix-0.5": GAMMA_ONLY,
    "fix-1": PAPER,
}
"""Claim 2's four arms per width in a crossover: γ ∈ {0.5, 1} × {no fix (ε 1e-5, no gate), fix (ε 1e-12, gate)}."""
EARLY_ARMS: dict[str, tuple[float, float, str]] = {
    "A": BASELINE,
    "B": (1.0, 1e-5, "none"),
    "C": (1.0, 1e-12, "none"),
    "D": PAPER,
}
"""The mechanism arms of a preset with ``early_arms``: A the baseline; B γ = 1 alone; C B with ε = 1e-12; D C with the
gate (the paper's setting). Claim 3 reads B vs C, claim 4 B vs A (small init raises the sink) and C vs D (the gate
lowers it), claim 6 B vs A (condensation under γ = 1 beyond γ = 0.5's, at one rate)."""


@dataclass
class CrossoverPlan:
    """Claim 1's loss-against-budget experiment (:mod:`smallinit.experiments.crossover`) in a preset: every arm ×
    seed trains one trunk plus cooldown branches at ``fractions`` of ``tokens``; the verdict is read from the gap
    at the largest budget (:func:`smallinit.analysis.crossing.loss_claim_verdict`). Claim 7 scores the D_max
    branches."""

    size: str
    """A key of :attr:`Preset.sizes`: the model shape (its ``train.max_steps`` is replaced by the budgets)."""
    tokens: int
    """D_max, training tokens of the largest budget per arm × seed (``reproduce --hours`` may resize it)."""
    seeds: int = 2
    arms: tuple[str, ...] = ("baseline", "paper")
    """Names from :data:`CROSSOVER_ARMS`; the first is the baseline."""
    fractions: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted settings for every crossover run (batch, sequence length, warmup, learning rate ...)."""
    lr: float | None = None
    """The learning rate of every arm when ``lrs`` is empty (None: the preset's first)."""
    lrs: tuple[float, ...] = ()
    """Rates tuned per arm before the trunks, each a WSD run of ``tune_fraction``·D tokens (grid extended past a
    winning edge value); empty: ``lr`` for every arm."""
    tune_fraction: float = 0.25
    claim: int = 1
    """The claim this crossover answers (1: claim 1's, in ``OUT/crossover``; others in ``OUT/crossover-cK[-LABEL]``)."""
    label: str = ""
    """Tells apart several crossovers of one claim (claim 2's widths)."""
    settings: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    """Arm name → (γ, norm ε, gate) for arms not in :data:`CROSSOVER_ARMS`."""
    tokens_per_param: float | None = None
    """When set, D = this × the model's non-embedding parameters (claim 2: equal tokens per parameter per width)."""


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
    enough: float = 75.0
    """The declared budget K of every loss claim, in tokens per non-embedding parameter, fixed before the runs
    (DESIGN.md §2): a loss claim is judged at K·N and is "inconclusive — not reached" from runs that stop below it."""
    seeds: dict[int, int] = field(default_factory=dict)
    gammas: tuple[float, ...] = ()
    anchor: dict[str, Any] = field(default_factory=dict)
    anchor_lrs: tuple[float, ...] = (1e-3,)
    corpus: dict[str, Any] = field(default_factory=dict)
    compare_tokens: int = 32768
    sink_without_bos: bool = False
    jobs: int | None = None
    """Runs at a time; None: :func:`smallinit.experiments.cost.default_jobs` (one per core on the CPU)."""
    gflops: float | None = None
    """Assumed training GFLOP/s for the estimates (None: measured on this machine)."""
    anchor_gflops: float | None = None
    inprocess: bool = False
    """Run every job in this process (tests) instead of one subprocess each."""
    description: str = ""
    crossover: CrossoverPlan | None = None
    """Claim 1 from a crossover (loss against budget) instead of one final loss per arm; claim 7 then scores the
    crossover's largest-budget runs."""
    extra_crossovers: tuple[CrossoverPlan, ...] = ()
    """Further crossovers (claims 2, 5, 10), added after claim 1's in this order while the hours allow; a claim
    with one here reads it instead of short runs, and is not run when its crossovers do not fit."""
    hours: float | None = None
    """The hours the plan is fitted into when ``--hours`` is not given (presets with further crossovers)."""
    early_arms: bool = False
    """Claims 3, 4 and 6 read the four arms of :data:`EARLY_ARMS` (shared runs) instead of their own."""
    saturation_share: float | None = None
    """Claim 3 part (a) by the share of the horizon: B is ε-dominated (lowest saturation ≤ 0.5) for more than this
    time-weighted share of the probed steps. None: by the time-averaged lowest saturation."""
    bf16_where_native: bool = False
    """Every run trains under bf16 autocast where the device computes bf16 natively, in float32 elsewhere."""

    def n_seeds(self, claim: int) -> int:
        return max(1, int(self.seeds.get(claim, 1)))


def shape(d: int, layers: int, heads: int, ff: int, steps: int, **extra) -> dict[str, Any]:
    return {
        "model.d_model": d,
        "model.n_layers": layers,
        "model.n_heads": heads,
        "model.d_ff": ff,
        "train.max_steps": steps,
        **extra,
    }


DEMO = Preset(
    name="demo",
    budget="≤ 15 minutes on a 2-core CPU",
    description="tiny models (d 128, 4 layers) on the built-in corpus; one learning rate (not tuned), one seed",
    claims=(1, 4, 6, 7, 9),
    base={
        "model": {"preset": "tiny", "max_seq_len": 128},
        "data": {"seq_len": 128, "val_batches": 8, "bos": True},
        "optim": {"lr": 3e-3, "warmup_steps": 30},
        "train": {"batch_size": 16, "log_every": 10, "eval_every": 100, "ckpt_every": 100, "keep_ckpts": 1},
        "probe": {"every": 20},
    },
    sizes={"d128": shape(128, 4, 4, 384, 500)},
    main_size="d128",
    probe_size="d128",
    lrs=(3e-3,),
    anchor={"steps": 700, "eval_every": 100},
    anchor_lrs=(1e-3,),
    corpus={
        "inputs": ["builtin:stdlib"],
        "vocab_size": 8192,
        "max_bytes": 12_000_000,
        "val_fraction": 0.05,
        "name": "stdlib-demo",
    },
    compare_tokens=32768,
    crossover=CrossoverPlan(
        size="d128",
        tokens=500 * 16 * 128,
        seeds=1,
        arms=("baseline", "paper"),
        fractions=(1 / 8, 1 / 4, 1 / 2, 1.0),
        overrides={"probe.every": 0},
    ),
)

CPU_STEPS = 240
"""Steps per short `cpu` run (claims 2–6, 8–10): they take ≈ 50 min on 2 cores; claim 1's crossover the rest."""

CPU = Preset(
    name="cpu",
    budget="≈ 2 hours on a 2-core CPU (1h38m measured on 2026-12-05)",
    description=(
        "claim 1 (and 7) from a crossover at d128 × 4 layers, T 256: 8M tokens per arm × seed, arms baseline, "
        "paper and γ-only, 2 seeds, budgets D/16 … D, each arm's rate tuned on D/4 runs of its own seed; "
        "claims 4 and 6 on 3 seeds of short runs at one rate; "
        "the other claims on short runs (widths 64/128/256 at depth 2, 240 steps of 8×128), "
        "learning rate swept over 3 values per arm on tune_loss; byte-level corpus"
    ),
    claims=tuple(range(1, 12)),
    base={
        "model": {"preset": "tiny", "max_seq_len": 128},
        "data": {"seq_len": 128, "val_batches": 8, "tune_batches": 8, "bos": True},
        "optim": {"warmup_steps": 30},
        "train": {"batch_size": 8, "log_every": 10, "eval_every": 100, "ckpt_every": 100, "keep_ckpts": 1},
        "probe": {"every": 25},
    },
    sizes={
        "d64": shape(64, 2, 2, 192, CPU_STEPS),
        "d128": shape(128, 2, 2, 384, CPU_STEPS),
        "d256": shape(256, 2, 4, 704, CPU_STEPS),
        "d128-moe": shape(
            128,
            2,
            2,
            384,
            CPU_STEPS,
            **{
                "model.moe.n_experts": 4,
                "model.moe.top_k": 2,
                "model.moe.d_expert": 192,
                "probe.heatmaps": ["blocks.0.attn.q"],
            },
        ),
    },
    main_size="d256",
    probe_size="d128",
    shrink_sizes=("d64", "d128", "d256"),
    scaling_sizes=("d64", "d128", "d256"),
    moe_size="d128-moe",
    lrs=(1e-3, 3e-3, 1e-2),
    # claims 4 (and 6, which shares its arms) and 5 need ≥ 3 seeds for a seed-paired t-interval (issue 35); claim
    # 5's six arms at 3 seeds also give the short runs' seed-noise floor (t with 2 degrees of freedom per arm)
    seeds={1: 2, 4: 3, 5: 3, 9: 2},
    gammas=(0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
    anchor={"steps": 700, "eval_every": 100},
    anchor_lrs=(3e-4, 1e-3, 3e-3),
    # byte-level: the LM head is 3% of a d128 × 4 model's FLOPs with bytes, 18% with BPE 2048, 47% with BPE 8192
    corpus={"inputs": ["builtin:stdlib"], "tokenizer": "byte", "val_fraction": 0.02, "name": "stdlib-bytes"},
    compare_tokens=32768,
    sink_without_bos=True,
    crossover=CrossoverPlan(
        size="d128",
        tokens=8_000_000,
        seeds=2,
        arms=("baseline", "paper", "gamma-only"),
        lrs=(1e-3, 3e-3, 1e-2),
        overrides={
            "model.n_layers": 4,
            "model.n_heads": 4,
            "data.seq_len": 256,
            "model.max_seq_len": 256,
            "train.batch_size": 16,
            "optim.warmup_steps": 50,
            "data.val_batches": 16,
            "data.tune_batches": 0,
            "train.eval_every": 100_000,
            "train.log_every": 50,
            "probe.every": 100,
        },
    ),
)

GPU = Preset(
    name="gpu",
    budget="paper-sized: for accelerators (estimate below at the assumed throughput)",
    description=(
        "the paper's sizes 0.1B–1.5B (and the 0.5B MoE) at ~20 tokens per parameter, seq 2048, "
        "0.5M tokens per step, bf16; learning rate swept over 3 values per arm; 2 seeds for claims 1, 9"
    ),
    claims=tuple(range(1, 12)),
    jobs=1,  # one accelerator, one run at a time
    base={
        "model": {"preset": "0.1b"},
        "data": {"seq_len": 2048, "val_batches": 32, "tune_batches": 32, "bos": True},
        "optim": {"warmup_steps": 2000, "schedule": "wsd"},
        "train": {
            "batch_size": 256,
            "micro_batch_size": 16,
            "dtype": "bf16",
            "compile": True,
            "log_every": 10,
            "eval_every": 1000,
            "ckpt_every": 2000,
            "keep_ckpts": 2,
        },
        "probe": {"every": 500},
    },
    sizes={
        "0.1b": {"model.preset": "0.1b", "train.max_steps": 4000},
        "0.3b": {"model.preset": "0.3b", "train.max_steps": 12000},
        "0.7b": {"model.preset": "0.7b", "train.max_steps": 27000},
        "1.5b": {"model.preset": "1.5b", "train.max_steps": 57000},
        "0.5b-moe": {"model.preset": "0.5b-moe", "train.max_steps": 12000, "probe.heatmaps": ["blocks.0.attn.q"]},
    },
    main_size="0.1b",
    probe_size="0.1b",
    shrink_sizes=("0.1b", "0.3b", "0.7b", "1.5b"),
    scaling_sizes=("0.1b", "0.3b", "0.7b", "1.5b"),
    moe_size="0.5b-moe",
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
    crossover=CrossoverPlan(
        size="0.1b",
        tokens=10_000_000_000,
        seeds=2,
        arms=("baseline", "paper", "gamma-only"),
        lrs=(1.5e-3, 3e-3, 6e-3),
        overrides={"probe.every": 2000, "train.eval_every": 100_000, "optim.warmup_steps": 500},
    ),
)

CPU_LONG = copy.deepcopy(CPU)
CPU_LONG.name = "cpu-long"
CPU_LONG.budget = "≈ 10 hours on a 2-core CPU (overnight)"
CPU_LONG.description = (
    "claim 1's crossover at d128 × 4 layers pushed to 64M tokens per arm × seed (2 seeds, baseline "
    "and paper), so that a crossing predicted from the cpu preset's budgets is observed or refuted; "
    "claim 7 on its largest budget; with more hours (--hours) crossovers for claims 10 (MoE), 5 "
    "(γ sweep) and 2 (widths at equal tokens per parameter), each only when it fits"
)
CPU_LONG.claims = (1, 2, 5, 7, 10)
CPU_LONG.crossover = dataclasses.replace(CPU.crossover, tokens=64_000_000, arms=("baseline", "paper"))
CPU_LONG.hours = 10.0
_LONG_SHAPE = {k: v for k, v in CPU.crossover.overrides.items() if k not in ("model.n_heads",)}
CPU_LONG.extra_crossovers = (
    # claim 10: the MoE pair (4 experts, top 2) at d128 × 4 layers, as claim 1's pair, 16M tokens
    dataclasses.replace(CPU.crossover, claim=10, size="d128-moe", tokens=16_000_000, arms=("baseline", "paper")),
    # claim 5: the γ sweep at d128 × 4 layers, ε 1e-12 and the gate throughout, 16M tokens, one seed
    dataclasses.replace(
        CPU.crossover,
        claim=5,
        tokens=16_000_000,
        seeds=1,
        arms=("g0.5", "g0.75", "g1", "g1.25", "g1.5"),
        settings={f"g{g:g}": (g, 1e-12, "elementwise") for g in (0.5, 0.75, 1.0, 1.25, 1.5)},
    ),
    # claim 2: widths 64 / 128 / 256 × 2 layers at equal tokens per parameter (10), γ ∈ {0.5, 1} × {no fix, fix}
    *(
        dataclasses.replace(
            CPU.crossover,
            claim=2,
            label=size,
            size=size,
            tokens=0,
            tokens_per_param=10.0,
            seeds=1,
            fractions=(0.25, 0.5, 1.0),
            tune_fraction=0.25,
            arms=tuple(SHRINK_ARMS),
            settings=dict(SHRINK_ARMS),
            overrides={**_LONG_SHAPE, "model.n_layers": 2},
        )
        for size in ("d64", "d128", "d256")
    ),
)

CPU_01B_STEPS = 300
"""The early horizon of ``cpu-0.1b``: the first 300 steps of 8 × 256 tokens (614k tokens, ≈ 10 min a run in bf16 on 2
cores with AMX), where ε can dominate the norms (claim 3: under γ = 1 the init mean square is 1/768² ≈ 1.7e-6 < 1e-5),
the first updates condense the weights (claim 6(a)) and sinks form (claim 4)."""

CPU_01B = Preset(
    name="cpu-0.1b",
    budget="≤ 2.5 hours on a 2-core CPU with native bf16 (float32 elsewhere: ≈ 2.6× longer)",
    description=(
        "the paper's 0.1b size (d 768 × 12, 12 heads / 4 KV heads, d_ff 2048) at an early horizon: 300 steps of "
        "8 × 256 tokens, bf16 where native, one rate (6e-4, warm-up 30) for every arm; bilingual BPE 32,768 on "
        "en-books-wiki + zh-news (4:1 by tokens), BOS-started windows; arms A–D × 3 seeds; the mechanism claims "
        "3 (ε saturation), 4 (sink) and 6 (condensation), log-spaced early probes; loss claims are not reached"
    ),
    claims=(3, 4, 6),
    jobs=1,  # one 0.1b run at a time gets both cores
    base={
        "model": {"preset": "0.1b", "max_seq_len": 256},
        "data": {"seq_len": 256, "val_batches": 4, "tune_batches": 0, "bos": True},
        "optim": {"warmup_steps": 30},
        "train": {"batch_size": 8, "log_every": 10, "eval_every": 100, "ckpt_every": 50, "keep_ckpts": 1},
        "probe": {"every": 50},
    },
    sizes={"0.1b": {"model.preset": "0.1b", "train.max_steps": CPU_01B_STEPS}},
    main_size="0.1b",
    probe_size="0.1b",
    lrs=(6e-4,),  # nanoGPT's rate for its 124M GPT-2: one rate, so that claim 6 compares arms at the same rate
    seeds={3: 3, 4: 3, 6: 3},
    corpus={
        "inputs": ["../shared/data/en-books-wiki/en_train.jsonl.gz", "../shared/data/zh-news/zh_train.jsonl.gz"],
        "weights": [0.8, 0.2],
        "text_field": "text",
        "vocab_size": 32768,
        "max_bytes": 40_000_000,
        "val_fraction": 0.01,
        "name": "en-zh-bpe32k",
    },
    early_arms=True,
    saturation_share=0.5,
    bf16_where_native=True,
)

GPU_01B = dataclasses.replace(
    CPU_01B,
    name="gpu-0.1b",
    budget="≈ 30 minutes on one H100-class accelerator (12 runs of 39M tokens)",
    description="cpu-0.1b at the 0.1b size's own sequence length and a GPU batch: 300 steps of 64 × 2048 tokens, bf16, "
    "compiled; the same arms, seeds, rate, probes and claims",
    base={
        **CPU_01B.base,
        "model": {"preset": "0.1b"},
        "data": {**CPU_01B.base["data"], "seq_len": 2048},
        "train": {**CPU_01B.base["train"], "batch_size": 64, "micro_batch_size": 16, "compile": True},
    },
    corpus={**CPU_01B.corpus, "max_bytes": 400_000_000, "val_fraction": 0.02, "name": "en-zh-bpe32k-all"},
    gflops=300_000.0,
)

PRESETS: dict[str, Preset] = {
    "demo": DEMO,
    "cpu": CPU,
    "cpu-long": CPU_LONG,
    "cpu-0.1b": CPU_01B,
    "gpu": GPU,
    "gpu-0.1b": GPU_01B,
}


def get_preset(name: str | Preset, seeds: int | None = None) -> Preset:
    """A copy of the named preset (or :class:`Preset`) with ``seeds`` (if given) for claims 1, 9, 10 and its own."""
    if isinstance(name, Preset):
        p = copy.deepcopy(name)
    elif name in PRESETS:
        p = copy.deepcopy(PRESETS[name])
    else:
        raise ConfigError(f"unknown reproduce preset {name!r}; choose one of {', '.join(PRESETS)}")
    if seeds is not None:
        if seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {seeds}")
        p.seeds = {k: seeds for k in sorted({*p.seeds, 1, 9, 10})}
    return p
