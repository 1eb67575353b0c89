"""`smallinit scaling` and `smallinit.analysis.scaling.runs_table`: fake run dirs from a known law, and one real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import tiny_overrides

from smallinit.analysis.scaling import runs_table
from smallinit.cli import main
from smallinit.train import load_config, train

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
E, A, ALPHA = 1.8, 40.0, 0.3


def law(N: float) -> float:
    return E + A * N ** (-ALPHA)


def n_for_loss(L: float) -> float:
    return (A / (L - E)) ** (1 / ALPHA)


def fake_run(
    root: Path, name: str, N: int, loss: float | None, gamma: float, gate: str = "none", summary: bool = True
) -> Path:
    rd = root / name
    rd.mkdir(parents=True)
    cfg = {"model": {"gamma": gamma, "gate": gate, "d_model": int(N**0.5)}, "train": {"progress": False}}
    (rd / "config.yaml").write_text(yaml.safe_dump(cfg))
    if summary:
        (rd / "summary.json").write_text(
            json.dumps({"completed": True, "step": 100, "final_val_loss": loss, "non_embedding_params": N})
        )
    return rd


SIZES = [100_000, 300_000, 1_000_000, 3_000_000, 10_000_000]


def baseline_family(root: Path, sizes=SIZES) -> list[Path]:
    return [fake_run(root, f"base_{n}", n, law(n), 0.5) for n in sizes]


def test_recovers_the_constructed_gain(tmp_path, capsys) -> None:
    base = baseline_family(tmp_path)
    # variants worth exactly 44% and 20% more parameters at two sizes, and one equal to the baseline
    v1 = fake_run(tmp_path, "small_1M", 1_000_000, law(1.44 * 1_000_000), 1.0, gate="elementwise")
    v2 = fake_run(tmp_path, "small_3M", 3_000_000, law(1.2 * 3_000_000), 1.0, gate="elementwise")
    v3 = fake_run(tmp_path, "same_300k", 300_000, law(300_000), 0.75)
    out = tmp_path / "out"
    rc = main(["scaling", *map(str, base + [v1, v2, v3]), "--baseline", "model.gamma=0.5", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "scaling.json").read_text())
    assert sorted(r["run"] for r in res["baseline"]["runs"]) == sorted(map(str, base))
    f = res["fit"]
    assert (f["E"], f["A"], f["alpha"]) == (
        pytest.approx(E, rel=1e-4),
        pytest.approx(A, rel=1e-3),
        pytest.approx(ALPHA, rel=1e-4),
    )
    assert max(abs(r) for r in f["residuals"]) < 1e-8
    gains = {Path(v["run"]).name: v for v in res["variants"]}
    assert gains["small_1M"]["gain"] == pytest.approx(0.44, abs=1e-4)
    assert gains["small_1M"]["N_eff"] == pytest.approx(1.44e6, rel=1e-4)
    assert gains["small_3M"]["gain"] == pytest.approx(0.20, abs=1e-4)
    assert gains["same_300k"]["gain"] == pytest.approx(0.0, abs=1e-4)
    assert not any(v["extrapolated"] for v in res["variants"])
    # variants are grouped by the baseline key; what else differs from the same-size baseline is listed
    assert set(res["groups"]) == {"model.gamma=1.0", "model.gamma=0.75"}
    assert res["groups"]["model.gamma=1.0"]["mean_gain"] == pytest.approx((0.44 + 0.20) / 2, abs=1e-4)
    assert gains["small_1M"]["differs_from_baseline"] == {
        "model.gamma": [1.0, 0.5],
        "model.gate": ["elementwise", "none"],
    }
    assert (out / "scaling.png").read_bytes()[:8] == PNG_MAGIC
    printed = capsys.readouterr().out
    assert "+44.0%" in printed and "+20.0%" in printed and "α = 0.3000" in printed


def test_noisy_baseline_gain_within_two_percent(tmp_path) -> None:
    """±0.2% multiplicative noise on the baseline losses: the recovered gain stays close to the constructed one."""
    noise = [+0.002, -0.0015, +0.001, -0.002, +0.0005, +0.0015, -0.001]
    sizes = [50_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000, 30_000_000]
    base = [fake_run(tmp_path, f"b{n}", n, law(n) * (1 + e), 0.5) for n, e in zip(sizes, noise)]
    v = fake_run(tmp_path, "v", 1_000_000, law(1.44e6), 1.0)
    out = tmp_path / "out"
    assert main(["scaling", *map(str, base + [v]), "--baseline", "model.gamma=0.5", "--out", str(out)]) == 0
    res = json.loads((out / "scaling.json").read_text())
    assert res["variants"][0]["N_eff"] == pytest.approx(1.44e6, rel=0.02)
    assert res["fit"]["rmse"] > 0 and len(res["fit"]["residuals"]) == len(sizes)


def test_fewer_than_three_baseline_sizes_is_an_error(tmp_path, capsys) -> None:
    base = baseline_family(tmp_path, SIZES[:2])
    again = fake_run(tmp_path, "base_again", SIZES[0], law(SIZES[0]) + 0.01, 0.5)  # a second seed: same size
    v = fake_run(tmp_path, "v", 1_000_000, 3.0, 1.0)
    out = tmp_path / "out"
    rc = main(["scaling", *map(str, base + [again, v]), "--baseline", "model.gamma=0.5", "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: baseline model.gamma=0.5: scaling fit needs baseline runs at >= 3 distinct sizes")
    assert "got 2" in err
    assert not (out / "scaling.json").exists()


def test_variant_below_E_gets_a_statement_not_a_number(tmp_path, capsys) -> None:
    base = baseline_family(tmp_path)
    v = fake_run(tmp_path, "too_good", 1_000_000, E - 0.05, 1.0)
    ok = fake_run(tmp_path, "ok", 1_000_000, law(2e6), 1.0)
    out = tmp_path / "out"
    assert main(["scaling", *map(str, base + [v, ok]), "--baseline", "model.gamma=0.5", "--out", str(out)]) == 0
    res = json.loads((out / "scaling.json").read_text())
    bad = next(x for x in res["variants"] if x["run"] == str(v))
    assert bad["gain"] is None and bad["N_eff"] is None
    assert "at or below the fitted irreducible loss" in bad["note"]
    assert res["groups"]["model.gamma=1.0"]["mean_gain"] is None  # no average over an undefined gain
    printed = capsys.readouterr().out
    assert f"note: {v}: variant loss" in printed


def test_extrapolated_gain_is_flagged(tmp_path) -> None:
    base = baseline_family(tmp_path)
    v = fake_run(tmp_path, "far", 10_000_000, law(1e8), 1.0)
    out = tmp_path / "out"
    assert main(["scaling", *map(str, base + [v]), "--baseline", "model.gamma=0.5", "--out", str(out)]) == 0
    res = json.loads((out / "scaling.json").read_text())
    assert res["variants"][0]["extrapolated"] is True
    assert res["variants"][0]["gain"] == pytest.approx(9.0, rel=1e-3)
    assert "outside the fitted size range" in res["variants"][0]["note"]


def test_refusals_of_bad_baseline_specs(tmp_path, capsys) -> None:
    runs = list(map(str, baseline_family(tmp_path)))
    out = str(tmp_path / "out")
    assert main(["scaling", *runs, "--baseline", "model.gamma", "--out", out]) == 2
    assert "must look like section.key=value" in capsys.readouterr().err
    assert main(["scaling", *runs, "--baseline", "model.gama=0.5", "--out", out]) == 2
    assert "no key 'model.gama'" in capsys.readouterr().err
    assert main(["scaling", *runs, "--baseline", "model.gamma=0.7", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "no run with a finite loss has model.gamma == 0.7" in err and "0.5" in err
    assert main(["scaling", *runs, str(tmp_path / "nowhere"), "--baseline", "model.gamma=0.5", "--out", out]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["scaling", *runs, "--baseline", "model.gamma=0.5", "--label", "model.bogus", "--out", out]) == 2
    assert "--label model.bogus: no run's config has that key" in capsys.readouterr().err  # was: variants named "?"


def test_runs_without_a_loss_are_excluded_and_named(tmp_path, capsys) -> None:
    base = baseline_family(tmp_path)
    dead = fake_run(tmp_path, "diverged", 1_000_000, None, 1.0)
    out = tmp_path / "out"
    assert main(["scaling", *map(str, base + [dead]), "--baseline", "model.gamma=0.5", "--out", str(out)]) == 0
    res = json.loads((out / "scaling.json").read_text())
    assert res["variants"] == [] and res["excluded"][0]["run"] == str(dead)
    assert f"excluded {dead}" in capsys.readouterr().out


def test_runs_table_on_a_real_run_without_summary(token_dir, tmp_path) -> None:
    """N from the checkpoint's config and the loss from metrics.jsonl equal what summary.json said."""
    rd = tmp_path / "run"
    train(load_config("tiny", tiny_overrides(token_dir, **{"train.max_steps": 2})), rd)
    summary = json.loads((rd / "summary.json").read_text())
    full = runs_table([rd])[0]
    assert (full.N, full.loss, full.completed, full.note) == (
        summary["non_embedding_params"],
        summary["final_val_loss"],
        True,
        "",
    )
    (rd / "summary.json").unlink()
    p = runs_table([rd])[0]
    assert p.N == summary["non_embedding_params"]
    assert p.loss == pytest.approx(summary["final_val_loss"], abs=0)
    assert p.step == 2 and p.completed is False and "no summary.json" in p.note
    assert p.config["model"]["gamma"] == load_config("tiny").model.gamma
