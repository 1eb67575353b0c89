"""Verdict rules: constructed results with a clear effect, a reversed effect and an effect inside the noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smallinit.experiments.claims import (
    c01_loss,
    c02_shrink,
    c03_saturation,
    c04_sink,
    c05_gamma,
    c06_condensation,
    c07_token_bins,
    c08_scaling,
    c09_anchor,
)
from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Effect,
    combine,
    difference,
    effect_verdict,
    lower_is_better_effect,
    paired_effect,
)

# each claim's rule is ``judge`` in its module
judge_lower_loss = c01_loss.judge
judge_shrinking_advantage = c02_shrink.judge
judge_saturation = c03_saturation.judge
judge_sink = c04_sink.judge
judge_gamma_sweep = c05_gamma.judge
judge_condensation = c06_condensation.judge
trajectory_stats = c06_condensation.trajectory_stats
judge_token_bins = c07_token_bins.judge
judge_effective_size = c08_scaling.judge
judge_reasoning = c09_anchor.judge


def test_the_rule_has_three_outcomes():
    assert effect_verdict(Effect("x", 0.3, 0.1, 0.5)) == SUPPORTED
    assert effect_verdict(Effect("x", -0.3, -0.5, -0.1)) == NOT_SUPPORTED
    assert effect_verdict(Effect("x", 0.1, -0.1, 0.3)) == INCONCLUSIVE
    assert effect_verdict(Effect("x", 0.3)) == INCONCLUSIVE  # no noise estimate: never a verdict
    assert effect_verdict(Effect("x", 0.3, 0.1, math.inf)) == SUPPORTED
    assert combine([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert combine([SUPPORTED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE]) == NOT_SUPPORTED


@pytest.mark.parametrize(
    "variant,baseline,boot,expected",
    [
        ([3.50, 3.52], [3.70, 3.71], None, SUPPORTED),  # paired diffs 0.20, 0.19: t half-width 0.064
        ([3.80, 3.81], [3.60, 3.62], None, NOT_SUPPORTED),  # reversed, beyond the t-interval
        ([3.60, 3.70], [3.64, 3.69], None, INCONCLUSIVE),  # diffs +0.04, −0.01
        ([3.50], [3.70], 0.05, SUPPORTED),  # one seed: the bootstrap interval decides
        ([3.50], [3.70], 0.30, INCONCLUSIVE),
        ([3.50], [3.70], None, INCONCLUSIVE),  # one seed, no bootstrap: no verdict
        ([3.50, 3.52], [3.70, 3.71], 0.5, INCONCLUSIVE),  # the larger of the two noise estimates counts
    ],
)
def test_lower_loss_claim(variant, baseline, boot, expected):
    v = judge_lower_loss(variant, baseline, boot)
    assert v.verdict == expected
    assert v.effects[0].value == pytest.approx(np.mean(baseline) - np.mean(variant))


def test_two_seed_interval_is_a_paired_t_interval_not_the_range():
    """Seed-paired differences 0.10 and 0.14 with arms whose seed spread is 0.04: the old rule (effect ± range over
    seeds) gave [+0.08, +0.16] → "supported"; the 95% t-interval with 1 degree of freedom is ±0.254."""
    variant, baseline = [3.50, 3.46], [3.60, 3.60]
    old_half = max(max(variant) - min(variant), max(baseline) - min(baseline))
    assert 0.12 - old_half > 0  # the old rule's verdict would have been "supported"
    e = lower_is_better_effect("l", variant, baseline)
    assert e.value == pytest.approx(0.12)
    assert e.hi - e.value == pytest.approx(12.706 * 0.028284 / math.sqrt(2), rel=1e-3)
    assert e.verdict == INCONCLUSIVE


def test_seed_noise_floor_pools_the_seed_variance_and_bounds_one_seed_verdicts():
    from smallinit.experiments.claims.rules import seed_noise_floor

    assert seed_noise_floor([[1.0], [2.0]]) is None  # no arm with two seeds: no floor
    # s² = (0.005² · 2 + 0.01² · 2) / 2 → s = 0.0079 on 2 degrees of freedom; floor = t_{2, 0.975} · √2 · s
    floor = seed_noise_floor([[1.00, 1.01], [2.00, 2.02]])
    assert floor == pytest.approx(4.3027 * math.sqrt(2) * math.sqrt((2 * 0.005**2 + 2 * 0.01**2) / 2), rel=1e-4)
    # a one-seed gap of 0.02 with a tight token bootstrap (±0.005) is below this floor: inconclusive
    assert lower_is_better_effect("l", [3.50], [3.52], max(0.005, floor)).verdict == INCONCLUSIVE
    assert lower_is_better_effect("l", [3.50], [3.52], 0.005).verdict == SUPPORTED


def test_paired_bootstrap_over_units():
    rng = np.random.default_rng(0)
    base = rng.normal(0.3, 0.05, 12)
    assert paired_effect("s", base + 0.2, base, "layers").verdict == SUPPORTED
    assert paired_effect("s", base - 0.2, base, "layers").verdict == NOT_SUPPORTED
    mixed = base + np.where(np.arange(12) % 2 == 0, 0.2, -0.2)
    assert paired_effect("s", mixed, base, "layers").verdict == INCONCLUSIVE


def test_sink_claim_three_outcomes():
    """Three seeds of two layers each ({seed: [layer shares]}): a t-interval over the seed-paired layer means."""
    std = {0: [0.05, 0.06], 1: [0.05, 0.07], 2: [0.06, 0.05]}
    small = {0: [0.4, 0.5], 1: [0.45, 0.5], 2: [0.42, 0.47]}
    assert judge_sink(std, small, {0: [0.05, 0.06], 1: [0.04, 0.05], 2: [0.05, 0.05]}).verdict == SUPPORTED
    low = {0: [0.01, 0.02], 1: [0.01, 0.02], 2: [0.02, 0.01]}
    assert judge_sink(std, low, {0: [0.0, 0.01], 1: [0.0, 0.01], 2: [0.01, 0.0]}).verdict == NOT_SUPPORTED
    mixed = {0: [0.3, 0.2], 1: [0.0, 0.01], 2: [0.2, 0.01]}
    assert judge_sink(std, mixed, {0: [0.01, 0.2], 1: [0.3, 0.01], 2: [0.0, 0.2]}).verdict == INCONCLUSIVE
    # one run of 4 layers (a list of layers is seed 0): never a verdict from the layers of one run
    one = judge_sink([0.05, 0.06, 0.05, 0.07], [0.4, 0.5, 0.45, 0.5], [0.05, 0.06, 0.04, 0.05])
    assert one.verdict == INCONCLUSIVE and any("needs ≥ 3" in n for n in one.notes)


def test_saturation_claim_needs_both_parts():
    steps = [0, 10, 20, 40, 80]
    sat_big_eps = {s: (steps, [0.3 + 0.01 * s, 0.35, 0.3, 0.32, 0.34]) for s in range(3)}  # ε-dominated (≤ 0.5)
    sat_small_eps = {s: (steps, [1.0] * 5) for s in range(3)}
    good_loss = Effect("loss", 0.1, 0.05, 0.15)
    assert judge_saturation(sat_big_eps, sat_small_eps, good_loss).verdict == SUPPORTED
    assert judge_saturation(sat_big_eps, sat_small_eps, Effect("loss", -0.1, -0.15, -0.05)).verdict == NOT_SUPPORTED
    assert judge_saturation(sat_big_eps, sat_small_eps, Effect("loss", 0.01, -0.05, 0.07)).verdict == INCONCLUSIVE


def test_gamma_sweep_claim():
    hw = 0.02
    clear = {0.25: [4.0], 0.5: [3.8], 0.75: [3.65], 1.0: [3.6], 1.25: [3.7], 1.5: [3.9]}
    assert judge_gamma_sweep(clear, hw, hw).verdict == SUPPORTED
    reversed_ = {0.25: [3.5], 0.5: [3.4], 0.75: [3.6], 1.0: [3.7], 1.25: [3.8], 1.5: [3.6]}
    assert judge_gamma_sweep(reversed_, hw, hw).verdict == NOT_SUPPORTED
    flat = {g: [3.6 + 0.005 * i] for i, g in enumerate((0.25, 0.5, 0.75, 1.0, 1.25, 1.5))}
    assert judge_gamma_sweep(flat, hw, hw).verdict == INCONCLUSIVE
    diverged = {**clear, 1.5: [math.inf]}
    assert judge_gamma_sweep(diverged, hw, hw).verdict == SUPPORTED


def test_condensation_claim():
    assert trajectory_stats([10, 4, 2, 5]) == pytest.approx({"drop": 0.8, "rebound": 1.5})
    rng = np.random.default_rng(1)
    names = [f"blocks.{i}.attn.{m}" for i in range(3) for m in "qkv"]
    flat = {n: list(10 + rng.normal(0, 0.1, 6)) for n in names}
    cond = {n: [10, 6, 3, 2, 3, 5 + rng.normal(0, 0.1)] for n in names}
    assert judge_condensation(cond, flat).verdict == SUPPORTED
    assert judge_condensation(flat, cond).verdict == NOT_SUPPORTED
    # effects inside the noise: 3 seeds per arm, a t-interval over the seed-paired means (one seed's bootstrap over
    # the matrices of one run holds no seed noise, see claim 6's notes)
    flat3 = {s: {n: list(10 + rng.normal(0, 0.1, 6)) for n in names} for s in range(3)}
    other3 = {s: {n: list(10 + rng.normal(0, 0.1, 6)) for n in names} for s in range(3)}
    assert judge_condensation(flat3, other3).verdict == INCONCLUSIVE


def _bins(means, hw=0.01):
    names = ["easy", "moderate", "hard", "very hard", "extreme"]
    return [
        {"bin": i, "name": n, "delta_sym": {"mean": m, "ci95": [m - hw, m + hw]}}
        for i, (n, m) in enumerate(zip(names, means))
    ]


def test_token_bins_claim():
    assert judge_token_bins(_bins([0.0, 0.05, 0.08, 0.06, 0.01])).verdict == SUPPORTED
    assert judge_token_bins(_bins([0.10, 0.0, -0.02, 0.0, 0.12])).verdict == NOT_SUPPORTED
    assert judge_token_bins(_bins([0.0, 0.05, 0.08, 0.06, 0.01], hw=0.2)).verdict == INCONCLUSIVE


def test_shrinking_advantage_claim():
    def e(v, h=0.01):
        return Effect("A", v, v - h, v + h)

    clear = judge_shrinking_advantage({1e6: e(0.2), 1e7: e(0.05)}, {1e6: e(0.2), 1e7: e(0.25)})
    assert clear.verdict == SUPPORTED
    rev = judge_shrinking_advantage({1e6: e(0.05), 1e7: e(0.2)}, {1e6: e(0.2), 1e7: e(0.1)})
    assert rev.verdict == NOT_SUPPORTED
    noisy = judge_shrinking_advantage({1e6: e(0.2, 0.3), 1e7: e(0.05, 0.3)}, {1e6: e(0.2, 0.3), 1e7: e(0.25, 0.3)})
    assert noisy.verdict == INCONCLUSIVE
    assert difference("d", e(0.3, 0.03), e(0.1, 0.04)).hi == pytest.approx(0.25)


def test_effective_size_claim():
    E, A, alpha = 2.0, 50.0, 0.3
    Ns = [1e5, 1e6, 1e7, 4e7]  # 4 sizes: a 3-size fit interpolates and decides nothing (claim 8's rule)
    base = [(n, E + A * n**-alpha) for n in Ns]
    better = [(1e7, E + A * (2e7) ** -alpha, 0.005)]  # worth twice the size
    v = judge_effective_size(base, better)
    assert v.verdict == SUPPORTED and v.numbers["variants"][-1]["gain"] == pytest.approx(1.0, rel=1e-3)
    worse = [(1e7, E + A * (5e6) ** -alpha, 0.005)]
    assert judge_effective_size(base, worse).verdict == NOT_SUPPORTED
    noisy = [(1e7, E + A * (1.05e7) ** -alpha, 0.05)]
    assert judge_effective_size(base, noisy).verdict == INCONCLUSIVE
    assert judge_effective_size(base[:2], better).verdict == INCONCLUSIVE  # fewer than 3 sizes: no fit


def test_reasoning_claim():
    ones, zeros = [1] * 900 + [0] * 100, [1] * 100 + [0] * 900
    assert judge_reasoning([0.9], [0.1], ones, zeros).verdict == SUPPORTED
    assert judge_reasoning([0.1], [0.9], zeros, ones).verdict == NOT_SUPPORTED
    half_a, half_b = [1, 0] * 20, [0, 1] * 20
    assert judge_reasoning([0.5], [0.5], half_a, half_b).verdict == INCONCLUSIVE
    assert judge_reasoning([0.9, 0.2], [0.1, 0.3]).verdict == INCONCLUSIVE  # gap inside the seed spread
