"""Scaling-law fit L(N) = E + A·N^(−α) and effective model size (DESIGN.md §2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from smallinit.analysis.scaling import EffectiveSize, ScalingError, ScalingFit, effective_size, fit_scaling_law, predict
from smallinit.core.errors import SmallinitError


def _law(N: np.ndarray, E: float, A: float, alpha: float) -> np.ndarray:
    return E + A * N ** (-alpha)


def test_fit_recovers_exact_parameters_in_raw_parameter_counts() -> None:
    N = np.geomspace(1e6, 3e8, 6)  # non-embedding parameters, Chinchilla-like constants
    E, A, alpha = 1.8, 200.0, 0.3
    fit = fit_scaling_law(N, _law(N, E, A, alpha))
    assert fit.E == pytest.approx(E, rel=1e-6)
    assert fit.A == pytest.approx(A, rel=1e-6)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert max(abs(r) for r in fit.residuals) < 1e-9
    assert (fit.n_points, fit.n_sizes) == (6, 6)
    assert fit.N_range == (pytest.approx(1e6), pytest.approx(3e8))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("E,A,alpha", [(2.0, 10.0, 0.5), (2.0, 5.0, 0.7), (1.2, 3.0, 0.35)])
def test_fit_recovers_parameters_from_noisy_data(seed: int, E: float, A: float, alpha: float) -> None:
    # 6 sizes over four decades (N in millions of parameters), 0.2% multiplicative noise
    N = np.geomspace(1.0, 1e4, 6)
    L_true = _law(N, E, A, alpha)
    L = L_true * (1 + 0.002 * np.random.default_rng(seed).standard_normal(N.size))
    fit = fit_scaling_law(N, L)
    assert fit.E == pytest.approx(E, rel=0.02)
    assert fit.A == pytest.approx(A, rel=0.02)
    assert fit.alpha == pytest.approx(alpha, rel=0.02)
    # residuals are reported in input order and are L - L(N)
    np.testing.assert_allclose(fit.residuals, L - predict(fit, N), atol=1e-12)
    assert fit.rmse < 0.01 * L.mean()
    assert fit.r2 > 0.999


def test_fit_is_equivariant_under_change_of_units() -> None:
    N = np.geomspace(1.0, 1e4, 6)
    L = _law(N, 2.0, 5.0, 0.7) * (1 + 0.002 * np.random.default_rng(0).standard_normal(6))
    f1 = fit_scaling_law(N, L)
    f2 = fit_scaling_law(N * 1e6, L)  # millions -> raw counts
    assert f2.E == pytest.approx(f1.E, rel=1e-6)
    assert f2.alpha == pytest.approx(f1.alpha, rel=1e-6)
    assert f2.A == pytest.approx(f1.A * 1e6**f1.alpha, rel=1e-5)


def test_fit_respects_bounds() -> None:
    # data that decrease too fast for alpha <= 3 and flatten below 0: bounds must hold
    N = np.array([1.0, 2.0, 4.0, 8.0])
    fit = fit_scaling_law(N, np.array([5.0, 0.5, 0.05, 0.01]))
    assert fit.E >= 0.0 and fit.A > 0.0 and 0.0 < fit.alpha <= 3.0
    # losses rising with size: the best law is flat (A at its floor), still within bounds
    fit = fit_scaling_law(np.array([1e6, 1e7, 1e8]), np.array([3.0, 3.1, 3.2]))
    assert fit.E >= 0.0 and fit.A > 0.0 and 0.0 < fit.alpha <= 3.0
    assert fit.r2 < 0.5


def test_repeated_sizes_count_once() -> None:
    N = np.array([1e6, 1e6, 1e7, 1e7, 1e8, 1e8])
    L = _law(N, 2.0, 50.0, 0.3) + np.array([0.01, -0.01] * 3)
    fit = fit_scaling_law(N, L)
    assert (fit.n_points, fit.n_sizes) == (6, 3)
    assert fit.E == pytest.approx(2.0, rel=1e-6)  # symmetric seed noise cancels at each size


@pytest.mark.parametrize(
    "N,L", [([1e6, 1e7], [3.0, 2.8]), ([1e6, 1e6, 1e7, 1e7, 1e7], [3.0, 3.01, 2.8, 2.79, 2.81]), ([5e6], [3.0])]
)
def test_fewer_than_three_sizes_is_refused(N: list[float], L: list[float]) -> None:
    with pytest.raises(ScalingError, match=">= 3 distinct sizes") as info:
        fit_scaling_law(N, L)
    assert isinstance(info.value, SmallinitError)


def test_bad_points_are_refused() -> None:
    with pytest.raises(ScalingError, match="positive"):
        fit_scaling_law([0.0, 1.0, 2.0], [3.0, 2.0, 1.0])
    with pytest.raises(ScalingError, match="finite"):
        fit_scaling_law([1.0, 2.0, 3.0], [3.0, math.nan, 1.0])
    with pytest.raises(ScalingError, match="losses"):
        fit_scaling_law([1.0, 2.0, 3.0], [3.0, 2.0])


def _fit(E: float = 2.0, A: float = 400.0, alpha: float = 0.3) -> ScalingFit:
    N = np.geomspace(1e7, 1e9, 5)
    return fit_scaling_law(N, _law(N, E, A, alpha))


def test_predict_scalar_and_array() -> None:
    fit = _fit()
    assert isinstance(predict(fit, 1e8), float)
    assert predict(fit, 1e8) == pytest.approx(2.0 + 400.0 * 1e8**-0.3, rel=1e-9)
    out = predict(fit, np.array([1e7, 1e9]))
    np.testing.assert_allclose(out, _law(np.array([1e7, 1e9]), 2.0, 400.0, 0.3), rtol=1e-9)


def test_effective_size_is_the_exact_inverse() -> None:
    fit = _fit()
    # a variant of 1e8 parameters reaching the baseline loss of 1.44e8 parameters -> gain 44%
    L_v = predict(fit, 1.44e8)
    eff = effective_size(fit, 1e8, L_v)
    assert isinstance(eff, EffectiveSize)
    assert eff.N_eff == pytest.approx(1.44e8, rel=1e-9)
    assert eff.gain == pytest.approx(0.44, rel=1e-8)
    assert eff.extrapolated is False
    assert "within" in eff.note
    # by hand: N_eff = (A / (L_v - E))^(1/alpha)
    assert eff.N_eff == pytest.approx((fit.A / (L_v - fit.E)) ** (1 / fit.alpha), rel=1e-12)
    # a variant equal to the baseline gains nothing; a worse one has a negative gain
    assert effective_size(fit, 3e8, predict(fit, 3e8)).gain == pytest.approx(0.0, abs=1e-9)
    assert effective_size(fit, 3e8, predict(fit, 3e8) + 0.01).gain < 0


def test_effective_size_flags_extrapolation() -> None:
    fit = _fit()
    eff = effective_size(fit, 1e9, predict(fit, 5e9))
    assert eff.N_eff == pytest.approx(5e9, rel=1e-9)
    assert eff.extrapolated is True
    assert "outside" in eff.note


def test_variant_at_or_below_E_gets_a_statement_not_a_number() -> None:
    fit = _fit()
    for L_v in (fit.E, fit.E - 0.1):
        eff = effective_size(fit, 1e8, L_v)
        assert eff.N_eff is None and eff.gain is None
        assert eff.extrapolated is True
        assert "undefined" in eff.note and "E =" in eff.note
    # barely above E: the number would overflow -> also a statement
    eff = effective_size(fit, 1e8, fit.E + 1e-300)
    assert eff.N_eff is None and eff.gain is None and eff.note


def test_results_are_json_serialisable() -> None:
    fit = _fit()
    d = json.loads(json.dumps(fit.to_dict(), allow_nan=False))
    assert d["E"] == pytest.approx(2.0, rel=1e-6) and len(d["residuals"]) == 5
    assert d["formula"] == "L(N) = E + A * N^(-alpha)"
    e = json.loads(json.dumps(effective_size(fit, 1e8, fit.E - 1).to_dict(), allow_nan=False))
    assert e["N_eff"] is None and isinstance(e["note"], str)
    flat = fit_scaling_law([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])  # SS_tot = 0 -> r2 undefined
    assert json.loads(json.dumps(flat.to_dict(), allow_nan=False))["r2"] is None
