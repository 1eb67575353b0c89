"""Data pipeline: tokenizers, prepare_corpus, TokenData, BatchLoader, val_batches, mixing, bad input."""

from __future__ import annotations

import json
import socket
import time
import warnings

import numpy as np
import pytest
import torch

from smallinit.core.errors import ConfigError, DataError, SmallinitError
from smallinit.core.paths import shared_data_dir
from smallinit.data import (
    EOT_TOKEN,
    BatchLoader,
    DataWarning,
    TokenData,
    byte_tokenizer,
    hf_sources,
    load_tokenizer,
    prepare_corpus,
    train_bpe,
    val_batches,
    val_offsets,
)
from smallinit.data import sources as sources_mod
from smallinit.data.mixing import plan_mix
from smallinit.data.tokenizer import token_dtype

EN = "The quick brown fox jumps over the lazy dog; small init matters.\n"
ZH = "小初始化对大语言模型很重要。我们在中文和英文上训练模型，观察注意力汇聚。\n"
EMOJI = "Emoji 👩‍👩‍👧 🌍🚀 ✨ and flags 🇨🇳🇬🇧\n"
RARE = "Rare CJK: 𠀀 𪚥 𰻞 龘 〇 and combining e\u0301, tabs\tand\r\nCRLF\n"
MIXED = [EN, ZH, EMOJI, RARE]


def _prep(inputs, out, **kw):
    kw.setdefault("tokenizer", "byte")
    kw.setdefault("progress", False)
    kw.setdefault("val_fraction", 0.0)
    return prepare_corpus([str(i) for i in inputs], out, **kw)


def _decode(tok, ids) -> str:
    return tok.decode([int(i) for i in ids], skip_special_tokens=False)


def _jsonl(path, docs, field="text"):
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({field: d, "id": 1}, ensure_ascii=False) + "\n")
    return path


# --------------------------------------------------------------------------------------------- tokenizers
def test_byte_tokenizer_ids_are_bytes_and_round_trip():
    tok = byte_tokenizer()
    for s in MIXED + ["".join(MIXED)]:
        ids = tok.encode(s, add_special_tokens=False).ids
        assert ids == list(s.encode("utf-8"))
        assert tok.decode(ids) == s
    assert tok.token_to_id(EOT_TOKEN) == 256
    assert tok.get_vocab_size() == 257


def test_bpe_round_trip_mixed_text_including_unseen_chars():
    corpus = (MIXED * 30)[:-1]
    tok = train_bpe(iter(corpus), vocab_size=400)
    assert tok.get_vocab_size() <= 400
    assert tok.token_to_id(EOT_TOKEN) == 0
    unseen = "从未见过的字：𪜀𫝀𬺰 🦩🧬 ＡＢＣ ½ ∑ naïve — fin"
    for s in MIXED + [unseen, "".join(MIXED) + unseen, " leading and trailing  "]:
        assert tok.decode(tok.encode(s).ids) == s
    # BPE learned something: fewer tokens than bytes on text it saw
    text = "".join(MIXED)
    assert len(tok.encode(text).ids) < 0.7 * len(text.encode("utf-8"))


def test_prepare_round_trip_bpe_mixed_text(tmp_path):
    f = tmp_path / "mixed.txt"
    text = "".join(MIXED) * 20 + "literal " + EOT_TOKEN + " stays text\n"
    f.write_text(text, encoding="utf-8", newline="")
    meta = _prep([f], tmp_path / "out", tokenizer="bpe", vocab_size=512)
    d = TokenData(tmp_path / "out")
    assert meta["tokenizer"]["kind"] == "bpe" and d.vocab_size <= 512
    # one document -> exactly one separator, at the end; the literal stays ordinary tokens
    assert int((np.asarray(d.train) == d.eot_id).sum()) == 1 and d.train[-1] == d.eot_id
    assert _decode(d.tokenizer, d.train) == text + EOT_TOKEN
    assert d.bos_id == d.eot_id == meta["eot_id"]
    # chars/token is chars over tokens without the separator
    src = meta["sources"][0]
    assert src["chars_per_token"] == pytest.approx(len(text) / (len(d.train) - 1))
    assert src["hash"]["files"] == 1 and len(src["hash"]["sha256"]) == 64


def test_dtype_selection(tmp_path):
    assert token_dtype(256) == "uint16"
    assert token_dtype(65536) == "uint16"
    assert token_dtype(65537) == "uint32"
    meta = _prep([_write(tmp_path / "a.txt", EN * 5)], tmp_path / "small")
    assert meta["dtype"] == "uint16"
    # a tokenizer.json with > 65536 ids gives uint32 files that still round-trip
    big = byte_tokenizer()
    big.add_tokens([f"zzq{i:05d}" for i in range(65300)])
    assert big.get_vocab_size() > 65536
    big.save(str(tmp_path / "big.json"))
    meta = _prep([tmp_path / "a.txt"], tmp_path / "big", tokenizer=str(tmp_path / "big.json"))
    d = TokenData(tmp_path / "big")
    assert meta["dtype"] == "uint32" and d.train.dtype == np.uint32
    assert (tmp_path / "big" / "train.bin").stat().st_size == 4 * len(d.train)
    assert _decode(d.tokenizer, d.train) == EN * 5 + EOT_TOKEN


def _write(path, text, mode="w"):
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


# --------------------------------------------------------------------------------------------- inputs
def test_jsonl_documents_and_val_split_are_exact_disjoint_pieces(tmp_path):
    rng = np.random.default_rng(0)
    docs = [f"doc {i}: " + "".join(rng.choice(MIXED, size=int(rng.integers(1, 4)))) for i in range(120)]
    f = _jsonl(tmp_path / "docs.jsonl", docs)
    meta = _prep([f], tmp_path / "out", val_fraction=0.1, seed=3)
    d = TokenData(tmp_path / "out")
    tok = d.tokenizer
    train_docs = _decode(tok, d.train).split(EOT_TOKEN)[:-1]
    val_docs = _decode(tok, d.val).split(EOT_TOKEN)[:-1]
    # short docs are single pieces: every written document is a whole original one, each used once
    assert sorted(train_docs + val_docs) == sorted(docs)
    assert set(train_docs).isdisjoint(val_docs)
    assert meta["sources"][0]["documents"] == 120
    assert meta["val_sources"] == [[0, len(d.val), "docs"]]
    assert meta["tokens"] == {"train": len(d.train), "val": len(d.val)}
    # about 10 % of the tokens are in val
    assert 0.05 < len(d.val) / (len(d.train) + len(d.val)) < 0.15


def test_long_document_cut_into_pieces_with_separators_at_cuts(tmp_path):
    lines = [f"line {i} " + MIXED[i % 4] for i in range(2000)]
    text = "".join(lines)
    f = _write(tmp_path / "long.txt", text)
    meta = _prep([f], tmp_path / "out", val_fraction=0.05)
    d = TokenData(tmp_path / "out")
    src = meta["sources"][0]
    assert src["documents"] == 1 and src["pieces"] > 20
    train = _decode(d.tokenizer, d.train).split(EOT_TOKEN)
    val = _decode(d.tokenizer, d.val).split(EOT_TOKEN)
    assert train[-1] == "" and val[-1] == ""
    segments = train[:-1] + val[:-1]
    # every segment is a contiguous slice of the text, cut at line ends, and together they cover it once
    assert all(s in text for s in segments)
    assert sum(len(s) for s in segments) == len(text)
    assert all(s.endswith("\n") for s in segments)
    assert len(val) >= 2


@pytest.mark.parametrize("window", [37, 2000])  # long runs sliced / several runs per read window
def test_writer_windows_do_not_change_the_output(tmp_path, monkeypatch, window):
    import smallinit.data.prepare as prep_mod

    lines = [f"{i} " + MIXED[i % 4] for i in range(600)]
    f = _write(tmp_path / "t.txt", "".join(lines))
    g = _jsonl(tmp_path / "d.jsonl", lines[:90])
    kw = dict(val_fraction=0.1, weights=[0.5, 0.5], seed=5)
    _prep([f, g], tmp_path / "a", **kw)
    monkeypatch.setattr(prep_mod, "GATHER_TOKENS", window)
    _prep([f, g], tmp_path / "b", **kw)
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_directory_recursive_txt_md_only(tmp_path):
    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    _write(tmp_path / "corpus" / "a.txt", "alpha\n")
    _write(tmp_path / "corpus" / "sub" / "b.md", "# beta\n")
    _write(tmp_path / "corpus" / "sub" / "c.csv", "not,read\n")
    meta = _prep([tmp_path / "corpus"], tmp_path / "out")
    d = TokenData(tmp_path / "out")
    assert _decode(d.tokenizer, d.train) == f"alpha\n{EOT_TOKEN}# beta\n{EOT_TOKEN}"
    assert meta["sources"][0]["kind"] == "dir" and meta["sources"][0]["hash"]["files"] == 2


def test_parquet_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = [ZH, EN, EMOJI]
    pq.write_table(pa.table({"body": docs, "n": [1, 2, 3]}), tmp_path / "t.parquet")
    _prep([tmp_path / "t.parquet"], tmp_path / "out", text_field="body")
    d = TokenData(tmp_path / "out")
    assert _decode(d.tokenizer, d.train) == EOT_TOKEN.join(docs) + EOT_TOKEN
    with pytest.raises(DataError, match="no column 'text'.*body"):
        _prep([tmp_path / "t.parquet"], tmp_path / "out2")


def test_hf_saved_dataset_offline(tmp_path):
    datasets = pytest.importorskip("datasets")
    docs = [EN, ZH, RARE, EMOJI]
    datasets.Dataset.from_dict({"text": docs}).save_to_disk(str(tmp_path / "ds"))
    meta = _prep([f"hf:{tmp_path / 'ds'}"], tmp_path / "out")
    d = TokenData(tmp_path / "out")
    assert _decode(d.tokenizer, d.train) == EOT_TOKEN.join(docs) + EOT_TOKEN
    assert meta["sources"][0]["kind"] == "hf-disk" and meta["sources"][0]["hash"]["files"] >= 1
    # a DatasetDict: pick the split with :SPLIT
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"text": [EN]}), "test": datasets.Dataset.from_dict({"text": [ZH]})}
    ).save_to_disk(str(tmp_path / "dd"))
    _prep([f"hf:{tmp_path / 'dd'}:test"], tmp_path / "out2")
    assert _decode(TokenData(tmp_path / "out2").tokenizer, TokenData(tmp_path / "out2").train) == ZH + EOT_TOKEN
    with pytest.raises(DataError, match="choose a split"):
        _prep([f"hf:{tmp_path / 'dd'}:nope"], tmp_path / "out3")


def test_hf_hub_fails_at_once_offline(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    import datasets
    import huggingface_hub.constants

    # offline flag set and nothing cached (the library in offline mode too, as when the flag is set at start)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    t0 = time.time()
    with pytest.raises(DataError, match="offline mode is set"):
        _prep(["hf:someone/nonexistent-corpus"], tmp_path / "out")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    with pytest.raises(DataError, match="not in the local Hugging Face cache"):
        _prep(["hf:someone/nonexistent-corpus"], tmp_path / "out")
    # no offline flag, but the hub is unreachable (a closed local port stands in for no network)
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setattr(hf_sources, "hf_probe_address", lambda: ("127.0.0.1", port))
    with pytest.raises(DataError, match="cannot reach 127.0.0.1"):
        _prep(["hf:someone/nonexistent-corpus:cfg:train"], tmp_path / "out")
    assert time.time() - t0 < 20
    assert not (tmp_path / "out").exists()


def test_parse_hf_specs(tmp_path):
    src = sources_mod.parse_source("hf:org/corpus:en:validation")
    assert (src.kind, src.hf_name, src.hf_config, src.hf_split, src.name) == (
        "hf",
        "org/corpus",
        "en",
        "validation",
        "org_corpus",
    )
    src = sources_mod.parse_source("hf:org/corpus::test")
    assert (src.hf_config, src.hf_split) == (None, "test")
    (tmp_path / "saved").mkdir()
    src = sources_mod.parse_source(f"hf:{tmp_path / 'saved'}:train")
    assert (src.kind, src.path, src.hf_split) == ("hf-disk", tmp_path / "saved", "train")
    with pytest.raises(DataError, match="no such directory"):
        sources_mod.parse_source(f"hf:{tmp_path / 'absent'}")
    with pytest.raises(DataError, match="expected hf:NAME"):
        sources_mod.parse_source("hf:a:b:c:d")
    with pytest.raises(DataError, match="not a dataset saved with save_to_disk"):
        _prep([f"hf:{tmp_path / 'saved'}"], tmp_path / "out")


def test_builtin_stdlib_capped(tmp_path):
    meta = _prep(["builtin:stdlib"], tmp_path / "out", max_bytes=150_000, val_fraction=0.05)
    src = meta["sources"][0]
    assert src["kind"] == "stdlib" and src["truncated_by_max_bytes"]
    assert 150_000 - 3 <= src["bytes"] <= 150_000  # at most max_bytes: the last piece is cut there (issue 32)
    assert src["hash"]["files"] >= 2 and "sha256_of_sha256sums" in src["hash"]
    d = TokenData(tmp_path / "out")
    assert len(d.train) > 100_000 and len(d.val) > 1000
    assert "import" in _decode(d.tokenizer, d.train[:50_000])


def test_builtin_stdlib_honours_coding_declarations(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    (lib / "site-packages").mkdir(parents=True)
    (lib / "a.py").write_bytes("# -*- coding: latin-1 -*-\nname = 'café'\n".encode("latin-1"))
    (lib / "b.py").write_text("x = '中文'\n", encoding="utf-8")
    (lib / "site-packages" / "c.py").write_text("skipped = 1\n", encoding="utf-8")
    monkeypatch.setattr(sources_mod, "stdlib_dir", lambda: lib)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        meta = _prep(["builtin:stdlib"], tmp_path / "out")
    d = TokenData(tmp_path / "out")
    assert _decode(d.tokenizer, d.train) == (
        f"# -*- coding: latin-1 -*-\nname = 'café'\n{EOT_TOKEN}x = '中文'\n{EOT_TOKEN}"
    )
    assert meta["sources"][0]["hash"]["files"] == 2 and meta["sources"][0]["invalid_utf8_bytes"] == 0


# --------------------------------------------------------------------------------------------- mixing
def test_plan_mix_rule():
    rng = np.random.default_rng(1)
    tokens = [rng.integers(50, 150, size=n) for n in (400, 60, 200)]
    weights = [0.5, 0.3, 0.2]
    plans = plan_mix(tokens, ["a", "b", "c"], weights, 0.02, seed=0)
    total = sum(int(t.sum()) for t in tokens)
    for t, p, w in zip(tokens, plans, weights):
        assert np.intersect1d(p.val, p.pool).size == 0 and np.isin(p.partial, p.pool).all()
        written = p.train_tokens(t) + int(t[p.val].sum())
        assert abs(written / (w * total) - 1) < 0.05
    assert plans[0].full_passes == 0 and plans[1].full_passes >= 2  # a subsampled, b repeated
    # deterministic in the seed, different across seeds
    again = plan_mix(tokens, ["a", "b", "c"], weights, 0.02, seed=0)
    assert all(np.array_equal(p.partial, q.partial) for p, q in zip(plans, again))
    other = plan_mix(tokens, ["a", "b", "c"], weights, 0.02, seed=1)
    assert not np.array_equal(plans[0].partial, other[0].partial)
    # no weights: everything exactly once
    plain = plan_mix(tokens, ["a", "b", "c"], None, 0.0, seed=0)
    assert all(p.full_passes == 1 and len(p.partial) == 0 and len(p.pool) == len(t) for p, t in zip(plain, tokens))


def test_mixing_weights_within_5_percent(tmp_path):
    rng = np.random.default_rng(0)
    en = [f"{i} " + EN * int(rng.integers(1, 4)) for i in range(300)]
    zh = [f"{i} " + ZH * int(rng.integers(1, 3)) for i in range(60)]
    code = [f"def f{i}(x):\n    return x + {i}\n" for i in range(200)]
    files = [_jsonl(tmp_path / f"{name}.jsonl", docs) for name, docs in (("en", en), ("zh", zh), ("code", code))]
    weights = [0.5, 0.3, 0.2]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # no "share is off" warning expected
        meta = _prep(files, tmp_path / "out", weights=weights, val_fraction=0.02)
    d = TokenData(tmp_path / "out")
    written = {n: 0 for n in ("en", "zh", "code")}
    for a, b, n in meta["train_sources"] + meta["val_sources"]:
        written[n] += b - a
    total = sum(written.values())
    assert total == len(d.train) + len(d.val)
    for (name, w), s in zip(zip(("en", "zh", "code"), weights), meta["sources"]):
        assert abs(written[name] / total / w - 1) < 0.05, (name, written[name] / total, w)
        assert s["share"] == pytest.approx(written[name] / total)
    by_name = {s["name"]: s for s in meta["sources"]}
    assert by_name["zh"]["repeat"] > 1.5 and by_name["en"]["repeat"] < 1.0
    # what is written is whole documents of the right source
    ids_zh = [r for r in meta["train_sources"] if r[2] == "zh"][0]
    zh_docs = _decode(d.tokenizer, d.train[ids_zh[0] : ids_zh[1]]).split(EOT_TOKEN)[:-1]
    assert set(zh_docs) <= set(zh) and len(zh_docs) > len(zh)


# --------------------------------------------------------------------------------------------- loader
def _tokens(n=5000, seed=0):
    return np.random.default_rng(seed).integers(1, 1000, size=n).astype(np.uint16)


def test_loader_deterministic_and_resumable():
    tok = _tokens()
    a = BatchLoader(tok, seq_len=16, global_batch_size=8, seed=7)
    b = BatchLoader(tok, seq_len=16, global_batch_size=8, seed=7)
    for step in (0, 1, 5, 1000):
        xa, ya = a.get(step)
        xb, yb = b.get(step)
        assert xa.dtype == torch.int64 and xa.shape == (8, 16) and ya.shape == (8, 16)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(a.get(0)[0], a.get(1)[0])
    # windows: x = tok[o:o+T], y = tok[o+1:o+T+1]
    offs = a.offsets(3)
    x, y = a.get(3)
    for i, o in enumerate(offs):
        assert np.array_equal(x[i].numpy(), tok[o : o + 16]) and np.array_equal(y[i].numpy(), tok[o + 1 : o + 17])
    assert offs.dtype == np.int64 and offs.min() >= 0 and offs.max() <= len(tok) - 17
    # restore into a loader built with another seed: same batches as the original
    c = BatchLoader(tok, seq_len=16, global_batch_size=8, seed=123)
    assert not torch.equal(c.get(4)[0], a.get(4)[0])
    c.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for step in (4, 99):
        assert torch.equal(c.get(step)[0], a.get(step)[0])
    # a state from other data or settings is refused
    with pytest.raises(DataError, match="seq_len"):
        BatchLoader(tok, seq_len=32, global_batch_size=8, seed=7).load_state_dict(a.state_dict())
    with pytest.raises(DataError, match="fingerprint"):
        BatchLoader(_tokens(seed=1), seq_len=16, global_batch_size=8, seed=7).load_state_dict(a.state_dict())


def test_loader_bos_windows():
    tok = _tokens()
    bos = 999
    L = BatchLoader(tok, seq_len=12, global_batch_size=6, seed=0, bos_id=bos)
    x, y = L.get(2)
    offs = L.offsets(2)
    assert (x[:, 0] == bos).all()
    assert torch.equal(x[:, 1:], y[:, :-1])
    for i, o in enumerate(offs):
        assert np.array_equal(y[i].numpy(), tok[o : o + 12])
    assert offs.max() <= len(tok) - 12


def test_loader_rank_slices_are_disjoint_and_cover_the_batch():
    tok = _tokens()
    B, W, m = 16, 4, 2
    L = BatchLoader(tok, seq_len=8, global_batch_size=B, seed=1)
    full_x, full_y = L.get(5, 0, B)
    seen = []
    for r in range(W):
        for k in range(B // W // m):
            start = r * (B // W) + k * m
            x, y = L.get(5, start, m)
            assert torch.equal(x, full_x[start : start + m]) and torch.equal(y, full_y[start : start + m])
            seen += list(range(start, start + m))
    assert sorted(seen) == list(range(B))  # each window slot read by exactly one (rank, micro-batch)
    with pytest.raises(DataError, match="outside the global batch"):
        L.get(0, 15, 2)


def test_val_batches_cover_val_in_order():
    tok = _tokens(1000)
    T = 10
    batches = list(val_batches(tok, T, batch_size=7))
    ys = torch.cat([y for _, y in batches]).reshape(-1).numpy()
    xs = torch.cat([x for x, _ in batches]).reshape(-1).numpy()
    n_win = (1000 - 1) // T
    assert len(ys) == n_win * T and np.array_equal(ys, tok[1 : 1 + n_win * T]) and np.array_equal(xs, tok[: n_win * T])
    assert [len(x) for x, _ in batches] == [7] * (n_win // 7) + ([n_win % 7] if n_win % 7 else [])
    assert len(list(val_batches(tok, T, batch_size=7, max_batches=2))) == 2
    # with BOS every token is a target once
    yb = torch.cat([y for _, y in val_batches(tok, T, batch_size=50, bos_id=5)]).reshape(-1).numpy()
    assert np.array_equal(yb, tok[: (1000 // T) * T])
    assert np.array_equal(val_offsets(1000, T), np.arange(n_win) * T)
    # the same again: fixed order
    assert all(torch.equal(a[1], b[1]) for a, b in zip(batches, val_batches(tok, T, batch_size=7)))


def test_tokendata_opens_memmaps_once(tmp_path):
    _prep([_write(tmp_path / "a.txt", EN * 50)], tmp_path / "out", val_fraction=0.1)
    d = TokenData(tmp_path / "out")
    assert isinstance(d.train, np.memmap) and isinstance(d.val, np.memmap)
    assert d.split("train") is d.train and d.tokenizer is d.tokenizer
    assert d.meta["vocab_size"] == d.vocab_size == 257
    assert "TokenData(" in repr(d)


# --------------------------------------------------------------------------------------------- bad input
def test_bad_missing_path(tmp_path):
    with pytest.raises(DataError, match="no such file or directory"):
        _prep([tmp_path / "nope.txt"], tmp_path / "out")
    with pytest.raises(DataError, match="unknown built-in"):
        _prep(["builtin:nope"], tmp_path / "out")


def test_bad_empty_corpus(tmp_path):
    with pytest.raises(DataError, match="empty corpus"):
        _prep([_write(tmp_path / "empty.txt", "")], tmp_path / "out")
    _jsonl(tmp_path / "e.jsonl", ["", ""])
    with pytest.raises(DataError, match="empty corpus"):
        _prep([tmp_path / "e.jsonl"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_directory_without_text(tmp_path):
    (tmp_path / "d").mkdir()
    _write(tmp_path / "d" / "x.csv", "a,b\n")
    with pytest.raises(DataError, match="directory has no .txt or .md files"):
        _prep([tmp_path / "d"], tmp_path / "out")


def test_bad_non_utf8_is_replaced_with_a_warning(tmp_path):
    f = _write(tmp_path / "latin1.txt", b"caf" + b"\xe9 na\xefve \xff\xfe ok\n", mode="wb")
    with pytest.warns(DataWarning, match=r"latin1\.txt: replaced 4 invalid UTF-8 byte"):
        meta = _prep([f], tmp_path / "out")
    assert meta["sources"][0]["invalid_utf8_bytes"] == 4
    d = TokenData(tmp_path / "out")
    assert _decode(d.tokenizer, d.train) == "caf\ufffd na\ufffdve \ufffd\ufffd ok\n" + EOT_TOKEN
    # jsonl lines too
    (tmp_path / "b.jsonl").write_bytes(b'{"text": "ok \xff"}\n')
    with pytest.warns(DataWarning, match=r"b\.jsonl: replaced 1 invalid"):
        _prep([tmp_path / "b.jsonl"], tmp_path / "out2")


def test_bad_too_small_for_val_split_or_seq_len(tmp_path):
    f = _write(tmp_path / "tiny.txt", "just a few words\n")
    with pytest.raises(DataError, match=r"too small for a val split: 18 tokens in 1 piece"):
        _prep([f], tmp_path / "out", val_fraction=0.01)
    _prep([f], tmp_path / "out")
    d = TokenData(tmp_path / "out")
    with pytest.raises(DataError, match=r"train split has 18 tokens, fewer than one window of 65"):
        d.check_seq_len(64)
    with pytest.raises(DataError, match=r"train split has 18 tokens, fewer than one window of 65"):
        BatchLoader(d.train, 64, 4, seed=0)
    with pytest.raises(DataError, match=r"val split has 0 tokens, fewer than one window of 9"):
        val_batches(d.val, 8, 4)
    BatchLoader(d.train, 17, 4, seed=0)  # 18 tokens fit one window of 17 + 1
    BatchLoader(d.train, 18, 4, seed=0, bos_id=d.bos_id)  # with BOS a window is 18 tokens


def test_bad_unknown_tokenizer_and_weights(tmp_path):
    f = _write(tmp_path / "a.txt", EN)
    with pytest.raises(ConfigError, match="unknown tokenizer 'sentencepiece'"):
        _prep([f], tmp_path / "out", tokenizer="sentencepiece")
    with pytest.raises(ConfigError, match="--weights has 3 value"):
        _prep([f, f], tmp_path / "out", weights=[0.5, 0.3, 0.2])
    with pytest.raises(ConfigError, match="positive"):
        _prep([f, f], tmp_path / "out", weights=[1.0, 0.0])
    with pytest.raises(ConfigError, match="vocab size"):
        _prep([f], tmp_path / "out", tokenizer="bpe", vocab_size=100)
    _write(tmp_path / "bad.json", "{not json")
    with pytest.raises(DataError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path / "bad.json")


def test_bad_jsonl_lines(tmp_path):
    _write(tmp_path / "a.jsonl", '{"text": "fine"}\n{"body": "x"}\n')
    with pytest.raises(DataError, match=r"a\.jsonl:2: no 'text' field \(have: body\)"):
        _prep([tmp_path / "a.jsonl"], tmp_path / "out")
    _write(tmp_path / "b.jsonl", '{"text": "fine"}\n{oops\n')
    with pytest.raises(DataError, match=r"b\.jsonl:2: invalid JSON"):
        _prep([tmp_path / "b.jsonl"], tmp_path / "out")


def test_failed_or_interrupted_prepare_leaves_no_dir(tmp_path, monkeypatch):
    good = _write(tmp_path / "good.txt", EN * 20)
    bad = _write(tmp_path / "bad.jsonl", '{"text": "a"}\n' * 10 + "{broken\n")
    with pytest.raises(DataError):
        _prep([good, bad], tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.txt"]
    # a previous complete output survives a failed re-run untouched
    _prep([good], tmp_path / "out")
    before = (tmp_path / "out" / "meta.json").read_bytes()
    with pytest.raises(DataError):
        _prep([good, bad], tmp_path / "out")
    assert (tmp_path / "out" / "meta.json").read_bytes() == before
    # Ctrl-C half-way
    import smallinit.data.prepare as prep_mod

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep_mod, "plan_mix", boom)
    with pytest.raises(KeyboardInterrupt):
        _prep([good], tmp_path / "out2")
    assert not (tmp_path / "out2").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_out_dir_policy(tmp_path):
    f = _write(tmp_path / "a.txt", EN * 3)
    (tmp_path / "mine").mkdir()
    _write(tmp_path / "mine" / "notes.txt", "keep me")
    with pytest.raises(DataError, match="refusing"):
        _prep([f], tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    _prep([f], tmp_path / "out")
    (tmp_path / "other").mkdir()
    g = _write(tmp_path / "other" / "a.txt", EN * 2)  # another file of the same name (one file twice is refused)
    with pytest.raises(DataError, match="already holds a prepared data directory"):
        _prep([f, g], tmp_path / "out")  # runs may use it: replaced only with force
    _prep([f, g], tmp_path / "out", force=True)  # a previous prepare is replaced
    with pytest.raises(DataError, match="input"):
        _prep([tmp_path / "mine"], tmp_path / "mine", force=True)  # never the input
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert [s["name"] for s in TokenData(tmp_path / "out").meta["sources"]] == ["a", "a#2"]


def test_tokendata_bad_dirs(tmp_path):
    with pytest.raises(DataError, match="not a prepared data directory"):
        TokenData(tmp_path)
    _prep([_write(tmp_path / "a.txt", EN * 3)], tmp_path / "out")
    with open(tmp_path / "out" / "train.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(DataError, match="holds 5 tokens, meta.json says"):
        TokenData(tmp_path / "out")


def test_errors_are_smallinit_errors():
    assert issubclass(DataError, SmallinitError) and issubclass(ConfigError, SmallinitError)


# --------------------------------------------------------------------------------------------- shared data
def test_shared_bilingual_sample(tmp_path):
    root = shared_data_dir()
    if root is None or not (root / "zh-uer-samples").is_dir() or not (root / "tinyshakespeare").is_dir():
        pytest.skip("shared data folder absent")
    en = root / "tinyshakespeare" / "input.txt"
    zh = root / "zh-uer-samples" / "CLUECorpusSmall_sampled.txt"
    cap = 120_000
    bpe = _prep([en, zh], tmp_path / "bpe", tokenizer="bpe", vocab_size=1024, max_bytes=cap, val_fraction=0.05)
    byte = _prep([en, zh], tmp_path / "byte", max_bytes=cap, val_fraction=0.05)
    cpt = {m["tokenizer"]["kind"]: {s["name"]: s["chars_per_token"] for s in m["sources"]} for m in (bpe, byte)}
    name_zh = "CLUECorpusSmall_sampled"
    assert cpt["byte"]["input"] == pytest.approx(1.0)  # ASCII English: one byte per char
    assert cpt["byte"][name_zh] < 0.4  # CJK: 3 bytes per char
    assert cpt["bpe"]["input"] > 2 * cpt["byte"]["input"]
    assert cpt["bpe"][name_zh] > 2 * cpt["byte"][name_zh]
    d = TokenData(tmp_path / "bpe")
    zh_text = zh.read_text(encoding="utf-8")
    for a, b, name in d.meta["val_sources"]:
        for seg in _decode(d.tokenizer, d.val[a:b]).split(EOT_TOKEN)[:-1]:
            assert seg in (zh_text if name == name_zh else en.read_text(encoding="utf-8"))


def test_a_killed_prepare_leaves_no_temporary_folder_after_the_next_run(tmp_path):
    """Issue 32 (I): a SIGKILLed prepare left `.OUT.tmp-*` folders that no later run removed. The next prepare of
    the same --out removes those our naming marks as its own whose process is gone, and nothing else."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    killed = (
        "import os, signal, sys; from pathlib import Path; from smallinit.core.outputs import tmp_dir_for; "
        "t = tmp_dir_for(Path(sys.argv[1])); (t / 'train.bin').write_bytes(b'x' * 1000); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    r = subprocess.run([sys.executable, "-c", killed, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
    assert len(left) == 1 and (left[0] / "train.bin").is_file()
    # not ours to remove: another naming (an older smallinit, the user), a live process (this one), another output
    keep = [
        tmp_path / ".out.tmp-abc123",
        tmp_path / f".out.tmp-{os.getpid()}.{left[0].name.split('.')[3][:8]}-x",
        tmp_path / (".other" + left[0].name[4:]),
    ]
    for k in keep:
        k.mkdir()
    _prep([_write(tmp_path / "a.txt", EN * 3)], out)
    assert not left[0].exists()
    assert all(k.is_dir() for k in keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.txt", "out", *(k.name for k in keep)])
