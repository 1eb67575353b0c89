"""Benchmark evaluation: scorer requests, task scoring with known answers, answer extraction, file errors.

Models here are stubs whose log-probabilities are known in closed form:
- ScriptLM: puts logit MARGIN on the next byte of a scripted completion of a trigger string and 0
  elsewhere (eot when no script applies), so log p = MARGIN - log Z for a scripted byte and -log Z
  otherwise, Z = e^MARGIN + V - 1.
- BigramLM: logits depend on the current token only (exact reference log-likelihoods).
- CausalMeanLM: random weights, output depends on the whole prefix and on positions (checks padding,
  batching and truncation against a direct forward pass).
The tokenizer is byte-level (id = byte value, eot = 256), built with Hugging Face tokenizers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from smallinit.core.errors import ConfigError, DataError
from smallinit.core.paths import shared_data_dir
from smallinit.eval import TASKS, LMScorer, results_markdown, run_tasks
from smallinit.eval.answers import (
    canonical_number,
    extract_gsm8k_answer,
    extract_math_answer,
    gsm8k_equal,
    last_boxed,
    math_equal,
    normalize_math_answer,
)
from smallinit.eval.mc_scoring import MCItem, fewshot_indices, score_mc, with_shots
from smallinit.eval.multiple_choice import YamlMCTask

V, EOT, MARGIN = 257, 256, 10.0
LOGZ = math.log(math.exp(MARGIN) + V - 1)
HIT, MISS = MARGIN - LOGZ, -LOGZ  # log p of a scripted byte / of any other byte under ScriptLM


# ----------------------------------------------------------------------------- stubs


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_tokenizer() -> Tokenizer:
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab["<|endoftext|>"] = EOT
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


class ScriptLM(torch.nn.Module):
    """Continues each trigger string with its scripted completion (then eot); see module docstring."""

    def __init__(self, scripts: dict[str, str], max_seq_len: int = 4096):
        super().__init__()
        self.scripts = [(t.encode(), c.encode()) for t, c in scripts.items()]
        self.config = SimpleNamespace(max_seq_len=max_seq_len)
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def next_token(self, prefix: bytes) -> int:
        for trig, comp in self.scripts:
            k = prefix.rfind(trig)
            if k < 0:
                continue
            done = prefix[k + len(trig) :]
            if comp.startswith(done):
                return comp[len(done)] if len(done) < len(comp) else EOT
        return EOT

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        out = torch.zeros(B, T, V)
        for b in range(B):
            row = bytes(x if x < 256 else 0 for x in idx[b].tolist())  # eot reads as b"\x00"
            for t in range(T):
                out[b, t, self.next_token(row[: t + 1])] = MARGIN
        return out


class BigramLM(torch.nn.Module):
    def __init__(self, table: torch.Tensor, max_seq_len: int = 64):
        super().__init__()
        self.table = torch.nn.Parameter(table)
        self.config = SimpleNamespace(max_seq_len=max_seq_len)

    def forward(self, idx):
        return self.table[idx]


class CausalMeanLM(torch.nn.Module):
    """h_t = mean_{s<=t} E[x_s] + P[t]; logits = tanh(h) W. Random, causal, position-dependent."""

    def __init__(self, max_seq_len: int = 32, d: int = 16, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(V, d, generator=g))
        self.pos = torch.nn.Parameter(torch.randn(max_seq_len, d, generator=g))
        self.out = torch.nn.Parameter(torch.randn(d, V, generator=g) * 2)
        self.config = SimpleNamespace(max_seq_len=max_seq_len)

    def forward(self, idx):
        T = idx.shape[1]
        assert T <= self.config.max_seq_len
        h = self.emb[idx].cumsum(1) / torch.arange(1, T + 1)[None, :, None] + self.pos[:T]
        return torch.tanh(h) @ self.out


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def ids(text: str) -> list[int]:
    return list(text.encode())


def ref_loglik(model, ctx: list[int], cont: list[int]) -> float:
    """Direct single-sequence reference: one forward pass over the last L+1 tokens."""
    seq = (ctx + cont)[-(model.config.max_seq_len + 1) :]
    lp = F.log_softmax(model(torch.tensor([seq[:-1]]))[0].float(), -1)
    n = len(cont)
    return lp[-n:].gather(-1, torch.tensor(cont)[:, None]).sum().item()


class FakeScorer:
    """Fixed log-likelihood per continuation string (default -100), canned generations; records requests."""

    def __init__(self, ll: dict[str, float] | None = None, gen: dict[str, str] | None = None):
        self.ll, self.gen, self.requests = ll or {}, gen or {}, []

    def loglikelihood(self, requests):
        self.requests += list(requests)
        return [(self.ll.get(c, -100.0), False) for _, c in requests]

    def generate_until(self, requests):
        self.requests += list(requests)
        return [next((v for k, v in self.gen.items() if ctx.endswith(k)), "") for ctx, _ in requests]


# ----------------------------------------------------------------------------- tokenizer / scorer


def test_byte_tokenizer_roundtrip(tok):
    assert tok.encode("héllo 答", add_special_tokens=False).ids == ids("héllo 答")
    assert tok.token_to_id("<|endoftext|>") == EOT
    assert tok.decode(ids("héllo 答")) == "héllo 答"


def test_encode_pair_moves_trailing_space_and_empty_context(tok):
    s = LMScorer(ScriptLM({}), tok)
    assert s.encode_pair("ab ", "c") == (ids("ab"), ids(" c"))
    assert s.encode_pair("ab", " c") == (ids("ab"), ids(" c"))
    assert s.encode_pair("", "xy") == ([EOT], ids("xy"))


def test_loglikelihood_exact_values_and_greedy(tok):
    s = LMScorer(ScriptLM({"Q: 2+2=": " 4."}), tok, batch_size=2)
    res = s.loglikelihood([("Q: 2+2=", " 4."), ("Q: 2+2=", " 5."), ("Q: 2+2=", " 4"), ("zzz", " 4.")])
    assert res[0][0] == pytest.approx(3 * HIT, abs=1e-5) and res[0][1] is True
    # " " is scripted, "5" is not, "." then follows no script (eot predicted): HIT + 2 MISS
    assert res[1][0] == pytest.approx(HIT + 2 * MISS, abs=1e-5) and res[1][1] is False
    assert res[2][0] == pytest.approx(2 * HIT, abs=1e-5) and res[2][1] is True
    assert res[3][0] == pytest.approx(3 * MISS, abs=1e-5) and res[3][1] is False


def test_loglikelihood_batching_padding_and_truncation_match_direct_forward(tok):
    model = CausalMeanLM(max_seq_len=16)
    reqs = [
        ("a", "b"),
        ("hello world, this is long", " context"),
        ("xy", "z" * 5),
        ("", "start"),
        ("0123456789" * 3, "!?"),
        ("mid", " size text"),
    ]
    ref = []
    for ctx, cont in reqs:
        c, k = LMScorer(model, tok).encode_pair(ctx, cont)
        ref.append(ref_loglik(model, c, k))
    for bs in (1, 4):
        got = [r[0] for r in LMScorer(model, tok, batch_size=bs).loglikelihood(reqs)]
        assert got == pytest.approx(ref, abs=1e-4)


def _bigram_ref(table: torch.Tensor, tokens: list[int]) -> float:
    lp = F.log_softmax(table, -1)
    return sum(lp[a, b].item() for a, b in zip(tokens[:-1], tokens[1:]))


def test_long_continuation_and_rolling_use_all_tokens(tok):
    g = torch.Generator().manual_seed(1)
    table = torch.randn(V, V, generator=g)
    s = LMScorer(BigramLM(table, max_seq_len=8), tok, batch_size=3)
    text = "the quick brown fox jumps over the lazy dog"  # 43 tokens > L = 8: disjoint windows
    ((ll, _),) = s.loglikelihood([("A", " " + text)])
    assert ll == pytest.approx(_bigram_ref(table, ids("A " + text)), abs=1e-3)
    rolling = s.loglikelihood_rolling([text, "hi"])
    assert rolling[0] == pytest.approx(_bigram_ref(table, [EOT] + ids(text)), abs=1e-3)
    assert rolling[1] == pytest.approx(_bigram_ref(table, [EOT] + ids("hi")), abs=1e-4)


def test_generate_until_stops_and_batches(tok):
    scripts = {"Q1:": " alpha STOP beta", "Q2 longer prompt:": " one\n\ntwo", "Q3:": " abcdefghij"}
    reqs = [
        ("Q1:", {"until": ["STOP"]}),
        ("Q2 longer prompt:", {"until": ["\n\n"]}),
        ("Q3:", {"until": [], "max_gen_toks": 4}),
        ("nothing scripted", {"until": ["x"]}),
    ]
    want = [" alpha ", " one", " abc", ""]
    for bs in (1, 3):
        assert LMScorer(ScriptLM(scripts), tok, batch_size=bs).generate_until(reqs) == want
    # the eot token ends generation: the whole completion comes back
    assert LMScorer(ScriptLM(scripts), tok).generate_until([("Q3:", {"until": ["zz"]})]) == [" abcdefghij"]


def test_generate_slides_window_past_max_seq_len(tok):
    model = ScriptLM({"go:": "0123456789"}, max_seq_len=6)
    assert LMScorer(model, tok).generate_until([("go:", {"until": [], "max_gen_toks": 10})]) == ["0123"]
    # with a 6-token window the trigger "go:" leaves the window after 3 new tokens, then eot: only "0123"


def test_scorer_config_errors(tok):
    with pytest.raises(ConfigError):
        LMScorer(ScriptLM({}), tok, batch_size=0)
    no_eot = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    with pytest.raises(ConfigError, match="endoftext"):
        LMScorer(ScriptLM({}), no_eot)
    with pytest.raises(ConfigError, match="greedy"):
        LMScorer(ScriptLM({}), tok).generate_until([("x", {"do_sample": True})])


# ----------------------------------------------------------------------------- multiple choice


def test_score_mc_acc_and_acc_norm_with_fixed_logprobs():
    items = [MCItem("p1", ["ab", "abcdefgh"], 1), MCItem("p2", ["yes", "no"], 0), MCItem("p3", ["x", "y"], 1)]
    # item 1: sum favours "ab" (-3 > -4.5), per character favours the long one (-0.5625 > -1.5): acc wrong, norm right
    fake = FakeScorer({" ab": -3.0, " abcdefgh": -4.5, " yes": -1.0, " no": -2.0, " x": -1.0, " y": -5.0})
    res = score_mc(fake, "t", items)
    assert [r["pred"] for r in res.records] == [0, 0, 0]
    assert [r["pred_norm"] for r in res.records] == [1, 0, 0]
    assert res.metrics["acc"] == pytest.approx(1 / 3) and res.metrics["acc_norm"] == pytest.approx(2 / 3)
    assert res.metrics["acc_stderr"] == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 2))
    assert len(fake.requests) == 6
    assert all(cont.startswith(" ") for _, cont in fake.requests)  # the delimiter is scored ...


def test_acc_norm_divides_by_characters_without_the_delimiter_as_the_harness_does():
    # ... but not counted: "é" is 1 character, 2 bytes. ll/len: "éé" -2.2/2 = -1.1, "ab" -2.0/2 = -1.0 -> "ab";
    # with the delimiter counted (the old rule, bytes): -2.2/5 = -0.44 > -2.0/3 = -0.67 -> "éé". acc_bytes (no
    # delimiter, bytes): -2.2/4 = -0.55 > -1.0 -> "éé".
    item = MCItem("q", ["éé", "ab"], 1)
    fake = FakeScorer({" éé": -2.2, " ab": -2.0})
    res = score_mc(fake, "t", [item])
    r = res.records[0]
    assert r["pred"] == 1 and r["pred_norm"] == 1 and r["pred_bytes"] == 0
    assert res.metrics["acc_norm"] == 1.0 and res.metrics["acc_bytes"] == 0.0
    # the harness's own formula on the same numbers
    import numpy as np

    lls, choices = np.array([-2.2, -2.0]), ["éé", "ab"]
    assert int(np.argmax(lls / np.array([float(len(c)) for c in choices]))) == r["pred_norm"]


def test_partial_scoring_scores_one_target_after_each_context():
    item = MCItem(
        "",
        ["The cup is full of", "The jug is full of"],
        1,
        contexts=["The cup is full of", "The jug is full of"],
        target="water.",
    )
    assert item.requests() == [("The cup is full of", " water."), ("The jug is full of", " water.")]
    assert item.lengths()[0] == [6, 6]


def test_fewshot_draw_is_deterministic_and_excludes_the_item():
    for i in range(20):
        a = fewshot_indices(20, 5, i, exclude_self=True)
        assert a == fewshot_indices(20, 5, i, exclude_self=True)
        assert len(a) == 5 and i not in a and len(set(a)) == 5
    assert sorted(fewshot_indices(3, 10, 1, exclude_self=True)) == [0, 2]  # capped at the candidates
    assert sorted(fewshot_indices(3, 10, 1, exclude_self=False)) == [0, 1, 2]
    items = [MCItem(f"q{i}", ["a", "b"], i % 2) for i in range(6)]
    shot, used = with_shots(items[:2], 2, pool=items)
    assert used == 2
    for i, it in enumerate(shot):
        demos = it.prompt.split("\n\n")
        assert len(demos) == 3 and demos[-1] == f"q{i}" and f"q{i}" not in "".join(demos[:-1])


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _hellaswag_row(label, act, a, b, endings):
    return {"activity_label": act, "ctx_a": a, "ctx_b": b, "endings": endings, "label": label}


def test_hellaswag_and_arc_end_to_end(tmp_path, tok):
    _write_jsonl(
        tmp_path / "hellaswag/hellaswag_val.jsonl",
        [
            _hellaswag_row(
                "1", "Cooking", "A man cuts onions.", "he", ["sings.", "fries them [title] well.", "flies."]
            ),
            _hellaswag_row("0", "Running", "A girl runs.", "she", ["stops.", "swims.", "reads."]),
            _hellaswag_row(2, "Golf", "A man swings.", "the ball", ["rolls.", "falls.", "sings."]),
        ],
    )
    _write_jsonl(
        tmp_path / "arc/arc_easy_val.jsonl",
        [
            {
                "id": "a1",
                "question": "Sky color?",
                "choices": {"text": ["red", "blue"], "label": ["1", "2"]},
                "answerKey": "2",
            },
            {
                "id": "a2",
                "question": "Grass color?",
                "choices": {"text": ["green", "pink", "gray"], "label": ["A", "B", "C"]},
                "answerKey": "A",
            },
        ],
    )
    scripts = {
        "Cooking: A man cuts onions. He": " fries them. well.",  # harness cleaning: " [title]" -> ". "
        "Running: A girl runs. She": " stops.",
        "Golf: A man swings. The ball": " falls.",  # wrong on purpose (gold is "sings.")
        "Question: Sky color?\nAnswer:": " blue",
        "Question: Grass color?\nAnswer:": " pink",  # wrong on purpose
    }
    scorer = LMScorer(ScriptLM(scripts), tok, batch_size=4)
    out = run_tasks(scorer, "hellaswag,arc_easy", data_dir=tmp_path, progress=False)
    hs, arc = out["tasks"]["hellaswag"], out["tasks"]["arc_easy"]
    assert [r["pred"] for r in hs["records"]] == [1, 0, 1]
    assert hs["metrics"]["acc"] == pytest.approx(2 / 3) and hs["metrics"]["acc_norm"] == pytest.approx(2 / 3)
    assert [r["pred"] for r in arc["records"]] == [1, 1] and arc["metrics"]["acc"] == pytest.approx(0.5)
    assert arc["records"][0]["id"] == "a1"
    assert out["tasks"]["hellaswag"]["metrics"]["n"] == 3
    md = results_markdown(out)
    assert "| hellaswag | acc | 0.6667 |" in md and "| arc_easy | acc_norm | 0.5000 |" in md


def _cmmlu_csv(path: Path, rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",Question,A,B,C,D,Answer"] + [",".join([str(i), *r]) for i, r in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_cmmlu_letters_subjects_and_dev_shots(tmp_path, tok):
    _cmmlu_csv(
        tmp_path / "cmmlu/test/agronomy.csv",
        [("土地是什么", "甲", "乙", "丙", "丁", "C"), ("水是什么", "一", "二", "三", "四", "A")],
    )
    _cmmlu_csv(tmp_path / "cmmlu/test/arts.csv", [("画是什么", "红", "绿", "蓝", "黄", "B")])
    _cmmlu_csv(tmp_path / "cmmlu/dev/agronomy.csv", [("示例问题", "x", "y", "z", "w", "D")])
    scripts = {
        "土地是什么\nA. 甲\nB. 乙\nC. 丙\nD. 丁\n答案：": " C",
        "水是什么\nA. 一\nB. 二\nC. 三\nD. 四\n答案：": " B",
        "画是什么\nA. 红\nB. 绿\nC. 蓝\nD. 黄\n答案：": " B",
    }
    out = run_tasks(LMScorer(ScriptLM(scripts), tok), ["cmmlu"], data_dir=tmp_path, progress=False)
    res = out["tasks"]["cmmlu"]
    assert res["metrics"]["acc"] == pytest.approx(2 / 3)
    assert res["subtasks"]["agronomy"] == {"acc": 0.5, "acc_norm": 0.5, "n": 2}
    assert res["subtasks"]["arts"]["acc"] == 1.0 and res["metrics"]["acc_macro"] == pytest.approx(0.75)
    # shots: agronomy draws from its dev file (1 item), arts (no dev) from its own file minus the item (none left)
    fake = FakeScorer()
    out = run_tasks(fake, "cmmlu", data_dir=tmp_path, shots=3, progress=False, records=False)
    prompts = [c for c, _ in fake.requests]
    assert all(p.startswith("示例问题\nA. x\nB. y\nC. z\nD. w\n答案： D\n\n") for p in prompts[:8])
    assert prompts[8].startswith("画是什么") and out["tasks"]["cmmlu"]["metrics"]["shots"] == 1
    assert "records" not in out["tasks"]["cmmlu"]


def test_yaml_mc_task(tmp_path, tok):
    _write_jsonl(
        tmp_path / "quiz.jsonl",
        [
            {"q": "Capital of France?", "A": "Paris", "B": "Rome", "answer": "A"},
            {"q": "Capital of Italy?", "A": "Paris", "B": "Rome", "answer": "B"},
            {"q": "Capital of Spain?", "A": "Madrid", "B": "Lisbon", "answer": "B"},
        ],
    )
    spec = tmp_path / "quiz.yaml"
    spec.write_text(
        'name: capitals\nfile: quiz.jsonl\nquestion: "Q: {q}\\nA:"\nchoices: [A, B]\nlabel: answer\nlabels: [A, B]\n',
        encoding="utf-8",
    )
    scripts = {
        "Q: Capital of France?\nA:": " Paris",
        "Q: Capital of Italy?\nA:": " Rome",
        "Q: Capital of Spain?\nA:": " Madrid",
    }
    out = run_tasks(LMScorer(ScriptLM(scripts), tok), [str(spec)], data_dir=tmp_path, progress=False)
    res = out["tasks"]["capitals"]
    assert [r["gold"] for r in res["records"]] == [0, 1, 1] and [r["pred"] for r in res["records"]] == [0, 1, 0]
    assert res["metrics"]["acc"] == pytest.approx(2 / 3)
    # fixed choices (letters) and a label given as choice text
    spec2 = tmp_path / "letters.yaml"
    spec2.write_text(
        'file: quiz.jsonl\nquestion: "{q} A={A} B={B}. Answer:"\nfixed_choices: [A, B]\nlabel: answer\n',
        encoding="utf-8",
    )
    task = YamlMCTask.from_yaml(spec2)
    items, pool = task.load()
    assert task.name == "letters" and pool is None
    assert items[1].choices == ["A", "B"] and items[1].gold == 1 and items[0].prompt.endswith("B=Rome. Answer:")
    assert items[1].requests()[1] == (items[1].prompt, " B")  # choice_prefix is the scored delimiter


def test_yaml_partial_scoring_winogrande_style(tmp_path, tok):
    _write_jsonl(
        tmp_path / "wino.jsonl",
        [
            {
                "sentence": "The trophy did not fit in the case because the _ was too big.",
                "option1": "trophy",
                "option2": "case",
                "answer": "1",
            },
            {
                "sentence": "Anna gave Maria a book because _ had finished it.",
                "option1": "Anna",
                "option2": "Maria",
                "answer": "1",
            },
        ],
    )
    spec = tmp_path / "wino.yaml"
    spec.write_text(
        'file: wino.jsonl\nblank: sentence\ncontext_choices: ["{sentence_before}{option1}", '
        '"{sentence_before}{option2}"]\ntarget: "{sentence_after}"\nlabel: answer\nlabels: ["1", "2"]\n',
        encoding="utf-8",
    )
    items, _ = YamlMCTask.from_yaml(spec).load()
    assert items[0].requests() == [
        ("The trophy did not fit in the case because the trophy", " was too big."),
        ("The trophy did not fit in the case because the case", " was too big."),
    ]
    assert items[0].gold == 0 and items[0].lengths()[0] == [len("was too big.")] * 2
    # scored end to end: the scripted model continues "...the trophy" with " was too big." only
    scripts = {
        "The trophy did not fit in the case because the trophy": " was too big.",
        "Anna gave Maria a book because Maria": " had finished it.",
    }
    out = run_tasks(LMScorer(ScriptLM(scripts), tok), [str(spec)], data_dir=tmp_path, progress=False)
    recs = out["tasks"]["wino"]["records"]
    assert [r["pred"] for r in recs] == [0, 1] and out["tasks"]["wino"]["metrics"]["acc"] == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text('file: wino.jsonl\ncontext_choices: ["{sentence}"]\nlabel: answer\n', encoding="utf-8")
    with pytest.raises(DataError, match="missing key 'target'"):
        YamlMCTask.from_yaml(bad)


@pytest.mark.parametrize(
    "body,match",
    [
        ("file: quiz.jsonl\nquestion: x\nlabel: answer\n", "exactly one of 'choices'"),
        ("file: quiz.jsonl\nchoices: c\nlabel: answer\n", "missing key 'question'"),
        ("file: quiz.jsonl\nquestion: x\nchoices: c\nlabel: a\ncolour: red\n", "unknown key"),
        ("file: missing.jsonl\nquestion: x\nchoices: [A]\nlabel: answer\n", "missing.jsonl: file not found"),
        ("file: quiz.jsonl\nquestion: '{nope}'\nchoices: [A, B]\nlabel: answer\n", "names field 'nope'"),
        (
            "file: quiz.jsonl\nquestion: x\nchoices: [A, B]\nlabel: answer\nlabels: [X, Y]\n",
            r"quiz.jsonl:1: label 'A' matches no",
        ),
        ("- not a mapping\n", "expected a YAML mapping"),
        # found by attacking the CLI: each was a traceback
        ('file: quiz.jsonl\nquestion: "Q: {q\\nA:"\nchoices: [A, B]\nlabel: answer\n', "template .* unmatched"),
        ("file: quiz.jsonl\nquestion: '{q.x}'\nchoices: [A, B]\nlabel: answer\n", r"names \{q.x\}; fields are plain"),
        ("file: quiz.jsonl\nquestion: x\nfixed_choices: 5\nlabel: answer\n", "'fixed_choices' must be a list"),
        ("file: quiz.jsonl\nquestion: x\nchoices: [A, B]\nlabel: answer\nlabels: 7\n", "'labels' must be"),
        ("file: 5\nquestion: x\nchoices: [A, B]\nlabel: answer\n", "'file' must be a file name, not int"),
        ("file: quiz.jsonl\nquestion: x\nchoices: [{a: 1}]\nlabel: answer\n", "'choices' must be"),
    ],
)
def test_yaml_task_errors(tmp_path, body, match):
    _write_jsonl(tmp_path / "quiz.jsonl", [{"q": "x", "A": "a", "B": "b", "answer": "A"}])
    spec = tmp_path / "t.yaml"
    spec.write_text(body, encoding="utf-8")
    with pytest.raises(DataError, match=match):
        YamlMCTask.from_yaml(spec).load()


# ----------------------------------------------------------------------------- LAMBADA, BLiMP


def test_lambada_accuracy_and_perplexity(tmp_path, tok):
    _write_jsonl(
        tmp_path / "lambada/lambada_openai.jsonl",
        [
            {"context": "I don't care about", "continuation": "signs"},
            {"context": "She waved at", "continuation": "Shane"},
        ],
    )
    scripts = {"I don't care about": " signs", "She waved at": " Shawn"}
    res = run_tasks(LMScorer(ScriptLM(scripts), tok), "lambada", data_dir=tmp_path, progress=False)["tasks"]["lambada"]
    assert res["metrics"]["acc"] == 0.5
    ll0, ll1 = 6 * HIT, 4 * HIT + 2 * MISS  # " Sha" + "n" hits, "e" misses, then no script: miss
    assert [r["loglikelihood"] for r in res["records"]] == pytest.approx([ll0, ll1], abs=1e-4)
    assert res["metrics"]["ppl"] == pytest.approx(math.exp(-(ll0 + ll1) / 2), rel=1e-4)


def test_blimp_per_paradigm(tmp_path, tok):
    _write_jsonl(
        tmp_path / "blimp/agreement.jsonl",
        [
            {"sentence_good": "The cats run.", "sentence_bad": "The cats runs."},
            {"sentence_good": "A dog barks.", "sentence_bad": "A dog bark."},
        ],
    )
    _write_jsonl(
        tmp_path / "blimp/island.jsonl",
        [
            {"sentence_good": "Who did you see?", "sentence_bad": "Who you did see?"},
            {"sentence_good": "What was eaten?", "sentence_bad": "What eaten was?"},
        ],
    )
    eot = "\x00"  # how ScriptLM reads the eot that stands for the empty context
    scripts = {
        eot: "The cats run.",
        eot + "A": " dog barks.",
        eot + "W": "ho did you see?",
        eot + "Wh": "at eaten was?",
    }  # the last one prefers the bad sentence
    res = run_tasks(LMScorer(ScriptLM(scripts), tok, batch_size=3), "blimp", data_dir=tmp_path, progress=False)[
        "tasks"
    ]["blimp"]
    assert res["subtasks"] == {"agreement": {"acc": 1.0, "n": 2}, "island": {"acc": 0.5, "n": 2}}
    assert res["metrics"]["acc"] == 0.75 and res["metrics"]["acc_macro"] == 0.75
    r0 = res["records"][0]
    assert r0["loglik_good"] > r0["loglik_bad"]
    limited = run_tasks(FakeScorer(), "blimp", data_dir=tmp_path, limit=1, progress=False)["tasks"]["blimp"]
    assert limited["metrics"]["n"] == 2  # first pair of each paradigm


# ----------------------------------------------------------------------------- GSM8K, MATH500


def test_gsm8k_generation_and_extraction(tmp_path, tok):
    _write_jsonl(
        tmp_path / "gsm8k/test.jsonl",
        [
            {"question": "Tom has 3 apples and gets 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
            {"question": "Price of 1234 pens at $1?", "answer": "#### 1,234"},
            {"question": "Debt?", "answer": "#### -5"},
        ],
    )
    scripts = {
        "Question: Tom has 3 apples and gets 4. How many?\nAnswer:": " He has 3 + 4 = 7 apples.\n#### 7\n\nQuestion: 9",
        "Question: Price of 1234 pens at $1?\nAnswer:": " The answer is $1,234.00.",
        "Question: Debt?\nAnswer:": " It is 5.",
    }
    out = run_tasks(LMScorer(ScriptLM(scripts), tok, batch_size=2), "gsm8k", data_dir=tmp_path, shots=0, progress=False)
    res = out["tasks"]["gsm8k"]
    assert [r["pred"] for r in res["records"]] == ["7", "1234", "5"]
    assert [r["gold"] for r in res["records"]] == ["7", "1234", "-5"]
    assert res["records"][0]["generation"] == " He has 3 + 4 = 7 apples.\n#### 7"
    assert res["metrics"]["exact_match"] == pytest.approx(2 / 3)
    # few-shot: default 5 shots capped at the 2 other items; demonstrations lose <<...>> annotations
    fake = FakeScorer()
    res = run_tasks(fake, "gsm8k", data_dir=tmp_path, progress=False)["tasks"]["gsm8k"]
    prompt0, kwargs = fake.requests[0]
    assert res["metrics"]["shots"] == 2 and prompt0.count("Question:") == 3 and "<<" not in prompt0
    assert prompt0.endswith("\n\nQuestion: Tom has 3 apples and gets 4. How many?\nAnswer:")
    assert prompt0.count("Tom has") == 1 and kwargs["until"] == ["Question:", "\n\n"]
    assert kwargs["max_gen_toks"] == 256


def test_math500_boxed_and_equivalence(tmp_path):
    _write_jsonl(
        tmp_path / "math500/test.jsonl",
        [
            {
                "problem": "Half of one?",
                "solution": "It is $\\boxed{\\frac{1}{2}}$.",
                "answer": "\\frac12",
                "subject": "Algebra",
            },
            {"problem": "Angle?", "solution": "$\\boxed{90^\\circ}$", "answer": "90^\\circ", "subject": "Geometry"},
            {"problem": "Point?", "solution": "$\\boxed{(1,2)}$", "subject": "Algebra"},
        ],
    )
    gen = {
        "Half of one?\n\nSolution:": " We get \\boxed{0.5}.",
        "Angle?\n\nSolution:": " So $\\boxed{90}$ degrees.",
        "Point?\n\nSolution:": " \\boxed{(2,1)}",
    }
    fake = FakeScorer(gen=gen)
    res = run_tasks(fake, "math500", data_dir=tmp_path, shots=0, max_gen_toks=7, progress=False)["tasks"]["math500"]
    assert [r["correct"] for r in res["records"]] == [True, True, False]
    assert res["records"][2]["gold"] == "(1,2)"  # no answer field: last \boxed of the solution
    assert res["subtasks"] == {"Algebra": {"exact_match": 0.5, "n": 2}, "Geometry": {"exact_match": 1.0, "n": 1}}
    assert fake.requests[0][1] == {"until": ["Problem:"], "max_gen_toks": 7}


GSM8K_CASES = [
    ("Janet makes 9 * 2 = $18 every day.\n#### 18", "18"),
    ("#### 1,000", "1000"),
    ("The answer is $1,234.50.", "1234.5"),
    ("So the answer is 5.0", "5"),
    ("She lost 3 then 8 more, ending at -11.", "-11"),
    ("The temperature is \u22127 degrees.", "-7"),
    ("He pays $2,500 for 3 months, so 2,500/3 = 833.33", "833.33"),
    ("The answer is 42. Question: what about 7?", "42"),
    ("x = 12.", "12"),
    ("Total: .5 liters", "0.5"),
    ("The answers are 3 and 4", "4"),
    ("#### $40", "40"),
    ("It costs 1,234,567 dollars", "1234567"),
    ("no numbers here", None),
    ("there are 007 agents", "7"),
]


@pytest.mark.parametrize("text,want", GSM8K_CASES)
def test_gsm8k_extraction(text, want):
    assert extract_gsm8k_answer(text) == want


def test_gsm8k_equal_and_canonical():
    assert gsm8k_equal("5.0", "5") and gsm8k_equal("$1,000", "1000") and not gsm8k_equal("5", "-5")
    assert not gsm8k_equal(None, "5") and canonical_number("abc") is None and canonical_number("-0.0") == "0"


MATH_EQUAL_CASES = [
    ("\\frac{1}{2}", "0.5"),
    ("\\frac12", "\\frac{1}{2}"),
    ("\\dfrac{3}{4}", "3/4"),
    ("\\tfrac{3}{4}", "0.75"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("10,\\!080", "10080"),
    ("11,\\! 111,\\! 111,\\! 100", "11111111100"),
    ("864 \\mbox{ inches}^2", "864"),
    ("5.4 \\text{ cents}", "5.4"),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90 degrees"),
    ("x = 5", "5"),
    ("y = 2x + 3", "2x+3"),
    ("\\$32,\\!348", "32348"),
    ("\\text{(C)}", "C"),
    ("\\text{Evelyn}", "Evelyn"),
    (".35625", "0.35625"),
    ("$\\frac{3}{2}$.", "\\frac{3}{2}"),
    ("11\\sqrt2", "11\\sqrt{2}"),
    ("\\frac 59", "\\frac{5}{9}"),
    ("5.0", "5"),
    ("-\\frac{35}{9}", "-35/9"),
    ("\\boxed{4}", "4"),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}", "\\begin{pmatrix}-1/3\\\\2/3\\end{pmatrix}"),
]
MATH_UNEQUAL_CASES = [
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("(1,2)", "(2,1)"),
    ("2x+3", "2x-3"),
    ("5", "50"),
    ("1,-2", "-2,1"),
    ("2m", "2"),
    ("\\sqrt{2}", "2"),
]


@pytest.mark.parametrize("a,b", MATH_EQUAL_CASES)
def test_math_equal(a, b):
    assert math_equal(a, b) and math_equal(b, a)


@pytest.mark.parametrize("a,b", MATH_UNEQUAL_CASES)
def test_math_unequal(a, b):
    assert not math_equal(a, b)


def test_boxed_extraction_nested_and_forms():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{\\sqrt{3}}{2}} end") == "\\frac{\\sqrt{3}}{2}"
    assert last_boxed("$\\boxed{\\left\\{1,2\\right\\}}$") == "\\left\\{1,2\\right\\}"
    assert last_boxed("so \\boxed 5$.") == "5" and last_boxed("\\fbox{7}") == "7"
    assert last_boxed("no box") is None and last_boxed("\\boxed{unclosed") is None
    assert (
        extract_math_answer("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.") == "\\frac{1}{2}"
    )
    assert extract_math_answer("nothing") is None and not math_equal(None, "1")
    assert (
        normalize_math_answer("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]")
        == "[\\frac{\\pi^2}{8},\\frac{5\\pi^2}{4}]"
    )


# ----------------------------------------------------------------------------- files and registry errors


def test_malformed_and_missing_files(tmp_path):
    scorer = FakeScorer()
    with pytest.raises(DataError, match=r"hellaswag_val.jsonl: file not found; expected JSON Lines with fields"):
        run_tasks(scorer, "hellaswag", data_dir=tmp_path, progress=False)
    bad = tmp_path / "lambada/lambada_openai.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"context": "a", "continuation": "b"}\n\n{"context": "a", \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"lambada_openai.jsonl:3: malformed JSON"):
        run_tasks(scorer, "lambada", data_dir=tmp_path, progress=False)
    bad.write_text('{"context": "a"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"lambada_openai.jsonl:1: missing field 'continuation'"):
        run_tasks(scorer, "lambada", data_dir=tmp_path, progress=False)
    _write_jsonl(
        tmp_path / "arc/arc_easy_val.jsonl",
        [{"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"}],
    )
    with pytest.raises(DataError, match=r"arc_easy_val.jsonl:1: answerKey 'B' not among"):
        run_tasks(scorer, "arc_easy", data_dir=tmp_path, progress=False)
    _cmmlu_csv(tmp_path / "cmmlu/test/x.csv", [("q", "a", "b", "c", "d", "E")])
    with pytest.raises(DataError, match=r"x.csv:2: Answer 'E'"):
        run_tasks(scorer, "cmmlu", data_dir=tmp_path, progress=False)
    (tmp_path / "gsm8k").mkdir()
    _write_jsonl(tmp_path / "gsm8k/test.jsonl", [{"question": "q", "answer": "no marker"}])
    with pytest.raises(DataError, match="'#### <number>'"):
        run_tasks(scorer, "gsm8k", data_dir=tmp_path, progress=False)
    with pytest.raises(DataError, match="no .jsonl files"):
        run_tasks(scorer, "blimp", data_dir=tmp_path, progress=False)


def test_registry_and_argument_errors(tmp_path):
    assert set(TASKS) == {"hellaswag", "arc_easy", "arc_challenge", "cmmlu", "lambada", "blimp", "gsm8k", "math500"}
    with pytest.raises(ConfigError, match="unknown task 'hellaswg'"):
        run_tasks(FakeScorer(), "hellaswg", data_dir=tmp_path)
    with pytest.raises(DataError, match="data directory not found"):
        run_tasks(FakeScorer(), "blimp", data_dir=tmp_path / "nope")
    with pytest.raises(ConfigError):
        run_tasks(FakeScorer(), "blimp", data_dir=tmp_path, limit=0)


# ----------------------------------------------------------------------------- the eval verb


def test_evaluate_function_and_json_output(tmp_path, tok):
    from smallinit.commands import evaluate as verb

    _write_jsonl(tmp_path / "lambada/lambada_openai.jsonl", [{"context": "Say", "continuation": "yes"}])
    res = verb.evaluate(ScriptLM({"Say": " yes"}), tok, "lambada", data_dir=tmp_path, batch_size=2, progress=False)
    assert res["tasks"]["lambada"]["metrics"]["acc"] == 1.0 and res["config"]["batch_size"] == 2
    out = tmp_path / "sub" / "res.json"
    res["tasks"]["lambada"]["metrics"]["weird"] = float("inf")
    verb.write_json_atomic(out, res)
    back = json.loads(out.read_text())
    assert back["tasks"]["lambada"]["metrics"]["acc"] == 1.0 and back["tasks"]["lambada"]["metrics"]["weird"] is None
    assert [p.name for p in out.parent.iterdir()] == ["res.json"]  # no temporary left behind
    import argparse

    p = argparse.ArgumentParser()
    verb.add_arguments(p)
    a = p.parse_args(["run1", "--tasks", "blimp,lambada", "--limit", "5", "--shots", "2", "--out", "r.json"])
    assert (a.ckpt, a.tasks, a.limit, a.shots, a.batch_size, a.data_dir) == ("run1", "blimp,lambada", 5, 2, 16, None)


# ----------------------------------------------------------------------------- real shared data


@pytest.fixture(scope="module")
def shared():
    root = shared_data_dir()
    if root is None:
        pytest.skip("shared benchmark data not present")
    return root


def test_shared_data_loaders_parse_real_files(shared):
    from smallinit.eval import blimp, generation, lambada
    from smallinit.eval import multiple_choice as mc

    counts = {
        "hellaswag": len(mc.load_hellaswag(shared / mc.HELLASWAG_FILE)),
        "arc_easy": len(mc.load_arc(shared / mc.ARC_FILES["arc_easy"])),
        "arc_challenge": len(mc.load_arc(shared / mc.ARC_FILES["arc_challenge"])),
        "lambada": len(lambada.load_lambada(shared / lambada.LAMBADA_FILE)),
        "gsm8k": len(generation.load_gsm8k(shared / generation.GSM8K_FILE)),
        "math500": len(generation.load_math500(shared / generation.MATH500_FILE)),
    }
    assert counts == {
        "hellaswag": 10042,
        "arc_easy": 570,
        "arc_challenge": 299,
        "lambada": 5153,
        "gsm8k": 1319,
        "math500": 500,
    }
    cm = mc.load_cmmlu(shared / mc.CMMLU_DIR)
    assert len(cm) == 67 and all(dev is not None and len(dev) == 5 for _, dev in cm.values())
    bl = blimp.load_blimp(shared / blimp.BLIMP_DIR)
    assert len(bl) == 67 and all(len(v) == 1000 for v in bl.values())
    # MATH500: the gold answer equals the solution's last \boxed{} under our normalization
    items = generation.load_math500(shared / generation.MATH500_FILE)
    rows = [json.loads(line) for line in (shared / generation.MATH500_FILE).read_text().splitlines()]
    assert sum(math_equal(last_boxed(r["solution"]), it.gold) for r, it in zip(rows, items)) == 500


def test_shared_data_all_tasks_run_with_a_random_tiny_model(shared, tok):
    scorer = LMScorer(CausalMeanLM(max_seq_len=64), tok, batch_size=32)
    out = run_tasks(scorer, list(TASKS), data_dir=shared, limit=3, max_gen_toks=4, progress=False)
    for name in TASKS:
        m = out["tasks"][name]["metrics"]
        key = "exact_match" if name in ("gsm8k", "math500") else "acc"
        assert 0.0 <= m[key] <= 1.0, name
    assert out["tasks"]["blimp"]["metrics"]["n"] == 67 * 3 and out["tasks"]["cmmlu"]["metrics"]["n"] == 67 * 3
    assert out["tasks"]["hellaswag"]["metrics"]["n"] == 3 and out["tasks"]["gsm8k"]["metrics"]["shots"] == 5
    assert math.isfinite(out["tasks"]["lambada"]["metrics"]["ppl"])
    assert all(len(r["generation"]) <= 4 * 4 for r in out["tasks"]["gsm8k"]["records"])  # <= 4 tokens of <= 4 bytes


def test_eval_verb_end_to_end_with_a_stub_checkpoint_loader(tmp_path, tok, monkeypatch, capsys):
    import sys

    from smallinit import cli

    _write_jsonl(
        tmp_path / "data/lambada/lambada_openai.jsonl",
        [{"context": "Say", "continuation": "yes"}, {"context": "Say it", "continuation": "no"}],
    )
    loaded = []
    fake = SimpleNamespace(
        load_checkpoint=lambda p: loaded.append(p) or ScriptLM({"Say": " yes"}), load_run_tokenizer=lambda p: tok
    )
    monkeypatch.setitem(sys.modules, "smallinit.runs.checkpoint", fake)
    out = tmp_path / "res.json"
    rc = cli.main(
        [
            "eval",
            "RUN",
            "--tasks",
            "lambada",
            "--data-dir",
            str(tmp_path / "data"),
            "--limit",
            "1",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0 and loaded == ["RUN"]
    res = json.loads(out.read_text())
    assert res["checkpoint"] == "RUN" and res["tasks"]["lambada"]["metrics"]["acc"] == 1.0
    assert res["tasks"]["lambada"]["metrics"]["n"] == 1
    assert "| lambada | acc | 1.0000 |" in capsys.readouterr().out
    rc = cli.main(["eval", "RUN", "--tasks", "nope", "--data-dir", str(tmp_path / "data"), "--out", str(out)])
    assert rc == 2 and "error: unknown task 'nope'" in capsys.readouterr().err
    assert loaded == ["RUN"]  # a bad task name fails before the model is loaded


def test_task_files_are_read_up_front_and_names_must_differ(tmp_path):
    """A bad task file fails in parse_tasks (before a model is loaded); two files reporting as one name are refused
    (one result silently replaced the other); YAML-only runs need no benchmark data folder."""
    from smallinit.core.errors import ConfigError
    from smallinit.eval.tasks import needs_data_dir, parse_tasks

    _write_jsonl(tmp_path / "quiz.jsonl", [{"q": "x", "A": "a", "B": "b", "answer": "A"}])
    (tmp_path / "sub").mkdir()
    for f in (tmp_path / "ok.yaml", tmp_path / "sub" / "ok.yaml"):
        f.write_text("file: ../quiz.jsonl\nquestion: '{q}'\nchoices: [A, B]\nlabel: answer\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="both report as 'ok'"):
        parse_tasks([str(tmp_path / "ok.yaml"), str(tmp_path / "sub" / "ok.yaml")])
    (tmp_path / "bad.yaml").write_text("file: quiz.jsonl\nquestion: '{q'\nchoices: [A]\nlabel: answer\n")
    with pytest.raises(DataError, match="bad.yaml: template"):
        parse_tasks([str(tmp_path / "bad.yaml")])
    assert not needs_data_dir([str(tmp_path / "ok.yaml")]) and needs_data_dir(["hellaswag", str(tmp_path / "ok.yaml")])
