"""The anchor-function task: data generator, held-out pairs, labels, answer kinds, a tiny training run, the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from smallinit.core.errors import ConfigError
from smallinit.experiments.anchor import (
    ANCHORS,
    SHIFTS,
    AnchorConfig,
    classify_answers,
    make_data,
    target_of,
    train_anchor,
    train_pairs,
)


def test_training_pairs_exclude_both_orders_of_the_held_out_pair():
    pairs = train_pairs()
    assert (3, 4) not in pairs and (4, 3) not in pairs
    assert len(pairs) == 14 and (3, 3) in pairs and (4, 4) in pairs and (1, 2) in pairs and (2, 1) in pairs


def test_generated_sequences_and_labels():
    cfg = AnchorConfig()
    data = make_data(3000, train_pairs(cfg.held_out), cfg, torch.Generator().manual_seed(0))
    toks, y = data.tokens, data.targets
    assert toks.shape == (3000, cfg.seq_len)
    seen = {tuple(p) for p in data.pairs.tolist()}
    assert seen == set(train_pairs()), "every training pair appears, and no held-out one"
    for i in range(3000):
        row = toks[i].tolist()
        anchor_pos = [j for j, t in enumerate(row) if t in ANCHORS]
        assert len(anchor_pos) == 2 and anchor_pos[1] == anchor_pos[0] + 1, "exactly one adjacent anchor pair"
        p = anchor_pos[0] - 1
        assert p >= 0 and row[p] == data.keys[i].item()
        a1, a2 = row[p + 1], row[p + 2]
        assert y[i].item() == row[p] + SHIFTS[a1] + SHIFTS[a2]  # the label, recomputed by hand
        assert all(cfg.key_low <= t <= cfg.key_high for j, t in enumerate(row) if j not in (p + 1, p + 2))
    assert 0 < y.min().item() and y.max().item() < cfg.vocab_size and y.min().item() > max(ANCHORS)
    ho = make_data(500, cfg.held_out, cfg, torch.Generator().manual_seed(1))
    assert {tuple(p) for p in ho.pairs.tolist()} == {(3, 4), (4, 3)}
    assert torch.equal(ho.targets, ho.keys - 10)
    assert target_of(30, 1, 4) == 30 + 5 - 8


def test_answer_kinds():
    cfg = AnchorConfig()
    ho = make_data(6, [[3, 4]], cfg, torch.Generator().manual_seed(2))
    x = ho.keys
    pred = torch.stack([x - 10, x - 2, x - 8, x + 10, x, x + 37])  # one of each kind, per example
    kinds = [classify_answers(p, ho, train_pairs())[0] for p in pred]
    assert kinds == ["inferential", "first_only", "second_only", "seen_pair", "key", "other"]
    ho43 = make_data(1, [[4, 3]], cfg, torch.Generator().manual_seed(3))
    assert classify_answers(ho43.keys - 8, ho43, train_pairs()) == ["first_only"]


def test_config_errors():
    with pytest.raises(ConfigError, match="targets"):
        AnchorConfig(key_low=10).validate()
    with pytest.raises(ConfigError, match="held-out pair"):
        AnchorConfig(held_out=[[3, 5]]).validate()


def test_a_tiny_run_learns_and_writes_its_files(tmp_path):
    cfg = AnchorConfig(
        steps=60, n_train=512, n_test=128, d_model=16, n_layers=1, n_heads=2, d_ff=32, eval_every=30, lr=3e-3, threads=1
    )
    r = train_anchor(cfg, tmp_path)
    h = r["history"]
    assert [x["step"] for x in h] == [0, 30, 60]
    assert h[-1]["loss"] < h[1]["loss"] < 4.6  # training loss falls below ln(vocab)
    assert h[-1]["val_loss"] < h[0]["val_loss"]  # and in distribution too
    f = r["final"]
    assert abs(sum(f["answers"].values()) - 1) < 1e-9
    assert len(r["heldout_correct"]) == 128
    assert f["heldout_acc"] == pytest.approx(r["heldout_correct"].count("1") / 128)
    assert json.loads((tmp_path / "summary.json").read_text())["completed"] is True
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3


def test_cli(tmp_path, capsys):
    from smallinit.cli import main

    rc = main(
        [
            "anchor",
            "--gamma",
            "0.5",
            "--steps",
            "4",
            "--out",
            str(tmp_path),
            "--quiet",
            "--set",
            "d_model=16",
            "--set",
            "n_layers=1",
            "--set",
            "n_heads=2",
            "--set",
            "n_train=64",
            "--set",
            "n_test=32",
            "--set",
            "eval_every=2",
        ]
    )
    assert rc == 0
    assert "held-out-pair acc" in capsys.readouterr().out
    assert json.loads((tmp_path / "anchor.json").read_text())["gamma"] == 0.5
    assert main(["anchor", "--out", str(tmp_path), "--set", "bogus=1"]) == 2
