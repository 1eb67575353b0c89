"""`smallinit compare` and `smallinit.analysis.compare.compare_models` on real tiny runs."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_overrides

from smallinit.analysis.compare import compare_models, score_models, top_contexts
from smallinit.cli import main
from smallinit.core.errors import DataError
from smallinit.data import TokenData, prepare_corpus
from smallinit.train import load_config, train

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SEQ = 32  # tiny_overrides' data.seq_len


@pytest.fixture(scope="module")
def pair(token_dir, tmp_path_factory) -> tuple[Path, Path]:
    """A = small init with both fixes (γ=1, ε=1e-12, gate), B = standard (γ=0.5, ε=1e-5, no gate); 10 steps each."""
    root = tmp_path_factory.mktemp("pair")
    specs = {
        "A": {"model.gamma": 1.0, "model.norm_eps": 1e-12, "model.gate": "elementwise"},
        "B": {"model.gamma": 0.5, "model.norm_eps": 1e-5, "model.gate": "none"},
    }
    for name, over in specs.items():
        train(load_config("tiny", tiny_overrides(token_dir, **over, **{"train.max_steps": 10})), root / name)
    return root / "A", root / "B"


def test_cli_writes_all_outputs(pair, tmp_path, capsys) -> None:
    a, b = pair
    out = tmp_path / "cmp"
    rc = main(["compare", str(a), str(b), "--tokens", "1000", "--n-boot", "200", "--top", "4", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "compare.json").read_text())
    n_windows = -(-1000 // SEQ)
    assert res["n_tokens"] == n_windows * SEQ == res["setup"]["n_windows"] * SEQ
    assert [x["name"] for x in res["bins"]] == ["easy", "moderate", "hard", "very hard", "extreme"]
    assert sum(x["count"] for x in res["bins"]) == res["n_tokens"] == res["overall"]["count"]
    # bins are ordered by difficulty: mean difficulty (ℓ_A + ℓ_B)/2 rises from bin to bin
    diffs = [(x["loss_a"] + x["loss_b"]) / 2 for x in res["bins"]]
    assert diffs == sorted(diffs)
    assert res["setup"]["config_diff"]["model.gamma"] == [1.0, 0.5]
    assert res["setup"]["config_diff"]["model.gate"] == ["elementwise", "none"]
    for x in [res["overall"], *res["bins"]]:
        lo, hi = x["delta_sym"]["ci95"]
        assert -1 <= lo <= x["delta_sym"]["mean"] <= hi <= 1
        lo, hi = x["loss_gain"]["ci95"]
        assert lo <= x["loss_gain"]["mean"] <= hi
        assert x["loss_gain"]["mean"] == pytest.approx(x["loss_b"] - x["loss_a"], abs=1e-9)
    for png in ("delta_by_bin.png", "scatter.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    md = (out / "contexts.md").read_text()
    assert "## A gains most" in md and "## A loses most" in md
    gains, losses = res["top_contexts"]["gains"], res["top_contexts"]["losses"]
    assert 1 <= len(gains) <= 4 and 1 <= len(losses) <= 4
    assert [g["loss_gain"] for g in gains] == sorted((g["loss_gain"] for g in gains), reverse=True)
    assert gains[0]["loss_gain"] >= losses[0]["loss_gain"]
    printed = capsys.readouterr().out
    assert "| bin | difficulty (nats) |" in printed and "| extreme |" in printed and "| **all** |" in printed
    assert not list(out.glob(".*tmp"))  # atomic writes leave no temporaries


def test_scores_are_the_models_true_token_log_probs(pair, token_dir) -> None:
    """Independent check: the trainer's own final val loss, and a hand-computed window."""
    from smallinit.runs.checkpoint import load_checkpoint

    a, b = pair
    cfg = load_config("tiny", tiny_overrides(token_dir))
    n_val = cfg.data.val_batches * cfg.train.batch_size  # windows behind the trainer's reported val_loss
    s = score_models(a, b, tokens=n_val * SEQ, batch_size=3)  # odd batch size: windows must not depend on it
    assert s.n_tokens == n_val * SEQ
    for run, lp in ((a, s.logp_a), (b, s.logp_b)):
        summary = json.loads((run / "summary.json").read_text())
        assert float(-lp.mean()) == pytest.approx(summary["final_val_loss"], abs=1e-5)
    val = TokenData(token_dir).val
    np.testing.assert_array_equal(s.positions[:SEQ], np.arange(1, SEQ + 1))  # targets of window 0, no BOS
    model = load_checkpoint(b)
    x = torch.from_numpy(np.asarray(val[s.window_starts[SEQ] : s.window_starts[SEQ] + SEQ], dtype=np.int64))[None]
    with torch.no_grad():
        logp = F.log_softmax(model(x).float(), dim=-1)[0]
    y = np.asarray(val[s.positions[SEQ : 2 * SEQ]], dtype=np.int64)
    np.testing.assert_allclose(
        s.logp_b[SEQ : 2 * SEQ], logp[torch.arange(SEQ), torch.from_numpy(y)].numpy(), rtol=0, atol=1e-5
    )
    top = top_contexts(s, val, TokenData(token_dir).tokenizer, k=3, context=8)
    best = top["gains"][0]
    assert best["loss_gain"] == pytest.approx(float((s.logp_a - s.logp_b).max()))
    assert best["target"] == TokenData(token_dir).tokenizer.decode(
        [int(val[best["position"]])], skip_special_tokens=False
    )


def test_swapping_runs_flips_the_sign(pair) -> None:
    a, b = pair
    ab = compare_models(a, b, tokens=256, n_boot=50)
    ba = compare_models(b, a, tokens=256, n_boot=50)
    assert ab["overall"]["delta_sym"]["mean"] == pytest.approx(-ba["overall"]["delta_sym"]["mean"], abs=1e-12)
    assert ab["overall"]["loss_gain"]["mean"] == pytest.approx(-ba["overall"]["loss_gain"]["mean"], abs=1e-12)
    assert [x["count"] for x in ab["bins"]] == [x["count"] for x in ba["bins"]]


def test_refuses_runs_with_different_tokenizers(pair, tmp_path, capsys) -> None:
    a, b = pair
    other = tmp_path / "other"
    shutil.copytree(b, other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    k1, k2 = [k for k, v in vocab.items() if v in (300, 301)]
    vocab[k1], vocab[k2] = vocab[k2], vocab[k1]  # same size, different token ↔ id map
    (other / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(DataError, match="different tokenizers"):
        compare_models(a, other, tokens=64)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(other), "--tokens", "64", "--out", str(out)]) == 2
    assert "error: runs use different tokenizers" in capsys.readouterr().err
    assert not (out / "compare.json").exists()
    (other / "tokenizer.json").unlink()
    with pytest.raises(DataError, match="no tokenizer.json"):
        compare_models(a, other, tokens=64)


def test_refuses_data_tokenized_otherwise(pair, tmp_path) -> None:
    a, b = pair
    (tmp_path / "t.txt").write_text("some plain text to tokenize byte by byte. " * 400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_corpus(
            [str(tmp_path / "t.txt")], tmp_path / "bytes", tokenizer="byte", val_fraction=0.4, progress=False
        )
    with pytest.raises(DataError, match="another tokenizer"):
        compare_models(a, b, data_dir=tmp_path / "bytes", tokens=64)


def test_refuses_mixed_bos_unless_chosen(pair, token_dir, tmp_path) -> None:
    a, _ = pair
    c = tmp_path / "bos"
    train(load_config("tiny", tiny_overrides(token_dir, **{"data.bos": True, "train.max_steps": 2})), c)
    with pytest.raises(DataError, match="BOS"):
        score_models(a, c, tokens=64)
    cfg = load_config("tiny", tiny_overrides(token_dir))
    n_val = cfg.data.val_batches * cfg.train.batch_size
    s = score_models(a, c, tokens=n_val * SEQ, bos=True)
    assert s.info["bos"] is True
    np.testing.assert_array_equal(s.positions[:SEQ], np.arange(SEQ))  # with BOS, token 0 is a target too
    np.testing.assert_array_equal(s.window_starts, np.repeat(np.arange(n_val) * SEQ, SEQ))
    # the BOS run's own (BOS) validation loss is reproduced on the same windows
    summary = json.loads((c / "summary.json").read_text())
    assert float(-s.logp_b.mean()) == pytest.approx(summary["final_val_loss"], abs=1e-5)


def test_by_source_splits_every_statistic(pair, token_dir, tmp_path, capsys) -> None:
    a, b = pair
    src = tmp_path / "src"
    src.mkdir()
    (src / "prose.txt").write_text(
        "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun by the river.\n" * 120
    )
    code = Path(json.__file__).read_text()[:12000]
    (src / "code.txt").write_text(code)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_corpus(
            [str(src / "prose.txt"), str(src / "code.txt")],
            tmp_path / "mixed",
            tokenizer=str(token_dir / "tokenizer.json"),
            val_fraction=0.4,
            progress=False,
        )
    out = tmp_path / "cmp"
    rc = main(
        [
            "compare",
            str(a),
            str(b),
            "--data",
            str(tmp_path / "mixed"),
            "--tokens",
            "100000",
            "--by-source",
            "--bins",
            "3",
            "--n-boot",
            "100",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads((out / "compare.json").read_text())
    td = TokenData(tmp_path / "mixed")
    assert res["setup"]["data"] == str(td.path)
    assert res["n_tokens"] == (len(td.val) - 1) // SEQ * SEQ  # --tokens beyond the val split: all whole windows
    bysrc = res["by_source"]
    assert set(bysrc) == {"prose", "code"}
    # expected counts per source straight from the spans in meta.json
    pos = np.arange(res["n_tokens"]) + 1
    for start, end, name in td.meta["val_sources"]:
        n = int(((pos >= start) & (pos < end)).sum())
        assert bysrc[name]["overall"]["count"] == n > 0
        assert sum(x["count"] for x in bysrc[name]["bins"]) == n
    for k in range(3):
        assert sum(bysrc[s]["bins"][k]["count"] for s in bysrc) == res["bins"][k]["count"]
    printed = capsys.readouterr().out
    assert "source prose:" in printed and "source code:" in printed


def test_cli_rejects_bad_arguments(pair, tmp_path, capsys) -> None:
    a, b = pair
    assert main(["compare", str(a), str(b), "--bins", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--bins" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such run" in capsys.readouterr().err
