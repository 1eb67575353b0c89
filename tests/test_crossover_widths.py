"""Claim 1 across widths (issue 34, 5c): gaps compared at equal tokens per parameter, D*/N only where a width's
gap fit can say, and the ``crossover-widths`` command. Built on synthetic crossovers whose truth is known."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import ttest_ind

from smallinit.analysis.crossing import analyse_crossover
from smallinit.core.stats import welch_t_interval
from smallinit.experiments.claims.c01_loss import across_widths, widths_markdown

FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)


def crossover(
    d_model: int,
    n_params: float,
    enough: float,
    gap,
    seeds: int = 5,
    noise: float = 0.004,
    seed: int = 0,
    data: str = "data/en-bytes",
) -> dict:
    """A finished crossover result as ``smallinit crossover`` writes it, with L_baseline − L_paper = gap(D/N)."""
    rng = np.random.default_rng(seed)
    budgets = [enough * n_params * f for f in FRACTIONS]
    base = {s: [1.2 + 4.0 * (d / n_params) ** -0.5 + rng.normal(0, noise) for d in budgets] for s in range(seeds)}
    paper = {
        s: [base[s][j] - gap(d / n_params) + rng.normal(0, noise) for j, d in enumerate(budgets)] for s in range(seeds)
    }
    a = analyse_crossover(
        budgets,
        {"baseline": base, "paper": paper},
        "baseline",
        "paper",
        non_embedding_params=n_params,
        n_boot=60,
        enough_tokens_per_param=enough,
    )
    spec = {
        "arms": {"baseline": ["model.gamma=0.5"], "paper": ["model.gamma=1.0"]},
        "baseline": "baseline",
        "base": "tiny",
        "overrides": [f"data.path={data}", f"model.d_model={d_model}", "model.n_layers=4"],
        "seeds": list(range(seeds)),
        "fractions": list(FRACTIONS),
        "enough": enough,
    }
    return json.loads(
        json.dumps(
            {
                "spec": spec,
                "budgets": [{"tokens": int(d)} for d in budgets],
                "non_embedding_params": n_params,
                "tokens_per_param": [d / n_params for d in budgets],
                "analyses": {"paper": a.to_dict()},
                "losses": {
                    "baseline": {str(s): v for s, v in base.items()},
                    "paper": {str(s): v for s, v in paper.items()},
                },
            },
            default=float,
        )
    )


def never_crossing(t: float) -> float:
    """Approaches 0 from below and never crosses (the README-shaped curve of issue 34, in tokens per parameter)."""
    return -0.4 / (1 + (t / 7.0) ** 1.29) ** 0.915


def crossing_at_30(t: float) -> float:
    return 0.05 - 0.05 * (t / 30.0) ** -0.6


def test_welch_interval_matches_scipy():
    a, b = [1.0, 1.2, 0.9, 1.1], [0.5, 0.7, 0.4]
    got = welch_t_interval(a, b)
    want = ttest_ind(a, b, equal_var=False).confidence_interval()
    assert got.value == pytest.approx(np.mean(a) - np.mean(b))
    assert (got.lo, got.hi) == pytest.approx((want.low, want.high))
    assert welch_t_interval([1.0], b).lo is None


def test_a_gap_that_depends_on_tokens_per_param_alone_agrees_across_widths():
    res = across_widths(
        [
            crossover(48, 120_000, 150, never_crossing, seeds=3, seed=1),
            crossover(64, 213_000, 75, never_crossing, seeds=5, seed=2),
            crossover(96, 480_000, 37.5, never_crossing, seeds=3, seed=3),
        ]
    )
    assert [r["label"] for r in res["widths"]] == ["d 48 × 4", "d 64 × 4", "d 96 × 4"]
    assert len(res["matched"]) >= 6  # 9.4 … 75 tokens/param shared by pairs of widths
    assert all(m["diff"]["lo"] <= 0 <= m["diff"]["hi"] for m in res["matched"])
    assert "function of tokens per parameter" in res["scaling"]
    assert not res["predictions"]  # never crosses: no width may predict a crossing budget
    assert all(r["crossing_per_param"] is None for r in res["widths"])
    assert "no crossing budget to carry" in widths_markdown(res)


def test_a_gap_that_shrinks_with_width_is_reported_as_not_a_function_of_tokens_per_param():
    res = across_widths(
        [
            crossover(48, 120_000, 75, never_crossing, seed=1),
            crossover(64, 213_000, 75, lambda t: never_crossing(t) - 0.05, seed=2),
        ]
    )
    assert any(m["diff"]["lo"] > 0 for m in res["matched"])  # d48's gap is 0.05 above d64's
    assert "does not carry the gap" in res["scaling"]


def test_a_true_crossing_is_restated_per_parameter_and_at_the_paper_sizes():
    res = across_widths([crossover(64, 213_000, 150, crossing_at_30, noise=0.001, seed=4)])
    (r,) = res["widths"]
    assert r["gap_fit_status"] == "crosses" and r["verdict"] == "supported"
    c = r["crossing_per_param"]
    assert c["lo"] <= 30 <= (c["hi"] or math.inf) and abs(c["value"] / 30 - 1) < 0.25
    (p,) = res["predictions"]
    assert p["tokens"]["1e+08"]["value"] == pytest.approx(c["value"] * 1e8)
    assert "a prediction, not a result" in widths_markdown(res)


def test_widths_on_other_data_or_the_same_width_twice_are_refused():
    a = crossover(48, 120_000, 75, never_crossing)
    with pytest.raises(ValueError, match="other data"):
        across_widths([a, crossover(64, 213_000, 75, never_crossing, data="data/zh")])
    with pytest.raises(ValueError, match="same width"):
        across_widths([a, crossover(48, 120_000, 75, never_crossing, seed=9)])


def test_the_command_writes_its_report_and_refuses_a_folder_without_a_crossover(tmp_path, capsys):
    from smallinit.cli import main

    for d, n, k in ((48, 120_000, 150), (64, 213_000, 75)):
        (tmp_path / f"d{d}").mkdir()
        (tmp_path / f"d{d}" / "crossover.json").write_text(json.dumps(crossover(d, n, k, never_crossing)))
    assert (
        main(
            [
                "crossover-widths",
                str(tmp_path / "d48"),
                str(tmp_path / "d64" / "crossover.json"),
                "--out",
                str(tmp_path / "w"),
            ]
        )
        == 0
    )
    assert {"widths.json", "widths.md", "widths.png"} <= {p.name for p in (tmp_path / "w").iterdir()}
    assert json.loads((tmp_path / "w" / "widths.json").read_text())["widths"][0]["label"] == "d 48 × 4"
    (tmp_path / "empty").mkdir()
    assert main(["crossover-widths", str(tmp_path / "empty"), "--out", str(tmp_path / "w2")]) != 0
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "no crossover.json" in err and not (tmp_path / "w2").exists()
    assert main(["crossover-widths", str(tmp_path / "d48"), str(tmp_path / "d48"), "--out", str(tmp_path / "w3")]) != 0
    assert "given twice" in capsys.readouterr().err


def test_a_rerun_replaces_only_its_own_report_and_bad_json_is_one_error(tmp_path, capsys):
    from smallinit.cli import main

    (tmp_path / "d48").mkdir()
    (tmp_path / "d48" / "crossover.json").write_text(json.dumps(crossover(48, 120_000, 150, never_crossing)))
    out = tmp_path / "w"
    assert main(["crossover-widths", str(tmp_path / "d48"), "--out", str(out)]) == 0
    assert main(["crossover-widths", str(tmp_path / "d48"), "--out", str(out)]) == 0  # its own report: replaced
    (out / "notes.txt").write_text("mine")
    assert main(["crossover-widths", str(tmp_path / "d48"), "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "notes.txt" in err
    assert (out / "notes.txt").read_text() == "mine" and (out / "widths.json").is_file()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "crossover.json").write_text("{not json")
    assert main(["crossover-widths", str(tmp_path / "bad"), "--out", str(tmp_path / "w4")]) != 0
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "invalid JSON" in err and not (tmp_path / "w4").exists()
