"""Nothing lost, ever (issue #20): finished-run resume, the output-folder policy, checks before the first step,
the divergence watch, SIGINT/SIGTERM, plain progress lines in a log file.

Each test reproduces one case of the issue (a command that used to destroy data or fail late) and asserts
the data is intact and the command said so in one line.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_overrides

from smallinit.cli import main as cli


def snapshot(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``root`` (the lock file excluded: flock touches it)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def one_error(capsys) -> str:
    """The single ``error:`` line on stderr (asserts there is exactly one and no traceback)."""
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def train(out: Path, token_dir: Path, **extra) -> int:
    return cli(["train", "--config", "tiny", "--out", str(out), *tiny_overrides(token_dir, **extra)])


@pytest.fixture(scope="module")
def done_run(tmp_path_factory, token_dir) -> Path:
    """A complete 6-step run (checkpoints at 3 and 6), trained once for the module."""
    out = tmp_path_factory.mktemp("rel") / "run"
    assert train(out, token_dir, **{"train.max_steps": 6, "train.ckpt_every": 3, "train.eval_every": 3}) == 0
    return out


# ---- 1. finished runs ------------------------------------------------------------------------------------


def test_resume_of_a_complete_run_changes_nothing(done_run, capsys):
    before = snapshot(done_run)
    summary = json.loads((done_run / "summary.json").read_text())
    assert summary["final_loss"] is not None and summary["final_val_loss"] is not None
    capsys.readouterr()
    assert cli(["train", "--resume", str(done_run)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert cli(["train", "--resume", str(done_run), "--max-steps", "6"]) == 0  # equal: nothing to extend
    assert snapshot(done_run) == before
    # --max-steps below the run's own budget: refused with one line, nothing touched (used to null the summary)
    capsys.readouterr()
    assert cli(["train", "--resume", str(done_run), "--max-steps", "4"]) == 2
    assert "only extends" in one_error(capsys)
    assert snapshot(done_run) == before
    from smallinit.runs.doctor import check_run

    rep = check_run(done_run)
    assert rep.healthy and rep.status == "complete"


def test_max_steps_extends_a_complete_run_and_the_summary_keeps_real_values(tmp_path, done_run):
    run = tmp_path / "run"
    shutil.copytree(done_run, run)
    assert cli(["train", "--resume", str(run), "--max-steps", "8"]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["step"] == 8 and isinstance(s["final_loss"], float) and isinstance(s["final_val_loss"], float)
    # a summary lost after the last step: resume rewrites it from the log, never with nulls
    (run / "summary.json").unlink()
    assert cli(["train", "--resume", str(run)]) == 0
    s2 = json.loads((run / "summary.json").read_text())
    assert s2["step"] == 8 and s2["final_loss"] == s["final_loss"] and s2["final_val_loss"] == s["final_val_loss"]


def test_doctor_flags_a_summary_blanked_by_an_old_resume(tmp_path, done_run):
    from smallinit.runs.doctor import check_run

    run = tmp_path / "run"
    shutil.copytree(done_run, run)
    s = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**s, "final_loss": None, "final_val_loss": None}))
    rep = check_run(run)
    assert not rep.healthy and rep.status != "complete"
    assert any("no value for final_loss" in f.what for f in rep.problems)


def test_doctor_flags_a_complete_run_without_weights_or_with_a_log_that_is_a_folder(tmp_path, done_run):
    from smallinit.runs.doctor import check_run

    run = tmp_path / "run"
    shutil.copytree(done_run, run)
    shutil.rmtree(run / "checkpoints")
    rep = check_run(run)
    assert not rep.healthy and rep.status != "complete"
    assert any("no good checkpoint is left" in f.what for f in rep.problems)
    run2 = tmp_path / "run2"
    shutil.copytree(done_run, run2)
    (run2 / "metrics.jsonl").unlink()
    (run2 / "metrics.jsonl").mkdir()
    rep = check_run(run2)
    assert not rep.healthy and any(f.what == "metrics.jsonl is not a file" for f in rep.problems)


# ---- 2. train --out onto something that is not a run ----------------------------------------------------


def test_train_out_onto_a_dataset_or_a_user_folder_is_refused(tmp_path, token_dir, capsys):
    data = tmp_path / "data"
    shutil.copytree(token_dir, data)
    before = snapshot(data)
    assert cli(["train", "--config", "tiny", "--out", str(data), *tiny_overrides(data)]) == 2
    assert "input" in one_error(capsys)
    assert snapshot(data) == before
    # a dataset that is not this run's input is protected the same way (it is not empty and not a run)
    other = tmp_path / "other"
    shutil.copytree(token_dir, other)
    assert cli(["train", "--config", "tiny", "--out", str(other), *tiny_overrides(data)]) == 2
    assert "prepared data directory" in one_error(capsys)
    assert snapshot(other) == snapshot(data)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "config.yaml").write_text("my: own\n")
    assert cli(["train", "--config", "tiny", "--out", str(user), *tiny_overrides(data)]) == 2
    one_error(capsys)
    assert (user / "config.yaml").read_text() == "my: own\n" and sorted(os.listdir(user)) == ["config.yaml"]
    # output onto a file, or under a read-only folder: one line before any work
    f = tmp_path / "afile"
    f.write_text("x")
    assert cli(["train", "--config", "tiny", "--out", str(f), *tiny_overrides(data)]) == 2
    assert "file" in one_error(capsys)
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        assert cli(["train", "--config", "tiny", "--out", str(ro / "run"), *tiny_overrides(data)]) == 2
        one_error(capsys)


# ---- 3. export --force never deletes its input -----------------------------------------------------------


def test_export_force_never_deletes_the_source_run_or_its_parent(tmp_path, done_run, capsys):
    root = tmp_path / "runs"
    run = root / "run"
    shutil.copytree(done_run, run)
    (root / "sibling").mkdir()
    (root / "sibling" / "notes.txt").write_text("keep me")
    before = snapshot(root)
    for out in (run, root, run / "inside"):
        assert cli(["export", str(run), "--to", "hf", str(out), "--force"]) == 2
        assert "input" in one_error(capsys)
        assert snapshot(root) == before
    # --force replaces a previous export, and only that
    hf = tmp_path / "hf"
    assert cli(["export", str(run), "--to", "hf", str(hf)]) == 0
    assert cli(["export", str(run), "--to", "hf", str(hf), "--force"]) == 0
    capsys.readouterr()
    assert cli(["export", str(run), "--to", "hf", str(root / "sibling"), "--force"]) == 2
    one_error(capsys)
    assert (root / "sibling" / "notes.txt").read_text() == "keep me"


# ---- 4. checks before the first step leave no folder behind -----------------------------------------------


@pytest.mark.parametrize(
    "extra,match",
    [
        ({"data.seq_len": 30000, "model.max_seq_len": 30000}, "val split has"),  # longer than the validation split
        ({"data.val_batches": 5000, "data.tune_batches": 1}, "tune_batches"),  # no tune windows after val
        ({"probe.every": 5, "probe.heatmaps": "[blocks.0.attn.qq]"}, "unknown matrix"),
        ({"train.batch_size": 2_000_000}, "needs about"),  # the OOM case: refused up front
    ],
)
def test_failing_checks_leave_no_folder(tmp_path, token_dir, capsys, extra, match):
    out = tmp_path / "run"
    assert train(out, token_dir, **extra) == 2
    assert match in one_error(capsys)
    assert not out.exists()
    assert train(out, token_dir, **{"train.max_steps": 2}) == 0  # the corrected command just works


def test_token_ids_beyond_the_vocabulary_are_refused(tmp_path, token_dir, capsys):
    data = tmp_path / "data"
    shutil.copytree(token_dir, data)
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "vocab_size": 100}))
    assert train(tmp_path / "run", data) == 2
    assert "token id" in one_error(capsys)
    assert not (tmp_path / "run").exists()


def test_silently_ignored_options_are_refused(tmp_path, token_dir, capsys):
    assert (
        cli(["train", "--config", "tiny", "--out", str(tmp_path / "a"), "--max-steps", "5", *tiny_overrides(token_dir)])
        == 2
    )
    assert "--resume" in one_error(capsys)
    assert train(tmp_path / "b", token_dir, **{"model.vocab_size": 100}) == 2
    assert "vocabulary" in one_error(capsys)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_base_config_cycle_is_one_error(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(f"base: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"base: {tmp_path / 'a.yaml'}\n")
    assert cli(["train", "--config", str(tmp_path / "a.yaml"), "--out", str(tmp_path / "run")]) == 2
    assert "loops back" in one_error(capsys)


# ---- 5. divergence watch -----------------------------------------------------------------------------------


def test_a_finite_blow_up_stops_the_run_and_keeps_the_pre_divergence_checkpoint(tmp_path, token_dir, capsys):
    from smallinit.runs.checkpoint import list_checkpoints
    from smallinit.runs.doctor import check_run

    run = tmp_path / "run"
    # lr=10: loss 6 -> thousands from step 2; keep_ckpts=1 used to prune every checkpoint from before it
    rc = train(run, token_dir, **{"optim.lr": 10, "train.max_steps": 60, "train.ckpt_every": 1, "train.keep_ckpts": 1})
    assert rc == 2
    assert "diverged" in one_error(capsys)
    d = json.loads((run / "diverged.json").read_text())
    assert d["kind"] == "diverged" and d["step"] >= 2
    ckpts = list_checkpoints(run)
    assert ckpts and int(ckpts[-1].name[5:]) < d["step"]  # the newest checkpoint predates the divergence
    assert not (run / "summary.json").exists()
    rep = check_run(run)
    assert rep.status == "diverged" and not rep.healthy
    assert any(f"diverged at step {d['step']}" in f.what for f in rep.problems)


def test_a_large_init_that_starts_far_above_ln_v_and_descends_is_not_called_diverged(tmp_path, token_dir):
    """γ = 0.05: σ ≈ 1 for every matrix, so the first loss is far above ln V + 3 and stays there for more than 10
    steps while it falls. The old line (ln V + 3) stopped such runs as "diverged" at step 10 (the cpu preset lost
    its γ = 0.25 runs at lr 1e-3 and 3e-3 that way); the line now starts from the first-step loss."""
    run = tmp_path / "run"
    rc = train(run, token_dir, **{"model.gamma": 0.05, "optim.lr": 1e-3, "train.max_steps": 16, "train.log_every": 1})
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    ln_v = math.log(json.loads((token_dir / "meta.json").read_text())["vocab_size"])
    assert sum(r["loss"] > ln_v + 3 for r in recs) >= 10  # the old rule would have stopped it
    assert rc == 0 and not (run / "diverged.json").exists() and recs[-1]["loss"] < recs[0]["loss"]


def test_the_divergence_rule_does_not_fire_on_a_healthy_run(done_run):
    recs = [json.loads(l) for l in (done_run / "metrics.jsonl").read_text().splitlines()]
    assert not (done_run / "diverged.json").exists() and len(recs) == 6


# ---- 6. SIGINT / SIGTERM -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_a_checkpoint_then_exits(tmp_path, token_dir, sig, code):
    from smallinit.runs.checkpoint import list_checkpoints

    run = tmp_path / "run"
    log = tmp_path / "stderr.log"
    args = [
        sys.executable,
        "-m",
        "smallinit",
        "train",
        "--config",
        "tiny",
        "--out",
        str(run),
        *tiny_overrides(
            token_dir,
            **{
                "train.max_steps": 5000,
                "train.ckpt_every": 1000,
                "train.progress": "true",
                "train.progress_seconds": 0,
            },
        ),
    ]
    with open(log, "w") as err:
        p = subprocess.Popen(args, stderr=err, stdout=subprocess.DEVNULL)
        deadline = time.time() + 600
        while time.time() < deadline and not (run / "metrics.jsonl").is_file():
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(sig)
        rc = p.wait(600)  # generous: a loaded machine (no timing target here)
    text = log.read_text()
    assert rc == code, text
    lines = [l for l in text.splitlines() if l.startswith("interrupted")]
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0] and "Traceback" not in text
    ckpts = list_checkpoints(run)
    assert ckpts, text
    step = int(ckpts[-1].name[5:])
    assert 0 < step < 1000 and f"at step {step}" in lines[0]  # saved at the step boundary, not at ckpt_every
    # progress in a log file: plain lines, never carriage returns
    assert "\r" not in text and any(l.startswith("step ") and "/5000" in l for l in text.splitlines())


def test_progress_lines_in_a_log_file_and_a_bar_on_a_terminal():
    from smallinit.train.loop import Progress

    buf = io.StringIO()
    p = Progress(10, 0, enabled=True, seconds=3600, stream=buf)
    for s in range(1, 11):
        p.update(s, 5.0 - s / 10, {"tokens_per_s": 100.0, **({"val_loss": 4.5} if s == 5 else {})})
    p.close()
    lines = buf.getvalue().splitlines()
    # the first step, the evaluated step and the last step; nothing in between within the interval
    assert [l.split()[1] for l in lines] == ["1/10", "5/10", "10/10"]
    assert "\r" not in buf.getvalue() and "val 4.5000" in lines[1]

    class Tty(io.StringIO):
        def isatty(self):
            return True

    t = Tty()
    p = Progress(10, 0, enabled=True, stream=t)
    assert p.bar is not None
    p.close()


# ---- the policy itself ---------------------------------------------------------------------------------------


def test_output_policy_rules(tmp_path):
    from smallinit.core.errors import ConfigError
    from smallinit.core.outputs import check_out_dir, check_out_file, output_kind, staged_dir

    data = tmp_path / "data"
    data.mkdir()
    for n in ("meta.json", "train.bin", "val.bin"):
        (data / n).write_text("x")
    assert output_kind(data) == "data"
    assert check_out_dir(tmp_path / "new", "data").state == "new"
    (tmp_path / "empty").mkdir()
    assert check_out_dir(tmp_path / "empty", "data").state == "new"
    with pytest.raises(ConfigError, match="already holds"):
        check_out_dir(data, "data")
    assert check_out_dir(data, "data", force=True).state == "replace"
    with pytest.raises(ConfigError, match="not empty"):
        check_out_dir(data, "export", force=True)  # --force replaces only an output of the same kind
    with pytest.raises(ConfigError, match="be or contain the input"):
        check_out_dir(data, "data", inputs=[data], force=True)
    with pytest.raises(ConfigError, match="be or contain the input"):
        check_out_dir(tmp_path, "data", inputs=[data], force=True)
    with pytest.raises(ConfigError, match="inside the input"):
        check_out_dir(data / "sub", "data", inputs=[data], force=True)
    assert check_out_dir(data / "sub", "data", inputs=[data]).state == "new"  # a new folder inside: fine
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("x")
    (run / "checkpoints").mkdir()
    assert check_out_dir(run, "run", inputs=[run], can_continue=True).state == "continue"
    f = tmp_path / "f.json"
    f.write_text("{}")
    with pytest.raises(ConfigError, match="is a file"):
        check_out_dir(f, "data")
    with pytest.raises(ConfigError, match="not an eval results file"):
        check_out_file(f, "eval")
    f.write_text('{"tasks": {}, "config": {}}')
    assert check_out_file(f, "eval") == f
    with pytest.raises(ConfigError, match="is a folder"):
        check_out_file(data, "eval")
    with pytest.raises(ConfigError, match="is the input"):
        check_out_file(f, "eval", inputs=[f])
    # written beside and renamed into place; an error leaves the destination as it was and no temporary
    plan = check_out_dir(data, "data", force=True)
    with pytest.raises(RuntimeError):
        with staged_dir(plan) as tmp:
            (tmp / "meta.json").write_text("new")
            raise RuntimeError("boom")
    assert (data / "meta.json").read_text() == "x"
    with staged_dir(plan) as tmp:
        for n in ("meta.json", "train.bin", "val.bin"):
            (tmp / n).write_text("new")
    assert (data / "meta.json").read_text() == "new"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---- sweep / reproduce lock, scaling and compare refusals (the library functions of the experiments) -------


def test_a_second_sweep_or_reproduce_on_one_folder_is_refused_and_records_nothing(tmp_path, token_dir, capsys):
    from smallinit.train.loop import RunLock

    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "base: tiny\noverrides: ["
        + ", ".join(f"'{o}'" for o in tiny_overrides(token_dir, **{"train.max_steps": 2}))
        + "]\ngrid:\n  model.gamma: [0.5, 1.0]\n"
    )
    for argv, out in ((["sweep", str(spec)], tmp_path / "sw"), (["reproduce", "--preset", "demo"], tmp_path / "rp")):
        out.mkdir()
        with RunLock(out):  # another invocation holds the folder
            assert cli([*argv, "--out", str(out), "--jobs", "1", "--gflops", "1"]) == 2
        line = one_error(capsys)
        assert "in use by another process" in line and f"pid {os.getpid()}" in line
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written, nothing recorded as failed


def test_scaling_refuses_mixed_tokenizers_and_flags_budgets(tmp_path, done_run, capsys):
    from smallinit.analysis.scaling import check_comparable, runs_table
    from smallinit.data.tokenizer import byte_tokenizer

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(done_run, a)
    shutil.copytree(done_run, b)
    byte_tokenizer().save(str(b / "tokenizer.json"))
    assert cli(["scaling", str(a), str(b), "--baseline", "model.gamma=1.0", "--out", str(tmp_path / "s")]) == 2
    assert "different tokenizers" in one_error(capsys)
    assert not (tmp_path / "s").exists()
    pts = runs_table([done_run, a])
    assert check_comparable(pts) == []  # same tokenizer, data and budget: nothing to say
    pts[1].tokens *= 4
    assert "different token budgets" in check_comparable(pts)[0]


def test_compare_counts_are_checked_up_front(done_run, tmp_path, capsys):
    for extra in (["--tokens", "10", "--bins", "20"], ["--bins", "0"], ["--batch-size", "0"], ["--top", "-1"]):
        assert cli(["compare", str(done_run), str(done_run), "--out", str(tmp_path / "c"), *extra]) == 2
        one_error(capsys)
        assert not (tmp_path / "c").exists()


# ---- damaged runs and foreign bytes (found by an attack on the CLI, 2026-12-01) --------------------------------


def _copy(done_run: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(done_run, dst)
    return dst


def test_resume_after_config_yaml_was_edited_to_another_shape_is_one_error(tmp_path, done_run, capsys):
    run = _copy(done_run, tmp_path)
    cfg = (run / "config.yaml").read_text()
    assert "d_model: 32" in cfg
    (run / "config.yaml").write_text(cfg.replace("d_model: 32", "d_model: 64"))
    assert cli(["train", "--resume", str(run), "--max-steps", "8"]) == 2
    err = one_error(capsys)
    assert "do not fit the model of" in err and "was config.yaml edited?" in err
    assert cli(["doctor", str(run)]) != 0
    out = capsys.readouterr().out
    assert "config.yaml's model differs from the newest checkpoint's copy (d_model: 64 here, 32 there)" in out
    assert "cp " in out and "step_00000006/config.yaml" in out  # how to restore it
    (run / "config.yaml").write_text("")
    assert cli(["train", "--resume", str(run)]) == 2
    assert "has no model/data sections" in one_error(capsys)


def test_metrics_lines_that_are_not_records_are_skipped_on_resume_and_plot(tmp_path, done_run, capsys):
    run = _copy(done_run, tmp_path)
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'[1, 2]\n"text"\n{"step": "x"}\n\xff\xfe not utf-8\n')
    assert cli(["plot", str(run), "--out", str(tmp_path / "plots")]) == 0
    assert cli(["train", "--resume", str(run), "--max-steps", "7"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 7  # the foreign lines were dropped with the resume


def test_a_summary_that_is_not_an_object_is_one_error_in_scaling(tmp_path, done_run, capsys):
    run = _copy(done_run, tmp_path)
    argv = ["scaling", str(run), str(done_run), "--baseline", "model.gamma=1.0", "--out", str(tmp_path / "sc")]
    (run / "summary.json").write_text("[1]")
    assert cli(argv) == 2
    assert "summary.json: not a JSON object" in one_error(capsys)
    (run / "summary.json").write_text('{"final_val_loss": "abc"}')
    assert cli(argv) == 2
    assert "is not a number" in one_error(capsys)


def test_what_the_os_refuses_is_one_error_line_naming_the_file(tmp_path, done_run, capsys, monkeypatch):
    def refused(run_dir):
        raise PermissionError(13, "Permission denied", str(Path(run_dir) / "config.yaml"))

    monkeypatch.setattr("smallinit.commands.plot.run", lambda args: refused(done_run))
    assert cli(["plot", str(done_run), "--out", str(tmp_path / "p")]) == 2
    assert one_error(capsys) == f"error: {done_run / 'config.yaml'}: Permission denied"


def test_an_anchor_folder_is_continued_only_with_its_own_config(tmp_path, capsys):
    small = [
        "--steps",
        "2",
        "--set",
        "n_train=64",
        "--set",
        "n_test=16",
        "--set",
        "eval_every=1",
        "--set",
        "d_model=16",
        "--set",
        "n_layers=1",
        "--set",
        "n_heads=2",
        "--set",
        "d_ff=32",
        "--quiet",
    ]
    out = tmp_path / "anchor"
    assert cli(["anchor", "--out", str(out), "--gamma", "1.0", *small]) == 0
    result = (out / "result.json").read_text()
    capsys.readouterr()
    assert cli(["anchor", "--out", str(out), "--gamma", "0.5", *small]) == 2
    assert "holds an anchor run with another config (gamma differ)" in one_error(capsys)
    assert (out / "result.json").read_text() == result  # the finished result is kept
    assert cli(["anchor", "--out", str(out), "--gamma", "1.0", *small, "--set", "threads=1"]) == 0  # same run


def test_unwritable_outputs_are_named_as_given(tmp_path, token_dir, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert train(afile / "sub", token_dir) == 2
    assert one_error(capsys) == f"error: {afile / 'sub'}: cannot be created: {afile} is a file, not a folder"


def test_a_hugging_face_config_with_impossible_values_is_one_error(tmp_path, capsys):
    bad = tmp_path / "neg.json"
    bad.write_text('{"model_type": "llama", "hidden_size": -4}')
    assert cli(["audit", str(bad)]) == 2
    err = one_error(capsys)
    assert err.startswith(f"error: {bad}: transformers") and "hidden" in err


def test_a_relative_data_path_resolves_from_another_folder(tmp_path, token_dir, monkeypatch, capsys):
    """A run started with a relative data.path resumes, probes and compares from any folder: the run records the
    folder it was started in (origin.json); config.yaml keeps data.path as written (the run's identity)."""
    import shutil

    import yaml

    home = tmp_path / "home"
    shutil.copytree(token_dir, home / "data" / "tok")
    monkeypatch.chdir(home)
    over = tiny_overrides(Path("data/tok"), **{"train.max_steps": 4, "train.ckpt_every": 2, "train.eval_every": 2})
    assert cli(["train", "--config", "tiny", "--out", "runs/r", *over]) == 0
    run = home / "runs" / "r"
    origin = json.loads((run / "origin.json").read_text())
    assert origin["cwd"] == str(home) and origin["dtype"]["dtype"] == "fp32"  # and the dtype decision (precision.py)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli(["train", "--resume", str(run), "--max-steps", "6"]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["path"] == "data/tok"
    assert json.loads((run / "origin.json").read_text()) == origin  # not moved (nor decided again) by the resume
    assert cli(["probe", str(run)]) == 0
    assert cli(["compare", str(run), str(run), "--tokens", "64", "--bins", "2", "--out", str(elsewhere / "c")]) == 0


def test_our_warnings_are_one_line(tmp_path, done_run, capsys):
    """A resume that falls back past a damaged checkpoint says so in one `warning:` line, not Python's
    file:line: UserWarning format with the source line."""
    run = _copy(done_run, tmp_path)
    newest = sorted((run / "checkpoints").iterdir())[-1]
    (newest / "model.safetensors").write_bytes(b"\0" * 64)
    assert cli(["train", "--resume", str(run), "--max-steps", "8"]) == 0
    err = capsys.readouterr().err
    assert [l for l in err.splitlines() if "skipping bad checkpoint" in l][0].startswith("warning: skipping")
    assert "UserWarning" not in err and "warnings.warn(" not in err


def test_overrides_may_follow_options(tmp_path, token_dir, capsys):
    """`train --config tiny model.gamma=0.5 --out DIR data.path=...`: overrides before and after an option all
    apply; an unknown option is still argparse's one error."""
    import yaml

    over = tiny_overrides(token_dir, **{"train.max_steps": 2})
    assert cli(["train", "--config", "tiny", "model.gamma=0.5", "--out", str(tmp_path / "r"), *over]) == 0
    cfg = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert cfg["model"]["gamma"] == 0.5 and cfg["data"]["path"] == str(token_dir)
    with pytest.raises(SystemExit) as e:
        cli(["train", "--config", "tiny", "--out", str(tmp_path / "r2"), "--no-such-flag", *over])
    assert e.value.code == 2 and "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()


def test_plot_never_writes_over_a_users_index_and_a_replot_leaves_no_stale_figure(tmp_path, done_run, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>my page</html>")
    (site / "notes.txt").write_text("mine")
    assert cli(["plot", str(done_run), "--out", str(site)]) == 2
    assert "folder exists and is not empty" in one_error(capsys)
    assert (site / "index.html").read_text() == "<html>my page</html>"
    out = tmp_path / "plots"
    assert cli(["plot", str(done_run), "--out", str(out)]) == 0
    (out / "stale_from_another_run.png").write_bytes(b"x")
    assert cli(["plot", str(done_run), "--out", str(out)]) == 0  # a plot folder of ours is replaced whole
    assert not (out / "stale_from_another_run.png").exists() and (out / "index.html").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_two_sigints_at_once_are_one_clean_stop(tmp_path, token_dir):
    """Ctrl-C under a sweep reaches a run twice (the terminal's SIGINT to the process group and the runner's
    forwarded one): the run must still checkpoint at its stop step, not die at once (a second SIGINT later does)."""
    from smallinit.runs.checkpoint import list_checkpoints

    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "smallinit",
        "train",
        "--config",
        "tiny",
        "--out",
        str(run),
        *tiny_overrides(token_dir, **{"train.max_steps": 5000, "train.ckpt_every": 1000, "train.compile": False}),
    ]  # eager: it checkpoints within the 0.3 s gap
    with open(tmp_path / "err.log", "w") as err:
        p = subprocess.Popen(args, stderr=err, stdout=subprocess.DEVNULL)
        deadline = time.time() + 600
        while time.time() < deadline and not (run / "metrics.jsonl").is_file():
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)  # the runner's forwarded copy comes a little later (two at once would coalesce)
        p.send_signal(signal.SIGINT)
        rc = p.wait(600)
    text = (tmp_path / "err.log").read_text()
    assert rc == 130, text
    step = int(list_checkpoints(run)[-1].name[5:])
    assert 0 < step < 1000 and f"at step {step}" in text  # checkpointed where it stopped


# ---- issue 32 (D): a resume re-verifies the data; doctor reports data that is no longer the run's ---------------


def test_resume_and_doctor_verify_the_data_is_still_the_runs(tmp_path, token_dir, capsys):
    """ids ≥ vocab written into train.bin after the start used to give an IndexError mid-run; data prepared again
    with --force under another tokenizer (same vocabulary size) resumed silently and doctor called the run healthy."""
    import numpy as np

    from smallinit.data import prepare_corpus
    from smallinit.runs.doctor import check_run

    data = tmp_path / "data"
    shutil.copytree(token_dir, data)
    run = tmp_path / "run"
    assert train(run, data, **{"train.max_steps": 4, "train.ckpt_every": 2, "train.eval_every": 2}) == 0
    assert check_run(run).healthy
    before = snapshot(run)
    capsys.readouterr()

    # 1. a token id beyond the vocabulary written into train.bin after the start
    original = (data / "train.bin").read_bytes()
    ids = np.memmap(data / "train.bin", dtype=np.uint16, mode="r+")
    ids[len(ids) // 2] = 60000
    ids.flush()
    del ids
    assert cli(["train", "--resume", str(run), "--max-steps", "6"]) == 2
    err = one_error(capsys)
    assert "train.bin holds token id 60000" in err and "vocabulary" in err
    rep = check_run(run)
    assert not rep.healthy and any("token id 60000" in f.what for f in rep.problems)
    assert snapshot(run) == before
    (data / "train.bin").write_bytes(original)

    # 2. the data folder prepared again (--force) under another tokenizer of the same vocabulary size
    prepare_corpus(
        ["builtin:stdlib"],
        data,
        tokenizer="bpe",
        vocab_size=512,
        val_fraction=0.1,
        progress=False,
        max_bytes=150_000,
        force=True,
    )
    assert json.loads((data / "meta.json").read_text())["vocab_size"] == 512
    assert cli(["train", "--resume", str(run), "--max-steps", "6"]) == 2
    err = one_error(capsys)
    assert f"{data / 'tokenizer.json'}: is not the tokenizer run {run} was trained with" in err
    rep = check_run(run)
    assert not rep.healthy and any("is not the tokenizer" in f.what for f in rep.problems)
    assert cli(["doctor", str(run)]) == 1
    assert "is not the tokenizer" in capsys.readouterr().out
    assert snapshot(run) == before
    prepare_corpus(
        ["builtin:stdlib"], data, tokenizer="byte", val_fraction=0.1, progress=False, max_bytes=150_000, force=True
    )  # another vocabulary size: named as such (it used to blame an edited config.yaml)
    assert cli(["train", "--resume", str(run), "--max-steps", "6"]) == 2
    assert f"{data}: holds a vocabulary of 257 tokens (meta.json), but run {run} was trained with 512" in one_error(
        capsys
    )
    assert snapshot(run) == before

    # 3. the run's own data back: the resume goes on
    shutil.rmtree(data)
    shutil.copytree(token_dir, data)
    assert cli(["train", "--resume", str(run), "--max-steps", "6"]) == 0
    assert check_run(run).healthy


# ---- issue 32 (E): --force replaces only what the command wrote ---------------------------------------------


def test_force_never_deletes_files_the_user_added_to_an_export_or_a_data_folder(tmp_path, done_run, capsys):
    """`export RUN HFDIR --force` and `prepare … --out D --force` used to delete notes.txt and mine/ added there."""
    text = tmp_path / "a.txt"
    text.write_text("the quick brown fox jumps over the lazy dog, again and again. " * 300)
    hf, data = tmp_path / "hf", tmp_path / "data"
    assert cli(["export", str(done_run), "--to", "hf", str(hf)]) == 0
    assert cli(["prepare", str(text), "--out", str(data), "--tokenizer", "byte", "--no-progress"]) == 0
    for d in (hf, data):
        (d / "notes.txt").write_text("keep me")
        (d / "mine").mkdir()
        (d / "mine" / "x.txt").write_text("mine")
    before = {d: snapshot(d) for d in (hf, data)}
    capsys.readouterr()
    for argv, d in (
        (["export", str(done_run), "--to", "hf", str(hf), "--force"], hf),
        (["prepare", str(text), "--out", str(data), "--tokenizer", "byte", "--force", "--no-progress"], data),
    ):
        assert cli(argv) == 2
        err = one_error(capsys)
        assert "mine/, notes.txt" in err and "did not write" in err, err
        assert snapshot(d) == before[d]
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
        # once the user's files are moved out, --force replaces the output as before
        shutil.rmtree(d / "mine")
        (d / "notes.txt").unlink()
        assert cli(argv) == 0
