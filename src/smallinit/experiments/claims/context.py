"""What a claim's analysis gets: :class:`ClaimContext` — the output folder, the preset, the claim's own arms
(by role) and their finished runs at the chosen learning rates, cached token-level comparisons, and a log —
and :meth:`ClaimContext.result`, the one shape of a claim's result (what ``claims.json`` and the report hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core.io import atomic_write_json
from smallinit.experiments.claims.rules import INCONCLUSIVE, NOT_RUN, RULE, Effect, Verdict
from smallinit.experiments.presets import AnchorArm, Arm, Preset
from smallinit.runs.rundir import collect_run, read_json, read_probes, run_state


def fmt_lr(lr: float) -> str:
    return f"{lr:g}"


def run_name(a: Arm, lr: float, seed: int) -> str:
    """The run directory name of an LM arm at a learning rate and seed (under OUT/runs/)."""
    return f"{a.key}-lr{fmt_lr(lr)}-s{seed}"


def anchor_name(gamma: float, lr: float, seed: int) -> str:
    """The run directory name of an anchor-task run (under OUT/anchor/)."""
    return f"anchor-g{gamma:g}-lr{fmt_lr(lr)}-s{seed}"


def planned_run_numbers(p: Preset, a: Arm) -> tuple[int, int] | None:
    """(training tokens, non-embedding parameters) of the arm's short run in preset ``p``, from the preset's
    definition alone: tokens = train.max_steps × train.batch_size × data.seq_len and
    ``ModelConfig.num_params(non_embedding=True)`` of the resolved config (the preset's base, the size's overrides,
    the arm's γ, ε and gate — as :func:`smallinit.experiments.plan.lm_config` resolves them; no data needed). None
    when the size is not in the preset."""
    import copy
    import dataclasses

    from smallinit.config import load_config, set_dotted

    if a.size not in p.sizes:
        return None
    d = copy.deepcopy(p.base)
    for k, v in p.sizes[a.size].items():
        set_dotted(d, k, v, what="preset key")
    cfg = load_config(None, [], base=d)
    model = dataclasses.replace(cfg.model, gamma=a.gamma, norm_eps=a.eps, gate=a.gate)
    return (cfg.train.max_steps * cfg.train.batch_size * cfg.data.seq_len, model.num_params(non_embedding=True))


def planned_tokens_per_param(p: Preset, a: Arm) -> float | None:
    """Tokens per non-embedding parameter of the arm's short run in preset ``p`` (:func:`planned_run_numbers`)."""
    r = planned_run_numbers(p, a)
    return r[0] / r[1] if r and r[1] else None


@dataclass
class ClaimContext:
    """One claim's view of a reproduction.

    ``roles`` = what the claim's ``arms(preset)`` returned ({role: Arm or AnchorArm}); ``chosen`` = the learning
    rate each arm kept ({arm.key: lr or None}); ``seeds`` = how many seeds each arm ran ({arm.key: k});
    ``costs`` = :func:`~smallinit.experiments.cost.model_cost` of each planned seed-0 run ({run name: ...}).
    """

    claim_id: int
    claim: str
    out: Path
    preset: Preset
    roles: dict[str, Any]
    chosen: dict[str, float | None] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)
    costs: dict[str, dict[str, float]] = field(default_factory=dict)
    log: Callable[[str], None] = print
    noise_floor: float | None = None
    """The preset's seed-noise floor (nats; :func:`~smallinit.experiments.claims.rules.seed_noise_floor`), which a
    one-seed loss difference must exceed; None when the preset has no multi-seed arm."""
    crossover_noise_floor: float | None = None
    """The same floor from the claim-1 crossover's multi-seed arms at D_max (long runs): the floor of one-seed
    comparisons read from the further crossovers (claims 2 and 5 in ``cpu-long``)."""

    @property
    def p(self) -> Preset:
        return self.preset

    # -- runs
    def runs(self, a: Arm | AnchorArm) -> list[Path]:
        """The finished runs of an arm at its chosen learning rate (seed 0 first)."""
        return list(self.runs_by_seed(a).values())

    def runs_by_seed(self, a: Arm | AnchorArm, lr: float | None = None) -> dict[int, Path]:
        """{seed: finished run} of an arm at ``lr`` (default: its chosen rate), in seed order. Every learning rate
        of the preset has seed 0 (phase 1); further seeds exist at the chosen rate only. Claims pair two arms'
        runs by these seed numbers (a lost seed drops its own pair and shifts no other)."""
        lr = self.chosen.get(a.key) if lr is None else lr
        if lr is None:
            return {}
        out = {}
        for s in range(self.seeds.get(a.key, 1)):
            rd = (
                self.out / "anchor" / anchor_name(a.gamma, lr, s)
                if isinstance(a, AnchorArm)
                else self.out / "runs" / run_name(a, lr, s)
            )
            if run_state(rd) == "done":
                out[s] = rd
        return out

    def common_lr(self, *arms: Arm) -> float | None:
        """A learning rate at which every arm has a finished seed-0 run (arms compared at the same rate, e.g. claim
        6): the first arm's chosen rate when all have a run there, else the next arm's chosen rate, else the
        preset's rates in order; None when there is none."""
        cands = [self.chosen.get(a.key) for a in arms] + list(self.p.lrs)
        for lr in cands:
            if lr is not None and all(0 in self.runs_by_seed(a, lr) for a in arms):
                return lr
        return None

    def losses_by_seed(self, a: Arm, lr: float | None = None) -> dict[int, float]:
        """{seed: final validation loss} of the arm's finished runs (finite ones only)."""
        out = {}
        for s, rd in self.runs_by_seed(a, lr).items():
            v = collect_run(rd).get("final_val_loss")
            if v is not None and math.isfinite(v):
                out[s] = float(v)
        return out

    def probes_by_seed(self, a: Arm, lr: float | None = None) -> dict[int, list[dict[str, Any]]]:
        """{seed: probe records} of the arm's finished runs that have probes."""
        out = {}
        for s, rd in self.runs_by_seed(a, lr).items():
            recs = read_probes(rd)
            if recs:
                out[s] = recs
        return out

    def tokens_per_param(self, a: Arm) -> float | None:
        """Training tokens per non-embedding parameter of the arm's runs: the planned cost's tokens /
        non_embedding_params, else :func:`planned_tokens_per_param` from the preset's definition."""
        c = self.cost(a)
        if c.get("tokens") and c.get("non_embedding_params"):
            return float(c["tokens"]) / float(c["non_embedding_params"])
        return planned_tokens_per_param(self.p, a)

    def budget(self, *arms: Arm) -> float | None:
        """The smallest tokens per non-embedding parameter over the arms' runs (None when one is unknown): what a
        loss claim compares against the declared budget ``Preset.enough`` (:func:`~.rules.at_budget`)."""
        v = [self.tokens_per_param(a) for a in arms]
        return None if not v or any(x is None for x in v) else float(min(v))

    def names(self, *arms: Arm | AnchorArm) -> list[str]:
        """The names of the arms' finished runs (the "Runs:" line of the report)."""
        return [rd.name for a in arms for rd in self.runs(a)]

    def losses(self, a: Arm) -> list[float]:
        """Final validation losses of the arm's finished runs (finite ones only), seed 0 first."""
        return [
            v
            for v in (collect_run(rd).get("final_val_loss") for rd in self.runs(a))
            if v is not None and math.isfinite(v)
        ]

    def probes(self, a: Arm) -> list[dict[str, Any]]:
        """The probe records of the arm's seed-0 run ([] when it has none)."""
        rs = self.runs(a)
        return read_probes(rs[0]) if rs else []

    def anchor_results(self, a: AnchorArm) -> list[dict[str, Any]]:
        """The ``result.json`` of each of the anchor arm's finished seeds (seed 0 first)."""
        return list(self.anchor_results_by_seed(a).values())

    def anchor_results_by_seed(self, a: AnchorArm) -> dict[int, dict[str, Any]]:
        """{seed: ``result.json``} of the anchor arm's seeds that have one, in seed order."""
        lr = self.chosen.get(a.key)
        if lr is None:
            return {}
        out = {}
        for s in range(self.seeds.get(a.key, 1)):
            r = read_json(self.out / "anchor" / anchor_name(a.gamma, lr, s) / "result.json")
            if r:
                out[s] = r
        return out

    def cost(self, a: Arm) -> dict[str, float]:
        """The planned cost numbers (params, non_embedding_params, tokens, flops ...) of the arm's run at the
        preset's first learning rate, seed 0."""
        return self.costs.get(run_name(a, self.p.lrs[0], 0), {})

    def lr_words(self) -> str:
        """How the learning rates were set, in words (for a claim's "measured" text)."""
        if len(self.p.lrs) > 1:
            return f"each at the learning rate it does best with among {', '.join(map(fmt_lr, self.p.lrs))} (tune_loss)"
        return f"both at learning rate {fmt_lr(self.p.lrs[0])} (fixed in this preset, not tuned per arm)"

    # -- comparisons
    def compare(self, variant: Arm, baseline: Arm, reference: Path | None = None) -> dict[str, Any] | None:
        """Token-level comparison of the two arms' seed-0 runs (smallinit.analysis.compare.compare_models, intervals by
        a bootstrap over windows; ``reference``: a third run whose loss quantiles give the primary bins), cached in
        OUT/compare/ until a run is newer. None when a run is missing or the comparison fails."""
        ra, rb = self.runs(variant), self.runs(baseline)
        if not ra or not rb:
            return None
        return self.compare_runs(ra[0], rb[0], reference)

    def compare_runs(
        self, run_a: Path, run_b: Path, reference: Path | Sequence[Path] | None = None
    ) -> dict[str, Any] | None:
        """:meth:`compare` on two run directories (e.g. a crossover's largest-budget branches); ``reference``: one
        run or several (bins by the mean of their per-token losses,
        :func:`smallinit.analysis.compare.compare_models`)."""
        ra, rb = [run_a], [run_b]
        refs = [] if reference is None else [reference] if isinstance(reference, Path) else list(reference)
        reference = (refs[0] if len(refs) == 1 else refs) if refs else None

        def label(r: Path) -> str:  # a crossover branch is named by its arm and seed, not only its budget
            return "-".join(r.parts[-3:]) if r.parent.parent.parent.name == "runs" else r.name

        ref = "".join(f"__ref__{label(r)}" for r in refs)
        path = self.out / "compare" / f"{label(ra[0])}__vs__{label(rb[0])}{ref}.windows.json"
        newest_run = max((r / "summary.json").stat().st_mtime for r in (ra[0], rb[0], *refs))
        if path.is_file() and path.stat().st_mtime >= newest_run:
            cached = read_json(path)
            if cached is not None:
                return cached
        from smallinit.analysis.compare import compare_models

        try:
            res = compare_models(
                ra[0], rb[0], tokens=self.p.compare_tokens, n_boot=1000, by_window=True, reference=reference
            )
        except Exception as e:  # noqa: BLE001 - a failed comparison makes the claim inconclusive, not the report
            self.log(f"[reproduce] compare {ra[0].name} vs {rb[0].name} failed: {e}")
            return None
        atomic_write_json(path, res)
        return res

    # -- claim 1's crossover (loss against budget)
    def crossover(self) -> dict[str, Any] | None:
        """``OUT/crossover/crossover.json`` (:mod:`smallinit.experiments.crossover`); None when the preset has no
        crossover or it did not finish."""
        if self.p.crossover is None:
            return None
        return read_json(self.out / "crossover" / "crossover.json")

    def crossover_run(self, arm_name: str, seed: int = 0) -> Path | None:
        """The largest-budget cooldown branch of a crossover arm at ``seed`` (None unless finished)."""
        x = self.crossover()
        if not x:
            return None
        rd = self.out / "crossover" / "runs" / arm_name / f"seed{seed}" / f"D{x['budgets'][-1]['tokens']}"
        return rd if run_state(rd) == "done" else None

    def extra_crossovers(self, claim: int) -> list[tuple[Any, dict[str, Any] | None]]:
        """(plan, ``OUT/crossover-cK…/crossover.json`` or None when unfinished) for each of the preset's further
        crossovers that answer ``claim`` (``Preset.extra_crossovers``)."""
        from smallinit.experiments.crossover_plan import crossover_folder

        return [
            (xp, read_json(self.out / crossover_folder(xp) / "crossover.json"))
            for xp in self.p.extra_crossovers
            if xp.claim == claim
        ]

    @staticmethod
    def final_losses(x: dict[str, Any], arm_name: str) -> list[float]:
        """A crossover's annealed losses L(D_max) of ``arm_name``, one per seed (NaN where a branch did not finish)."""
        rows = ((x or {}).get("losses") or {}).get(arm_name) or {}
        return [float(r[-1]) if r and r[-1] is not None else math.nan for r in rows.values()]

    @staticmethod
    def final_losses_by_seed(x: dict[str, Any], arm_name: str) -> dict[int, float]:
        """A crossover's annealed losses L(D_max) of ``arm_name`` by seed number ({seed: loss}; NaN where a branch
        did not finish)."""
        rows = ((x or {}).get("losses") or {}).get(arm_name) or {}
        return {int(s): float(r[-1]) if r and r[-1] is not None else math.nan for s, r in rows.items()}

    @staticmethod
    def largest_budget_tokens_per_param(x: dict[str, Any] | None) -> float | None:
        """A crossover's tokens per non-embedding parameter at its largest budget D_max (None when unknown): what
        a claim read from it compares against the declared budget."""
        t = (x or {}).get("tokens_per_param") or []
        return float(t[-1]) if t else None

    def crossover_trunk(self, arm_name: str, seed: int = 0) -> Path | None:
        """The constant-rate trunk of a crossover arm at ``seed`` (None unless finished): its probe log covers the
        whole run up to the last cooldown's start."""
        rd = self.out / "crossover" / "runs" / arm_name / f"seed{seed}" / "trunk"
        return rd if self.p.crossover is not None and run_state(rd) == "done" else None

    def crossover_trunk_tokens(self) -> int:
        """Tokens a crossover trunk trains (to the start of the largest budget's cooldown)."""
        x = self.crossover() or {}
        b = (x.get("budgets") or [{}])[-1]
        per_step = b["tokens"] // b["steps"] if b.get("steps") else 0
        return int(b.get("start", 0) * per_step)

    def loss_hw(self, variant: Arm, baseline: Arm) -> float | None:
        """Half-width of the 95% interval of a one-seed loss difference between two arms: the paired bootstrap
        over windows of the token-level loss gain, and at least the preset's seed-noise floor (None when the
        floor is unknown: one seed says nothing about training noise). With ≥ 2 seeds per arm the t-interval of
        :func:`~smallinit.experiments.claims.rules.lower_is_better_effect` decides and this only widens it."""
        res = self.compare(variant, baseline)
        ci = (((res or {}).get("overall") or {}).get("loss_gain") or {}).get("ci95")
        boot = (ci[1] - ci[0]) / 2 if ci else None
        if min(len(self.runs(variant)), len(self.runs(baseline))) >= 2:
            return boot
        if self.noise_floor is None or boot is None:
            return None
        return max(boot, self.noise_floor)

    # -- the result
    def result(
        self,
        measured: str,
        verdict: Verdict | None,
        *,
        plots: list[str | None] | None = None,
        tables: list[dict[str, Any]] | None = None,
        notes: list[str] | None = None,
        runs: list[str] | None = None,
    ) -> dict[str, Any]:
        """A claim's result: ``measured`` (what was measured, in words), the verdict with its effects and
        numbers (None: inconclusive, runs missing), plot file names (None entries dropped), tables
        ({"title", "columns", "rows"}), notes and the run names."""
        return make_result(
            self.claim_id,
            self.claim,
            measured,
            verdict,
            plots=[p for p in plots or [] if p],
            tables=tables,
            notes=notes,
            runs=runs,
        )


def make_result(
    cid: int,
    claim: str,
    measured: str,
    verdict: Verdict | None,
    *,
    ran: bool = True,
    plots: list[str] | None = None,
    tables: list[dict[str, Any]] | None = None,
    notes: list[str] | None = None,
    runs: list[str] | None = None,
) -> dict[str, Any]:
    """The result dict of claim ``cid`` (``ran=False``: not run in this preset)."""
    if not ran:
        return {
            "id": cid,
            "claim": claim,
            "verdict": NOT_RUN,
            "measured": measured,
            "effects": [],
            "numbers": {},
            "plots": [],
            "tables": [],
            "notes": notes or [],
            "runs": [],
        }
    v = verdict or Verdict(INCONCLUSIVE, notes=["runs missing or failed"])
    return {
        "id": cid,
        "claim": claim,
        "verdict": v.verdict,
        "measured": measured,
        "effects": [e.to_dict() for e in v.effects],
        "numbers": v.numbers,
        "plots": plots or [],
        "tables": tables or [],
        "notes": (v.notes or []) + (notes or []),
        "runs": runs or [],
        "rule": RULE,
    }


# ---- formatting numbers for tables ---------------------------------------------------------------------


def fmt(x: Any) -> str:
    """4 decimals; a list joined with commas; None / non-finite as —."""
    if isinstance(x, (list, tuple)):
        return ", ".join(fmt(v) for v in x) if x else "—"
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def fmt_ci(e: Effect) -> str:
    """An effect's interval as [lo, hi]."""
    return f"[{e.lo:+.4f}, {e.hi:+.4f}]" if e.lo is not None and e.hi is not None else "—"


def fmt_ci_pair(ci: Any, pct: bool = False) -> str:
    """A (lo, hi) pair as [lo, hi] (``pct``: as percentages, ±∞ for infinite ends)."""
    if not ci or any(v is None for v in ci):
        return "—"
    if pct:
        return "[" + ", ".join(f"{v:+.0%}" if math.isfinite(v) else ("+∞" if v > 0 else "−∞") for v in ci) + "]"
    return f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


__all__ = [
    "ClaimContext",
    "anchor_name",
    "fmt",
    "fmt_ci",
    "fmt_ci_pair",
    "fmt_lr",
    "make_result",
    "planned_run_numbers",
    "planned_tokens_per_param",
    "run_name",
]
