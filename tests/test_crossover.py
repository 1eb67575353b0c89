"""The crossover: loss-vs-budget fits, the crossing budget, the loss-claim verdict, and cooldown branches."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import tiny_overrides
from scipy.optimize import brentq

from smallinit.analysis.crossing import (
    INCONCLUSIVE,
    NOT_REACHED,
    NOT_SUPPORTED,
    SUPPORTED,
    analyse_crossover,
    describe_crossing,
    four_fold_reference,
    loss_claim_verdict,
    seeds_to_resolve,
)
from smallinit.core.errors import ConfigError, RunDirError
from smallinit.core.stats import Interval, cluster_bootstrap_ci, paired_t_interval

D_MAX = 8e6
BUDGETS = [D_MAX / 16, D_MAX / 8, D_MAX / 4, D_MAX / 2, D_MAX]


def curves(fb, fv, seeds=3, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "base": {s: [fb(d) + rng.normal(0, noise) for d in BUDGETS] for s in range(seeds)},
        "var": {s: [fv(d) + rng.normal(0, noise) for d in BUDGETS] for s in range(seeds)},
    }


def true_crossing(fb, fv):
    return math.exp(brentq(lambda x: fb(math.exp(x)) - fv(math.exp(x)), math.log(1e3), math.log(1e13)))


@pytest.mark.parametrize(
    "fv,noise",
    [
        (lambda D: 1.9 + 200 * D**-0.4, 0.001),  # crosses inside the range
        (lambda D: 1.97 + 150 * D**-0.38, 0.0),
    ],
)  # 6.5× beyond D_max
def test_fit_recovers_a_known_crossing_within_10_percent(fv, noise):
    fb = lambda D: 2.0 + 30 * D**-0.3  # noqa: E731
    want = true_crossing(fb, fv)
    a = analyse_crossover(BUDGETS, curves(fb, fv, noise=noise), "base", "var", n_boot=60)
    assert a.crossing.status == "crosses"
    assert abs(a.crossing.D_star / want - 1) < 0.10, (a.crossing.D_star, want)
    assert a.crossing.lo <= a.crossing.D_star <= (a.crossing.hi or math.inf)
    assert not a.crossing.extrapolated  # both within 10× the largest budget


def test_a_noisy_extrapolated_crossing_is_covered_by_its_interval_and_flagged_beyond_10x():
    fb = lambda D: 2.0 + 30 * D**-0.3  # noqa: E731
    fv = lambda D: 1.97 + 150 * D**-0.38  # noqa: E731
    want = true_crossing(fb, fv)
    a = analyse_crossover(BUDGETS, curves(fb, fv, noise=0.001), "base", "var", n_boot=100)
    assert a.crossing.lo <= want <= a.crossing.hi
    far = analyse_crossover(BUDGETS, curves(fb, lambda D: 1.99 + 100 * D**-0.36), "base", "var", n_boot=20)
    assert far.crossing.status == "crosses" and far.crossing.extrapolated
    assert far.verdict == NOT_SUPPORTED and far.gap[-1].hi < 0  # behind at D_max: the fits' crossing decides nothing


def test_curves_that_never_cross_say_so():
    fb = lambda D: 2.0 + 30 * D**-0.3  # noqa: E731
    fv = lambda D: 2.1 + 30 * D**-0.3  # noqa: E731  (always 0.1 behind)
    a = analyse_crossover(BUDGETS, curves(fb, fv, noise=0.001), "base", "var", n_boot=60)
    assert a.crossing.status == "no crossing" and a.crossing.D_star is None
    assert a.gap_fit.status == "never crosses" and a.gap_fit.c_hi < 0
    assert "never cross" in a.answer
    assert a.verdict == NOT_SUPPORTED  # behind beyond noise at the (largest = judged) budget


def test_verdict_supported_when_the_variant_is_ahead_beyond_noise():
    fb = lambda D: 2.0 + 30 * D**-0.3  # noqa: E731
    a = analyse_crossover(BUDGETS, curves(fb, lambda D: fb(D) - 0.05, noise=0.002), "base", "var", n_boot=30)
    assert a.verdict == SUPPORTED and a.gap[-1].lo > 0


# ---- the declared budget, closing with noise, the gap fit (issue 34) --------------------------------------------

N_PARAMS = 213_568
README_GAP = lambda D: -0.396 / (1 + (D / 1.52e6) ** 1.29) ** 0.915  # noqa: E731  never crosses; README-shaped


def gap_curves(gap, budgets, seeds=5, noise=0.0, seed=0):
    """Both arms per seed: a baseline curve with its own seed offset, the variant = baseline − gap(D) + noise."""
    rng = np.random.default_rng(seed)
    base = {s: [2.0 + 0.3 * (d / 1e6) ** -0.5 + rng.normal(0, 0.02) for d in budgets] for s in range(seeds)}
    var = {s: [base[s][i] - gap(d) + rng.normal(0, noise) for i, d in enumerate(budgets)] for s in range(seeds)}
    return {"base": base, "var": var}


def test_a_never_crossing_gap_at_the_declared_budget_is_not_supported():
    """(a) G → 0 from below, never crossing; 5 seeds; D_max = the declared 75 tokens/param; the gap's interval lies
    below 0 there → *not supported*, although the gap is closing (closing does not decide the verdict)."""
    D = [16e6 / 16, 16e6 / 8, 16e6 / 4, 16e6 / 2, 16e6]
    a = analyse_crossover(
        D,
        gap_curves(README_GAP, D, noise=0.004),
        "base",
        "var",
        non_embedding_params=N_PARAMS,
        enough_tokens_per_param=16e6 / N_PARAMS,
        n_boot=100,
    )
    assert a.reached and a.judged == 4 and a.gap[4].hi < 0
    assert a.verdict == NOT_SUPPORTED
    assert a.gap_change.lo > 0 and "closing" in a.answer  # closing, and said so
    assert a.gap_fit.status != "crosses"  # and no confident crossing


@pytest.mark.parametrize("noise", [0.0, 0.012])
@pytest.mark.parametrize("d_max", [8e6, 16e6, 32e6])
def test_the_readme_shaped_never_crossing_curve_gives_no_confident_crossing(noise, d_max):
    """(b) The smooth gap that matches the README's six seed means and tends to 0 from below: the per-arm fits
    predicted D* ≈ 2× D_max from every data set; the gap fit must not report a D* (noise-free and with the README's
    seed noise), wherever the data stop."""
    D = [d_max / 16, d_max / 8, d_max / 4, d_max / 2, d_max]
    a = analyse_crossover(
        D, gap_curves(README_GAP, D, noise=noise, seed=3), "base", "var", non_embedding_params=N_PARAMS, n_boot=100
    )
    assert a.gap_fit.status in ("cannot tell", "never crosses"), a.answer
    assert a.gap_fit.D_star is None
    assert "D* ≈" not in a.answer.split("; ")[-1]


def test_a_true_crossing_at_a_third_of_d_max_is_supported_and_located():
    """(c) G(D) = c − a·D^(−b) crossing at D_max / 3, 5 seeds with noise: *supported* at the declared budget and the
    D* interval covers the truth."""
    d_max, c, b = 16e6, 0.02, 0.6
    truth = d_max / 3
    gap = lambda D: c - c * (truth / D) ** b  # noqa: E731  zero at D = truth
    D = [d_max / 16, d_max / 8, d_max / 4, d_max / 2, d_max]
    for seed in range(3):
        a = analyse_crossover(
            D,
            gap_curves(gap, D, noise=0.003, seed=seed),
            "base",
            "var",
            non_embedding_params=N_PARAMS,
            enough_tokens_per_param=75,
            n_boot=150,
        )
        assert a.verdict == SUPPORTED, a.reason
        f = a.gap_fit
        assert f.status == "crosses" and f.D_lo <= truth <= (f.D_hi or math.inf), (f.D_lo, truth, f.D_hi)
        assert "predicts a crossing" in a.answer


def test_two_seeds_at_a_small_true_gap_are_inconclusive_and_say_how_many_seeds_would_resolve_it():
    """(d) +0.03 nats with 0.017 spread over 2 seeds: t(1) = 12.7 makes the interval straddle 0 → inconclusive, with
    the number of seeds whose interval would exclude 0 at that spread (4: t(3)·0.017/2 = 0.027 < 0.03)."""
    D = [1e6, 2e6, 4e6]
    losses = {"base": {0: [2.0, 1.9, 1.818], 1: [2.0, 1.9, 1.842]}, "var": {0: [2.0, 1.9, 1.8], 1: [2.0, 1.9, 1.8]}}
    a = analyse_crossover(D, losses, "base", "var", n_boot=10)
    assert a.gap[-1].value == pytest.approx(0.03) and a.gap[-1].lo < 0 < a.gap[-1].hi
    assert a.verdict == INCONCLUSIVE
    assert seeds_to_resolve([0.018, 0.042]) == 4
    assert "≈ 4 seeds would resolve it" in a.reason
    assert seeds_to_resolve([0.01, -0.01]) is None  # a zero mean: no number of seeds


def test_not_reached_only_below_the_declared_budget():
    """The same gap interval below 0: *not supported* at the declared budget, *inconclusive — not reached* when the
    largest budget is below it (a short run never says "not supported"), judged at the declared budget when the
    budgets go beyond it."""
    D = [1e6, 2e6, 4e6, 8e6, 16e6]
    data = gap_curves(lambda d: -0.05, D, noise=0.003)
    kw = dict(non_embedding_params=N_PARAMS, n_boot=10)
    assert (
        analyse_crossover(D, data, "base", "var", enough_tokens_per_param=16e6 / N_PARAMS, **kw).verdict
        == NOT_SUPPORTED
    )
    short = analyse_crossover(D, data, "base", "var", enough_tokens_per_param=2 * 16e6 / N_PARAMS, **kw)
    assert short.verdict == NOT_REACHED and not short.reached
    mid = analyse_crossover(D, data, "base", "var", enough_tokens_per_param=4e6 / N_PARAMS, **kw)
    assert mid.judged == 2 and mid.verdict == NOT_SUPPORTED and "declared budget D = 4e+06" in mid.answer
    # the verdict reads the judged budget's interval, with one seed the floor
    one = Interval(0.2, None, None, "one seed", 1)
    assert loss_claim_verdict(one, 1, None)[0] == INCONCLUSIVE
    assert loss_claim_verdict(one, 1, 0.05)[0] == SUPPORTED
    assert loss_claim_verdict(Interval(-0.2, None, None, "one seed", 1), 1, 0.05)[0] == NOT_SUPPORTED
    assert loss_claim_verdict(one, 1, 0.5)[0] == INCONCLUSIVE
    assert loss_claim_verdict(Interval(-0.2, -0.3, -0.1, "t", 3), 3, reached=False)[0] == NOT_REACHED


def test_the_four_fold_reference_is_a_true_four_fold_with_budgets_rounded_to_steps():
    """(e) Budgets rounded to whole steps (the d128 run's 8M: 7,999,488 with 1,998,848 and 3,998,… below): the
    reference of "over 4×" is the budget nearest D/4 by ratio — never D/2 (searchsorted(D, D/4 − 1e-9) picked D/2
    when D/4 was rounded up by a step) — and none when no budget lies within 10% of D/4."""
    D = [499_712, 999_424, 2_002_944, 4_001_792, 7_999_488]  # 2,002,944 > 7,999,488 / 4 by one step
    assert four_fold_reference(D, 4) == 2
    assert D[4] / D[four_fold_reference(D, 4)] == pytest.approx(4.0, rel=0.01)
    assert four_fold_reference([1e6, 2e6, 4e6], 2) == 0
    assert four_fold_reference([2e6, 4e6], 1) is None  # a 2× span is not called 4×
    a = analyse_crossover([2e6, 4e6], gap_curves(lambda d: -0.1, [2e6, 4e6]), "base", "var", n_boot=5)
    assert a.gap_change.value is None and "no budget at a true 4×" in a.answer


def test_closing_needs_its_interval_above_zero():
    """A gap that rises by less than its seed noise is "not closing beyond noise"; a steady rise is closing."""
    D = [1e6, 2e6, 4e6, 8e6, 16e6]
    flat = analyse_crossover(D, gap_curves(lambda d: -0.05, D, noise=0.01, seed=5), "base", "var", n_boot=5)
    assert flat.gap_change.lo < 0 < flat.gap_change.hi and "not closing beyond noise" in flat.answer
    rising = analyse_crossover(D, gap_curves(README_GAP, D, noise=0.002), "base", "var", n_boot=5)
    assert rising.gap_change.lo > 0 and ": closing" in rising.answer


def test_paired_t_interval_is_the_textbook_one():
    iv = paired_t_interval([0.10, 0.14])
    # mean 0.12, sd 0.02828, t(1, .975) = 12.706: half-width 12.706 * 0.02828 / sqrt 2 = 0.2541
    assert iv.value == pytest.approx(0.12)
    assert iv.hi - iv.value == pytest.approx(12.7062 * 0.028284 / math.sqrt(2), rel=1e-3)
    # ≈ 4× wider than the old "range over seeds" half-width (0.04 → here 0.254: the old rule said "supported")
    assert iv.lo < 0 < iv.hi
    assert paired_t_interval([0.3]).lo is None


def test_cluster_bootstrap_resamples_windows_not_tokens():
    rng = np.random.default_rng(0)
    win = np.repeat(np.arange(20), 50)
    shared = rng.normal(0, 1, 20)[win]  # tokens of a window share its offset: strong within-window correlation
    vals = shared + rng.normal(0, 0.1, win.size)
    by_window = cluster_bootstrap_ci(vals, win, n_boot=500)
    by_token = cluster_bootstrap_ci(vals, np.arange(win.size), n_boot=500)
    # treating tokens as independent understates the uncertainty several-fold
    assert (by_window.hi - by_window.lo) > 4 * (by_token.hi - by_token.lo)


# ---- cooldown branches and resume (real training on the tiny corpus) ------------------------------------


def _spec(token_dir, **kw):
    from smallinit.experiments.crossover import CrossoverSpec

    ov = tiny_overrides(token_dir, **{"train.eval_every": 1000, "train.ckpt_every": 1000})
    return CrossoverSpec(
        arms={"base": ["model.gamma=0.5"], "small": ["model.gamma=1.0"]},
        baseline="base",
        tokens=4 * 32 * 40,
        base="tiny",
        overrides=ov,
        seeds=[0],
        fractions=[0.25, 0.5, 1.0],
        **kw,
    )


def _losses(run_dir):
    return [r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def test_a_cooldown_branch_equals_wsd_from_the_start(token_dir, tmp_path):
    import copy

    from smallinit.experiments.crossover import plan_jobs
    from smallinit.experiments.crossover_runs import run_job
    from smallinit.train.loop import train

    spec = _spec(token_dir)
    trunks, branches, budgets = plan_jobs(spec, tmp_path / "x")
    assert [b.steps for b in budgets] == [10, 20, 40] and [b.start for b in budgets] == [8, 16, 32]
    trunk = next(j for j in trunks if j.arm == "small")
    branch = next(j for j in branches if j.arm == "small" and j.start == 16)
    assert run_job(trunk)[0] == "done" and run_job(branch)[0] == "done"
    assert branch.after == (trunk.name,) and branch.branch_from == (trunk.run_dir, 16)
    direct = copy.deepcopy(branch.config)  # WSD to 20 steps, trained from step 0 in one go (a typed RunConfig)
    train(direct, tmp_path / "direct")
    assert _losses(branch.run_dir) == _losses(tmp_path / "direct")  # bit-identical
    got = json.loads((branch.run_dir / "summary.json").read_text())["final_val_loss"]
    assert got == json.loads((tmp_path / "direct" / "summary.json").read_text())["final_val_loss"]


def test_rerun_after_a_kill_mid_branch_skips_finished_work(token_dir, tmp_path):
    from smallinit.experiments.crossover import run_crossover
    from smallinit.runs.checkpoint import list_checkpoints

    out = tmp_path / "x"
    logs: list[str] = []
    res = run_crossover(_spec(token_dir), out, log=logs.append, n_boot=20)
    assert sum("done" in l for l in logs) == 2 + 6
    assert set(res["analyses"]) == {"small"} and len(res["analyses"]["small"]["gap"]) == 3
    assert (out / "crossover.md").read_text().startswith("# Crossover")
    assert (out / "crossover.png").stat().st_size > 1000
    # a kill in the middle of one branch: its summary not yet written, its last checkpoint mid-way
    killed = out / "runs" / "small" / "seed0" / "D5120"
    (killed / "summary.json").unlink()
    finished = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed0/*/summary.json")}
    assert list_checkpoints(killed)
    logs.clear()
    run_crossover(_spec(token_dir), out, log=logs.append, n_boot=20)
    assert any("7/8 already finished" in l for l in logs) and sum(" done " in l for l in logs) == 1
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # finished runs untouched
    assert json.loads((killed / "summary.json").read_text())["completed"]


def test_out_dir_with_another_spec_or_foreign_files_is_refused(token_dir, tmp_path):
    from smallinit.core.errors import ConfigError, RunDirError
    from smallinit.experiments.crossover import run_crossover

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(RunDirError, match="not a crossover"):
        run_crossover(_spec(token_dir), foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    spec = _spec(token_dir)
    spec.baseline = "nope"
    with pytest.raises(ConfigError, match="baseline"):
        run_crossover(spec, tmp_path / "new")
    assert not (tmp_path / "new").exists()  # a failed check leaves no folder behind


def test_adding_an_arm_continues_but_changing_one_is_refused(token_dir, tmp_path):
    from smallinit.core.errors import RunDirError
    from smallinit.core.io import atomic_write_json
    from smallinit.experiments.crossover import check_output

    out = tmp_path / "x"
    out.mkdir()
    spec = _spec(token_dir)
    atomic_write_json(out / "crossover.spec.json", spec.to_dict())
    more = _spec(token_dir)
    more.arms["gate-only"] = ["model.gamma=0.5", "model.gate=elementwise"]
    check_output(out, more)  # adds an arm: accepted
    changed = _spec(token_dir)
    changed.arms["small"] = ["model.gamma=1.25"]
    with pytest.raises(RunDirError, match="arm small"):
        check_output(out, changed)
    other_cooldown = _spec(token_dir, cooldown=0.3)
    with pytest.raises(RunDirError, match="cooldown"):
        check_output(out, other_cooldown)
    other_base = _spec(token_dir)
    other_base.overrides = other_base.overrides + ["optim.weight_decay=0.0"]
    with pytest.raises(RunDirError, match="overrides"):
        check_output(out, other_base)


def test_a_larger_budget_extends_the_trunks_and_reuses_every_finished_run(token_dir, tmp_path):
    """D → 2D with budgets 1/8 … 1 of the new D: the old budgets D/4 … D are the same step counts, so their
    branches are reused, the trunks continue from their last step, and only the new budget 2D trains a branch."""
    from smallinit.experiments.crossover import run_crossover

    out = tmp_path / "x"
    run_crossover(_spec(token_dir), out, log=lambda s: None, n_boot=10)  # budgets 1280, 2560, 5120 tokens
    trunk = out / "runs" / "small" / "seed0" / "trunk"
    old = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed0/D*/summary.json")}
    longer = _spec(token_dir)
    longer.tokens *= 2
    longer.fractions = [0.125, 0.25, 0.5, 1.0]
    logs: list[str] = []
    res = run_crossover(longer, out, log=logs.append, n_boot=10)
    assert {p: p.stat().st_mtime_ns for p in old} == old  # the old budgets' branches untouched
    assert json.loads((trunk / "summary.json").read_text())["step"] == 64  # the trunk went on to 0.8 · 80 steps
    assert (out / "runs" / "small" / "seed0" / "D10240" / "summary.json").is_file()
    assert [b["tokens"] for b in res["budgets"]] == [1280, 2560, 5120, 10240]
    assert any("6/10 already finished" in l for l in logs) and sum(" done " in l for l in logs) == 2 * 2
    assert sum(" start " in l and "trunk (resuming from step 32)" in l for l in logs) == 2  # continued, not redone
    other = _spec(token_dir)
    other.tokens *= 2
    other.fractions = [0.3, 1.0]  # would start from trunk steps that kept no checkpoint
    with pytest.raises(RunDirError, match="kept no checkpoint"):
        run_crossover(other, out, log=lambda s: None)


def test_each_arm_gets_its_tuned_rate_and_a_winning_edge_extends_the_grid(token_dir, tmp_path):
    """Rates far too small for 10 steps: the larger edge wins, so the grid grows upward (at most tune_extend times);
    each arm's trunk and branches then train at the arg-min rate, and a rerun reuses every tuning run."""
    from smallinit.experiments.crossover import run_crossover
    from smallinit.experiments.crossover_plan import training_seconds
    from smallinit.runs.rundir import read_config

    spec = _spec(token_dir, lrs=[1e-5, 3e-5], tune_fraction=0.25, tune_extend=2)
    assert sum(" tune " in line for line in training_seconds(spec, 1.0)[1]) == 4  # the dry-run plan shows them
    out = tmp_path / "x"
    res = run_crossover(spec, out, log=lambda s: None, n_boot=10)
    for arm in ("base", "small"):
        t = res["tuning"][arm]
        tried = sorted(float(r) for r in t["losses"])
        assert tried[:2] == [1e-5, 3e-5] and 3 <= len(tried) <= 4
        assert tried[2] == pytest.approx(9e-5, rel=1e-3)  # one grid step (×3) past the winning edge
        losses = {float(r): v for r, v in t["losses"].items()}
        assert t["chosen"] == min(losses, key=losses.get) and t["chosen"] > 3e-5
        for run in ("trunk", "D5120"):
            assert read_config(out / "runs" / arm / "seed0" / run)["optim"]["lr"] == t["chosen"]
        cfg = read_config(out / "runs" / arm / "tune" / "lr1e-05")
        assert cfg["train"]["max_steps"] == 10 and cfg["optim"]["schedule"] == "wsd"
    # (f) no reported seed, no validation batch: the tuning runs train on their own seed and are judged on tune_loss,
    # the batches after the val_batches behind every reported loss (the same grid for every arm)
    from smallinit.experiments.crossover import TUNE_SEED
    from smallinit.runs.rundir import collect_run

    assert TUNE_SEED not in spec.seeds
    assert res["tuning"]["base"]["losses"].keys() == res["tuning"]["small"]["losses"].keys()
    for arm in ("base", "small"):
        assert (out / "runs" / arm / "tune" / "jobs" / "lr1e-05.log").is_file()  # the runner's logs, beside the runs
        for d in (out / "runs" / arm / "tune").iterdir():
            if d.is_dir() and d.name != "jobs":
                cfg = read_config(d)
                assert cfg["train"]["seed"] == TUNE_SEED
                assert cfg["data"]["tune_batches"] >= 1
                run = collect_run(d)
                assert res["tuning"][arm]["losses"][d.name[2:]] == run["final_tune_loss"] != run["final_val_loss"]
    assert "Learning rate per arm" in (out / "crossover.md").read_text()
    logs: list[str] = []
    run_crossover(spec, out, log=logs.append, n_boot=10)
    assert any("already finished" in line for line in logs) and not any(" start " in line for line in logs)


def _fake_runs(monkeypatch, outcome):
    """The runner's in-process call replaced: ``outcome(run_dir name)`` is None (the run is done), an exception to
    raise, or a callable; returns the names in the order they started."""
    from smallinit.experiments import runner

    started = []

    def fake(job, resume=False):
        started.append(job.run_dir.name)
        what = outcome(job.run_dir.name)
        if isinstance(what, BaseException):
            raise what
        job.run_dir.mkdir(parents=True, exist_ok=True)
        (job.run_dir / "summary.json").write_text(json.dumps({"completed": True, "step": job.total_steps}))

    monkeypatch.setattr(runner, "run_job", fake)
    return started


def _job(tmp_path, kind, name, trunk=None, train=None):
    from smallinit.config import RunConfig
    from smallinit.experiments.crossover_runs import crossover_job

    cfg = RunConfig()
    for k, v in (train or {}).items():
        setattr(cfg.train, k, v)
    return crossover_job(kind, "a", 0, tmp_path / "runs" / "a" / "seed0" / name, cfg, trunk, 1 if trunk else 0)


def test_an_interrupted_run_stops_the_batch(monkeypatch, tmp_path):
    """Ctrl-C or SIGTERM to one run: it checkpoints and reports "interrupted"; the batch raises Interrupted and
    starts nothing more (before, the pool went on with the next jobs and the command never stopped)."""
    import signal

    from smallinit.core.errors import Interrupted
    from smallinit.experiments.crossover_runs import execute

    stop = Interrupted("interrupted by SIGINT at step 3: checkpoint saved", signal.SIGINT, 3, None)
    started = _fake_runs(monkeypatch, lambda name: stop if name == "b" else None)
    jobs = [_job(tmp_path, "trunk", n) for n in ("a", "b", "c")]
    with pytest.raises(Interrupted, match="rerun the same command"):
        execute(jobs, 1, log=lambda s: None)
    assert started == ["a", "b"]
    assert not (jobs[1].run_dir / "failed.json").exists()  # interrupted is never failed


def test_a_batch_of_fewer_runs_than_cores_shares_all_the_cores(monkeypatch, tmp_path):
    """Each run's torch threads = usable cores // the runs a batch trains at once: two trunks on 16 cores get 8 each
    (before, `reproduce` gave every run cores // jobs = 1 thread and left 14 cores idle), eight branches 2 each;
    finished runs do not count; a count given or set in the run's config is kept."""
    from smallinit.experiments import cost
    from smallinit.experiments.crossover_runs import assign_threads

    monkeypatch.setattr(cost, "usable_cores", lambda: 16)

    def batch(n: int, train: dict | None = None) -> list:
        return [_job(tmp_path, "branch", f"r{i}", train=train) for i in range(n)]

    def threads(jobs: list) -> list[int]:
        return [j.config.train.threads for j in jobs]

    for n, workers, want in ((2, 16, 8), (8, 16, 2), (8, 4, 4), (32, 16, 1), (3, 16, 5), (1, 16, 0)):
        jobs = batch(n)
        assign_threads(jobs, workers)
        assert threads(jobs) == [want] * n, (n, workers)
    for j in batch(8)[:6]:  # six of eight runs finished: the two left share the cores
        j.run_dir.mkdir(parents=True)
        (j.run_dir / "summary.json").write_text(json.dumps({"completed": True}))
    jobs = batch(8)
    assign_threads(jobs, 16)
    assert threads(jobs) == [8] * 8
    jobs = batch(2)
    assign_threads(jobs, 16, threads=3)
    assert threads(jobs) == [3, 3]
    jobs = batch(2, {"threads": 5})
    assign_threads(jobs, 16)
    assert threads(jobs) == [5, 5]


def test_a_report_with_no_finished_budget_still_renders(tmp_path):
    from smallinit.experiments.crossover_report import crossover_figure, crossover_markdown

    result = {
        "spec": {
            "baseline": "base",
            "arms": {"base": [], "var": []},
            "seeds": [0],
            "base": "tiny",
            "overrides": [],
            "cooldown": 0.2,
            "fractions": [0.5, 1.0],
        },
        "budgets": [{"tokens": 1000, "steps": 10, "start": 8}, {"tokens": 2000, "steps": 20, "start": 16}],
        "non_embedding_params": 100,
        "tokens_per_param": [10.0, 20.0],
        "losses": {"base": {"0": [None, None]}, "var": {"0": [None, None]}},
        "analyses": {},
    }
    assert crossover_figure(result, tmp_path / "x.png").stat().st_size > 0
    assert "| 1,000 |" in crossover_markdown(result)


def test_a_fit_with_its_floor_at_zero_predicts_no_crossing():
    """A variant curve fitted with E = 0 (no loss floor: four budgets, three parameters, as in the demo) must meet
    any baseline with E > 0 somewhere; that meeting is not a prediction. The same curves with an interior fit keep
    their predicted crossing. Neither decides the verdict."""
    fb = lambda D: 2.0 + 30 * D**-0.3  # noqa: E731
    fv = lambda D: 60 * D**-0.2  # noqa: E731  behind at D_max, no floor: the fits must meet (at ≈ 1.5e7)
    a = analyse_crossover(BUDGETS, curves(fb, fv, noise=0.0), "base", "var", n_boot=20)
    assert a.fits["var"]["E"] < 1e-9
    assert a.crossing.degenerate and "var's fit has E = 0" in a.crossing.degenerate
    assert "not a prediction" in describe_crossing(a.crossing)
    assert a.verdict == NOT_SUPPORTED  # behind at the judged budget: the per-arm fit cannot rescue it
    fv2 = lambda D: 1.97 + 150 * D**-0.38  # noqa: E731  an interior fit that crosses
    b = analyse_crossover(BUDGETS, curves(fb, fv2, noise=0.0), "base", "var", n_boot=20)
    assert b.crossing.degenerate is None and b.crossing.status == "crosses"


def test_keys_the_crossover_sets_are_refused_in_arms_and_overrides():
    """`b:train.seed=5` was accepted and silently replaced by each --seeds value (the spec file said otherwise)."""
    from smallinit.experiments.crossover import CrossoverSpec

    for bad in (["train.seed=5"], ["train.max_steps=3"], ["optim.schedule=cosine"]):
        spec = CrossoverSpec(arms={"a": ["model.gamma=1"], "b": bad}, baseline="a", tokens=1_000_000, base="tiny")
        with pytest.raises(ConfigError, match="is set by the crossover itself"):
            spec.validate()


def test_a_branch_waits_only_for_its_own_trunk_and_is_blocked_when_it_failed(monkeypatch, tmp_path):
    """A trunk's branches are runnable as soon as that trunk is done (issue 31: a core idled while the other arm's
    trunk finished); the branches of a failed trunk are not run ("blocked"), the others are; the failed trunk has
    its failed.json and is not run again by a rerun unless asked (it used to count as "partial": retried forever)."""
    from smallinit.core.errors import RunDirError
    from smallinit.experiments.crossover_runs import execute

    started = _fake_runs(monkeypatch, lambda name: RunDirError("boom") if name == "tA" else None)
    tA, tB = _job(tmp_path, "trunk", "tA"), _job(tmp_path, "trunk", "tB")
    bA, bB = _job(tmp_path, "branch", "bA", tA), _job(tmp_path, "branch", "bB", tB)
    res = execute([tA, tB, bA, bB], 1, log=lambda s: None)
    assert started == ["tA", "tB", "bB"]
    assert res[bA.run_dir][0] == "blocked" and res[bB.run_dir][0] == "done" and res[tA.run_dir] == ("failed", "boom")
    assert json.loads((tA.run_dir / "failed.json").read_text())["error"] == "boom"
    assert "error: boom" in tA.log_path.read_text() and tA.log_path.parent.name == "jobs"
    started.clear()
    res = execute([tA, tB, bA, bB], 1, log=lambda s: None)
    assert started == [] and res[tA.run_dir][0] == "failed" and res[bA.run_dir][0] == "blocked"
    res = execute([tA, tB, bA, bB], 1, log=lambda s: None, retry_failed=True)
    assert started == ["tA"]  # it fails again: its branch is blocked again
    assert res[bA.run_dir][0] == "blocked"


def test_the_crossover_command_passes_retry_failed_to_the_run(monkeypatch, tmp_path, capsys):
    """`smallinit crossover --retry-failed` reaches run_crossover (and so the JobRunner) as retry_failed=True;
    without the flag failed runs stay failed (retry_failed=False)."""
    import smallinit.experiments.crossover as crossover_mod
    from smallinit.cli import main as cli

    seen = []

    def fake_run(spec, out, **kw):
        seen.append(kw["retry_failed"])
        return {"analyses": {}}

    monkeypatch.setattr(crossover_mod, "run_crossover", fake_run)
    argv = ["crossover", "a:model.gamma=0.5", "b:model.gamma=1.0", "--tokens", "1M", "--out", str(tmp_path / "x")]
    assert cli(argv) == 0 and cli([*argv, "--retry-failed"]) == 0
    assert seen == [False, True]
    capsys.readouterr()


def test_two_seeds_never_predict_a_crossing_either_way():
    """The gap fit needs ≥ 3 seeds for a D* or a "never": the same curve with 2 seeds cannot tell."""
    d_max, truth = 16e6, 16e6 / 3
    gap = lambda D: 0.02 - 0.02 * (truth / D) ** 0.6  # noqa: E731
    D = [d_max / 16, d_max / 8, d_max / 4, d_max / 2, d_max]
    a = analyse_crossover(D, gap_curves(gap, D, seeds=2, noise=0.003), "base", "var", n_boot=50)
    assert a.gap_fit.status == "cannot tell" and "fewer than 3 seeds" in a.answer


# ---- issue 32 (C, J): arms on another tokenizer; equal settings written differently; a key twice in one arm ------


def test_arms_on_other_data_are_refused_before_any_folder_run_and_dry_run(token_dir, tmp_path, capsys):
    """Issue #43 (6): an arm with its own data.path — same tokenizer, other text — printed *supported, G = +2.47*, each
    arm scored on its own validation split. Any data.* difference between arms (path, BOS, validation or tune
    batches) is now refused with one error line before any folder is made, by the run and by its dry run; data of
    another tokenizer is refused as well. The same data written per arm is fine."""
    from smallinit.cli import main as cli
    from smallinit.core.errors import ConfigError, DataError
    from smallinit.data import prepare_corpus
    from smallinit.experiments.crossover import plan_jobs, run_crossover
    from smallinit.experiments.crossover_checks import check_data, check_same_data

    text = tmp_path / "a.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    bytes_dir = tmp_path / "bytes"
    prepare_corpus([str(text)], bytes_dir, tokenizer="byte", val_fraction=0.1, progress=False)
    spec = _spec(token_dir)
    out = tmp_path / "x"
    for other in (f"data.path={bytes_dir}", "data.bos=true", "data.val_batches=3"):
        spec.arms["small"] = ["model.gamma=1.0", other]
        with pytest.raises(ConfigError, match=f"differ in data.{other.split('=')[0][5:]}"):
            run_crossover(spec, out, log=lambda s: None)
        assert not out.exists()
    spec.arms["small"] = ["model.gamma=1.0"]
    with pytest.raises(DataError, match="different tokenizers"):  # the tokenizer check stands behind it
        check_data([*plan_jobs(spec, out)[0], *plan_jobs(_spec(bytes_dir), out)[0]])
    capsys.readouterr()
    over = [x for o in tiny_overrides(token_dir) if not o.startswith("train.max_steps=") for x in ("--set", o)]
    for dry in ([], ["--dry-run"]):
        argv = ["crossover", "base:model.gamma=0.5", f"small:model.gamma=1.0,data.path={bytes_dir}", "--config"]
        argv += ["tiny", *over, "--tokens", "5120", "--budgets", "1/4,1/2,1", "--out", str(out), *dry]
        assert cli(argv) == 2
        lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(bytes_dir) in lines[0], lines
        assert not out.exists()
    spec.arms["small"] = ["model.gamma=1.0", f"data.path={token_dir}"]  # the same data, written per arm: fine
    assert check_same_data(plan_jobs(spec, out)[0])["path"] == str(token_dir.resolve())


def test_equal_settings_written_differently_continue_and_a_key_twice_in_an_arm_is_refused(
    token_dir, tmp_path, monkeypatch, capsys
):
    """model.gamma=1 vs 1.0, a reordered --set and a relative vs absolute data.path are the same crossover (they
    used to be refused as "a changed crossover"); model.gamma=0.5,model.gamma=1.0 in one arm is one error line."""
    from smallinit.cli import main as cli
    from smallinit.commands.crossover import parse_arm
    from smallinit.core.io import atomic_write_json
    from smallinit.experiments.crossover import CrossoverSpec, check_output
    from smallinit.runs.rundir import config_mismatch

    monkeypatch.chdir(token_dir.parent)
    rel = tiny_overrides(token_dir.relative_to(token_dir.parent))  # data.path=stdlib (relative)
    first = CrossoverSpec(
        arms={"base": ["model.gamma=0.5"], "small": ["model.gamma=1", "model.gate=none"]},
        baseline="base",
        tokens=5120,
        base="tiny",
        overrides=rel,
        lrs=[0.001, 0.01],
    )
    out = tmp_path / "x"
    out.mkdir()
    atomic_write_json(out / "crossover.spec.json", first.to_dict())
    same = CrossoverSpec(
        arms={"base": ["model.gamma=0.5"], "small": ["model.gate=none", "model.gamma=1.0"]},
        baseline="base",
        tokens=5120,
        base="tiny",
        overrides=list(reversed(tiny_overrides(token_dir))),
        lrs=[1e-2, 1e-3],
    )
    check_output(out, same)  # accepted: the same settings
    changed = CrossoverSpec(
        arms={"base": ["model.gamma=0.5"], "small": ["model.gamma=1.25", "model.gate=none"]},
        baseline="base",
        tokens=5120,
        base="tiny",
        overrides=rel,
        lrs=[0.001, 0.01],
    )
    with pytest.raises(RunDirError, match="arm small"):
        check_output(out, changed)  # a real change is still refused
    # a trunk saved with the relative path is the run the absolute one wants (crossover._check_reuse)
    a = {"data": {"path": "stdlib"}, "model": {"gamma": 1.0}}
    assert config_mismatch(a, {"data": {"path": str(token_dir)}, "model": {"gamma": 1.0}}) == {}
    assert "data.path" in config_mismatch(a, {"data": {"path": str(tmp_path)}, "model": {"gamma": 1.0}})
    # one key twice inside one arm
    with pytest.raises(ConfigError, match="model.gamma is set twice"):
        parse_arm("small:model.gamma=0.5,model.gamma=1.0")
    capsys.readouterr()
    assert (
        cli(
            [
                "crossover",
                "base:model.gamma=0.5",
                "small:model.gamma=0.5,model.gamma=1.0",
                "--tokens",
                "1M",
                "--out",
                str(tmp_path / "y"),
            ]
        )
        == 2
    )
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and "model.gamma is set twice" in lines[0], lines
    assert not (tmp_path / "y").exists()
