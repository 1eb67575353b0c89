"""Nothing wrong in silence, round three (issue #47): a bad-input attack on what had landed.

- compressed corpora are read as what they are (gzip, bzip2, xz; zstd with the zstandard package), detected by their
  first bytes: the same corpus plain and compressed gives the same tokens; what is neither text nor a known
  container is refused with one line before any work;
- a resumed run whose config.yaml differs from its checkpoint's copy is refused, listing the keys, unless they are
  named with --allow-change (then the change is recorded, shown by doctor and in summary.json);
- no file is read twice by prepare, and no validation window occurs in train.bin whatever the input layout;
- tracebacks and values that silently switched a safeguard off are one ``error:`` line each, nothing written.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import random
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import tiny_overrides

from smallinit.cli import main as cli
from smallinit.data import TokenData, prepare_corpus


def _words(seed: int, n: int) -> str:
    """``n`` random words: text in which no 24-byte sequence repeats by chance."""
    rng = random.Random(seed)
    return " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(n)
    )


def _docs(seed: int, n: int = 40) -> list[str]:
    return [
        _words(seed * 1000 + i, 60 + 7 * (i % 5)) + ("\nsecond line é ü 中文" if i % 3 == 0 else "") for i in range(n)
    ]


def _jsonl(docs: list[str]) -> bytes:
    return "".join(json.dumps({"text": d, "id": i}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)).encode()


def _prep(inputs, out, **kw):
    kw.setdefault("tokenizer", "byte")
    kw.setdefault("progress", False)
    kw.setdefault("val_fraction", 0.1)
    return prepare_corpus([str(i) for i in inputs], out, **kw)


def _one_error(capsys, argv: list[str]) -> str:
    """Run the CLI; assert rc 2, exactly one ``error:`` line and no traceback; return that line."""
    capsys.readouterr()
    try:
        rc = cli(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err[-600:])
    return lines[0]


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---- 1. compressed inputs --------------------------------------------------------------------------------------


def test_the_same_corpus_plain_and_compressed_gives_identical_tokens(tmp_path, capsys):
    """gzip (two members), bzip2, xz and a gzip file named plain .jsonl all give the plain file's tokens, for the byte
    tokenizer and a trained BPE; the summary's chars/token and MB count the decompressed text."""
    docs = _docs(1)
    raw = _jsonl(docs)
    half = len(raw) // 2
    half = raw.index(b"\n", half) + 1
    files = {
        "plain": ("c.jsonl", raw),
        "gzip": ("g/c.jsonl.gz", gzip.compress(raw[:half]) + gzip.compress(raw[half:])),  # a multi-member gzip
        "bzip2": ("b/c.jsonl.bz2", bz2.compress(raw)),
        "xz": ("x/c.jsonl.xz", lzma.compress(raw)),
        "gzip named .jsonl": ("m/c.jsonl", gzip.compress(raw)),  # detected by its first bytes, not its name
    }
    for name, data in files.values():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    for tok in ("byte", "bpe"):
        metas, bins = {}, {}
        for key, (name, _) in files.items():
            out = tmp_path / f"out-{tok}-{key.replace(' ', '_')}"
            metas[key] = _prep([tmp_path / name], out, tokenizer=tok, vocab_size=300)
            bins[key] = ((out / "train.bin").read_bytes(), (out / "val.bin").read_bytes())
        for key in files:
            assert bins[key] == bins["plain"], (tok, key)
            s, p = metas[key]["sources"][0], metas["plain"]["sources"][0]
            assert s["name"] == "c" and (s["chars"], s["bytes"], s["documents"]) == (
                p["chars"],
                p["bytes"],
                p["documents"],
            )
            assert s["chars_per_token"] == p["chars_per_token"]
    assert metas["gzip"]["sources"][0]["bytes"] == sum(len(d.encode()) for d in docs)  # the text, not the gzip file
    from smallinit.commands.prepare import summary

    assert (
        summary(metas["gzip"], "o").splitlines()[2].split()[1:]
        == summary(metas["plain"], "o").splitlines()[2].split()[1:]
    )


def test_a_folder_reads_compressed_text_files_and_a_plain_file_named_gz_is_read_as_text(tmp_path):
    a, b = _words(7, 3000), _words(8, 2000)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_text(a)
    (tmp_path / "plain" / "b.md").write_text(b)
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.txt.gz").write_bytes(gzip.compress(a.encode()))
    (tmp_path / "mixed" / "b.md").write_text(b)
    _prep([tmp_path / "plain"], tmp_path / "o1")
    _prep([tmp_path / "mixed"], tmp_path / "o2")
    assert (tmp_path / "o1" / "train.bin").read_bytes() == (tmp_path / "o2" / "train.bin").read_bytes()
    (tmp_path / "notgz.gz").write_text(a)  # a name is not a format: plain text named .gz is text
    (tmp_path / "a.txt").write_text(a)
    _prep([tmp_path / "notgz.gz"], tmp_path / "o3")
    _prep([tmp_path / "a.txt"], tmp_path / "o4")
    assert (tmp_path / "o3" / "val.bin").read_bytes() == (tmp_path / "o4" / "val.bin").read_bytes()


def test_benchmark_files_may_be_compressed(tmp_path):
    from smallinit.eval.data import read_csv, read_jsonl, read_records

    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "t.jsonl").write_text(text)
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "t.csv.bz2").write_bytes(bz2.compress(b"question,answer\nq0,0\nq1,1\n"))
    assert [r.data for r in read_jsonl(tmp_path / "t.jsonl.gz", "f")] == [
        r.data for r in read_jsonl(tmp_path / "t.jsonl", "f")
    ]
    assert [r.data for r in read_records(tmp_path / "t.csv.bz2", "f")] == [
        r.data for r in read_csv(tmp_path / "t.csv.bz2", "f")
    ]
    assert read_records(tmp_path / "t.csv.bz2", "f")[1].data == {"question": "q1", "answer": "1"}


def test_input_that_is_not_text_is_refused_before_any_work(tmp_path, capsys):
    text = _words(3, 4000).encode()
    (tmp_path / "a.txt").write_bytes(text)
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        z.write(tmp_path / "a.txt", "a.txt")
    with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as t:
        t.add(tmp_path / "a.txt", "a.txt")
    (tmp_path / "trunc.jsonl.gz").write_bytes(gzip.compress(_jsonl(_docs(2)))[:300])
    (tmp_path / "rand.bin").write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    (tmp_path / "cp1251.txt").write_bytes(("Привет, мир. " * 400).encode("cp1251"))
    (tmp_path / "utf16.txt").write_bytes(("hello world " * 100).encode("utf-16"))
    (tmp_path / "tokens.gz").write_bytes(gzip.compress(np.arange(5000, dtype=np.uint16).tobytes()))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bad.txt").write_bytes(b"\x00\x01\x02" * 100)
    cases = {
        "a.zip": "a zip archive, not text",
        "a.tar.gz": "a gzip-compressed tar archive",
        "trunc.jsonl.gz": "damaged or truncated gzip data",
        "rand.bin": "binary data, not text",
        "cp1251.txt": "not UTF-8 text",
        "utf16.txt": "UTF-16",
        "tokens.gz": "gzip-compressed binary data",
        "d": "binary data, not text",
    }
    try:
        import zstandard

        (tmp_path / "a.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    except ImportError:  # the zstd magic bytes: refused, naming the package
        (tmp_path / "a.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(64))
        cases["a.txt.zst"] = "reading it needs the zstandard package: pip install zstandard"
    before = _listing(tmp_path)
    for name, want in cases.items():
        line = _one_error(
            capsys, ["prepare", str(tmp_path / name), "--out", str(tmp_path / "o"), "--tokenizer", "byte"]
        )
        assert want in line and name in line, line
    assert _listing(tmp_path) == before  # no output folder, no temporary one
    if "a.txt.zst" not in cases:  # zstandard installed: read like the others
        _prep([tmp_path / "a.txt.zst"], tmp_path / "z")
        _prep([tmp_path / "a.txt"], tmp_path / "p")
        assert (tmp_path / "z" / "train.bin").read_bytes() == (tmp_path / "p" / "train.bin").read_bytes()


# ---- 3. no overlap between sources -----------------------------------------------------------------------------


def test_a_file_read_twice_is_refused_links_resolved(tmp_path, capsys):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    f = tmp_path / "d" / "sub" / "x.txt"
    f.write_text(_words(4, 3000))
    (tmp_path / "y.txt").write_text(_words(5, 3000))
    (tmp_path / "link.txt").symlink_to(f)
    os.link(tmp_path / "y.txt", tmp_path / "hard.txt")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "again.txt").symlink_to(f)
    (tmp_path / "both").mkdir()  # the text and its compressed copy side by side
    (tmp_path / "both" / "z.txt").write_text(_words(6, 3000))
    (tmp_path / "both" / "z.txt.gz").write_bytes(gzip.compress((tmp_path / "both" / "z.txt").read_bytes()))
    line = _one_error(capsys, ["prepare", str(tmp_path / "both"), "--out", str(tmp_path / "o"), "--tokenizer", "byte"])
    assert "holds both z.txt and z.txt.gz (the same text twice?)" in line, line
    before = _listing(tmp_path)
    for inputs, want in (
        ([f, f], "given as"),
        ([tmp_path / "d", f], "in folder"),
        ([tmp_path / "link.txt", tmp_path / "d"], "in folder"),
        ([tmp_path / "y.txt", tmp_path / "hard.txt"], "y.txt"),
        ([tmp_path / "d", tmp_path / "e"], "in folder"),
        ([tmp_path / "d", tmp_path / "d/"], "in folder"),
    ):
        argv = ["prepare", *map(str, inputs), "--out", str(tmp_path / "o"), "--tokenizer", "byte"]
        line = _one_error(capsys, argv)
        assert "would be read twice" in line and "its validation pieces would also be trained on" in line, line
        assert want in line, line
    assert _listing(tmp_path) == before


def _windows_leaked(out: Path, width: int = 24) -> int:
    """How many validation windows of ``width`` tokens (every ``width`` tokens of each val piece, separators
    excluded) occur in train.bin."""
    d = TokenData(out)
    train = np.asarray(d.train).astype(np.int32)
    val = np.asarray(d.val).astype(np.int32)
    eot = d.meta["eot_id"]
    seen = {train[i : i + width].tobytes() for i in range(len(train) - width + 1)}
    leaked = 0
    for seg in np.split(val, np.flatnonzero(val == eot)):
        seg = seg[seg != eot]
        for a in range(0, len(seg) - width + 1, width):
            leaked += seg[a : a + width].tobytes() in seen
    return leaked


def test_no_validation_window_occurs_in_train_for_any_input_layout(tmp_path):
    """Every layout prepare accepts (files, folders, a folder beside files, JSON Lines, compressed, weights that
    repeat a source) keeps each validation window out of train.bin; and the check is able to fail: two files with
    the same text (a duplicate, not the same file) do leak."""
    t = tmp_path
    (t / "d" / "sub").mkdir(parents=True)
    for i in range(6):
        (t / "d" / ("sub" if i % 2 else ".") / f"f{i}.txt").write_text(_words(100 + i, 700))
    (t / "a.txt").write_text(_words(200, 5000))
    (t / "b.md").write_text(_words(201, 3000))
    (t / "c.jsonl").write_bytes(_jsonl(_docs(3)))
    (t / "e.jsonl.gz").write_bytes(gzip.compress(_jsonl(_docs(4))))
    layouts = {
        "one file": [t / "a.txt"],
        "two files": [t / "a.txt", t / "b.md"],
        "a folder": [t / "d"],
        "a folder and a file": [t / "d", t / "a.txt"],
        "json lines": [t / "c.jsonl", t / "e.jsonl.gz"],
        "everything": [t / "d", t / "a.txt", t / "b.md", t / "c.jsonl", t / "e.jsonl.gz"],
    }
    for i, (name, inputs) in enumerate(layouts.items()):
        _prep(inputs, t / f"o{i}")
        assert _windows_leaked(t / f"o{i}") == 0, name
    _prep([t / "a.txt", t / "b.md"], t / "w", weights=[3.0, 1.0])  # a repeated source: val never repeated into train
    assert _windows_leaked(t / "w") == 0
    (t / "copy.txt").write_text((t / "a.txt").read_text())
    _prep([t / "a.txt", t / "copy.txt"], t / "dup")
    assert _windows_leaked(t / "dup") > 0  # the detector sees a leak where there is one


# ---- 2. resume checks its config -------------------------------------------------------------------------------


def _edit(run: Path, **changes) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    for key, v in changes.items():
        sec, k = key.split("__")
        cfg[sec][k] = v
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def _state(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def test_resume_refuses_an_edited_config_unless_the_keys_are_named_then_records_them(tmp_path, token_dir, capsys):
    run = tmp_path / "run"
    over = tiny_overrides(token_dir, **{"train.max_steps": 4, "train.ckpt_every": 2, "train.eval_every": 2})
    assert cli(["train", "--config", "tiny", "--out", str(run), *over, "optim.lr=0.003", "train.dtype=fp32"]) == 0
    _edit(run, optim__lr=0.03, train__dtype="bf16")
    before = _state(run)
    line = _one_error(capsys, ["train", "--resume", str(run), "--max-steps", "6"])
    assert "differs from the config of checkpoint step_00000004 in optim.lr (0.03 here, 0.003 there)" in line, line
    assert "train.dtype ('bf16' here, 'fp32' there)" in line and "--allow-change optim.lr,train.dtype" in line, line
    assert _state(run) == before  # nothing trained, nothing written
    # naming one key is not enough; an unknown key is refused
    assert "train.dtype" in _one_error(
        capsys, ["train", "--resume", str(run), "--max-steps", "6", "--allow-change", "optim.lr"]
    )
    assert "unknown config key(s) optim.lrr" in _one_error(
        capsys, ["train", "--resume", str(run), "--allow-change", "optim.lrr"]
    )
    assert _state(run) == before
    # doctor no longer calls it healthy
    capsys.readouterr()
    assert cli(["doctor", str(run)]) != 0
    out = capsys.readouterr().out
    assert "config.yaml differs from the newest checkpoint's copy in optim.lr (0.03 here, 0.003 there)" in out, out
    assert "--allow-change optim.lr,train.dtype" in out
    # named: it trains with the change, and the change is recorded (config_changes.jsonl, doctor, summary.json)
    _edit(run, train__dtype="fp32")
    assert cli(["train", "--resume", str(run), "--max-steps", "6", "--allow-change", "optim.lr"]) == 0
    assert "config changed from checkpoint step_00000004 on: optim.lr 0.003 → 0.03" in capsys.readouterr().err
    recs = [json.loads(x) for x in (run / "config_changes.jsonl").read_text().splitlines()]
    assert len(recs) == 1 and recs[0]["step"] == 4 and recs[0]["changes"]["optim.lr"] == [0.003, 0.03]
    assert recs[0]["changes"]["train.max_steps"] == [4, 6] and "--allow-change optim.lr" in recs[0]["by"]
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert lrs[5] > 0.005 > lrs[4]  # the steps after the resume ran at the new rate
    assert json.loads((run / "summary.json").read_text())["config_changes"] == recs
    assert yaml.safe_load((run / "checkpoints" / "step_00000006" / "config.yaml").read_text())["optim"]["lr"] == 0.03
    capsys.readouterr()
    assert cli(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "config changed from step 4 on (train --resume --allow-change optim.lr --max-steps 6)" in out, out
    assert "optim.lr 0.003 → 0.03" in out and "healthy" in out


def test_resume_takes_what_does_not_change_learning_and_what_a_branch_recorded(tmp_path, token_dir, capsys):
    """Logging, checkpoint cadence and a larger max_steps change freely; a cooldown branch's schedule (recorded by
    make_branch) is no edit; the API names keys like the CLI."""
    from smallinit.experiments.job import make_branch
    from smallinit.train import resume

    run = tmp_path / "run"
    over = tiny_overrides(token_dir, **{"train.max_steps": 4, "train.ckpt_every": 2, "train.ckpt_steps": [2]})
    assert cli(["train", "--config", "tiny", "--out", str(run), *over]) == 0
    _edit(run, train__log_every=2, train__eval_every=3, train__progress=False, train__max_steps=5)
    assert resume(run)["step"] == 5
    assert json.loads((run / "config_changes.jsonl").read_text())["changes"] == {"train.max_steps": [4, 5]}
    branch = tmp_path / "branch"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["optim"].update(schedule="wsd", decay_fraction=0.5, min_lr_ratio=0.0)
    make_branch(run, 2, cfg, branch)
    assert resume(branch)["step"] == 5  # the branch's schedule was recorded when it was laid out
    rec = json.loads((branch / "config_changes.jsonl").read_text().splitlines()[0])
    assert rec["by"] == f"branch of {run} at step 2" and rec["changes"]["optim.schedule"] == ["cosine", "wsd"]
    _edit(branch, model__gamma=0.7)
    (branch / "summary.json").unlink()
    with pytest.raises(Exception, match="model.gamma"):
        resume(branch, max_steps=6)
    assert resume(branch, max_steps=6, allow_change=["model.gamma"])["step"] == 6


# ---- 4. every other case: one error line, nothing written ------------------------------------------------------


def test_bad_values_and_damaged_records_are_one_error_line_and_write_nothing(tmp_path, token_dir, capsys):
    t = tmp_path
    data = ["--set", f"data.path={token_dir}"]
    (t / "st").mkdir()
    jobs = {"nokey": {"jobs": [{"run": "x", "executor": "local"}]}, "string": {"jobs": "abc"}}
    for name, d in jobs.items():
        (t / "st" / name / "cluster").mkdir(parents=True)
        (t / "st" / name / "cluster" / "jobs.json").write_text(json.dumps(d))
    (t / "st" / "binary" / "cluster").mkdir(parents=True)
    (t / "st" / "binary" / "cluster" / "jobs.json").write_bytes(b'\xff\xfe{"jobs": []}')
    hf = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
    hf.update(num_hidden_layers=2, vocab_size=256)
    (t / "huge.json").write_text(json.dumps({**hf, "hidden_size": 10**12}))
    (t / "wide.json").write_text(json.dumps({**hf, "hidden_size": 10**6}))
    (t / "naneps.json").write_text(json.dumps({**hf, "rms_norm_eps": float("nan")}))
    new = ["train", "--config", "tiny", "--out", str(t / "r")]
    xo = ["crossover", "a:model.gamma=1", "--config", "tiny", "--tokens", "1M", "--out", str(t / "x"), *data]
    cases = [
        (new + tiny_overrides(token_dir, **{"optim.eps": -1}), "optim.eps must be >= 0, got -1"),
        (new + tiny_overrides(token_dir, **{"optim.eps": "nan"}), "optim.eps must be a finite number, got nan"),
        (new + tiny_overrides(token_dir, **{"optim.grad_clip": "nan"}), "optim.grad_clip must be a finite number"),
        (new + tiny_overrides(token_dir, **{"train.diverge_margin": "nan"}), "train.diverge_margin must be a finite"),
        (new + tiny_overrides(token_dir, **{"optim.weight_decay": "nan"}), "optim.weight_decay must be a finite"),
        (new + tiny_overrides(token_dir, **{"optim.lr": "inf"}), "optim.lr must be a finite number"),
        (
            new + tiny_overrides(token_dir) + ['model.init_overrides={"blocks.*": -5}'],
            "'blocks.*' gamma must be a finite",
        ),
        (new + tiny_overrides(token_dir) + ["model.init_overrides={blocks.*:-5}"], "'blocks.*:-5' has no value"),
        (new + tiny_overrides(token_dir, **{"data.tune_batches": 100000}), "data.tune_batches=100000 after"),
        (xo + ["b:optim.eps=nan"], "optim.eps must be a finite number"),
        (xo + ["b:optim.eps=-1", "--dry-run"], "optim.eps must be >= 0"),
        (xo + ["b:model.gamma=0.5", "--set", "train.seed=5"], "--set train.seed=5: train.seed is set by the crossover"),
        (xo + ["b:model.gamma=0.5", "--set", "train.max_steps=5"], "train.max_steps is set by the crossover itself"),
        (["status", str(t / "nonexistent")], "no such folder"),
        (["status", str(t / "st" / "nokey")], "submission 1 has no key or job_id"),
        (["status", str(t / "st" / "string")], '"jobs" must be a list of submissions, got str'),
        (["status", str(t / "st" / "binary")], "jobs.json: not UTF-8 text"),
        (["audit", str(t / "huge.json")], "transformers cannot build a causal LM from this config"),
        (["audit", str(t / "wide.json")], "more than this machine's"),
        (["audit", str(t / "naneps.json")], "rms_norm_eps must be a finite number >= 0, got nan"),
    ]
    before = _listing(t)
    bad = []
    for argv, want in cases:
        line = _one_error(capsys, argv)
        if want not in line:
            bad.append(f"{argv[:2]} …: {line!r} lacks {want!r}")
    assert not bad, "\n".join(bad)
    assert _listing(t) == before  # nothing written by any of them


def test_a_refused_reproduce_leaves_no_folder_and_no_lock(tmp_path, capsys):
    (tmp_path / "a.txt").write_text(_words(9, 4000))
    _prep([tmp_path / "a.txt"], tmp_path / "small", val_fraction=0.05)  # far too few val windows for the preset
    line = _one_error(
        capsys, ["reproduce", "--preset", "demo", "--corpus", str(tmp_path / "small"), "--out", str(tmp_path / "rp")]
    )
    assert "val split holds" in line
    assert not (tmp_path / "rp").exists()
    (tmp_path / "empty").mkdir()  # a folder the user made: kept, but no .lock left in it
    _one_error(
        capsys, ["reproduce", "--preset", "demo", "--corpus", str(tmp_path / "small"), "--out", str(tmp_path / "empty")]
    )
    assert list((tmp_path / "empty").iterdir()) == []


def test_crossover_widths_names_what_differs_not_one_path_twice():
    from test_crossover_widths import crossover, never_crossing

    from smallinit.experiments.claims.c01_loss import across_widths

    a = crossover(48, 120_000, 75, never_crossing, seed=1)
    b = crossover(64, 213_000, 75, never_crossing, seed=2)
    b["spec"]["arms"]["paper"] = ["model.gamma=1.5"]
    with pytest.raises(ValueError) as e:
        across_widths([a, b])
    msg = str(e.value)
    assert "other arms" in msg and "'paper'" in msg and "model.gamma=1.5" in msg and "model.gamma=1.0" in msg, msg
    assert msg.count("data/en-bytes") == 0, msg
