"""Issue 18: verdict rules that could pass by construction, each shown failing under a copy of its OLD rule on
constructed data where the claim is false, and giving the right verdict under the new rule (claims 2, 6, 8, 9)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from smallinit.experiments.claims import c02_shrink, c06_condensation, c08_scaling, c09_anchor
from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    NOT_REACHED,
    NOT_SUPPORTED,
    SUPPORTED,
    Effect,
    combine,
    difference,
    is_finite,
    paired_effect,
    proportion_gap_ci,
)

# ---- copies of the old rules (as they were before issue 18), to show what they said --------------------------


def old_claim2(adv_nofix: dict[float, Effect], adv_fix: dict[float, Effect]) -> str:
    """Old claim 2: the two trend parts only, never the sign of the advantage."""
    sizes = sorted(set(adv_nofix) & set(adv_fix))
    lo, hi = sizes[0], sizes[-1]
    shrink = difference("a", adv_nofix[lo], adv_nofix[hi])
    removed = difference("b", difference("f", adv_fix[hi], adv_fix[lo]), difference("n", adv_nofix[hi], adv_nofix[lo]))
    return combine([shrink.verdict, removed.verdict])


def old_trajectory_stats(r: list[float]) -> dict[str, float]:
    m = min(r)
    return {"drop": 1 - m / r[0], "rebound": r[-1] / m - 1}


def old_claim6(small: dict[str, list[float]], std: dict[str, list[float]]) -> tuple[str, str, str]:
    """Old claim 6: drop from init to the minimum, and rebound = r_end / r_min − 1 (≥ 0 for any trajectory)."""
    names = [n for n in small if n in std]
    s = {n: old_trajectory_stats(small[n]) for n in names}
    t = {n: old_trajectory_stats(std[n]) for n in names}
    a = paired_effect("a", [s[n]["drop"] for n in names], [t[n]["drop"] for n in names], "matrices")
    b = paired_effect("b", [s[n]["rebound"] for n in names], [t[n]["rebound"] for n in names], "matrices")
    return combine([a.verdict, b.verdict]), a.verdict, b.verdict


def old_claim8(baseline, variant) -> tuple[str, float]:
    """Old claim 8: the gain at the largest size decides, extrapolated or not, whatever the number of sizes."""
    from smallinit.analysis.scaling import effective_size, fit_scaling_law

    fit = fit_scaling_law([n for n, _ in baseline], [l for _, l in baseline])
    n, l, hw = sorted(variant)[-1]
    g = effective_size(fit, n, l).gain
    lo, hi = effective_size(fit, n, l + hw).gain, effective_size(fit, n, l - hw).gain
    return Effect("g", g, lo, hi).verdict, g


def old_claim9(acc_small, acc_std, correct_small=None, correct_std=None) -> str:
    """Old claim 9: mean held-out gap ± max(range over seeds, example bootstrap); nobody checked learning."""
    hw = proportion_gap_ci(correct_small, correct_std) if correct_small is not None else None
    spreads = [max(a) - min(a) for a in (acc_small, acc_std) if len(a) >= 2]
    h = max([x for x in [*spreads, hw] if x is not None])
    v = float(np.mean(acc_small) - np.mean(acc_std))
    return Effect("d", v, v - h, v + h).verdict


def _e(v: float, h: float = 0.02) -> Effect:
    return Effect("A", v, v - h, v + h)


# ---- claim 2 ----------------------------------------------------------------------------------------------------


def test_claim2_behind_at_every_size_is_not_supported():
    """The README's cpu case: γ = 1 about 0.5 nats behind at every size. Without fixes the (negative) advantage
    shrinks and the fixes flatten the trend, so the old trend-only rule said "supported"."""
    nofix = {1e6: _e(-0.30), 3e6: _e(-0.45), 1e7: _e(-0.60)}
    fix = {1e6: _e(-0.50), 3e6: _e(-0.48), 1e7: _e(-0.45)}
    assert old_claim2(nofix, fix) == SUPPORTED  # the old rule's wrong verdict
    v = c02_shrink.judge(nofix, fix)
    assert v.verdict == NOT_SUPPORTED
    part_c = [e for e in v.effects if e.label.startswith("(c)")][0]
    assert part_c.value == pytest.approx(-0.45) and part_c.verdict == NOT_SUPPORTED
    assert any("not ahead" in n for n in v.notes)


def test_claim2_ahead_within_noise_at_the_largest_size_is_inconclusive():
    nofix = {1e6: _e(0.30), 1e7: _e(0.05)}
    fix = {1e6: _e(0.02), 1e7: _e(0.03, 0.05)}  # trend removed, but γ = 1's lead is inside its interval
    assert old_claim2(nofix, fix) == SUPPORTED
    assert c02_shrink.judge(nofix, fix).verdict == INCONCLUSIVE


def test_claim2_compares_widths_at_equal_tokens_per_parameter():
    """Issue 35: the same trend at unequal tokens per parameter (0.25 → 0.025: same tokens for every size) is
    inconclusive and names the confound; at equal tokens per parameter it passes."""
    nofix = {1e6: _e(0.30), 1e7: _e(0.05)}
    fix = {1e6: _e(0.20), 1e7: _e(0.25)}
    v = c02_shrink.judge(nofix, fix, {1e6: 0.25, 1e7: 0.025})
    assert v.verdict == INCONCLUSIVE
    assert any(
        "width is confounded with tokens per parameter: 0.25 at the smallest size to 0.025" in n
        and "would read 'supported'" in n
        for n in v.notes
    )
    assert v.numbers["tokens_per_param"] == {"1000000.0": 0.25, "10000000.0": 0.025}
    same = c02_shrink.judge(nofix, fix, {1e6: 80.0, 1e7: 80.5}, enough=75.0)  # equal and at the declared budget
    assert same.verdict == SUPPORTED and not any("confounded" in n for n in same.notes)


def test_claim2_short_runs_are_not_reached_never_not_supported():
    """Issue 35: γ = 1 behind at every size (the cpu runs at 0.14–0.5 tokens per parameter) reads "not supported"
    without a budget; below the declared 75 tokens per parameter it is "inconclusive — not reached"."""
    nofix = {1e6: _e(-0.30), 1e7: _e(-0.60)}
    fix = {1e6: _e(-0.50), 1e7: _e(-0.45)}
    assert c02_shrink.judge(nofix, fix, {1e6: 0.5, 1e7: 0.5}).verdict == NOT_SUPPORTED
    v = c02_shrink.judge(nofix, fix, {1e6: 0.5, 1e7: 0.5}, enough=75.0)
    assert v.verdict == NOT_REACHED and any("would read 'not supported'" in n for n in v.notes)
    assert c02_shrink.judge(nofix, fix, {1e6: 80, 1e7: 80}, enough=75.0).verdict == NOT_SUPPORTED  # at the budget
    assert c02_shrink.judge(nofix, fix, None, enough=75.0).verdict == INCONCLUSIVE  # budget unknown: no verdict


def _claim2_ctx(tmp_path, params, tokens, enough, captured):
    sizes = ("s", "m")
    losses = {
        ("s", "nofix", "0.5"): 3.0,
        ("s", "nofix", "1"): 2.7,
        ("m", "nofix", "0.5"): 2.8,
        ("m", "nofix", "1"): 2.78,
        ("s", "fix", "0.5"): 3.0,
        ("s", "fix", "1"): 2.8,
        ("m", "fix", "0.5"): 2.8,
        ("m", "fix", "1"): 2.55,
    }
    p = SimpleNamespace(shrink_sizes=sizes, extra_crossovers=(), enough=enough)
    roles = c02_shrink.arms(p)
    key = {id(a): tuple(role.split("/")) for role, a in roles.items()}

    def result(measured, v, **kw):
        captured["v"] = v
        return {"verdict": v.verdict}

    return SimpleNamespace(
        p=p,
        roles=roles,
        out=tmp_path,
        cost=lambda a: {"non_embedding_params": params[key[id(a)][0]], "tokens": tokens[key[id(a)][0]]},
        tokens_per_param=lambda a: tokens[key[id(a)][0]] / params[key[id(a)][0]],
        losses_by_seed=lambda a: {0: losses[key[id(a)]]},
        loss_hw=lambda a, b: 0.01,
        names=lambda *a: [],
        result=result,
        extra_crossovers=lambda claim: [],
    )


def test_claim2_analysis_takes_tokens_per_parameter_from_the_planned_costs(tmp_path):
    params = {"s": 1e6, "m": 4e6}
    captured = {}
    ctx = _claim2_ctx(tmp_path, params, {"s": 250_000, "m": 250_000}, 75.0, captured)
    assert c02_shrink.analyse(ctx)["verdict"] == NOT_REACHED  # 0.0625 tokens per parameter: far below 75
    v = captured["v"]
    assert v.numbers["tokens_per_param"] == {"1000000.0": 0.25, "4000000.0": 0.0625}
    assert any("0.25 at the smallest size to 0.0625 at the largest" in n for n in v.notes)
    # equal tokens per parameter at the declared budget: the trend decides
    ctx = _claim2_ctx(tmp_path, params, {"s": 80e6, "m": 320e6}, 75.0, captured)
    assert c02_shrink.analyse(ctx)["verdict"] == SUPPORTED


# ---- claim 6 ----------------------------------------------------------------------------------------------------

NAMES = [f"blocks.{i}.{m}" for i in range(4) for m in ("attn.q", "attn.k", "attn.v", "mlp.up")]
STEPS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


def test_claim6_monotone_trajectory_cannot_pass_the_expansion():
    """γ = 1: a monotone decrease to a noisy plateau; γ = 0.5: flat. The old rebound r_end / r_min − 1 is ≥ 0
    for both and larger where the plateau is lower (relative noise), so the old rule said "supported"."""
    rng = np.random.default_rng(0)
    t = np.asarray(STEPS, dtype=float)
    small = {n: list(2 + 8 * np.exp(-t / 10) + rng.normal(0, 0.05, t.size)) for n in NAMES}
    std = {n: list(10 + rng.normal(0, 0.05, t.size)) for n in NAMES}
    for n in NAMES:  # monotone up to noise: the old rebound is only noise, and ≥ 0 by construction
        assert old_trajectory_stats(small[n])["rebound"] >= 0 and old_trajectory_stats(std[n])["rebound"] >= 0
    assert old_claim6(small, std) == (SUPPORTED, SUPPORTED, SUPPORTED)  # the old rule's wrong verdict
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.verdict != SUPPORTED
    a, b, c = v.effects
    assert a.verdict == SUPPORTED  # it does condense from step 0, beyond the flat γ = 0.5 arm
    assert b.value < 0 and b.verdict != SUPPORTED  # signed expansion: a monotone decrease is ≤ 0
    assert c.verdict != SUPPORTED
    # t_c: the middle of 10 … 100 in log-steps, √(10 · 100) ≈ 31.6 → 30
    assert v.numbers["steps_gamma1"] == {"ref_step": 0.0, "mid_step": 30.0, "end_step": 100.0}


def test_claim6_the_optimizers_own_collapse_is_not_condensation():
    """AdamW's first updates move every matrix: when the same matrices under γ = 0.5 drop as much at the same steps
    (the same learning rate), part (a) — the drop beyond γ = 0.5's — is 0, and the claim is not supported."""
    rng = np.random.default_rng(1)
    both = [40.0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    small = {s: {n: list(np.asarray(both) * np.exp(rng.normal(0, 0.02, len(STEPS)))) for n in NAMES} for s in range(3)}
    std = {s: {n: list(np.asarray(both) * np.exp(rng.normal(0, 0.02, len(STEPS)))) for n in NAMES} for s in range(3)}
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.effects[0].verdict == INCONCLUSIVE and abs(v.effects[0].value) < 0.05
    assert v.verdict != SUPPORTED
    # a collapse under γ = 1 only, then flat: condensation (a) holds, but nothing expands: not supported
    flat = {s: {n: list(40 * np.exp(rng.normal(0, 0.02, len(STEPS)))) for n in NAMES} for s in range(3)}
    v2 = c06_condensation.judge(small, flat, STEPS, STEPS)
    assert v2.effects[0].verdict == SUPPORTED and v2.verdict != SUPPORTED


def test_claim6_genuine_condense_then_expand_is_supported():
    rng = np.random.default_rng(2)
    shape = [30, 9, 7, 5, 3, 2, 3, 4, 5, 6, 8]
    small = {n: list(np.asarray(shape, float) * np.exp(rng.normal(0, 0.02, len(shape)))) for n in NAMES}
    std = {n: list(30 * np.exp(rng.normal(0, 0.02, len(shape)))) for n in NAMES}
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.verdict == SUPPORTED
    assert v.numbers["condensation_gamma1"] == pytest.approx(math.log(30 / 5), abs=0.05)  # r(0) = 30, r(30) = 5
    assert v.numbers["expansion_gamma1"] == pytest.approx(math.log(8 / 5), abs=0.05)
    assert c06_condensation.judge(std, small, STEPS, STEPS).verdict == NOT_SUPPORTED  # arms swapped


def fast_trajectory(t) -> np.ndarray:
    """A fast condense-then-expand stable rank: 30 at init, ≈ 4 around step 30, back up to ≈ 12 by step 2000."""
    t = np.asarray(t, dtype=float)
    return 2 + 28 * np.exp(-t / 8) + 10 * (1 - np.exp(-t / 300))


def old_issue18_claim6(small, std, steps):
    """The rule before issue 35: condensation from the first probed step after 0 to the step nearest t_end / 2."""

    def stats(r):
        pts = [(t, x) for t, x in zip(steps, r) if t > 0]
        r_ref, t_end = pts[0][1], pts[-1][0]
        _, r_mid = min(pts[1:-1], key=lambda p: abs(p[0] - t_end / 2))
        return math.log(r_ref) - math.log(r_mid)

    return paired_effect("a", [stats(small[n]) for n in NAMES], [stats(std[n]) for n in NAMES], "matrices")


def test_claim6_fast_condensation_is_seen_by_the_early_log_spaced_probes():
    """Issue 35: probes every 100 steps (the crossover's trunks), reference = step 100 — after the collapse — gave
    part (a) < 0: "not supported" by construction. With the early log-spaced probes (and condensation measured from
    step 0 against the same matrix under γ = 0.5) the same trajectory is supported."""
    from smallinit.probes import early_probe_steps

    rng = np.random.default_rng(3)
    uniform = list(range(0, 2001, 100))
    logged = sorted({0, *early_probe_steps(100), *uniform})
    assert logged[:8] == [0, 1, 2, 5, 10, 20, 50, 100]

    def arms_at(steps):
        small = {n: list(fast_trajectory(steps) * np.exp(rng.normal(0, 0.02, len(steps)))) for n in NAMES}
        std = {
            n: list(30 * np.exp(-np.asarray(steps) / 20000) * np.exp(rng.normal(0, 0.02, len(steps)))) for n in NAMES
        }
        return small, std

    s_u, t_u = arms_at(uniform)
    old = old_issue18_claim6(s_u, t_u, uniform)
    assert old.verdict == NOT_SUPPORTED and old.value < -0.5  # the old rule fails by construction
    s_l, t_l = arms_at(logged)
    v = c06_condensation.judge(s_l, t_l, logged, logged)
    assert v.verdict == SUPPORTED, [e.to_dict() for e in v.effects]
    assert v.numbers["steps_gamma1"]["mid_step"] == 50.0  # √(1 · 2000) ≈ 45 → 50: inside the condensed phase


def test_claim6_uses_every_seed_paired_by_number():
    """Three seeds (t-interval over seed-paired means); a seed lost in one arm drops its own pair only."""
    rng = np.random.default_rng(4)
    shape = np.asarray([30, 9, 7, 5, 3, 2, 3, 4, 5, 6, 8], float)
    small = {s: {n: list(shape * np.exp(rng.normal(0, 0.05, 11))) for n in NAMES} for s in (0, 1, 2)}
    std = {s: {n: list(30 * np.exp(rng.normal(0, 0.05, 11))) for n in NAMES} for s in (0, 2)}  # seed 1 lost
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.verdict == SUPPORTED and v.numbers["seeds"] == [0, 2]
    assert all("t-interval over 2 seed-paired" in e.noise and "seeds 0, 2" in e.noise for e in v.effects)
    flat = {s: {n: list(30 * np.exp(rng.normal(0, 0.05, 11))) for n in NAMES} for s in (0, 1, 2)}
    assert c06_condensation.judge(flat, small, STEPS, STEPS).verdict == NOT_SUPPORTED


def test_claim6_compares_arms_at_the_same_learning_rate():
    """A crossover that tunes each arm's rate trains paper and γ-only at different rates: claim 6 then trains its
    own pair (short runs, read at one common rate); an untuned crossover with probes still serves."""
    import dataclasses

    from smallinit.experiments.presets import CPU, CrossoverPlan

    assert CPU.crossover.lrs and not c06_condensation.uses_crossover(CPU)
    assert set(c06_condensation.arms(CPU)) == {"small", "std"}
    untuned = dataclasses.replace(CPU, crossover=dataclasses.replace(CPU.crossover, lrs=(), lr=3e-3))
    assert c06_condensation.uses_crossover(untuned) and c06_condensation.arms(untuned) == {}
    off = dataclasses.replace(
        untuned,
        crossover=CrossoverPlan(size="d128", tokens=1, arms=("paper", "gamma-only"), overrides={"probe.every": 0}),
    )
    assert not c06_condensation.uses_crossover(off)


def test_claim6_stats_and_probe_table():
    assert c06_condensation.reference_steps([0, 5, 10, 20, 40]) == (0.0, 10.0, 40.0)  # √(5 · 40) ≈ 14.1 → 10
    s = c06_condensation.condensation_stats([0, 5, 10, 20, 40], [10, 8, 4, 2, 4])
    assert s["ref_step"] == 0 and s["mid_step"] == 10 and s["end_step"] == 40
    assert s["condensation"] == pytest.approx(math.log(10 / 4)) and s["expansion"] == pytest.approx(0.0)
    assert math.isnan(c06_condensation.condensation_stats([0, 5, 10], [10, 8, 4])["expansion"])  # too few steps
    assert c06_condensation.reference_steps([5, 10, 20, 40]) is None  # no step 0
    recs = [
        {"step": 0, "matrices": {"blocks.0.q": {"srank": 5.0}, "emb": {"srank": 1.0}}},
        {"step": 10, "matrices": {"blocks.0.q": {"srank": 4.0}, "blocks.0.k": {"srank": 3.0}}},
    ]
    steps, table = c06_condensation.srank_table(recs)
    assert steps == [0.0, 10.0]
    assert table["blocks.0.q"] == [5.0, 4.0] and math.isnan(table["blocks.0.k"][0]) and "emb" not in table


# ---- claim 8 ----------------------------------------------------------------------------------------------------

E, A, ALPHA = 2.0, 50.0, 0.3


def law(n: float) -> float:
    return E + A * n**-ALPHA


def test_claim8_extrapolated_negative_gain_is_inconclusive():
    """The README's cpu case: a 3-size fit, the paper setting's loss worth only 4.2% of its size (gain −0.958),
    N_eff below the smallest fitted size. The old rule said "not supported"."""
    base = [(n, law(n)) for n in (1e6, 2e6, 4e6)]
    variant = [(4e6, law(0.042 * 4e6), 0.005)]
    old, g = old_claim8(base, variant)
    assert old == NOT_SUPPORTED and g == pytest.approx(-0.958, abs=1e-3)
    v = c08_scaling.judge(base, variant)
    assert v.verdict == INCONCLUSIVE
    assert v.effects[0].value == pytest.approx(-0.958, abs=1e-3) and v.effects[0].verdict == INCONCLUSIVE
    note = v.notes[-1]
    assert "would read 'not supported'" in note and "extrapolated" in note and "3 sizes" in note
    # with 4 sizes the extrapolation alone still makes it inconclusive
    base4 = [(n, law(n)) for n in (1e6, 2e6, 4e6, 8e6)]
    v4 = c08_scaling.judge(base4, [(8e6, law(0.042 * 8e6), 0.005)])
    assert v4.verdict == INCONCLUSIVE and "extrapolated" in v4.notes[-1] and "3 sizes" not in v4.notes[-1]


def test_claim8_three_size_fit_never_gives_a_verdict():
    base = [(n, law(n)) for n in (1e5, 1e6, 1e7)]
    worse = [(1e7, law(5e6), 0.005)]  # N_eff inside the fitted range: interpolated, but the fit is exact
    assert old_claim8(base, worse)[0] == NOT_SUPPORTED
    v = c08_scaling.judge(base, worse)
    assert v.verdict == INCONCLUSIVE and "3 sizes" in v.notes[-1]


def test_claim8_interpolated_figure_from_four_sizes_decides():
    base = [(n, law(n)) for n in (1e5, 1e6, 1e7, 1e8)]
    # the largest size's gain (+100%) is extrapolated (N_eff = 2e8 > 1e8); the verdict uses N = 1e7
    better = [(1e7, law(2e7), 0.005), (1e8, law(2e8), 0.005)]
    v = c08_scaling.judge(base, better)
    assert v.verdict == SUPPORTED and v.numbers["decisive_N"] == 1e7
    assert v.effects[0].value == pytest.approx(1.0, rel=1e-3)
    assert any("largest size is extrapolated" in n for n in v.notes)
    worse = [(1e7, law(5e6), 0.005), (1e8, law(5e7), 0.005)]
    assert c08_scaling.judge(base, worse).verdict == NOT_SUPPORTED
    noisy = [(1e8, law(1.05e8 * 0.9), 0.05)]
    assert c08_scaling.judge(base, noisy).verdict == INCONCLUSIVE


# ---- claim 9 ----------------------------------------------------------------------------------------------------


def test_claim9_untrained_arm_makes_it_inconclusive():
    """γ = 1 learned the task (99.6% in-distribution), γ = 0.5 did not (7%): a big held-out gap, which the old
    rule called "supported"."""
    ones = [1] * 600 + [0] * 400
    zeros = [1] * 10 + [0] * 990
    assert old_claim9([0.6], [0.01], ones, zeros) == SUPPORTED
    v = c09_anchor.judge([0.6], [0.01], ones, zeros, in_small=[0.996], in_std=[0.07], steps=700)
    assert v.verdict == INCONCLUSIVE
    assert v.numbers["both_learned"] is False
    assert any("γ=0.5 reached only 7% in-distribution within 700 steps" in n for n in v.notes)
    assert not any("γ=1 reached" in n for n in v.notes)
    # a seed that did not learn is enough
    v2 = c09_anchor.judge([0.6, 0.62], [0.1, 0.12], in_small=[0.99, 0.90], in_std=[0.99, 0.99], steps=700)
    assert v2.verdict == INCONCLUSIVE and any(
        "γ=1 reached only 90% in-distribution (worst of 2 seeds)" in n for n in v2.notes
    )


def test_claim9_both_learned_is_judged():
    ones = [1] * 600 + [0] * 400
    zeros = [1] * 100 + [0] * 900
    v = c09_anchor.judge([0.6], [0.1], ones, zeros, in_small=[0.99], in_std=[0.97], steps=700)
    assert v.verdict == SUPPORTED and v.numbers["both_learned"] is True
    assert "bootstrap" in v.effects[0].noise
    assert c09_anchor.judge([0.1], [0.6], zeros, ones, in_small=[0.99], in_std=[0.97]).verdict == NOT_SUPPORTED


def test_claim9_two_seeds_use_a_paired_t_interval():
    """Seed-paired differences 0.30 and 0.12: the old ± range-over-seeds interval [0.01, 0.41] said "supported";
    the 95% t-interval with 1 degree of freedom is ±1.14."""
    small, std = [0.60, 0.62], [0.30, 0.50]
    assert old_claim9(small, std) == SUPPORTED
    v = c09_anchor.judge(small, std, in_small=[0.99, 0.99], in_std=[0.98, 0.99])
    e = v.effects[0]
    assert v.verdict == INCONCLUSIVE and "t-interval over 2 seed-paired" in e.noise
    d = np.array([0.30, 0.12])
    assert e.hi - e.value == pytest.approx(12.706 * d.std(ddof=1) / math.sqrt(2), rel=1e-3)
    tight = c09_anchor.judge([0.60, 0.62, 0.61], [0.30, 0.31, 0.29], in_small=[0.99] * 3, in_std=[0.99] * 3)
    assert tight.verdict == SUPPORTED


def test_anchor_stops_once_in_distribution_accuracy_reaches_the_threshold(tmp_path, monkeypatch):
    from smallinit.core.errors import ConfigError
    from smallinit.experiments import anchor

    real = anchor.evaluate
    calls = []

    def fake(model, sets, trained):  # in-distribution accuracy 0 until the third evaluation (step 10)
        ev = real(model, sets, trained)
        calls.append(1)
        ev["in_acc"] = 0.97 if len(calls) >= 3 else 0.0
        return ev

    monkeypatch.setattr(anchor, "evaluate", fake)
    cfg = anchor.AnchorConfig(
        steps=40,
        eval_every=5,
        n_train=256,
        n_test=64,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
        batch_size=32,
        warmup_steps=2,
        stop_in_acc=0.95,
    )
    r = anchor.train_anchor(cfg, tmp_path / "run")
    assert r["steps_run"] == 10 and r["history"][-1]["step"] == 10 and r["final"]["in_acc"] == 0.97
    assert anchor.AnchorConfig.from_dict({"stop_in_acc": 0.95}).stop_in_acc == 0.95
    import json

    assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 10
    calls.clear()
    cfg.stop_in_acc = 0.0  # off: the whole cap
    assert anchor.train_anchor(cfg)["steps_run"] == 40
    with pytest.raises(ConfigError, match="stop_in_acc"):
        anchor.AnchorConfig(stop_in_acc=1.5).validate()


def test_is_finite_helper_used_by_the_rules():
    assert is_finite(1.0) and not is_finite(math.nan) and not is_finite(None)


def test_claim11_adam_eps_rule_and_arms():
    from smallinit.experiments.claims import c11_adam_eps as c11
    from smallinit.experiments.presets import get_preset

    cpu = get_preset("cpu")
    roles = c11.arms(cpu)
    assert roles["tiny"].adam_eps == 1e-16 and roles["default"].adam_eps is None
    assert roles["tiny"].key != roles["default"].key and roles["default"].size == cpu.shrink_sizes[-1]
    # the default ε costs 0.05 nats beyond the t-interval: supported; the reverse: not supported; noise: inconclusive
    assert c11.judge([3.00, 3.01], [3.05, 3.06], None).verdict == "supported"
    assert c11.judge([3.05, 3.06], [3.00, 3.01], None).verdict == "not supported"
    assert c11.judge([3.00, 3.10], [3.05, 3.02], None).verdict == "inconclusive"
    rec = [
        {"optim_eps": {"matrices": {}}},
        {
            "optim_eps": {
                "matrices": {
                    "blocks.0.attn.q": {"damping": 0.2},
                    "blocks.0.attn.k": {"damping": 0.4},
                    "blocks.0.mlp.up": {"damping": 0.9},
                }
            }
        },
    ]
    assert c11.first_damping(rec) == pytest.approx(0.3)


# ---- issue 35: the other claims judged where they can show, by rules that can fail and can pass ------------------


def test_noise_floor_uses_t_at_its_degrees_of_freedom():
    from smallinit.core.stats import t_quantile
    from smallinit.experiments.claims.rules import seed_noise_floor

    two = [[3.00, 3.02], [2.90, 2.93]]  # 2 degrees of freedom: t = 4.30, not z = 1.96
    s = math.sqrt((0.01**2 * 2 + 0.015**2 * 2) / 2)
    assert seed_noise_floor(two) == pytest.approx(t_quantile(2) * math.sqrt(2) * s)
    assert t_quantile(2) == pytest.approx(4.303, abs=1e-3)
    many = [[3.0 + 0.01 * i for i in range(31)]]  # 30 degrees of freedom: close to z
    assert seed_noise_floor(many) / (
        math.sqrt(2) * float(np.std([0.01 * i for i in range(31)], ddof=1))
    ) == pytest.approx(t_quantile(30), rel=1e-9)


def old_claim3_part_a(sat_eps_large, sat_eps_small):
    """Old claim 3(a): saturation with ε = 1e-12 higher than with ε = 1e-5, paired over norms."""
    return paired_effect("a", sat_eps_small, sat_eps_large, "norms").verdict


def test_claim3_saturation_threshold_can_fail_and_pass():
    """Issue 35: ms/(ms + 1e-12) > ms/(ms + 1e-5) for every ms > 0, so the old part (a) passed by construction — here
    on norms at ms = 1e-3 (saturation 0.99: nowhere near ε-dominated). The threshold s ≤ 0.5 fails there and passes
    where ε does dominate."""
    from smallinit.experiments.claims import c03_saturation as c3

    ms = np.array([1e-3, 2e-3, 5e-4, 1e-3])
    assert old_claim3_part_a(list(ms / (ms + 1e-5)), list(ms / (ms + 1e-12))) == SUPPORTED  # by construction
    steps = [0, 1, 2, 5, 10, 20, 50, 100, 200, 300]
    loss = Effect("loss", 0.1, 0.05, 0.15)
    healthy = {s: (steps, list(0.99 - 0.001 * np.arange(10) + 0.002 * s)) for s in range(3)}
    v = c3.judge(healthy, {s: (steps, [1.0] * 10) for s in range(3)}, loss)
    assert v.effects[0].verdict == NOT_SUPPORTED and v.verdict == NOT_SUPPORTED
    dominated = {s: (steps, list(0.3 + 0.01 * np.sin(np.arange(10)) + 0.01 * s)) for s in range(3)}
    v = c3.judge(dominated, {s: (steps, [1.0] * 10) for s in range(3)}, loss)
    assert v.effects[0].verdict == SUPPORTED and v.verdict == SUPPORTED
    assert v.numbers["saturation_eps_1e-5_time_mean"] == pytest.approx(0.31, abs=0.02)
    # the loss part is a loss claim: below the declared budget it is not reached, whatever its interval
    short = c3.judge(dominated, {}, Effect("loss", -0.1, -0.15, -0.05), tokens_per_param=0.5, enough=75.0)
    assert short.verdict == NOT_REACHED and short.numbers["loss_part"] == NOT_REACHED
    # the time average weights the run by time: log-spaced early probes do not outweigh the rest
    early_low = ([0, 1, 2, 5, 10, 20, 50, 100, 1000], [0.1] * 7 + [0.9, 0.9])
    assert c3.time_mean(early_low) > 0.8 and float(np.mean(early_low[1])) < 0.3
    # the per-norm table weights alike: a norm low at the early probes only reads like the rule's time average
    recs = [
        {"step": t, "layers": [{"layer": 0, "attn_norm": {"saturation": v}}], "final_norm": {"saturation": v}}
        for t, v in zip(*early_low)
    ]
    per_norm = c3.norm_saturations(recs)
    assert per_norm == pytest.approx({"0.attn_norm": c3.time_mean(early_low), "final_norm": c3.time_mean(early_low)})


def test_claim3_part_a_is_not_reached_at_a_width_that_cannot_show_it():
    """Issue #44 (3): under γ = 1 the hidden mean square starts at ≈ 1/d², above ε = 1e-5 for d < 316 — there ε cannot
    dominate, and the cpu preset's d 256 read *not supported*. At d 256 part (a) is now not reached (with the reason),
    whatever the data; at d 768 the same data decide as before, both ways; the preset definitions say which widths
    can show it."""
    from smallinit.experiments.claims import c03_saturation as c3
    from smallinit.experiments.presets import PRESETS

    steps = [0, 1, 2, 5, 10, 20, 50, 100, 200, 300]
    loss = Effect("loss", 0.1, 0.05, 0.15)
    healthy = {s: (steps, list(0.99 - 0.001 * np.arange(10) + 0.002 * s)) for s in range(3)}
    dominated = {s: (steps, list(0.3 + 0.01 * np.sin(np.arange(10)) + 0.01 * s)) for s in range(3)}
    ok = {s: (steps, [1.0] * 10) for s in range(3)}
    narrow = c3.judge(healthy, ok, loss, width=256)
    assert narrow.numbers["part_a"] == NOT_REACHED and narrow.verdict == NOT_REACHED
    assert any("shows only at d ≳ 316" in n and "would read 'not supported'" in n for n in narrow.notes)
    assert c3.judge(healthy, ok, loss, width=768).verdict == NOT_SUPPORTED
    assert c3.judge(dominated, ok, loss, width=768).verdict == SUPPORTED
    assert c3.can_show_saturation(317)[0] and not c3.can_show_saturation(316)[0]
    widths = {name: c3.preset_width(p.sizes[p.main_size]) for name, p in PRESETS.items()}
    assert not c3.can_show_saturation(widths["cpu"])[0] and c3.can_show_saturation(widths["gpu"])[0]


def old_claim4_part(std_layers, small_layers):
    """Old claim 4: a percentile bootstrap over the layers of one run."""
    return paired_effect("a", small_layers, std_layers, "layers").verdict


def test_claim4_false_verdict_rate_on_null_data_is_at_most_5_percent():
    """Issue 35: on null data (all three arms alike; 2 layers, and a run's offset shared by its layers) the old
    bootstrap over the 2 layers of one run — the interval [min, max] — gives a verdict most of the time (≈ 25% per
    part without the shared offset, ≈ 75% with it); the seed-paired t-interval over 3 seeds gives the nominal 5%
    (simulated, 2000 data sets; the bound allows 2 binomial standard errors)."""
    from smallinit.experiments.claims import c04_sink as c4

    rng = np.random.default_rng(0)
    n_sim, old_false, new_false = 2000, 0, np.zeros(2)
    for _ in range(n_sim):

        def run():  # 2 layers: a per-run (seed) offset plus per-layer noise
            return list(0.2 + rng.normal(0, 0.03) + rng.normal(0, 0.02, 2))

        std, small, gate = ({s: run() for s in range(3)} for _ in range(3))
        old_false += old_claim4_part(std[0], small[0]) != INCONCLUSIVE
        v = c4.judge(std, small, gate)
        new_false += [e.verdict != INCONCLUSIVE for e in v.effects]
    assert old_false / n_sim > 0.15  # the old rule: ≈ 25% false verdicts per part
    se = math.sqrt(0.05 * 0.95 / n_sim)
    assert (new_false / n_sim <= 0.05 + 2 * se).all(), new_false / n_sim


def test_claim4_true_effect_is_found_with_three_seeds():
    from smallinit.experiments.claims import c04_sink as c4

    rng = np.random.default_rng(1)
    std = {s: list(0.05 + rng.normal(0, 0.01, 2)) for s in range(3)}
    small = {s: list(0.45 + rng.normal(0, 0.03, 2)) for s in range(3)}
    gate = {s: list(0.06 + rng.normal(0, 0.01, 2)) for s in range(3)}
    assert c4.judge(std, small, gate).verdict == SUPPORTED
    assert c4.judge(small, std, small).verdict == NOT_SUPPORTED  # γ = 1 lower than γ = 0.5: (a) fails
    two = c4.judge({s: std[s] for s in (0, 1)}, small, gate)  # 2 seeds in one arm: below the 3 a verdict needs
    assert two.verdict == INCONCLUSIVE and any("needs ≥ 3" in n for n in two.notes)


def test_claim5_t_intervals_over_seeds_paired_by_number_and_the_budget():
    """Issue 35: 3 seeds per γ, paired by seed number (a seed lost at one γ drops its own pair); the one-seed
    half-widths reach the effects; below the declared budget: not reached, never not supported."""
    from smallinit.experiments.claims import c05_gamma as c5

    rng = np.random.default_rng(2)
    curve = {0.25: 4.0, 0.5: 3.8, 0.75: 3.65, 1.0: 3.6, 1.25: 3.7, 1.5: 3.9}
    seed_fx = rng.normal(0, 0.05, 3)  # seed s shifts every γ alike (same batches)
    losses = {g: {s: l + seed_fx[s] + rng.normal(0, 0.005) for s in range(3)} for g, l in curve.items()}
    v = c5.judge(losses)
    assert v.verdict == SUPPORTED and all("t-interval over 3 seed-paired" in e.noise for e in v.effects)
    # by position the pairs would mix seeds: seed 1 lost at γ = 1.5 must drop that pair, not shift seed 2 onto it
    lost = {**losses, 1.5: {0: losses[1.5][0], 2: losses[1.5][2]}}
    assert "t-interval over 2 seed-paired" in c5.judge(lost).effects[1].noise
    assert c5.judge(lost).effects[1].value == pytest.approx(np.mean([losses[1.5][s] - losses[1.0][s] for s in (0, 2)]))
    flat = {g: {s: 3.6 + seed_fx[s] + rng.normal(0, 0.01) for s in range(3)} for g in curve}
    assert c5.judge(flat).verdict == INCONCLUSIVE
    rev = {g: {s: 7.2 - l + seed_fx[s] for s in range(3)} for g, l in curve.items()}
    assert c5.judge(rev).verdict == NOT_SUPPORTED
    assert c5.judge(rev, tokens_per_param=0.14, enough=75.0).verdict == NOT_REACHED
    # one seed: the bootstrap half-widths decide (the old analysis never passed them on)
    one = {g: [l] for g, l in curve.items()}
    assert c5.judge(one, 0.01, 0.01).verdict == SUPPORTED and c5.judge(one, 0.5, 0.5).verdict == INCONCLUSIVE


def test_claim5_analysis_passes_the_one_seed_half_widths(tmp_path):
    from smallinit.experiments.claims import c05_gamma as c5

    p = SimpleNamespace(gammas=(0.5, 1.0, 1.5), main_size="d", extra_crossovers=(), enough=75.0)
    roles = c5.arms(p)
    gamma_of = {id(a): float(g) for g, a in roles.items()}
    loss = {0.5: 3.8, 1.0: 3.6, 1.5: 3.9}
    calls, captured = [], {}

    def loss_hw(a, b):
        calls.append((gamma_of[id(a)], gamma_of[id(b)]))
        return 0.01

    def result(measured, v, **kw):
        captured["v"] = v
        return {"verdict": v.verdict}

    ctx = SimpleNamespace(
        p=p,
        roles=roles,
        out=tmp_path,
        chosen={},
        extra_crossovers=lambda c: [],
        losses_by_seed=lambda a: {0: loss[gamma_of[id(a)]]},
        loss_hw=loss_hw,
        budget=lambda *a: 100.0,
        names=lambda *a: [],
        result=result,
    )
    assert c5.analyse(ctx)["verdict"] == SUPPORTED
    assert calls == [(1.0, 0.5), (1.0, 1.5)]  # γ_in vs γ_out, γ = 1 vs γ_max
    assert all("one seed: ±0.01" in e.noise for e in captured["v"].effects)


def _null_tokens(rng, n, base, fam_sd=0.2, seed_sd=0.2, gain=None):
    """Two seeds of one family: per-token family errors shared by both seeds, plus each seed's own noise."""
    f = rng.normal(0, fam_sd, n)

    def seed():
        loss = base + f + rng.normal(0, seed_sd, n) - (0 if gain is None else gain)
        return np.maximum(loss, 1e-3)

    return seed(), seed()


def test_claim7_bins_by_a_symmetric_reference_show_no_trend_on_null_data():
    """Issue 35: two equal families (per-token family errors sd 0.2). Binning by a second seed of the baseline shares
    the baseline's errors and shows a trend (easy −0.03 … extreme +0.01: "not supported"); binning by the mean
    per-token loss of a second seed of each arm shows none."""
    from smallinit.analysis.compare import compare_token_scores
    from smallinit.experiments.claims import c07_token_bins as c7

    rng = np.random.default_rng(0)
    n = 32768
    base = rng.gamma(2.0, 1.2, n) + 0.05
    a1, a2 = _null_tokens(rng, n, base)
    b1, b2 = _null_tokens(rng, n, base)
    win = np.arange(n) // 64
    old = compare_token_scores(-a1, -b1, reference_logp=-b2, windows=win, n_boot=300)
    old_means = [b["delta_sym"]["mean"] for b in old["bins"]]
    assert old_means[-1] - old_means[0] > 0.02 and c7.judge(old["bins"]).verdict == NOT_SUPPORTED
    assert c7.judge(old["bins"], tokens_per_param=9.4, enough=75.0).verdict == NOT_REACHED
    assert c7.judge(old["bins"], tokens_per_param=75.0, enough=75.0).verdict == NOT_SUPPORTED  # at the budget: judged
    new = compare_token_scores(-a1, -b1, reference_logp=-(a2 + b2) / 2, windows=win, n_boot=300)
    new_means = [b["delta_sym"]["mean"] for b in new["bins"]]
    assert max(abs(m) for m in new_means) < 0.01
    assert c7.judge(new["bins"]).verdict == INCONCLUSIVE
    # both seed pairs (A1 vs B1 by (A2+B2)/2, A2 vs B2 by (A1+B1)/2): still no trend
    new2 = compare_token_scores(-a2, -b2, reference_logp=-(a1 + b1) / 2, windows=win, n_boot=300)
    assert c7.judge([new["bins"], new2["bins"]]).verdict == INCONCLUSIVE


def test_claim7_true_concentration_in_the_inner_bins_is_found():
    from smallinit.analysis.compare import compare_token_scores
    from smallinit.experiments.claims import c07_token_bins as c7

    rng = np.random.default_rng(1)
    n = 32768
    base = rng.gamma(2.0, 1.2, n) + 0.05
    q = np.argsort(np.argsort(base)) / n  # the token's difficulty quantile
    gain = 0.3 * np.exp(-(((q - 0.5) / 0.2) ** 2))  # A better on moderate … very hard tokens only
    a1, a2 = _null_tokens(rng, n, base, gain=gain)
    b1, b2 = _null_tokens(rng, n, base)
    win = np.arange(n) // 64
    r1 = compare_token_scores(-a1, -b1, reference_logp=-(a2 + b2) / 2, windows=win, n_boot=300)
    r2 = compare_token_scores(-a2, -b2, reference_logp=-(a1 + b1) / 2, windows=win, n_boot=300)
    assert c7.judge(r1["bins"]).verdict == SUPPORTED
    v = c7.judge([r1["bins"], r2["bins"]])
    assert v.verdict == SUPPORTED and v.numbers["seed_pairs"] == 2
    assert all("t-interval over 2 seed pairs" in e.noise for e in v.effects)
    # a loss claim: below the declared budget neither a true effect nor a trend says anything
    short = c7.judge([r1["bins"], r2["bins"]], tokens_per_param=9.4, enough=75.0)
    assert short.verdict == NOT_REACHED and short.effects == v.effects
    assert c7.judge([r1["bins"], r2["bins"]], tokens_per_param=75.0, enough=75.0).verdict == SUPPORTED


def test_claim7_references_are_symmetric_and_paired_by_seed(tmp_path):
    from pathlib import Path

    from smallinit.experiments.claims import c07_token_bins as c7

    A = {s: Path(f"/a/s{s}") for s in (0, 1, 2)}
    B = {s: Path(f"/b/s{s}") for s in (0, 2)}  # seed 1 of the baseline lost
    comps = c7.references(A, B, (Path("/ref"), "neither"))
    assert [(s, a.name, b.name, [r.as_posix() for r in refs]) for s, a, b, refs, _ in comps] == [
        (0, "s0", "s0", ["/a/s2", "/b/s2"]),
        (2, "s2", "s2", ["/a/s0", "/b/s0"]),
    ]
    one = c7.references({0: Path("/a")}, {0: Path("/b"), 1: Path("/b1")}, (Path("/ref"), "neither"))
    assert [refs for *_, refs, _ in one] == [[Path("/ref")]]  # never a second seed of one arm alone
    assert c7.references({0: Path("/a")}, {0: Path("/b")}, (None, "")) == []


def test_compare_models_bins_by_the_mean_loss_of_several_references(monkeypatch):
    from smallinit.analysis import compare

    n = 400
    pos, win = np.arange(n), np.arange(n) // 40
    rng = np.random.default_rng(0)
    la, lb, r1, r2 = (-(rng.gamma(2.0, 1.0, n) + 0.01) for _ in range(4))
    scored = {"a": (la, lb), "r1": (r1, lb), "r2": (r2, lb)}

    def fake(run_a, run_b, **kw):
        x, y = scored[str(run_a)]
        return compare.TokenScores(x, y, pos, win, np.array(["unknown"] * n), {"run_a": str(run_a)})

    monkeypatch.setattr(compare.runs, "score_models", fake)  # compare_models calls it from compare/runs.py
    res = compare.compare_models("a", "b", reference=["r1", "r2"], n_boot=50, by_window=True)
    want = compare.compare_token_scores(la, lb, reference_logp=(r1 + r2) / 2, windows=win, n_boot=50)
    assert res["edges"] == want["edges"] and res["setup"]["reference"] == ["r1", "r2"]
    assert [b["count"] for b in res["bins"]] == [b["count"] for b in want["bins"]]


E8, A8, ALPHA8 = 2.0, 50.0, 0.3


def law8(n: float) -> float:
    return E8 + A8 * n**-ALPHA8


def test_claim8_reports_the_gain_against_the_papers_44_percent():
    """Issue 35: the old rule tested gain > 0 only. A tight +20% is positive but reliably below the paper's +44%:
    not supported; +50% with an interval holding 0.44 is supported; the interval comes from the fit's bootstrap."""
    base = [(n, law8(n)) for n in (1e5, 1e6, 1e7, 1e8)]
    small_gain = [(1e7, law8(1.2e7), 0.002)]
    v = c08_scaling.judge(base, small_gain)
    a, b = v.effects
    assert a.verdict == SUPPORTED and a.value == pytest.approx(0.2, rel=1e-3)
    assert b.verdict == NOT_SUPPORTED and v.verdict == NOT_SUPPORTED
    assert "bootstrap 95% of the fit" in a.noise and v.numbers["paper_gain_in_interval"] is False
    assert any("reliably less than the paper's +44%" in n for n in v.notes)
    like_paper = c08_scaling.judge(base, [(1e7, law8(1.5e7), 0.01)])
    assert like_paper.verdict == SUPPORTED and like_paper.numbers["paper_gain_in_interval"] is True
    # the fit's own uncertainty widens the interval: noisy baseline points (residuals) with the same variant loss
    rng = np.random.default_rng(0)
    noisy = [(n, law8(n) + rng.normal(0, 0.02)) for n in (1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8)]
    wide = c08_scaling.judge(noisy, [(1e7, law8(1.5e7), 0.01)])
    lo, hi = wide.numbers["variants"][0]["gain_interval"]
    assert hi - lo > like_paper.effects[0].hi - like_paper.effects[0].lo
    # a loss claim at heart: below the declared budget it is not reached
    assert c08_scaling.judge(base, small_gain, tokens_per_param=0.5, enough=75.0).verdict == NOT_REACHED


def test_claim9_pairs_seeds_by_number_in_the_analysis(tmp_path):
    """Issue 35: seed 1 of γ = 0.5 lost; the old analysis paired by position (γ=1 seed 1 with γ=0.5 seed 2)."""
    from smallinit.experiments.presets import AnchorArm

    def res(acc, lr=1e-3, s=0):
        answers = {k: 0.0 for k in c09_anchor.ANSWER_KINDS}
        return {
            "final": {"heldout_acc": acc, "in_acc": 0.99, "answers": answers},
            "heldout_correct": [1, 0] * 10,
            "config": {"lr": lr, "steps": 100, "n_layers": 1, "d_model": 16, "n_train": 64},
            "history": [],
        }

    small = {0: res(0.60), 1: res(0.90), 2: res(0.62)}
    std = {0: res(0.40), 2: res(0.41)}
    captured = {}

    def result(measured, v, **kw):
        captured["v"] = v
        return {"verdict": v.verdict}

    roles = {"gamma1": AnchorArm(1.0), "gamma0.5": AnchorArm(0.5)}
    ctx = SimpleNamespace(
        roles=roles, out=tmp_path, result=result, anchor_results_by_seed=lambda a: small if a.gamma == 1.0 else std
    )
    c09_anchor.analyse(ctx)
    v = captured["v"]
    assert v.numbers["paired_seeds"] == [0, 2]
    assert v.numbers["heldout_acc_gamma1"] == [0.60, 0.62] and v.numbers["heldout_acc_gamma0.5"] == [0.40, 0.41]
    assert v.verdict == SUPPORTED  # differences 0.20 and 0.21 (by position: 0.20 and 0.49)


def test_claims_10_and_11_are_not_reached_below_the_declared_budget():
    from smallinit.experiments.claims import c10_moe, c11_adam_eps

    behind = ([3.80, 3.81, 3.79], [3.60, 3.61, 3.62])  # the variant clearly behind
    assert c10_moe.judge(*behind, None).verdict == NOT_SUPPORTED
    assert c10_moe.judge(*behind, None, tokens_per_param=0.33, enough=75.0).verdict == NOT_REACHED
    assert c10_moe.judge(*behind, None, tokens_per_param=90.0, enough=75.0).verdict == NOT_SUPPORTED
    ahead = ([3.60, 3.61, 3.62], [3.80, 3.81, 3.79])
    assert c10_moe.judge(*ahead, None, tokens_per_param=90.0, enough=75.0).verdict == SUPPORTED
    assert c11_adam_eps.judge([3.05, 3.06], [3.00, 3.01], None, 0.14, 75.0).verdict == NOT_REACHED
    assert c11_adam_eps.judge([3.00, 3.01], [3.05, 3.06], None, 80.0, 75.0).verdict == SUPPORTED


LOSS_CLAIMS = (2, 3, 5, 8, 10, 11)
"""The loss claims judged from this package's own runs (claim 1, and claim 10 from a crossover, are judged by
:func:`smallinit.analysis.crossing.loss_claim_verdict` at the crossover's declared budget; claim 7's budget step is
tested on its judge, test_claim7_true_concentration_in_the_inner_bins_is_found)."""


class _Behind:
    """A ClaimContext stand-in on a real preset whose runs all say the claim's side is clearly *worse* (γ = 1 behind,
    ε = 1e-5 and Adam's default ε ahead, loss rising with γ): every loss effect reads "not supported" unless the budget
    rule steps in. Tokens per parameter come from the preset's definition alone."""

    def __init__(self, p, cid, out):
        from smallinit.experiments.claims import registry

        self.p, self.out, self.claim_id = p, out, cid
        self.roles = registry()[cid].arms(p)
        self.chosen, self.seeds, self.costs, self.noise_floor = {}, {}, {}, 0.01
        self.crossover_noise_floor = 0.01
        self.captured = None

    def tokens_per_param(self, a):
        from smallinit.experiments.claims.context import planned_tokens_per_param

        return planned_tokens_per_param(self.p, a)

    def budget(self, *arms):
        return min(self.tokens_per_param(a) for a in arms)

    def cost(self, a):
        return {}

    def lr_words(self):
        return "fixed"

    def loss(self, a) -> float:
        from smallinit.experiments.claims.context import planned_run_numbers

        n = planned_run_numbers(self.p, a)[1]
        return 2 + 30 * n**-0.3 + 0.5 * a.gamma - 0.3 * (a.eps > 1e-6) + 0.2 * (a.adam_eps is not None)

    def losses_by_seed(self, a):
        return {s: self.loss(a) + 0.001 * s for s in range(3)}

    def losses(self, a):
        return list(self.losses_by_seed(a).values())

    def loss_hw(self, a, b):
        return 0.01

    def probes_by_seed(self, a):
        rec = [
            {"step": s, "layers": [{"attn_norm": {"saturation": 0.3}, "mlp_norm": {"saturation": 0.3}}]}
            for s in (0, 1, 2, 5, 10, 20)
        ]
        return {0: rec, 1: rec, 2: rec}

    def probes(self, a):
        return self.probes_by_seed(a)[0]

    def runs(self, a):
        return []

    def names(self, *arms):
        return []

    def extra_crossovers(self, claim):
        return []

    @staticmethod
    def final_losses_by_seed(x, arm_name):
        return {int(s): r[-1] for s, r in x["losses"][arm_name].items()}

    @staticmethod
    def largest_budget_tokens_per_param(x):
        from smallinit.experiments.claims.context import ClaimContext

        return ClaimContext.largest_budget_tokens_per_param(x)  # the real reading of crossover.json

    def result(self, measured, v, **kw):
        from smallinit.experiments.claims.context import make_result

        self.captured = v
        return make_result(self.claim_id, "", measured, v, **{k: x for k, x in kw.items() if k != "plots"})


def _crossover_result(p, xps, out, declared):
    """Claims 2 / 5 from crossovers whose γ = 1 arms are clearly behind, at the crossovers' real tokens/param."""
    import dataclasses

    from smallinit.experiments.claims import c02_shrink as c2
    from smallinit.experiments.claims import c05_gamma as c5
    from smallinit.experiments.claims.context import planned_run_numbers
    from smallinit.experiments.crossover_plan import arm_settings
    from smallinit.experiments.presets import arm

    pairs = []
    for xp in xps:
        shape = {k: v for k, v in xp.overrides.items() if k.startswith("model.")}
        q = dataclasses.replace(p, sizes={**p.sizes, xp.size: {**p.sizes[xp.size], **shape}})
        n = planned_run_numbers(q, arm(xp.size, (1.0, 1e-12, "elementwise")))[1]
        tpp = xp.tokens_per_param or xp.tokens / n
        assert tpp < declared, (xp.claim, tpp)
        losses = {
            a: {str(s): [None, 4.0 + 0.5 * g - 1e-7 * n + 0.001 * s] for s in range(3)}
            for a, (g, e, gate) in arm_settings(xp).items()
        }
        pairs.append(
            (
                xp,
                {
                    "losses": losses,
                    "tokens_per_param": [tpp / 2, tpp],
                    "non_embedding_params": n,
                    "budgets": [{"tokens": 1}, {"tokens": int(tpp * n)}],
                },
            )
        )
    ctx = _Behind(p, xps[0].claim, out)
    return c5.analyse_crossover(ctx, *pairs[0]) if xps[0].claim == 5 else c2.analyse_crossovers(ctx, pairs)


@pytest.mark.parametrize("preset", ["demo", "cpu", "cpu-long", "gpu"])
def test_no_loss_claim_is_not_supported_below_the_declared_budget(preset, tmp_path):
    """Issue 35 acceptance, over the preset definitions: every loss claim a preset judges trains below its declared
    budget (the cpu short runs at 0.14–2.3 tokens per parameter, even gpu's at ≈ 14–30 against K = 75, cpu-long's
    crossovers for claims 2 and 5 at 10 and ≈ 19), and on data where the claim's side is clearly worse the verdict
    is "inconclusive — not reached at this budget" — while the same data with no budget declared (K = 0) reads "not
    supported": the budget rule, not the data, keeps the verdict off "not supported"."""
    import dataclasses

    from smallinit.experiments.claims import registry
    from smallinit.experiments.claims.context import planned_tokens_per_param
    from smallinit.experiments.presets import PRESETS

    p = PRESETS[preset]
    judged = []
    for q in (p, dataclasses.replace(p, enough=0.0)):
        verdicts = {}
        for cid in LOSS_CLAIMS:
            if cid not in p.claims:
                continue
            xps = [xp for xp in p.extra_crossovers if xp.claim == cid]
            if xps and cid in (2, 5):
                verdicts[cid] = _crossover_result(q, xps, tmp_path, p.enough)["verdict"]
                continue
            ctx = _Behind(q, cid, tmp_path)
            if not ctx.roles:
                continue  # claim 10 from its crossover: crossing.loss_claim_verdict's business
            assert min(planned_tokens_per_param(q, a) for a in ctx.roles.values()) < p.enough, (preset, cid)
            verdicts[cid] = registry()[cid].analyse(ctx)["verdict"]
        judged.append(verdicts)
    at_k, no_k = judged
    assert all(v == NOT_REACHED for v in at_k.values()), at_k
    # without a declared budget the constructed data are "not supported" (claim 8: its fits stay inconclusive; claim
    # 2 from short runs: every width trains the same tokens, so it is inconclusive for the confound)
    short2 = not any(xp.claim == 2 for xp in p.extra_crossovers)
    want = {c: INCONCLUSIVE if c == 8 or (c == 2 and short2) else NOT_SUPPORTED for c in no_k}
    assert no_k == want, no_k
    assert set(at_k) == {c for c in LOSS_CLAIMS if c in p.claims and (c != 10 or not p.extra_crossovers)}


def test_claim6_reads_every_seed_of_untuned_crossover_trunks_at_one_rate(tmp_path):
    """The trunk path: both seeds of paper vs γ-only, paired by seed; trunks at different rates are refused."""
    import json as _json

    import yaml

    steps = [0, 1, 2, 5, 10, 20, 50, 100, 200, 300, 400]
    rng = np.random.default_rng(5)

    def trunk(arm_name, seed, lr, shape):
        d = tmp_path / arm_name / f"seed{seed}" / "trunk"
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(yaml.safe_dump({"optim": {"lr": lr}}))
        recs = [
            {"step": t, "matrices": {n: {"srank": float(shape(t) * math.exp(rng.normal(0, 0.02)))} for n in NAMES}}
            for t in steps
        ]
        (d / "probes.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in recs))
        return d

    def make(lr_std):
        dirs = {}
        for s in (0, 1):
            dirs[("paper", s)] = trunk(f"paper-{lr_std}", s, 1e-3, fast_trajectory)
            dirs[("gamma-only", s)] = trunk(f"gonly-{lr_std}", s, lr_std, lambda t: 30.0)
        captured = {}

        def result(measured, v, **kw):
            captured["v"], captured["measured"], captured["runs"] = v, measured, kw.get("runs")
            return {"verdict": v.verdict if v else INCONCLUSIVE, "notes": kw.get("notes")}

        xp = SimpleNamespace(seeds=2, arms=("baseline", "paper", "gamma-only"), lrs=(), overrides={"probe.every": 100})
        ctx = SimpleNamespace(
            p=SimpleNamespace(crossover=xp, claims=(1, 6), base={}),
            out=tmp_path,
            result=result,
            crossover_trunk=lambda a, s: dirs.get((a, s)),
            crossover_trunk_tokens=lambda: 1000,
        )
        return c06_condensation.analyse(ctx), captured

    r, cap = make(1e-3)
    assert r["verdict"] == SUPPORTED and cap["v"].numbers["seeds"] == [0, 1]
    assert "constant rate 0.001 for both" in cap["measured"] and len(cap["runs"]) == 4
    r, cap = make(3e-3)  # the γ-only trunks at another rate: no comparison
    assert r["verdict"] == INCONCLUSIVE and any("different or unknown learning rates" in n for n in r["notes"])
