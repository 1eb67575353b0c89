"""Token-level comparison math (DESIGN.md §2): Δ_sym, difficulty bins, bootstrap, per-source split."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smallinit.analysis.compare import (
    bin_names,
    bootstrap_ci,
    compare_token_scores,
    delta_sym,
    delta_sym_from_logp,
    difficulty_bins,
)

probs = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=50)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_delta_sym_antisymmetric_and_bounded(data: st.DataObject) -> None:
    pa = np.array(data.draw(probs))
    pb = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=pa.size, max_size=pa.size)))
    d = delta_sym(pa, pb)
    assert d.shape == pa.shape
    assert np.all(np.isfinite(d))
    assert np.all((d >= -1.0) & (d <= 1.0))
    np.testing.assert_array_equal(delta_sym(pb, pa), -d)
    np.testing.assert_array_equal(delta_sym(pa, pa), np.zeros_like(pa))


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-300, 1.0), st.floats(1e-300, 1.0))
def test_delta_sym_matches_direct_formula(pa: float, pb: float) -> None:
    direct = (pa - pb) / (pa + pb)
    assert delta_sym([pa], [pb])[0] == pytest.approx(direct, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e4, 0.0), st.floats(-1e4, 0.0))
def test_tanh_identity_from_log_probs(la: float, lb: float) -> None:
    d = delta_sym_from_logp([la], [lb])[0]
    assert d == pytest.approx(math.tanh((la - lb) / 2), abs=1e-15)
    if max(la, lb) > -700:  # probabilities representable: compare with the ratio form
        pa, pb = math.exp(la), math.exp(lb)
        assert d == pytest.approx((pa - pb) / (pa + pb), rel=1e-9, abs=1e-12)


def test_delta_sym_edge_values() -> None:
    np.testing.assert_allclose(delta_sym([1.0, 0.0, 0.0, 0.3], [0.0, 1.0, 0.0, 0.1]), [1.0, -1.0, 0.0, 0.5])
    # both underflow as probabilities, but the log form keeps the ratio
    d = delta_sym_from_logp([-1000.0], [-1001.0])[0]
    assert d == pytest.approx(math.tanh(0.5))
    assert delta_sym_from_logp([-math.inf], [-math.inf])[0] == 0.0
    assert delta_sym_from_logp([-1.0], [-math.inf])[0] == 1.0
    # torch tensors accepted
    assert delta_sym(torch.tensor([0.3]), torch.tensor([0.1]))[0] == pytest.approx(0.5)


def test_delta_sym_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="length"):
        delta_sym_from_logp([-1.0, -2.0], [-1.0])
    with pytest.raises(ValueError, match=">= 0"):
        delta_sym([-0.1], [0.2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 20.0), min_size=1, max_size=200), st.integers(1, 8), st.data())
def test_bins_partition_and_are_ordered(la: list[float], n_bins: int, data: st.DataObject) -> None:
    lb = data.draw(st.lists(st.floats(0.0, 20.0), min_size=len(la), max_size=len(la)))
    idx, edges = difficulty_bins(la, lb, n_bins)
    d = (np.array(la) + np.array(lb)) / 2
    assert idx.shape == d.shape
    assert idx.min() >= 0 and idx.max() < n_bins  # every token in exactly one bin
    assert len(edges) == n_bins + 1 and np.all(np.diff(edges) >= 0)
    for k in range(n_bins):
        m = idx == k
        if m.any():
            assert d[m].min() >= edges[k] and d[m].max() <= edges[k + 1]
        later = idx > k
        if m.any() and later.any():
            assert d[m].max() <= d[later].min()  # ordered by difficulty
    for v in np.unique(d):  # equal difficulty -> same bin
        assert np.unique(idx[d == v]).size == 1


def test_bins_have_equal_counts_for_distinct_difficulties() -> None:
    rng = np.random.default_rng(0)
    la, lb = rng.exponential(2.0, 1000), rng.exponential(2.0, 1000)
    idx, _ = difficulty_bins(la, lb, 5)
    np.testing.assert_array_equal(np.bincount(idx, minlength=5), [200] * 5)


def test_bin_names() -> None:
    assert bin_names(5) == ["easy", "moderate", "hard", "very hard", "extreme"]
    assert bin_names(3) == ["q1", "q2", "q3"]


def test_bootstrap_ci_contains_mean_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(1)
    widths = []
    for n in (50, 500, 5000):
        v = rng.normal(0.3, 1.0, n)
        lo, hi = bootstrap_ci(v, n_boot=500, seed=0)
        assert lo < v.mean() < hi
        widths.append(hi - lo)
        # roughly the normal-theory width 2 * 1.96 * sd / sqrt(n)
        assert hi - lo == pytest.approx(2 * 1.96 * v.std() / math.sqrt(n), rel=0.25)
    assert widths[0] > widths[1] > widths[2]


def test_bootstrap_ci_is_deterministic_and_level_ordered() -> None:
    v = np.random.default_rng(2).normal(size=300)
    assert bootstrap_ci(v, seed=3) == bootstrap_ci(v, seed=3)
    lo90, hi90 = bootstrap_ci(v, level=0.90)
    lo99, hi99 = bootstrap_ci(v, level=0.99)
    assert lo99 < lo90 and hi90 < hi99
    assert bootstrap_ci([2.0]) == (2.0, 2.0)
    with pytest.raises(ValueError, match="empty"):
        bootstrap_ci([])


def _synthetic_scores(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Baseline losses over a wide range; the variant gains mainly on middle-difficulty tokens."""
    rng = np.random.default_rng(seed)
    loss_b = rng.gamma(2.0, 1.5, n)
    gain = 0.3 * np.exp(-((loss_b - 4.0) ** 2) / 2.0) + 0.02 * rng.normal(size=n)
    loss_a = np.clip(loss_b - gain, 0.0, None)
    return -loss_a, -loss_b


def test_compare_token_scores_structure_and_values() -> None:
    logp_a, logp_b = _synthetic_scores(2000)
    out = compare_token_scores(logp_a, logp_b, n_bins=5, n_boot=200)
    json.dumps(out, allow_nan=False)  # JSON-serialisable, no NaN
    assert out["n_tokens"] == 2000
    assert [b["name"] for b in out["bins"]] == ["easy", "moderate", "hard", "very hard", "extreme"]
    assert sum(b["count"] for b in out["bins"]) == 2000

    dsym = np.tanh((logp_a - logp_b) / 2)
    gain = logp_a - logp_b  # ℓ_B − ℓ_A
    assert out["overall"]["delta_sym"]["mean"] == pytest.approx(dsym.mean())
    assert out["overall"]["loss_gain"]["mean"] == pytest.approx(gain.mean())
    assert out["overall"]["loss_a"] == pytest.approx(-logp_a.mean())
    lo, hi = out["overall"]["delta_sym"]["ci95"]
    assert lo < out["overall"]["delta_sym"]["mean"] < hi
    # bin means recomputed by hand
    idx, edges = difficulty_bins(-logp_a, -logp_b, 5)
    assert out["edges"] == pytest.approx(list(edges))
    for k, b in enumerate(out["bins"]):
        assert b["count"] == int((idx == k).sum())
        assert b["loss_gain"]["mean"] == pytest.approx(gain[idx == k].mean())
        assert b["difficulty"] == pytest.approx([edges[k], edges[k + 1]])
        lo, hi = b["loss_gain"]["ci95"]
        assert lo <= b["loss_gain"]["mean"] <= hi
    # the constructed gain peaks in the middle: the easy bin gains least, a middle bin most
    gains = [b["loss_gain"]["mean"] for b in out["bins"]]
    assert gains[0] < max(gains[1:4])
    # swapping A and B flips the signs
    swapped = compare_token_scores(logp_b, logp_a, n_bins=5, n_boot=200)
    assert swapped["overall"]["delta_sym"]["mean"] == pytest.approx(-out["overall"]["delta_sym"]["mean"])


def test_compare_token_scores_by_source() -> None:
    n = 600
    logp_b = -np.random.default_rng(4).gamma(2.0, 1.5, n)
    sources = np.array(["en", "zh"] * (n // 2))
    logp_a = logp_b.copy()
    logp_a[sources == "zh"] += 0.2  # A better on zh only (ℓ_A = ℓ_B − 0.2)
    logp_a = np.minimum(logp_a, 0.0)
    out = compare_token_scores(logp_a, logp_b, sources=sources, n_boot=200)
    json.dumps(out, allow_nan=False)
    by = out["by_source"]
    assert set(by) == {"en", "zh"}
    assert by["en"]["overall"]["count"] + by["zh"]["overall"]["count"] == n
    assert by["en"]["overall"]["loss_gain"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert by["en"]["overall"]["delta_sym"]["ci95"] == pytest.approx([0.0, 0.0], abs=1e-12)
    zh_gain = (logp_a - logp_b)[sources == "zh"].mean()
    assert by["zh"]["overall"]["loss_gain"]["mean"] == pytest.approx(zh_gain)
    assert by["zh"]["overall"]["delta_sym"]["mean"] > 0
    # per-source bins use the global edges and partition that source's tokens
    for name in ("en", "zh"):
        assert sum(b["count"] for b in by[name]["bins"]) == by[name]["overall"]["count"]
        assert [b["difficulty"] for b in by[name]["bins"]] == [b["difficulty"] for b in out["bins"]]


def test_compare_token_scores_empty_bins_are_none() -> None:
    # 3 tokens, 5 bins: some bins are empty and report None, not NaN
    out = compare_token_scores([-1.0, -2.0, -3.0], [-1.5, -2.5, -3.5], n_bins=5, n_boot=50)
    json.dumps(out, allow_nan=False)
    empty = [b for b in out["bins"] if b["count"] == 0]
    assert empty and all(b["delta_sym"]["mean"] is None for b in empty)
    assert sum(b["count"] for b in out["bins"]) == 3


def test_compare_token_scores_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="<= 0"):
        compare_token_scores([0.5], [-1.0])
    with pytest.raises(ValueError, match="finite"):
        compare_token_scores([-math.inf], [-1.0])
    with pytest.raises(ValueError, match="sources"):
        compare_token_scores([-1.0, -2.0], [-1.0, -2.0], sources=["en"])


def test_reference_binning_shows_no_trend_where_mean_difficulty_binning_invents_one():
    """Two models of EQUAL mean loss, B's per-token losses noisier: binning by (ℓ_A + ℓ_B)/2 puts B's lucky tokens
    in the easy bin and its unlucky ones in the extreme bin (a spurious trend); binning by an independent
    reference model's loss (DESIGN: 'Token bins by an independent reference') shows none."""
    from smallinit.analysis.compare import compare_token_scores

    rng = np.random.default_rng(0)
    n = 20_000
    true = rng.uniform(3.0, 8.0, n)  # per-token difficulty shared by every model
    loss_a = np.maximum(true + rng.normal(0, 0.3, n), 1e-3)
    loss_b = np.maximum(true + rng.normal(0, 1.0, n), 1e-3)  # equal mean, noisier
    loss_ref = np.maximum(true + rng.normal(0, 0.6, n), 1e-3)
    old = compare_token_scores(-loss_a, -loss_b, n_boot=200)
    new = compare_token_scores(-loss_a, -loss_b, n_boot=200, reference_logp=-loss_ref)
    old_d = [b["delta_sym"]["mean"] for b in old["bins"]]
    new_d = [b["delta_sym"]["mean"] for b in new["bins"]]
    assert old_d[0] < -0.1 and old_d[-1] > 0.1  # the artefact: B "wins" easy tokens, A "wins" extreme ones
    assert max(abs(d) for d in new_d) < 0.03  # no trend by the independent reference
    assert abs(new_d[0] - new_d[-1]) < 0.04
    assert [b["name"] for b in new["bins_mean_difficulty"]] == [b["name"] for b in old["bins"]]
    assert new["difficulty"].startswith("reference")


def test_window_bootstrap_is_wider_than_token_bootstrap_when_windows_share_context():
    from smallinit.analysis.compare import compare_token_scores

    rng = np.random.default_rng(1)
    win = np.repeat(np.arange(40), 64)
    shift = rng.normal(0, 0.5, 40)[win]  # A is better in some windows, worse in others
    loss_b = rng.uniform(1, 5, win.size)
    loss_a = np.maximum(loss_b - shift + rng.normal(0, 0.05, win.size), 1e-3)
    tok = compare_token_scores(-loss_a, -loss_b, n_boot=300)["overall"]["loss_gain"]["ci95"]
    byw = compare_token_scores(-loss_a, -loss_b, n_boot=300, windows=win)["overall"]["loss_gain"]["ci95"]
    assert (byw[1] - byw[0]) > 4 * (tok[1] - tok[0])


def test_the_bins_figure_names_what_it_binned_by():
    """With a reference model the primary bins are its loss quantiles; the figure's axis must say so (it said
    (ℓ_A + ℓ_B)/2, the secondary table's binning, under reference bins)."""
    from smallinit.core.figures import difficulty_label

    rng = np.random.default_rng(0)
    a, b, r = (np.log(rng.uniform(0.05, 1.0, 400)) for _ in range(3))
    assert "(ℓ_A + ℓ_B)/2" in difficulty_label(compare_token_scores(a, b, n_bins=4, n_boot=50))
    assert "reference" in difficulty_label(compare_token_scores(a, b, n_bins=4, n_boot=50, reference_logp=r))
