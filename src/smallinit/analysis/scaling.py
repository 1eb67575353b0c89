"""Scaling-law fit and effective model size (DESIGN.md §2).

The baseline family's final validation losses L at sizes N (non-embedding parameters) are fitted
with

    L(N) = E + A · N^(−α),      E >= 0, A > 0, 0 < α <= 3,

by bounded least squares. A variant of size N with loss L_v is then worth the baseline size

    N_eff = (A / (L_v − E))^(1/α),      gain = N_eff / N − 1,

defined only when L_v > E (the baseline law never reaches a loss at or below E).

:func:`analyse` applies this to a family of runs (``smallinit scaling``); reading the run directories
(:func:`runs_table`, :class:`RunPoint`, :func:`check_comparable`) is in :mod:`smallinit.analysis.scaling_runs`,
re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from smallinit.analysis.scaling_runs import (
    RunPoint,
    _has_key,
    check_comparable,
    config_value,  # noqa: F401 (re-exported)
    runs_table,
)
from smallinit.core.errors import SmallinitError

__all__ = ["ScalingError", "ScalingFit", "EffectiveSize", "fit_scaling_law", "predict", "effective_size"]

ALPHA_MAX = 3.0
ALPHA_MIN = 1e-6
_ALPHA_GRID = np.linspace(0.005, ALPHA_MAX, 600)


class ScalingError(SmallinitError, ValueError):
    """A scaling-law fit cannot be made from the given points (too few sizes, bad values)."""


@dataclass(frozen=True)
class ScalingFit:
    """L(N) = E + A·N^(−α) fitted to ``n_points`` (N, L) points.

    residuals: L_i − L(N_i) per point, in input order. r2: 1 − SS_res/SS_tot (NaN when all L are
    equal). n_sizes: distinct N; with exactly 3 the fit interpolates (residuals ~ 0, no check of
    the functional form). N_range, L_range: (min, max) of the fitted data.
    """

    E: float
    A: float
    alpha: float
    residuals: list[float]
    r2: float
    n_points: int
    n_sizes: int
    N_range: tuple[float, float]
    L_range: tuple[float, float]

    @property
    def rmse(self) -> float:
        """Root-mean-square residual."""
        return float(np.sqrt(np.mean(np.square(self.residuals))))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (non-finite numbers become None)."""
        d = asdict(self)
        d["N_range"], d["L_range"] = list(self.N_range), list(self.L_range)
        d["rmse"] = self.rmse
        d["r2"] = self.r2 if math.isfinite(self.r2) else None
        d["formula"] = "L(N) = E + A * N^(-alpha)"
        return d


@dataclass(frozen=True)
class EffectiveSize:
    """Effective baseline size of a variant: N_eff = (A/(L_v − E))^(1/α), gain = N_eff/N − 1.

    N_eff and gain are None when undefined (L_v <= E, or N_eff beyond float range); ``note`` then
    says why in words. ``extrapolated`` is True when N_eff (or the variant's loss) lies outside the
    range the law was fitted on.
    """

    N: float
    L_variant: float
    N_eff: float | None
    gain: float | None
    extrapolated: bool
    note: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        return asdict(self)


def predict(fit: ScalingFit, N: Any) -> Any:
    """L(N) = E + A·N^(−α) for a scalar (returns float) or an array of sizes (returns ndarray)."""
    n = np.asarray(N, dtype=np.float64)
    out = fit.E + np.exp(math.log(fit.A) - fit.alpha * np.log(n))
    return float(out) if out.ndim == 0 else out


def _check_points(N: Any, L: Any) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(N, dtype=np.float64).reshape(-1)
    loss = np.asarray(L, dtype=np.float64).reshape(-1)
    if n.size != loss.size:
        raise ScalingError(f"scaling fit: {n.size} sizes but {loss.size} losses")
    if not (np.isfinite(n).all() and np.isfinite(loss).all()):
        raise ScalingError("scaling fit: sizes and losses must be finite numbers")
    if (n <= 0).any():
        raise ScalingError("scaling fit: model sizes N must be positive")
    n_sizes = np.unique(n).size
    if n_sizes < 3:
        raise ScalingError(
            f"scaling fit needs baseline runs at >= 3 distinct sizes to determine E, A and alpha; got {n_sizes}"
        )
    return n, loss


def _grid_start(u: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """Start point (E, B, α) for L ≈ E + B·exp(−α·u): the best α on a grid, with (E, B) solved.

    For each grid α the model is linear in (E, B): ordinary least squares, and where that breaks
    E >= 0 or B >= 0 the better of the two boundary solutions (E = 0, B = <x,L>/<x,x>) and
    (B = 0, E = mean L). All grid points are solved at once (vectorised).
    """
    a = _ALPHA_GRID[:, None]
    X = np.exp(-a * u[None, :])  # (G, n)
    xm = X.mean(axis=1)
    lm = float(loss.mean())
    xc = X - xm[:, None]
    B = (xc @ (loss - lm)) / np.maximum(np.sum(xc**2, axis=1), 1e-300)
    E = lm - B * xm
    cands_E = np.stack([E, np.zeros_like(E), np.full_like(E, max(lm, 0.0))])
    cands_B = np.stack([B, np.maximum((X @ loss) / np.sum(X**2, axis=1), 0.0), np.zeros_like(B)])
    sse = np.sum((cands_E[..., None] + cands_B[..., None] * X[None] - loss) ** 2, axis=-1)  # (3, G)
    sse[0, (E < 0) | (B < 0)] = np.inf
    c, g = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return float(cands_E[c, g]), float(cands_B[c, g]), float(_ALPHA_GRID[g])


def fit_scaling_law(N: Any, L: Any) -> ScalingFit:
    """Fit L(N) = E + A·N^(−α) by bounded least squares (DESIGN.md §2, "Effective model size").

    Bounds: E >= 0, A > 0, α in (0, 3]. For conditioning the model is fitted as
    L = E + B·exp(−α·(ln N − ln N0)) with N0 the geometric mean of the sizes (then A = B·N0^α):
    a grid over α with the linear least-squares E, B at each α gives the start point, which
    ``scipy.optimize.least_squares`` (trust-region reflective, bounded) then refines.
    Several runs at the same size are allowed (e.g. seeds); at least 3 distinct sizes are needed.

    Raises:
        ScalingError: fewer than 3 distinct sizes, mismatched lengths, non-finite or non-positive values.
    """
    from scipy.optimize import least_squares

    n, loss = _check_points(N, L)
    u = np.log(n) - np.log(n).mean()  # ln(N / N0)

    # 1. start point: grid over alpha, linear solve for (E, B)
    E0, B0, a0 = _grid_start(u, loss)
    scale = max(float(np.abs(loss).max()), 1e-12)
    B0 = max(B0, 1e-9 * scale)

    # 2. refine with bounded least squares
    def resid(p: np.ndarray) -> np.ndarray:
        E, B, a = p
        return E + B * np.exp(-a * u) - loss

    def jac(p: np.ndarray) -> np.ndarray:
        E, B, a = p
        x = np.exp(-a * u)
        return np.stack([np.ones_like(u), x, -B * u * x], axis=1)

    lb = np.array([0.0, 1e-12 * scale, ALPHA_MIN])
    ub = np.array([np.inf, np.inf, ALPHA_MAX])
    x0 = np.clip(np.array([E0, B0, a0]), lb, ub)
    sol = least_squares(
        resid,
        x0,
        jac=jac,
        bounds=(lb, ub),
        method="trf",
        x_scale="jac",
        ftol=1e-14,
        xtol=1e-14,
        gtol=1e-14,
        max_nfev=10_000,
    )
    p = sol.x if 0.5 * np.sum(resid(sol.x) ** 2) <= 0.5 * np.sum(resid(x0) ** 2) else x0
    E, B, alpha = (float(v) for v in p)
    A = float(B * np.exp(alpha * np.log(n).mean()))

    res = -resid(p)  # L_i − L(N_i)
    ss_tot = float(np.sum((loss - loss.mean()) ** 2))
    r2 = 1.0 - float(np.sum(res**2)) / ss_tot if ss_tot > 0 else float("nan")
    return ScalingFit(
        E=E,
        A=A,
        alpha=alpha,
        residuals=[float(r) for r in res],
        r2=r2,
        n_points=int(n.size),
        n_sizes=int(np.unique(n).size),
        N_range=(float(n.min()), float(n.max())),
        L_range=(float(loss.min()), float(loss.max())),
    )


def effective_size(fit: ScalingFit, N: float, L_variant: float) -> EffectiveSize:
    """Effective baseline size of a variant of size N with loss L_variant (DESIGN.md §2).

    N_eff = (A / (L_v − E))^(1/α) — the baseline size whose fitted loss equals L_v — and
    gain = N_eff / N − 1 (0.44 = "worth 44% more parameters"). Computed in log space,
    ln N_eff = (ln A − ln(L_v − E)) / α. When L_v <= E no baseline size reaches that loss: N_eff and
    gain are None and ``note`` says so. ``extrapolated`` flags N_eff outside the fitted size range.
    """
    N = float(N)
    L_v = float(L_variant)
    if not (math.isfinite(N) and N > 0):
        raise ScalingError(f"variant size must be a positive number, got {N}")
    if not math.isfinite(L_v):
        raise ScalingError(f"variant loss must be a finite number, got {L_v}")
    lo, hi = fit.N_range
    if L_v <= fit.E:
        note = (
            f"variant loss {L_v:.4g} is at or below the fitted irreducible loss E = {fit.E:.4g}: "
            "the baseline law reaches it at no size, so the effective size is undefined"
        )
        return EffectiveSize(N=N, L_variant=L_v, N_eff=None, gain=None, extrapolated=True, note=note)
    log_neff = (math.log(fit.A) - math.log(L_v - fit.E)) / fit.alpha
    if log_neff > 700.0:  # exp would overflow a float
        note = (
            f"variant loss {L_v:.4g} is barely above the fitted E = {fit.E:.4g}: "
            f"the effective size would be about 10^{log_neff / math.log(10):.0f} parameters, beyond any meaning"
        )
        return EffectiveSize(N=N, L_variant=L_v, N_eff=None, gain=None, extrapolated=True, note=note)
    n_eff = math.exp(log_neff)
    gain = n_eff / N - 1.0
    extrapolated = not (lo <= n_eff <= hi)
    if extrapolated:
        note = (
            f"N_eff = {n_eff:.4g} lies outside the fitted size range [{lo:.4g}, {hi:.4g}] "
            "(extrapolated from the law; treat with caution)"
        )
    else:
        note = f"N_eff = {n_eff:.4g} lies within the fitted size range [{lo:.4g}, {hi:.4g}]"
    return EffectiveSize(N=N, L_variant=L_v, N_eff=n_eff, gain=gain, extrapolated=extrapolated, note=note)


# ----------------------------------------------------------------------------------------------
# runs_table(run_dirs), RunPoint, check_comparable: in smallinit.analysis.scaling_runs (re-exported here).
# ----------------------------------------------------------------------------------------------

__all__ += ["RunPoint", "runs_table", "config_value"]


# ---- a family of runs (``smallinit scaling``) ---------------------------------------------------------


def parse_baseline(text: str) -> tuple[str, Any]:
    """``model.gamma=0.5`` → ("model.gamma", 0.5); the value is parsed like a config override (YAML)."""
    from smallinit.config import parse_value
    from smallinit.core.errors import ConfigError

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ConfigError(f"--baseline {text!r} must look like section.key=value, e.g. model.gamma=0.5")
    return key, parse_value(raw.strip())


def values_equal(a: Any, b: Any) -> bool:
    """Config values equal (numbers within a relative 1e-9; booleans only equal booleans)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _fmt_n(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def analyse(points: list, key: str, value: Any, label_keys: list[str] | None = None) -> dict:
    """Baseline fit and variant effective sizes from :class:`RunPoint` s (the scaling.json dict): the runs with
    ``key`` == ``value`` are the baseline family, the others variants (grouped by ``label_keys``).

    Raises ConfigError when a run lacks ``key``; ScalingError when no run is a baseline or the baseline
    family has fewer than 3 distinct sizes with a finite loss.
    """
    label_keys = label_keys or [key]
    notes: list[str] = check_comparable(points)
    excluded: list[dict] = []
    base, var = _split_baseline(points, key, value, label_keys, notes, excluded)
    try:
        fit = fit_scaling_law([p.N for p in base], [p.loss for p in base])
    except ScalingError as e:
        raise ScalingError(f"baseline {key}={value!r}: {e}") from None
    if fit.n_sizes == 3:
        notes.append(
            "the baseline has exactly 3 sizes: the 3-parameter law passes through them, so the residuals "
            "cannot test its form"
        )
    variants = [_variant_row(p, fit, base, label_keys) for p in var]
    notes += [f"{v['run']}: {v['note']}" for v in variants if v["gain"] is None]
    residuals = dict(zip([p.run for p in base], fit.residuals))
    return {
        "formula": "L(N) = E + A * N^(-alpha); N_eff = (A / (L_v - E))^(1/alpha); gain = N_eff / N - 1",
        "N": "non-embedding parameters",
        "baseline": {
            "key": key,
            "value": value,
            "runs": [
                {
                    "run": p.run,
                    "N": p.N,
                    "loss": p.loss,
                    "fit_loss": predict(fit, p.N),
                    "residual": residuals[p.run],
                    "step": p.step,
                    "completed": p.completed,
                }
                for p in base
            ],
        },
        "fit": fit.to_dict(),
        "variants": variants,
        "groups": _group_gains(variants),
        "excluded": excluded,
        "notes": notes,
    }


def _split_baseline(
    points: list, key: str, value: Any, label_keys: list[str], notes: list[str], excluded: list[dict]
) -> tuple[list, list]:
    """(baseline runs, variant runs) among the points with a finite loss; the others go to ``excluded``, the
    points' own notes to ``notes``. Raises as :func:`analyse` says, and for a ``label_keys`` entry no run has."""
    from smallinit.core.errors import ConfigError

    base, var = [], []
    seen = []
    for p in points:
        try:
            v = config_value(p.config, key)
        except KeyError:
            raise ConfigError(f"{p.run}: config has no key {key!r} (check the --baseline field name)") from None
        seen.append(v)
        if p.note:
            notes.append(f"{p.run}: {p.note}")
        if p.loss is None or not math.isfinite(p.loss):
            excluded.append({"run": p.run, "reason": "no finite validation loss (diverged or never evaluated)"})
            continue
        (base if values_equal(v, value) else var).append(p)
    for k in label_keys:  # a misspelt --label would name every variant "k=?"
        if not any(_has_key(p.config, k) for p in points):
            raise ConfigError(f"--label {k}: no run's config has that key (a config field such as model.gamma)")
    if not base:
        shown = ", ".join(sorted({repr(s) for s in seen}))
        raise ScalingError(f"no run with a finite loss has {key} == {value!r} (values seen: {shown})")
    return base, var


def _variant_row(p, fit: ScalingFit, base: list, label_keys: list[str]) -> dict:
    """One variant run against the baseline law: its effective size and gain, its group label, and how its config
    differs from the baseline run of its size."""
    from smallinit.runs.rundir import compared_diff

    parts = []
    for k in label_keys:
        try:
            parts.append(f"{k}={config_value(p.config, k)!r}")
        except KeyError:
            parts.append(f"{k}=?")
    same = [b for b in base if b.N == p.N]
    es = effective_size(fit, p.N, p.loss)
    return {
        "run": p.run,
        "label": ", ".join(parts),
        "N": p.N,
        "loss": p.loss,
        "baseline_loss_at_N": predict(fit, p.N),
        "N_eff": es.N_eff,
        "gain": es.gain,
        "extrapolated": es.extrapolated,
        "note": es.note,
        "step": p.step,
        "completed": p.completed,
        "differs_from_baseline": (
            {k: [a, b] for k, (a, b) in compared_diff(p.config, same[0].config).items()} if same else None
        ),
    }


def _group_gains(variants: list[dict]) -> dict[str, dict]:
    """{label: its runs, their gains, the mean gain (None unless every run has one)}."""
    groups: dict[str, dict] = {}
    for v in variants:
        g = groups.setdefault(v["label"], {"runs": [], "gains": []})
        g["runs"].append(v["run"])
        g["gains"].append(v["gain"])
    for g in groups.values():
        defined = [x for x in g["gains"] if x is not None]
        g["mean_gain"] = sum(defined) / len(defined) if defined and len(defined) == len(g["gains"]) else None
        if defined and len(defined) < len(g["gains"]):
            g["note"] = "some runs of this group have no defined gain (loss at or below E): no mean is given"
    return groups


def report_text(res: dict) -> str:
    """Plain-text summary: the fit, a markdown table of variants, the notes."""
    f = res["fit"]
    b = res["baseline"]
    r2 = "n/a" if f["r2"] is None else f"{f['r2']:.4f}"
    lines = [
        f"baseline {b['key']}={b['value']!r}: {f['n_points']} runs at {f['n_sizes']} sizes "
        f"({_fmt_n(f['N_range'][0])}–{_fmt_n(f['N_range'][1])} non-embedding params)",
        f"fit L(N) = E + A·N^-α: E = {f['E']:.4f}, A = {f['A']:.4g}, α = {f['alpha']:.4f}; "
        f"R² = {r2}, rmse = {f['rmse']:.2e}, residuals {', '.join(f'{x:+.1e}' for x in f['residuals'])}",
        "",
        "| run | variant | N | loss | baseline L(N) | N_eff | gain |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in res["variants"]:
        gain = "–" if v["gain"] is None else f"{v['gain']:+.1%}" + (" (extrapolated)" if v["extrapolated"] else "")
        lines.append(
            f"| {v['run']} | {v['label']} | {_fmt_n(v['N'])} | {v['loss']:.4f} | "
            f"{v['baseline_loss_at_N']:.4f} | {_fmt_n(v['N_eff'])} | {gain} |"
        )
    if not res["variants"]:
        lines.append("| (no variant runs) | | | | | | |")
    for name, g in res["groups"].items():
        if g["mean_gain"] is not None:
            lines.append(f"\nmean gain of {name}: {g['mean_gain']:+.1%} over {len(g['runs'])} run(s)")
    for e in res["excluded"]:
        lines.append(f"excluded {e['run']}: {e['reason']}")
    for n in res["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


__all__ += ["analyse", "parse_baseline", "report_text", "values_equal"]
