"""``smallinit prepare``: the summary on success, one ``error:`` line and exit 2 on each bad input."""

from __future__ import annotations

import json

import pytest

from smallinit.cli import main
from smallinit.data import EOT_TOKEN, TokenData

EN = "It was the best of times, it was the worst of times.\n"
ZH = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\n"


def _run(capsys, *argv):
    rc = main(["prepare", *map(str, argv), "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "en.txt").write_text(EN * 300, encoding="utf-8")
    (tmp_path / "zh.jsonl").write_text(
        "".join(json.dumps({"body": f"{i} {ZH * 3}"}, ensure_ascii=False) + "\n" for i in range(150)), encoding="utf-8"
    )
    return tmp_path


def test_prepare_cli_success_and_summary(capsys, corpus):
    out_dir = corpus / "data"
    rc, out, err = _run(
        capsys,
        corpus / "en.txt",
        corpus / "zh.jsonl",
        "--out",
        out_dir,
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "300",
        "--weights",
        "0.6,0.4",
        "--text-field",
        "body",
        "--val-fraction",
        "0.05",
        "--max-bytes",
        "1M",
    )
    assert rc == 0, err
    assert "error" not in err
    assert f"wrote {out_dir}" in out and "chars/tok" in out and "MB/s" in out
    for name in ("en", "zh"):
        assert any(line.split()[0] == name for line in out.splitlines()[2:-1])
    d = TokenData(out_dir)
    assert sorted(p.name for p in out_dir.iterdir()) == ["meta.json", "tokenizer.json", "train.bin", "val.bin"]
    assert d.meta["command"].startswith("smallinit prepare ") and "--weights 0.6,0.4" in d.meta["command"]
    assert d.meta["max_bytes"] == 1_000_000
    shares = {s["name"]: s["share"] for s in d.meta["sources"]}
    assert shares["en"] == pytest.approx(0.6, rel=0.05) and shares["zh"] == pytest.approx(0.4, rel=0.05)
    assert [s[2] for s in d.meta["val_sources"]] == ["en", "zh"]
    text = d.tokenizer.decode([int(i) for i in d.train[: d.meta["train_sources"][0][1]]], skip_special_tokens=False)
    assert all(seg in EN * 300 for seg in text.split(EOT_TOKEN))


@pytest.mark.parametrize(
    "args, message",
    [
        (["{d}/missing.txt"], "missing.txt: no such file or directory"),
        (["{d}/empty.txt"], "empty.txt: empty corpus"),
        (["{d}/nodir"], "directory has no .txt or .md files"),
        (["{d}/en.txt", "--tokenizer", "wordpiece"], "unknown tokenizer 'wordpiece'"),
        (["{d}/en.txt", "{d}/en.txt", "--weights", "1,2,3"], "--weights has 3 value(s) for 2 input(s)"),
        (["{d}/tiny.txt", "--val-fraction", "0.01"], "too small for a val split"),
        (["{d}/zh.jsonl"], "zh.jsonl:1: no 'text' field (have: body)"),
        (["{d}/en.txt", "--vocab-size", "10"], "vocab size must be"),
        (["{d}/en.txt", "--val-fraction", "0.9"], "val fraction must be in [0, 0.5)"),
    ],
)
def test_prepare_cli_bad_input(capsys, corpus, args, message):
    (corpus / "empty.txt").write_text("", encoding="utf-8")
    (corpus / "tiny.txt").write_text("hi\n", encoding="utf-8")
    (corpus / "nodir").mkdir()
    (corpus / "nodir" / "data.bin").write_bytes(b"\x00\x01")
    argv = [a.format(d=corpus) for a in args]
    if "--tokenizer" not in args and "--vocab-size" not in args:
        argv += ["--tokenizer", "byte"]  # no BPE training needed to reach the error
    rc, out, err = _run(capsys, *argv, "--out", corpus / "out")
    assert rc == 2
    assert message in _error_line(err)
    assert not (corpus / "out").exists()
    assert not [p for p in corpus.iterdir() if ".tmp-" in p.name]


def test_prepare_cli_non_utf8_warns_and_succeeds(capsys, tmp_path):
    (tmp_path / "bad.txt").write_bytes(EN.encode() * 20 + b"\xff\xfe\xfa end\n")
    rc, out, err = _run(capsys, tmp_path / "bad.txt", "--out", tmp_path / "out", "--tokenizer", "byte")
    assert rc == 0
    warn = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "bad.txt" in warn[0] and "replaced 3 invalid UTF-8 byte(s)" in warn[0]
    assert TokenData(tmp_path / "out").meta["sources"][0]["invalid_utf8_bytes"] == 3


def test_prepare_cli_bad_option_values_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["prepare", "x.txt", "--out", str(tmp_path / "o"), "--weights", "a,b"])
    assert e.value.code == 2
    assert "expected comma-separated numbers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prepare", "x.txt", "--out", str(tmp_path / "o"), "--max-bytes", "lots"])


def test_max_bytes_reads_at_most_n_bytes(capsys, corpus):
    """Issue 32 (H): `--max-bytes 1K` read 4,497 bytes (the stream stopped at the first piece boundary past N) while
    --help says "at most N": the last piece is now cut at N, never inside a character."""
    for src, name in ((corpus / "en.txt", "en"), (corpus / "zh.jsonl", "zh")):
        out_dir = corpus / f"cap-{name}"
        rc, out, err = _run(
            capsys,
            src,
            "--out",
            out_dir,
            "--tokenizer",
            "byte",
            "--val-fraction",
            "0",
            "--text-field",
            "body",
            "--max-bytes",
            "1K",
        )
        assert rc == 0, err
        d = TokenData(out_dir)
        s = d.meta["sources"][0]
        assert 1000 - 3 <= s["bytes"] <= 1000 and s["truncated_by_max_bytes"], s["bytes"]
        text = d.tokenizer.decode([int(i) for i in d.train], skip_special_tokens=False)
        assert "\ufffd" not in text and len(text.replace(EOT_TOKEN, "").encode("utf-8")) == s["bytes"]
