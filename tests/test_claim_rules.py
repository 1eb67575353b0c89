"""Issue 18: verdict rules that could pass by construction, each shown failing under a copy of its OLD rule on
constructed data where the claim is false, and giving the right verdict under the new rule (claims 2, 6, 8, 9)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from smallinit.experiments.claims import c02_shrink, c06_condensation, c08_scaling, c09_anchor
from smallinit.experiments.claims.rules import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Effect, combine, difference,
                                                is_finite, paired_effect, proportion_gap_ci)


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
    from smallinit.scaling import effective_size, fit_scaling_law

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


def test_claim2_can_pass_and_names_the_tokens_per_parameter_confound():
    nofix = {1e6: _e(0.30), 1e7: _e(0.05)}
    fix = {1e6: _e(0.20), 1e7: _e(0.25)}
    v = c02_shrink.judge(nofix, fix, {1e6: 0.25, 1e7: 0.025})
    assert v.verdict == SUPPORTED
    assert any("width is confounded with tokens per parameter: 0.25 at the smallest size to 0.025" in n
               for n in v.notes)
    assert v.numbers["tokens_per_param"] == {"1000000.0": 0.25, "10000000.0": 0.025}
    same = c02_shrink.judge(nofix, fix, {1e6: 20.0, 1e7: 20.5})  # equal budgets per parameter: no confound
    assert not any("confounded" in n for n in same.notes)


def test_claim2_analysis_takes_tokens_per_parameter_from_the_planned_costs(tmp_path):
    sizes = ("s", "m")
    params = {"s": 1e6, "m": 4e6}
    losses = {("s", "nofix", "0.5"): 3.0, ("s", "nofix", "1"): 2.7, ("m", "nofix", "0.5"): 2.8,
              ("m", "nofix", "1"): 2.78, ("s", "fix", "0.5"): 3.0, ("s", "fix", "1"): 2.8,
              ("m", "fix", "0.5"): 2.8, ("m", "fix", "1"): 2.55}
    p = SimpleNamespace(shrink_sizes=sizes, extra_crossovers=())
    roles = c02_shrink.arms(p)
    key = {id(a): tuple(role.split("/")) for role, a in roles.items()}
    captured = {}

    def result(measured, v, **kw):
        captured["v"] = v
        return {"verdict": v.verdict}

    ctx = SimpleNamespace(
        p=p, roles=roles, out=tmp_path,
        cost=lambda a: {"non_embedding_params": params[key[id(a)][0]], "tokens": 250_000},
        losses=lambda a: [losses[key[id(a)]]], loss_hw=lambda a, b: 0.01, names=lambda *a: [], result=result,
        extra_crossovers=lambda claim: [])
    assert c02_shrink.analyse(ctx)["verdict"] == SUPPORTED
    v = captured["v"]
    assert v.numbers["tokens_per_param"] == {"1000000.0": 0.25, "4000000.0": 0.0625}
    assert any("0.25 at the smallest size to 0.0625 at the largest" in n for n in v.notes)


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
    assert a.verdict == SUPPORTED  # it does condense after the first probe step
    assert b.value < 0 and b.verdict != SUPPORTED  # signed expansion: a monotone decrease is ≤ 0
    assert c.verdict != SUPPORTED
    assert v.numbers["steps_gamma1"] == {"ref_step": 10.0, "mid_step": 50.0, "end_step": 100.0}


def test_claim6_collapse_in_the_first_steps_is_not_condensation():
    """AdamW's first updates (≈ lr per entry) collapse a σ = 1/d matrix's stable rank within a few steps; after
    that the trajectory is flat. The old drop from init counted it; the new drop starts at the first probe."""
    rng = np.random.default_rng(1)
    small = {n: [40.0] + list(3 + rng.normal(0, 0.05, len(STEPS) - 1)) for n in NAMES}
    std = {n: list(40 + rng.normal(0, 0.05, len(STEPS))) for n in NAMES}
    assert old_claim6(small, std)[1] == SUPPORTED  # old part (a): "condenses"
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.effects[0].verdict == INCONCLUSIVE
    assert abs(v.effects[0].value) < 0.05
    assert v.verdict != SUPPORTED


def test_claim6_genuine_condense_then_expand_is_supported():
    rng = np.random.default_rng(2)
    shape = [30, 9, 7, 5, 3, 2, 3, 4, 5, 6, 8]
    small = {n: list(np.asarray(shape, float) * np.exp(rng.normal(0, 0.02, len(shape)))) for n in NAMES}
    std = {n: list(30 * np.exp(rng.normal(0, 0.02, len(shape)))) for n in NAMES}
    v = c06_condensation.judge(small, std, STEPS, STEPS)
    assert v.verdict == SUPPORTED
    assert v.numbers["condensation_gamma1"] == pytest.approx(math.log(9 / 2), abs=0.05)
    assert v.numbers["expansion_gamma1"] == pytest.approx(math.log(8 / 2), abs=0.05)
    assert c06_condensation.judge(std, small, STEPS, STEPS).verdict == NOT_SUPPORTED  # arms swapped


def test_claim6_stats_and_probe_table():
    s = c06_condensation.condensation_stats([0, 5, 10, 20, 40], [10, 8, 4, 2, 4])
    assert s["ref_step"] == 5 and s["mid_step"] == 20 and s["end_step"] == 40
    assert s["condensation"] == pytest.approx(math.log(8 / 2)) and s["expansion"] == pytest.approx(math.log(2))
    assert math.isnan(c06_condensation.condensation_stats([0, 5, 10], [10, 8, 4])["expansion"])  # too few steps
    recs = [{"step": 0, "matrices": {"blocks.0.q": {"srank": 5.0}, "emb": {"srank": 1.0}}},
            {"step": 10, "matrices": {"blocks.0.q": {"srank": 4.0}, "blocks.0.k": {"srank": 3.0}}}]
    steps, table = c06_condensation.srank_table(recs)
    assert steps == [0.0, 10.0]
    assert table["blocks.0.q"] == [5.0, 4.0] and math.isnan(table["blocks.0.k"][0]) and "emb" not in table


# ---- claim 8 ----------------------------------------------------------------------------------------------------

E, A, ALPHA = 2.0, 50.0, 0.3


def law(n: float) -> float:
    return E + A * n ** -ALPHA


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
    assert v2.verdict == INCONCLUSIVE and any("γ=1 reached only 90% in-distribution (worst of 2 seeds)" in n
                                              for n in v2.notes)


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
    from smallinit.errors import ConfigError
    from smallinit.experiments import anchor

    real = anchor.evaluate
    calls = []

    def fake(model, sets, trained):  # in-distribution accuracy 0 until the third evaluation (step 10)
        ev = real(model, sets, trained)
        calls.append(1)
        ev["in_acc"] = 0.97 if len(calls) >= 3 else 0.0
        return ev

    monkeypatch.setattr(anchor, "evaluate", fake)
    cfg = anchor.AnchorConfig(steps=40, eval_every=5, n_train=256, n_test=64, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32, batch_size=32, warmup_steps=2, stop_in_acc=0.95)
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
    rec = [{"optim_eps": {"matrices": {}}},
           {"optim_eps": {"matrices": {"blocks.0.attn.q": {"damping": 0.2}, "blocks.0.attn.k": {"damping": 0.4},
                                       "blocks.0.mlp.up": {"damping": 0.9}}}}]
    assert c11.first_damping(rec) == pytest.approx(0.3)
