"""The residual-flow law at init (issue #44): the exponent of flow on width per γ, its interval over seeds, and a rule
that can fail and can pass."""

from __future__ import annotations

import numpy as np

from smallinit.analysis.loss_verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from smallinit.audit.flow_law import flow_exponents, judge_flow_law, measure_flow

WIDTHS = (768, 1024, 1536, 2048)


def _flows(exponent: float, noise: float, seeds: int = 3, seed: int = 0) -> dict[int, dict[int, float]]:
    rng = np.random.default_rng(seed)
    return {
        s: {w: 0.3 * w**exponent * float(np.exp(noise * rng.standard_normal())) for w in WIDTHS} for s in range(seeds)
    }


def test_the_law_holds_where_the_exponent_is_1_minus_gamma_and_fails_where_it_is_not():
    for gamma in (0.5, 1.0, 1.5):
        assert flow_exponents(_flows(1 - gamma, 0.01), gamma, "attn").verdict == SUPPORTED
        off = flow_exponents(_flows(1 - gamma + 0.5, 0.01), gamma, "attn")
        assert off.verdict == NOT_SUPPORTED and off.value > off.predicted + 0.4
    noisy = flow_exponents(_flows(0.0, 0.4, seed=0), 1.0, "attn")
    assert noisy.verdict == INCONCLUSIVE and noisy.lo < -0.15 < 0.15 < noisy.hi
    assert judge_flow_law(0.1, 0.2, 0.0) == INCONCLUSIVE and judge_flow_law(-0.1, 0.1, 0.0) == SUPPORTED


def test_measure_flow_reads_every_block_at_init():
    """A tiny stand-in size (the paper sizes are measured by benchmarks/flow_law.py, not in tests)."""
    f = measure_flow("tiny", 1.0, 0, layers=2, vocab=64, batch=1, seq=16)
    assert len(f["attn"]) == len(f["mlp"]) == 2 and all(v > 0 for v in f["attn"] + f["mlp"])
    g = measure_flow("tiny", 0.5, 0, layers=2, vocab=64, batch=1, seq=16)
    assert g["mlp"][0] > f["mlp"][0]  # a larger init: a larger branch relative to the stream at this width
