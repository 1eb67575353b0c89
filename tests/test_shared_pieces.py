"""The one place of each shared piece: reading a run directory (smallinit.runs.rundir), figures and the HTML page
(smallinit.core.figures), the device resolver (smallinit.core.device); jobs as library calls (smallinit.experiments.job)
and the claim registry."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from smallinit.core.errors import ConfigError, RunDirError

# ---- rundir ------------------------------------------------------------------------------------------


def _run(tmp_path, name="r", metrics=(), probes=(), summary=None, config=True):
    rd = tmp_path / name
    rd.mkdir()
    if config:
        (rd / "config.yaml").write_text("model:\n  gamma: 1.0\ntrain:\n  threads: 2\n")
    (rd / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (rd / "probes.jsonl").write_text("".join(json.dumps(p) + "\n" for p in probes))
    if summary is not None:
        (rd / "summary.json").write_text(json.dumps(summary))
    return rd


def test_run_state_and_collect_run(tmp_path):
    from smallinit.runs.rundir import collect_run, last_step, last_val_loss, read_metrics, run_state

    assert run_state(tmp_path / "absent") == "new"
    rd = _run(
        tmp_path,
        metrics=[
            {"step": 2, "loss": 5.0, "val_loss": 5.5, "tokens": 10},
            {"step": 4, "loss": 4.0, "tune_loss": 4.8, "tokens": 20},
            {"step": 2, "loss": 4.9},
        ],
    )  # a resumed run repeats step 2
    assert run_state(rd) == "partial" and last_step(rd) == 2
    assert [m["step"] for m in read_metrics(rd, by_step=True)] == [2, 4]
    assert read_metrics(rd, by_step=True)[0]["loss"] == 4.9  # the last record of a repeated step
    assert last_val_loss(rd) == (5.5, 2)
    info = collect_run(rd)
    assert info["final_val_loss"] == 5.5 and info["final_tune_loss"] == 4.8 and info["state"] == "partial"
    (rd / "summary.json").write_text(json.dumps({"completed": True, "final_val_loss": 4.5}))
    assert run_state(rd) == "done" and collect_run(rd)["final_val_loss"] == 4.5
    (rd / "summary.json").unlink()
    (rd / "failed.json").write_text(json.dumps({"error": "boom"}))
    assert run_state(rd) == "failed" and collect_run(rd)["error"] == "boom"


def test_read_config_and_load_run_refuse_a_non_run(tmp_path):
    from smallinit.runs.rundir import load_run, read_config

    rd = _run(tmp_path, config=False)
    with pytest.raises(RunDirError, match="no config.yaml"):
        read_config(rd)
    (rd / "config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(RunDirError, match="not valid YAML"):
        load_run(rd)


def test_one_list_of_ignored_keys_in_every_comparison():
    from smallinit.config import load_config
    from smallinit.runs.rundir import IGNORED_IN_COMPARISON, compared_diff, config_mismatch

    a = load_config("tiny", ["optim.lr=0.002"]).to_dict()
    b = load_config("tiny", ["optim.lr=0.002", "train.threads=3", "train.progress=false", "model.vocab_size=999"])
    b = b.to_dict()
    assert "train.threads" in IGNORED_IN_COMPARISON
    assert compared_diff(a, b) == {"model.vocab_size": (a["model"]["vocab_size"], 999)}  # a real difference
    assert config_mismatch(a, b) == {}  # the data decides the vocabulary of a run
    b["model"]["gamma"] = 0.25
    assert config_mismatch(a, b) == {"model.gamma": (a["model"]["gamma"], 0.25)}


def test_plot_labels_and_scaling_differences_use_the_same_list():
    from smallinit.probes.plots import run_labels

    c1 = {"model": {"gamma": 0.5}, "train": {"threads": 1, "device": "cpu"}}
    c2 = {"model": {"gamma": 1.0}, "train": {"threads": 4, "device": "cuda"}}
    assert run_labels([c1, c2], ["a", "b"]) == ["gamma=0.5", "gamma=1"]


# ---- figures -----------------------------------------------------------------------------------------


def test_save_png_is_atomic_and_closes_the_figure(tmp_path):
    from smallinit.core.figures import pyplot, save_png

    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    p = save_png(fig, tmp_path / "sub" / "x.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(f.name for f in p.parent.iterdir()) == ["x.png"]  # no temporary file left
    assert not plt.fignum_exists(fig.number)


def test_html_page_escapes_and_is_written_whole(tmp_path):
    from smallinit.core.figures import html_page, write_html

    page = html_page("a <b> & c", ["<p>body</p>"])
    assert page.startswith("<!DOCTYPE html>") and "<title>a &lt;b&gt; &amp; c</title>" in page
    assert page.rstrip().endswith("</body></html>") and "<p>body</p>" in page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page  # phones: no zoomed-out page
    assert "overflow-x:auto" in page.split("table{display:block")[1].split("}")[0]  # wide tables scroll, not the page
    assert write_html(tmp_path / "i.html", "t", ["<p>x</p>"]).read_text() == html_page("t", ["<p>x</p>"])


def _bins(means):
    return [
        {
            "name": f"b{i}",
            "difficulty": [i, i + 1],
            "count": 10,
            "delta_sym": {"mean": m, "ci95": None if m is None else [m - 0.1, m + 0.1]},
        }
        for i, m in enumerate(means)
    ]


def test_delta_by_bin_and_scaling_figures(tmp_path):
    from smallinit.core.figures import plot_delta_by_bin, plot_scaling

    assert plot_delta_by_bin({"bins": _bins([None, None]), "overall": {"count": 0}}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    res = {
        "bins": _bins([0.1, -0.2, None]),
        "overall": {"count": 30},
        "by_source": {"en": {"bins": _bins([0.2, 0.0, 0.1]), "overall": {"count": 15}}},
    }
    assert plot_delta_by_bin(res, tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_scaling(tmp_path / "s0.png", [], {}, None) is None
    fit = {"E": 1.0, "A": 10.0, "alpha": 0.3}
    p = plot_scaling(
        tmp_path / "s.png", [(1e5, 3.0), (2e5, 2.8), (4e5, 2.6)], {"v": [(2e5, 2.7, 0.4), (4e5, 2.5, None)]}, fit
    )
    assert p.read_bytes()[:4] == b"\x89PNG"


# ---- device -------------------------------------------------------------------------------------------


def test_one_device_resolver():
    import torch

    from smallinit.core.device import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ConfigError, match="train.device=cuda but no CUDA device"):
            resolve_device("cuda", what="train.device")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert resolve_device("cuda:1", fallback=True) == torch.device("cpu")
        assert any("CUDA is not available" in str(x.message) for x in w)


# ---- jobs -------------------------------------------------------------------------------------------


def test_a_gamma_set_in_a_preset_reaches_the_trainer_as_a_typed_config(tmp_path, monkeypatch):
    import smallinit.train
    from smallinit.config import RunConfig
    from smallinit.experiments.job import run_job
    from smallinit.experiments.plan import lm_job
    from smallinit.experiments.presets import Arm, get_preset

    p = get_preset("demo")
    a = Arm(p.main_size, 0.875, 1e-12, "headwise", bos=False)
    job = lm_job(p, tmp_path, a, 3e-3, 2, tmp_path / "corpus", parallel=1, gflops=None)
    assert isinstance(job.config, RunConfig) and job.task == "train"
    seen = {}
    monkeypatch.setattr(smallinit.train, "train", lambda cfg, run_dir, callbacks=None: seen.update(cfg=cfg, rd=run_dir))
    run_job(job)
    cfg = seen["cfg"]
    assert isinstance(cfg, RunConfig) and cfg is not job.config  # the task works on a copy
    assert (cfg.model.gamma, cfg.model.norm_eps, cfg.model.gate, cfg.data.bos) == (0.875, 1e-12, "headwise", False)
    assert (cfg.optim.lr, cfg.train.seed, cfg.data.path) == (3e-3, 2, str(tmp_path / "corpus"))
    assert seen["rd"] == tmp_path / "runs" / job.name


def test_job_files_round_trip_typed_configs(tmp_path):
    from smallinit.config import load_config
    from smallinit.experiments.anchor import AnchorConfig
    from smallinit.experiments.job import Job, read_job_file, write_job_file

    cfg = load_config("tiny", ["model.gamma=1.25", "data.path=/x"])
    back = read_job_file(write_job_file(Job("n", tmp_path / "n", "train", cfg), tmp_path / "n.json"))
    assert back.task == "train" and back.config == cfg and back.run_dir == tmp_path / "n"
    acfg = AnchorConfig(gamma=0.5, steps=7)
    back = read_job_file(write_job_file(Job("a", tmp_path / "a", "anchor", acfg), tmp_path / "a.json"))
    assert back.config == acfg and not back.resumable
    (tmp_path / "bad.json").write_text(json.dumps({"task": "argv", "config": {}}))
    with pytest.raises(ConfigError, match="not a job file"):
        read_job_file(tmp_path / "bad.json")


def test_the_job_entry_reports_one_error_line(tmp_path):
    (tmp_path / "j.json").write_text(
        json.dumps(
            {"task": "anchor", "name": "a", "run_dir": str(tmp_path / "a"), "config": {"gamma": 1.0, "steps": 0}}
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "smallinit.experiments.job", str(tmp_path / "j.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "error: anchor: steps must be > 0" in r.stderr
    assert not (tmp_path / "a").exists()


def test_anchor_config_from_plain_data():
    from smallinit.experiments.anchor import AnchorConfig

    assert AnchorConfig.from_dict({"gamma": 1, "lr": 3e-3}).gamma == 1.0
    with pytest.raises(ConfigError, match="unknown anchor setting 'bogus'"):
        AnchorConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="steps: expected int"):
        AnchorConfig.from_dict({"steps": 2.5})
    with pytest.raises(ConfigError, match="steps: expected int"):
        AnchorConfig.from_dict({"steps": True})


# ---- claims -------------------------------------------------------------------------------------------


def test_every_claim_module_is_registered_with_its_interface():
    from smallinit.experiments.claims import CLAIMS, REQUIRED, registry
    from smallinit.experiments.plan import claim_arms
    from smallinit.experiments.presets import AnchorArm, Arm, get_preset

    mods = registry()
    assert list(mods) == list(range(1, 12)) and list(CLAIMS) == list(mods)  # the paper's ten and our claim 11
    for cid, m in mods.items():
        assert all(hasattr(m, n) for n in REQUIRED) and m.ID == cid and m.CLAIM == CLAIMS[cid]
        assert m.__name__.rsplit(".", 1)[-1].startswith(f"c{cid:02d}_")
    cpu = get_preset("cpu")
    arms = claim_arms(cpu)
    assert all(isinstance(a, (Arm, AnchorArm)) for roles in arms.values() for a in roles.values())
    assert all(isinstance(a, AnchorArm) for a in arms[9].values())
    cpu.moe_size = None
    assert 10 not in claim_arms(cpu)  # claim 10 cannot run without an MoE size


def test_a_failed_job_is_recorded_with_its_error_and_log(tmp_path):
    from smallinit.config import load_config
    from smallinit.experiments.runner import JobRunner
    from smallinit.experiments.sweep import train_job
    from smallinit.runs.rundir import read_json, run_state

    cfg = load_config("tiny", [f"data.path={tmp_path / 'no-data'}", "train.max_steps=2"])
    job = train_job("bad", cfg, tmp_path / "runs")
    logs: list[str] = []
    res = JobRunner([job], inprocess=True, log=logs.append).run()
    assert res["bad"].state == "failed" and run_state(job.run_dir) == "failed"
    f = read_json(job.run_dir / "failed.json")
    assert "no-data" in f["error"] and f["log"] == str(job.log_path) and job.log_path.is_file()
    again = JobRunner([job], inprocess=True, log=logs.append).run()
    assert again["bad"].skipped and "1 failed earlier; not retried" in logs[-1]
