"""Every verb against bad inputs: exactly one ``error:`` line on stderr, exit status 2, no traceback, and
nothing written. The cases are the ones a new user with messy inputs hit (issue #20): missing inputs, an
output that is a file or a folder, zero or negative counts, a disk that fills up."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from conftest import tiny_overrides

from smallinit.cli import main as cli


@pytest.fixture(scope="module")
def run(tmp_path_factory, token_dir) -> Path:
    out = tmp_path_factory.mktemp("errs") / "run"
    assert (
        cli(
            [
                "train",
                "--config",
                "tiny",
                "--out",
                str(out),
                *tiny_overrides(token_dir, **{"train.max_steps": 2, "model.gate": "none"}),
            ]
        )
        == 0
    )
    return out


def _cases(run: Path, token_dir: Path, tmp: Path) -> list[tuple[str, list[str]]]:
    afile = tmp / "afile.txt"
    afile.write_text("not a folder\n")
    adir = tmp / "adir"
    adir.mkdir(exist_ok=True)
    missing = str(tmp / "missing")
    yaml_task = tmp / "t.yaml"
    yaml_task.write_text("file: x.jsonl\nquestion: q\nchoices: c\nlabel: l\n")
    binary = tmp / "bin.yaml"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    busy = tmp / "busy"
    busy.mkdir(exist_ok=True)
    (busy / "notes.txt").write_text("mine\n")
    sweep_nodata = tmp / "nodata.yaml"
    sweep_nodata.write_text(f"base: tiny\noverrides: [data.path={missing}]\ngrid:\n  model.gamma: [0.5, 1.0]\n")
    arm_yaml = tmp / "arm.yaml"
    arm_yaml.write_text("name: b\noverrides: 5\n")
    return [
        (
            "train: negative seed",
            ["train", "--config", "tiny", "--out", str(tmp / "t3"), *tiny_overrides(token_dir, **{"train.seed": -1})],
        ),
        (
            "train: seed beyond 64 bits",
            [
                "train",
                "--config",
                "tiny",
                "--out",
                str(tmp / "t4"),
                *tiny_overrides(token_dir, **{"train.seed": 2**70}),
            ],
        ),
        ("train: config not UTF-8", ["train", "--config", str(binary), "--out", str(tmp / "t5")]),
        ("init-report: config not UTF-8", ["init-report", "--config", str(binary)]),
        ("init-report: larger than memory", ["init-report", "--config", "tiny", "model.d_model=1048576"]),
        ("sweep: spec not UTF-8", ["sweep", str(binary), "--out", str(tmp / "w2")]),
        ("sweep: a run's data missing", ["sweep", str(sweep_nodata), "--out", str(tmp / "w4"), "--gflops", "1"]),
        ("sweep: negative gflops", ["sweep", str(yaml_task), "--out", str(tmp / "w3"), "--dry-run", "--gflops", "-5"]),
        ("probe: unknown device", ["probe", str(run), "--device", "bogus"]),
        ("anchor: negative gamma", ["anchor", "--out", str(tmp / "an1"), "--gamma", "-1"]),
        ("anchor: unknown gate", ["anchor", "--out", str(tmp / "an2"), "--set", "gate=bogus"]),
        ("anchor: negative threads", ["anchor", "--out", str(tmp / "an3"), "--set", "threads=-1"]),
        (
            "reproduce: corpus is a file",
            ["reproduce", "--preset", "demo", "--corpus", str(afile), "--out", str(tmp / "rp2")],
        ),
        (
            "reproduce: corpus is a file (dry run)",
            ["reproduce", "--preset", "demo", "--corpus", str(afile), "--out", str(tmp / "rp3"), "--dry-run"],
        ),
        (
            "reproduce: dry run into a foreign folder",
            ["reproduce", "--preset", "demo", "--out", str(busy), "--gflops", "1", "--dry-run"],
        ),
        (
            "crossover: dry run into a foreign folder",
            ["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1M", "--out", str(busy), "--dry-run"],
        ),
        (
            "scaling: a run given twice",
            ["scaling", str(run), str(run), "--baseline", "model.gamma=1", "--out", str(tmp / "s2")],
        ),
        ("audit: --max-params nan", ["audit", "tiny", "--max-params", "nan"]),
        ("audit: --max-params 0", ["audit", "tiny", "--max-params", "0"]),
        (
            "crossover: arm overrides not a list",
            ["crossover", "a:model.gamma=1", str(arm_yaml), "--tokens", "1M", "--out", str(tmp / "x3")],
        ),
        ("prepare: missing input", ["prepare", missing, "--out", str(tmp / "p1")]),
        ("prepare: output is a file", ["prepare", str(afile), "--out", str(afile), "--tokenizer", "byte"]),
        (
            "prepare: output is its own input",
            ["prepare", str(adir), "--out", str(adir), "--tokenizer", "byte", "--force"],
        ),
        ("train: missing data", ["train", "--config", "tiny", "--out", str(tmp / "t1"), f"data.path={missing}"]),
        ("train: output onto a file", ["train", "--config", "tiny", "--out", str(afile), *tiny_overrides(token_dir)]),
        ("train: resume of nothing", ["train", "--resume", missing]),
        (
            "train: output on a read-only filesystem (/proc)",
            ["train", "--config", "tiny", "--out", "/proc/smallinit-ro/run", *tiny_overrides(token_dir)],
        ),
        (
            "prepare: output on a read-only filesystem",
            ["prepare", str(afile), "--out", "/proc/smallinit-ro/data", "--tokenizer", "byte"],
        ),
        ("export: output on a read-only filesystem", ["export", str(run), "--to", "hf", "/proc/smallinit-ro/hf"]),
        ("train: zero max-steps", ["train", "--resume", str(run), "--max-steps", "0"]),
        (
            "train: max-steps without resume",
            ["train", "--config", "tiny", "--out", str(tmp / "t2"), "--max-steps", "3"],
        ),
        ("eval: out is a folder", ["eval", str(run), "--tasks", str(yaml_task), "--out", str(adir)]),
        ("eval: out onto a non-result file", ["eval", str(run), "--tasks", str(yaml_task), "--out", str(afile)]),
        (
            "eval: zero batch size",
            ["eval", str(run), "--tasks", str(yaml_task), "--out", str(tmp / "r.json"), "--batch-size", "0"],
        ),
        ("eval: missing checkpoint", ["eval", missing, "--tasks", str(yaml_task), "--out", str(tmp / "r.json")]),
        ("probe: out is a folder", ["probe", str(run), "--out", str(adir)]),
        ("probe: negative batch", ["probe", str(run), "--batch-size", "-1"]),
        ("probe: missing run", ["probe", missing]),
        ("export: missing run", ["export", missing, "--to", "hf", str(tmp / "e1")]),
        ("export: onto the run", ["export", str(run), "--to", "hf", str(run), "--force"]),
        ("export: onto a file", ["export", str(run), "--to", "hf", str(afile)]),
        ("import-hf: missing folder", ["import-hf", missing, "--out", str(tmp / "i1")]),
        ("import-hf: not an HF folder", ["import-hf", str(adir), "--out", str(tmp / "i2")]),
        ("doctor: missing run", ["doctor", missing]),
        ("plot: missing run", ["plot", missing]),
        ("compare: missing runs", ["compare", missing, missing, "--out", str(tmp / "c1")]),
        ("scaling: missing runs", ["scaling", missing, "--out", str(tmp / "s1")]),
        ("sweep: missing spec", ["sweep", missing, "--out", str(tmp / "w1")]),
        ("anchor: output onto a file", ["anchor", "--out", str(afile)]),
        ("plot: output onto a file", ["plot", str(run), "--out", str(afile)]),
        ("crossover: one arm", ["crossover", "a:model.gamma=1", "--tokens", "1M", "--out", str(tmp / "x0")]),
        (
            "crossover: output is a file",
            ["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1M", "--out", str(afile)],
        ),
        (
            "crossover: foreign folder",
            ["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1M", "--out", str(adir)],
        ),
        (
            "crossover: budget too small",
            ["crossover", "a:model.gamma=1", "b:model.gamma=0.5", "--tokens", "1k", "--out", str(tmp / "x1")],
        ),
        (
            "crossover: misspelt key",
            ["crossover", "a:model.gama=1", "b:model.gamma=0.5", "--tokens", "1M", "--out", str(tmp / "x2")],
        ),
        ("reproduce: zero jobs", ["reproduce", "--preset", "demo", "--jobs", "0", "--out", str(tmp / "rp0")]),
        ("reproduce: zero gflops", ["reproduce", "--preset", "demo", "--gflops", "0", "--out", str(tmp / "rp1")]),
        (
            "compare: bins above tokens",
            ["compare", str(run), str(run), "--tokens", "4", "--bins", "9", "--out", str(tmp / "c2")],
        ),
        ("reproduce: bad corpus", ["reproduce", "--preset", "test", "--corpus", missing, "--out", str(tmp / "rp")]),
        # found by a review helper (2026-12-01): tracebacks, silently accepted values, a false message
        (
            "prepare: infinite byte count",
            ["prepare", "builtin:stdlib", "--out", str(tmp / "p1"), "--max-bytes", "infM"],
        ),
        (
            "prepare: zero BPE sample",
            ["prepare", "builtin:stdlib", "--out", str(tmp / "p2"), "--bpe-sample-bytes", "0"],
        ),
        ("prepare: negative seed", ["prepare", "builtin:stdlib", "--out", str(tmp / "p3"), "--seed", "-1"]),
        ("prepare: empty --out", ["prepare", "builtin:stdlib", "--out", ""]),
        (
            "reproduce: infinite hours",
            ["reproduce", "--preset", "demo", "--hours", "inf", "--dry-run", "--out", str(tmp / "rp2")],
        ),
        (
            "reproduce: infinite gflops",
            ["reproduce", "--preset", "demo", "--gflops", "inf", "--dry-run", "--out", str(tmp / "rp3")],
        ),
        (
            "sweep: infinite gflops",
            ["sweep", str(sweep_nodata), "--gflops", "inf", "--dry-run", "--out", str(tmp / "w3")],
        ),
        ("audit: zero blocks", ["audit", "tiny", "--blocks", "0"]),
        ("audit: negative grad clip", ["audit", "tiny", "--grad-clip", "-1"]),
        ("audit: nan grad clip", ["audit", "tiny", "--grad-clip", "nan"]),
        ("anchor: negative seed", ["anchor", "--seed", "-1", "--out", str(tmp / "a9")]),
        ("no verb", []),
    ]


def test_every_verb_fails_with_one_error_line(run, token_dir, tmp_path, capsys):
    before = sorted(p.name for p in run.iterdir())
    bad = []
    for label, argv in _cases(run, token_dir, tmp_path):
        capsys.readouterr()
        try:
            rc = cli(argv)
        except SystemExit as e:  # argparse's own usage errors exit 2 with one "error:" line too
            rc = e.code
        except BaseException as e:  # noqa: BLE001 - a traceback is exactly what this test forbids
            bad.append(f"{label}: raised {type(e).__name__}: {e}")
            continue
        err = capsys.readouterr().err
        errors = [l for l in err.splitlines() if "error:" in l]
        if rc != 2 or len(errors) != 1 or "Traceback" in err:
            bad.append(f"{label}: rc={rc}, stderr={err.strip()[-300:]!r}")
    assert not bad, "\n".join(bad)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing was written into the run
    assert (tmp_path / "afile.txt").read_text() == "not a folder\n"
    leftovers = [
        p.name
        for p in tmp_path.iterdir()
        if p.name not in ("afile.txt", "adir", "t.yaml", "bin.yaml", "arm.yaml", "nodata.yaml", "busy")
    ]
    assert leftovers == [], leftovers  # no folder left behind by a refused command


def test_disk_full_during_prepare_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import smallinit.data.prepare as prep

    src = tmp_path / "a.txt"
    src.write_text("hello world, some text to tokenize. " * 200)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "train.bin"))

    monkeypatch.setattr(prep, "_write_splits", full)
    assert cli(["prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", "byte", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert [l for l in err.splitlines() if l.startswith("error:")] and "No space left" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no output, no temporary folder


def test_argparse_errors_are_one_error_line_without_a_usage_block(capsys):
    """What argparse refuses (a missing argument, a bad value, an unknown option or verb) is one `error:` line that
    names the problem and the verb's --help — argparse's own format printed a usage block first."""
    cases = [
        (["crossover"], "the following arguments are required", "smallinit crossover --help"),
        (["reproduce", "--jobs", "x"], "argument --jobs: invalid int value: 'x'", "smallinit reproduce --help"),
        (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag", "smallinit train --help"),
        (["no-such-verb"], "invalid choice: 'no-such-verb'", "smallinit --help"),
    ]
    for argv, problem, where in cases:
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            cli(argv)
        err = capsys.readouterr().err.splitlines()
        assert e.value.code == 2 and len(err) == 1, (argv, err)
        assert err[0].startswith("error: ") and problem in err[0] and f"(see '{where}')" in err[0], (argv, err)


def test_each_kind_of_name_says_which_it_is(tmp_path, capsys):
    """Three kinds of name, one word each (issue #33): a run *config* (``--config``, configs/*.yaml), a model
    *size* (``model.preset:`` in a config, ``ModelConfig.from_size``) and a reproduction *preset* (``--preset``)."""
    cases = [
        (["train", "--config", "nope", "--out", str(tmp_path / "a")], "error: unknown config 'nope'; configs: "),
        (
            ["train", "--config", "tiny", "--out", str(tmp_path / "b"), "model.preset=huge"],
            "error: model.preset: unknown model size 'huge'; choose one of tiny, small",
        ),
        (["train", "--out", str(tmp_path / "c")], "error: give --config CONFIG_OR_YAML and --out RUN_DIR"),
        (
            ["reproduce", "--preset", "nope", "--out", str(tmp_path / "d"), "--dry-run"],
            "error: unknown reproduce preset 'nope'; choose one of demo, cpu",
        ),
    ]
    for argv, line in cases:
        capsys.readouterr()
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(line), (argv, err)
    assert list(tmp_path.iterdir()) == []


def test_more_jobs_than_cores_and_impossible_audit_sizes(token_dir, tmp_path, capsys, monkeypatch):
    """Issue 32 (G): `crossover … --jobs 4 --dry-run` (3 arms) and `reproduce --dry-run --jobs 16` on 2 cores gave a
    ZeroDivisionError traceback (2 // 3 = 0 threads); `audit` of an HF config with hidden_size: -64 or
    intermediate_size: 0 gave tracebacks, and `audit --widths 64,65536` started allocating 64 GiB with no estimate."""
    import os

    from smallinit.experiments import cost

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cost, "measure_gflops", lambda *a, **k: 10.0)
    assert cost.sharing_speedup(3, 4) == 1.0 and cost.sharing_speedup(3, 16) == 1.0
    assert (
        cli(
            [
                "crossover",
                "a:model.gamma=0.5",
                "b:model.gamma=1.0",
                "c:model.gamma=1.5",
                "--config",
                "tiny",
                "--set",
                f"data.path={token_dir}",
                "--tokens",
                "4M",
                "--jobs",
                "4",
                "--out",
                str(tmp_path / "x"),
                "--dry-run",
            ]
        )
        == 0
    )
    assert "4 at a time" in capsys.readouterr().out
    assert (
        cli(
            [
                "reproduce",
                "--preset",
                "demo",
                "--dry-run",
                "--jobs",
                "16",
                "--gflops",
                "10",
                "--out",
                str(tmp_path / "rp"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    neg, zero = tmp_path / "neg.json", tmp_path / "zero.json"
    neg.write_text('{"model_type": "llama", "hidden_size": -64}')
    zero.write_text('{"model_type": "llama", "intermediate_size": 0}')
    for argv, want in (
        (["audit", str(neg)], "hidden_size must be a positive integer, got -64"),
        (["audit", str(zero)], "intermediate_size must be a positive integer, got 0"),
        (["audit", "tiny", "--widths", "64,65536"], "--widths: width 65536 builds a model of"),
    ):
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err
        lines = [l for l in err.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and want in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neg.json", "zero.json"]  # dry runs write nothing
