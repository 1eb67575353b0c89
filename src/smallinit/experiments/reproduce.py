"""``smallinit reproduce``: run the experiments behind each claim of the paper and judge them.

The pieces: a **preset** (:mod:`~smallinit.experiments.presets`) fixes the budget; each **claim** is one module
of :mod:`smallinit.experiments.claims` (its arms, analysis, verdict rule and figures); :mod:`.plan` turns the
claims' arms into jobs (every arm at every learning rate of the preset, seed 0; then extra seeds at each arm's
chosen rate, :mod:`.lr`); :class:`~smallinit.experiments.runner.JobRunner` runs them — finished runs are skipped,
so rerunning the same command resumes where it stopped; each claim's ``analyse`` then reads its runs through a
:class:`~smallinit.experiments.claims.context.ClaimContext`, and :mod:`.report` renders what the claims return.

Outputs: ``OUT/runs/`` and ``OUT/anchor/`` (run directories), ``OUT/compare/`` (cached token-level comparisons),
``OUT/claims.json``, ``OUT/report.md`` and ``OUT/index.html`` with PNG plots beside them, ``OUT/plan.json`` and
``OUT/timings.json``.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smallinit.core.errors import ConfigError, SmallinitError
from smallinit.core.io import atomic_write_json
from smallinit.experiments.claims import registry
from smallinit.experiments.claims.context import ClaimContext, anchor_name, make_result, run_name
from smallinit.experiments.claims.rules import INCONCLUSIVE, RULE, Verdict, seed_noise_floor
from smallinit.experiments.cost import (
    check_gflops,
    default_jobs,
    default_threads,
    fmt_seconds,
    measure_anchor_gflops,
    measure_gflops,
)
from smallinit.experiments.lr import plot_lr_sweep, select_anchor_lr, select_lr
from smallinit.experiments.plan import (
    Plan,
    anchor_config,
    check_corpus,
    check_corpus_path,
    corpus_note,
    describe_plan,
    ensure_corpus,
    lm_config,
    make_plan,
    phase2_jobs,
    phase_wall_seconds,
    plan_wall_seconds,
)
from smallinit.experiments.presets import PAPER, Preset, arm, get_preset
from smallinit.experiments.report import deciding_effect, write_report
from smallinit.experiments.runner import JobRunner
from smallinit.runs.rundir import read_config, read_json


class Reproduction:
    """One reproduction: plan, run (two phases), analyse, report. ``run()`` returns the claims list."""

    def __init__(
        self,
        preset: Preset,
        out: str | os.PathLike,
        corpus: str | os.PathLike | None = None,
        *,
        jobs: int | None = None,
        gflops: float | None = None,
        log: Callable[[str], None] | None = None,
        retry_failed: bool = False,
        inprocess: bool | None = None,
        hours: float | None = None,
    ):
        self.p = preset
        self.hours = hours
        self.out = Path(out)
        self.corpus_arg = corpus
        self.jobs = jobs or preset.jobs or default_jobs()
        self.inprocess = preset.inprocess if inprocess is None else inprocess
        self.gflops = gflops or preset.gflops
        self.crossover_gflops: float | None = None
        """Throughput of the crossover's model shape (None: ``gflops``)."""
        self.extra_lines: list[str] = []
        self.hours_used = 0.0
        self.anchor_gflops = preset.anchor_gflops
        self.log = log or (lambda s: print(s, flush=True))
        self.retry_failed = retry_failed
        self.timings: dict[str, float] = {}
        self.corpus_path: Path | None = None

    # -- set-up
    def _calibrate(self, corpus: Path | None) -> None:
        """Measure this machine's throughput for the time estimates (unless the preset or --gflops gives it)."""
        if self.gflops is None:
            # the main size's model (before the corpus exists, e.g. a dry run, at the size's own vocabulary)
            cfg = lm_config(self.p, arm(self.p.main_size, PAPER), self.p.lrs[0], 0, corpus or "")
            meta = (read_json(corpus / "meta.json") if corpus else None) or {}
            cfg.model.vocab_size = int(meta.get("vocab_size", cfg.model.vocab_size))
            self.gflops = measure_gflops(cfg, threads=default_threads(self.jobs))
            self.log(
                f"[reproduce] measured {self.gflops:.1f} GFLOP/s training the {self.p.main_size} model here in "
                f"{getattr(self.gflops, 'dtype', 'fp32')} (for the time estimates)"
            )
            xs = self.crossover_spec(corpus) if corpus else None
            if xs is not None:  # the crossover's own shape (a smaller model reaches fewer GFLOP/s)
                from smallinit.experiments.crossover import plan_jobs

                xcfg = copy.deepcopy(plan_jobs(xs, self.out)[0][0].config)
                meta = read_json(corpus / "meta.json") or {}
                xcfg.model.vocab_size = int(meta.get("vocab_size", xcfg.model.vocab_size))
                self.crossover_gflops = measure_gflops(xcfg, threads=default_threads(self.jobs))
                self.log(
                    f"[reproduce] measured {self.crossover_gflops:.1f} GFLOP/s training the crossover's model in "
                    f"{getattr(self.crossover_gflops, 'dtype', 'fp32')}"
                )
        if self.anchor_gflops is None and 9 in self.p.claims:
            cfg = anchor_config(self.p, 1.0, self.p.anchor_lrs[0], 0)
            self.anchor_gflops = measure_anchor_gflops(cfg, default_threads(self.jobs))

    def plan(self, corpus: Path) -> Plan:
        """Phase 1's runs, each with cores // min(jobs, runs) torch threads (fewer runs than jobs share the cores)."""
        plan = make_plan(self.p, self.out, corpus, self.gflops, self.anchor_gflops, self.jobs)
        if 0 < len(plan.phase1) < self.jobs:
            plan = make_plan(self.p, self.out, corpus, self.gflops, self.anchor_gflops, len(plan.phase1))
        return plan

    def describe_plan(self, plan: Plan) -> str:
        text = describe_plan(plan, self.jobs)
        xs = self.crossover_spec(self.corpus_path) if self.p.crossover else None
        if xs is None:
            return text
        from smallinit.experiments.crossover_plan import describe_crossovers

        g, jobs = self.crossover_gflops or self.gflops or 1.0, max(1, self.jobs)
        lines = describe_crossovers(self.p, xs, self.corpus_path or Path("data"), g, jobs)
        if self.extra_lines:
            lines += [f"further crossovers in {self.hours_used:g} hours (after claim 1's):", *self.extra_lines]
        return "\n".join([text, "", *lines])

    def crossover_spec(self, corpus: Path | None):
        """The preset's crossover as a :class:`~smallinit.experiments.crossover.CrossoverSpec` (None: none, or claim
        1 not run)."""
        if self.p.crossover is None or 1 not in self.p.claims:
            return None
        from smallinit.experiments.crossover_plan import spec_from_preset

        return spec_from_preset(self.p, corpus or Path("data"))

    def fit_hours(self, plan: Plan) -> Plan:
        """Fit the plan into H hours (``--hours``, or the preset's own ``hours`` when it has further crossovers) at
        the measured throughput, the other claims' runs first, and say what was chosen. Without further crossovers
        claim 1's budget D fills the hours; with them (``cpu-long``) D stays the preset's unless it alone is too
        long, and the further crossovers are added in the preset's order while they fit — a claim whose
        crossovers do not fit is not run. Returns the plan (made again when claims were dropped)."""
        from smallinit.experiments.crossover_plan import choose_extras, crossover_wall_seconds, tokens_for_seconds

        hours = self.hours or (self.p.hours if self.p.extra_crossovers else None)
        xs = self.crossover_spec(self.corpus_path)
        if xs is None or not hours:
            return plan
        self.hours_used = hours
        g, jobs = self.crossover_gflops or self.gflops, max(1, self.jobs)
        others = plan_wall_seconds(plan, jobs)
        left = hours * 3600 - others
        main = crossover_wall_seconds(xs, g, jobs)
        if self.p.extra_crossovers and main <= left:
            extras, self.extra_lines = choose_extras(self.p, self.corpus_path, left - main, g, jobs)
            dropped = sorted({xp.claim for xp in self.p.extra_crossovers} - {xp.claim for xp in extras})
            self.p.extra_crossovers = tuple(extras)
            self.p.claims = tuple(c for c in self.p.claims if c not in dropped)
            self.log(
                f"[reproduce] {hours:g} hours: claim 1's crossover ≈ {fmt_seconds(main)} at D = {xs.tokens:,}; "
                f"further crossovers for claims {', '.join(str(xp.claim) for xp in extras) or 'none'}"
                + (f"; claims {', '.join(map(str, dropped))} do not fit and are not run" if dropped else "")
            )
            return self.plan(self.corpus_path) if dropped else plan
        self.p.claims = tuple(c for c in self.p.claims if c not in {xp.claim for xp in self.p.extra_crossovers})
        self.p.extra_crossovers = ()
        tokens = tokens_for_seconds(xs, left, g, jobs)
        floor = int(xs.tokens / 16)
        if tokens < floor:
            raise ConfigError(
                f"--hours {hours:g}: the other claims' runs alone take ≈ {fmt_seconds(others)}; "
                f"the crossover needs ≥ {fmt_seconds(hours * 3600 - left)} more — raise --hours"
            )
        self.p.crossover.tokens = tokens
        self.log(
            f"[reproduce] {hours:g} hours: other runs ≈ {fmt_seconds(others)}; the crossover gets "
            f"≈ {fmt_seconds(left)} → D = {tokens:,} tokens per arm × seed"
        )
        return plan

    # -- the run
    def run(self, dry_run: bool = False, launcher: Any = None) -> list[dict[str, Any]] | None:
        """Plan, train (the crossovers, phase 1, phase 2), analyse, report; ``launcher``
        (:class:`~smallinit.experiments.launcher.Launcher`): every run and the analysis are cluster jobs."""
        t0 = time.time()
        if dry_run:
            corpus = (
                Path(self.corpus_arg)
                if self.corpus_arg
                else self.out.parent / "data" / self.p.corpus.get("name", "data")
            )
            prepared = (corpus / "meta.json").is_file()
            if prepared and (note := corpus_note(self.p, corpus)):
                self.log(note)
            self._make_plan(corpus, corpus if prepared else None)
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        corpus = ensure_corpus(self.p, self.corpus_arg, self.out, self.log)
        self.timings["prepare"] = time.time() - t0
        corpus_info = check_corpus(self.p, corpus)
        if note := corpus_note(self.p, corpus):
            self.log(note)
        plan = self._make_plan(corpus, corpus)
        atomic_write_json(
            self.out / "plan.json",
            {
                "preset": self.p.name,
                "corpus": corpus_info,
                "phase1": [j.name for j in plan.phase1],
                "phase2_count": plan.phase2_count,
            },
        )
        chosen, lr_tables = self._train(plan, corpus, launcher)
        if launcher is None:
            results = self.report(plan, chosen, lr_tables, corpus_info, t0)
        else:  # the analysis loads the models (token-level comparisons): a job where the runs ran
            results = launcher.call(
                self.report, plan, chosen, lr_tables, corpus_info, t0, name="analysis", log=self.log
            )
        self.log(claims_table_text(results))
        self.log(
            f"[reproduce] report: {self.out / 'report.md'} and {self.out / 'index.html'} "
            f"(this invocation {fmt_seconds(time.time() - t0)})"
        )
        return results

    def _make_plan(self, corpus: Path, calibrate_on: Path | None) -> Plan:
        """Calibrate (on ``calibrate_on``; None: no corpus yet), plan on ``corpus``, fit it to the hours, log it."""
        self._calibrate(calibrate_on)
        self.corpus_path = corpus
        plan = self.fit_hours(self.plan(corpus))
        self.log(self.describe_plan(plan))
        return plan

    def _train(self, plan: Plan, corpus: Path, launcher: Any) -> tuple[dict[str, float | None], dict[str, Any]]:
        """The crossovers, phase 1 (every arm at every rate), the choice of rates, phase 2 (extra seeds at the
        chosen rates); returns (the chosen rates, the learning-rate tables)."""
        n_total = len(plan.phase1) + plan.phase2_count
        t1 = time.time()
        xs = self.crossover_spec(corpus)
        if xs is not None:
            from smallinit.experiments.crossover_plan import run_crossovers

            g = self.crossover_gflops or self.gflops
            here = self.inprocess or None  # an in-process preset (tests): its crossovers too; else as the jobs say
            run_crossovers(self.p, xs, self.out, corpus, self.jobs, self.log, launcher, self.retry_failed, g, here)
            self.timings["crossover"] = time.time() - t1
        self.log(f"[reproduce] phase 1/2: {len(plan.phase1)} runs")
        later = phase_wall_seconds(plan.phase2_estimates, self.jobs)
        self._run_phase(plan.phase1, 0, n_total, launcher, later_seconds=later)
        chosen, lr_tables = self._choose_lrs(plan)
        phase2 = phase2_jobs(plan, self.out, chosen, corpus, self.jobs)
        if 0 < len(phase2) < self.jobs:  # fewer runs than job slots: they share all the cores
            phase2 = phase2_jobs(plan, self.out, chosen, corpus, len(phase2))
        if phase2:
            self.log(f"[reproduce] phase 2/2: {len(phase2)} runs (extra seeds at the chosen learning rates)")
            self._run_phase(phase2, len(plan.phase1), n_total, launcher)
        self.timings["training"] = time.time() - t1
        return chosen, lr_tables

    def _run_phase(self, jobs: list, index_offset: int, total: int, launcher: Any, later_seconds: float = 0.0) -> None:
        """One phase's jobs through a JobRunner, numbered from ``index_offset`` of ``total``."""
        JobRunner(
            jobs,
            self.jobs,
            inprocess=self.inprocess,
            retry_failed=self.retry_failed,
            log=self.log,
            title=f"reproduce {self.p.name}",
            index_offset=index_offset,
            total=total,
            later_seconds=later_seconds,
            launcher=launcher,
        ).run()

    def report(
        self,
        plan: Plan,
        chosen: dict[str, float | None],
        lr_tables: dict[str, dict[str, Any]],
        corpus_info: dict[str, Any],
        t0: float,
    ) -> list[dict[str, Any]]:
        """After every run: analyse each claim and write report.md, index.html, claims.json and timings.json."""
        t2 = time.time()
        self.log("[reproduce] analysing ...")
        results = analyse(self, plan, chosen)
        self.timings["analysis"] = time.time() - t2
        self.timings["this invocation"] = time.time() - t0
        history = (read_json(self.out / "timings.json") or {}).get("invocations", [])
        history.append({"time": time.time(), **self.timings})
        atomic_write_json(self.out / "timings.json", {"invocations": history})
        self.timings["all invocations"] = sum(h.get("this invocation", 0.0) for h in history)
        regime = regime_rows(self.out, plan, chosen)
        self.timings["sum of run wall times"] = sum(r.get("wall_time") or 0.0 for r in regime)
        lr_plot = plot_lr_sweep(self.out, "lr_sweep.png", lr_tables) if len(self.p.lrs) > 1 else None
        write_report(
            self.out,
            preset=self.p,
            claims=results,
            lr_tables=lr_tables,
            regime=regime,
            corpus=corpus_info,
            timings=self.timings,
            plan_text=self.describe_plan(plan),
            lr_plot=lr_plot,
        )
        return results

    def _choose_lrs(self, plan: Plan):
        """{arm key: chosen lr} and {arm key: the selection table} for every arm of the plan."""
        chosen: dict[str, float | None] = {}
        tables: dict[str, dict[str, Any]] = {}
        for a in plan.lm_arms:
            lr, rows = select_lr({lr: self.out / "runs" / run_name(a, lr, 0) for lr in self.p.lrs})
            chosen[a.key] = lr
            tables[a.key] = {"arm": a.describe(), "rows": rows, "chosen": lr}
        for a in plan.anchor_arms:
            lr, rows = select_anchor_lr(
                {lr: self.out / "anchor" / anchor_name(a.gamma, lr, 0) for lr in self.p.anchor_lrs}
            )
            chosen[a.key] = lr
            tables[a.key] = {"arm": a.describe(), "rows": rows, "chosen": lr}
        return chosen, tables


def analyse(rep: Reproduction, plan: Plan, chosen: dict[str, float | None]) -> list[dict[str, Any]]:
    """Every registered claim's result (not-run claims included), in order; also written to OUT/claims.json.
    A claim whose analysis raises is reported inconclusive with the error, the others go on."""
    out = []
    floor, floor_arms = noise_floor(rep.out, plan, chosen)
    x = read_json(rep.out / "crossover" / "crossover.json") if rep.p.crossover is not None else None
    xfloor = seed_noise_floor([ClaimContext.final_losses(x, a) for a in (x or {}).get("losses") or {}])
    for cid, mod in registry().items():
        if cid not in plan.arms:
            out.append(make_result(cid, mod.CLAIM, "", None, ran=False))
            continue
        ctx = ClaimContext(
            cid,
            mod.CLAIM,
            rep.out,
            rep.p,
            plan.arms[cid],
            chosen,
            plan.seeds,
            plan.costs,
            rep.log,
            noise_floor=floor,
            crossover_noise_floor=xfloor,
        )
        try:
            out.append(mod.analyse(ctx))
        except Exception as e:  # noqa: BLE001 - one broken analysis must not lose the whole report
            rep.log(f"[reproduce] claim {cid}: analysis failed: {type(e).__name__}: {e}")
            out.append(
                make_result(
                    cid, mod.CLAIM, "analysis failed", Verdict(INCONCLUSIVE, notes=[f"{type(e).__name__}: {e}"])
                )
            )
    atomic_write_json(
        rep.out / "claims.json",
        {
            "preset": rep.p.name,
            "rule": RULE,
            "claims": out,
            "noise_floor": {"nats": floor, "from": floor_arms},
            "crossover_noise_floor": xfloor,
        },
    )
    return out


def noise_floor(out: Path, plan: Plan, chosen: dict[str, float | None]) -> tuple[float | None, list[str]]:
    """The preset's seed-noise floor (:func:`~smallinit.experiments.claims.rules.seed_noise_floor`) from the final
    validation losses of every LM arm that finished ≥ 2 seeds at its chosen learning rate, and those arms' keys."""
    from smallinit.runs.rundir import collect_run, run_state

    groups, keys = [], []
    for a in plan.lm_arms:
        lr = chosen.get(a.key)
        if lr is None or plan.seeds.get(a.key, 1) < 2:
            continue
        dirs = [out / "runs" / run_name(a, lr, s) for s in range(plan.seeds[a.key])]
        losses = [collect_run(d).get("final_val_loss") for d in dirs if run_state(d) == "done"]
        losses = [x for x in losses if x is not None]
        if len(losses) >= 2:
            groups.append(losses)
            keys.append(a.key)
    return seed_noise_floor(groups), keys


def regime_rows(out: Path, plan: Plan, chosen: dict[str, float | None]) -> list[dict[str, Any]]:
    """Each reported LM run's width, depth, parameters, tokens and tokens per parameter."""
    rows = []
    for a in plan.lm_arms:
        lr = chosen.get(a.key)
        if lr is None:
            continue
        for s in range(plan.seeds[a.key]):
            rd = out / "runs" / run_name(a, lr, s)
            cfg = read_json(rd / "summary.json") or {}
            if not cfg.get("completed"):
                continue
            try:
                rc = read_config(rd)
            except Exception:  # noqa: BLE001 - a run without a readable config is left out of the table
                continue
            params = cfg.get("params") or 0
            rows.append(
                {
                    "run": rd.name,
                    "d_model": rc["model"]["d_model"],
                    "n_layers": rc["model"]["n_layers"],
                    "params": params,
                    "non_embedding_params": cfg.get("non_embedding_params"),
                    "tokens": cfg.get("tokens"),
                    "tokens_per_param": (cfg.get("tokens") or 0) / params if params else None,
                    "wall_time": cfg.get("wall_time"),
                }
            )
    return rows


def claims_table_text(results: list[dict[str, Any]]) -> str:
    """The plain-text claims table printed at the end of a reproduction."""
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


def reproduce(
    preset: str | Preset,
    out: str | os.PathLike,
    corpus: str | os.PathLike | None = None,
    *,
    seeds: int | None = None,
    jobs: int | None = None,
    dry_run: bool = False,
    gflops: float | None = None,
    log: Callable[[str], None] | None = None,
    retry_failed: bool = False,
    hours: float | None = None,
    launcher: Any = None,
):
    """Run (or resume, or with ``dry_run`` only print) a reproduction of a named preset (or a :class:`Preset`);
    returns the claims list (None for a dry run). ``hours``: size the crossover's budget to fit that many hours;
    ``launcher``: run it on a cluster (:class:`~smallinit.experiments.launcher.Launcher`)."""
    from smallinit.core.outputs import check_out_dir
    from smallinit.train.loop import RunLock

    for name, v in (("--seeds", seeds), ("--jobs", jobs)):
        if v is not None and v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    check_gflops(gflops)
    p = get_preset(preset, seeds)
    if hours is not None and not 0 < hours < math.inf:
        raise ConfigError(f"--hours must be a finite number > 0, got {hours}")
    check_corpus_path(p, corpus, Path(out), planning=dry_run)
    rep = Reproduction(p, out, corpus, jobs=jobs, gflops=gflops, log=log, retry_failed=retry_failed, hours=hours)
    # what the real run would refuse, the dry run refuses too (it writes nothing either way)
    check_out_dir(out, "reproduce", inputs=[corpus] if corpus else [], can_continue=True, verb="reproduce")
    if dry_run:
        return rep.run(dry_run)
    existed = Path(out).exists()
    empty = not existed or not any(Path(out).iterdir())
    Path(out).mkdir(parents=True, exist_ok=True)
    with RunLock(Path(out)):  # a second reproduce on the same folder is refused with the holder's pid
        try:
            return rep.run(dry_run, launcher)
        except SmallinitError:  # refused before any run (the corpus, the plan): nothing is left behind
            if empty and [f.name for f in Path(out).iterdir()] == [".lock"]:
                (Path(out) / ".lock").unlink()
                if not existed:
                    Path(out).rmdir()
            raise


__all__ = ["Reproduction", "analyse", "claims_table_text", "regime_rows", "reproduce"]
