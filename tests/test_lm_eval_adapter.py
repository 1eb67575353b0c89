"""The lm-evaluation-harness adapter: a local 20-item multiple-choice task scored through the harness gives the
same per-item log-likelihoods and accuracy as `smallinit eval` on the same items (skipped without lm-eval)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from smallinit.commands.evaluate import evaluate  # noqa: E402
from smallinit.config import RunConfig  # noqa: E402
from smallinit.data.tokenizer import byte_tokenizer  # noqa: E402
from smallinit.model import ModelConfig, Transformer  # noqa: E402
from smallinit.runs.checkpoint import load_checkpoint, load_run_tokenizer, save_checkpoint  # noqa: E402

WORDS = (
    "apple river stone cloud garden silver window ocean pencil forest candle mirror tiger lemon "
    "bridge castle violin planet copper meadow"
).split()
N_ITEMS = 20


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    """A tiny run (γ = 0.5 so choices get clearly different scores), a 20-item JSONL file, the same task as an
    lm-eval YAML (dataset_path: json) and as a smallinit YAML task."""
    root = tmp_path_factory.mktemp("lmeval")
    cfg = ModelConfig.from_size(
        "tiny", vocab_size=257, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=128, gamma=0.5
    )
    torch.manual_seed(0)
    model = Transformer(cfg)
    run = root / "run"
    save_checkpoint(run, 0, model.state_dict(), {}, {}, RunConfig(model=cfg).to_dict(), tied_keys=("lm_head.weight",))
    byte_tokenizer().save(str(run / "tokenizer.json"))
    rng = random.Random(0)
    items = root / "items.jsonl"
    with open(items, "w") as f:
        for i in range(N_ITEMS):
            f.write(
                json.dumps(
                    {
                        "question": f"Which word is number {i}?",
                        "choices": rng.sample(WORDS, 4),
                        "label": rng.randrange(4),
                    }
                )
                + "\n"
            )
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {items}\n  cache_dir: {root / 'hf_cache'}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        "doc_to_choice: choices\n"
        "doc_to_target: label\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    ours = root / "tiny_mc.yaml"
    ours.write_text(
        f'name: tiny_mc\nfile: {items}\nquestion: "Question: {{question}}\\nAnswer:"\nchoices: choices\nlabel: label\n'
    )
    return {"root": root, "run": run, "tasks": tasks, "ours": ours}


@pytest.fixture(scope="module")
def ours(setup) -> dict:
    """`smallinit eval`'s scoring of the task (the function behind the CLI verb)."""
    res = evaluate(
        load_checkpoint(setup["run"]),
        load_run_tokenizer(setup["run"]),
        [str(setup["ours"])],
        data_dir=setup["root"],
        batch_size=4,
        progress=False,
    )
    return res["tasks"]["tiny_mc"]


def test_harness_agrees_with_smallinit_eval(setup, ours):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import smallinit.eval.lm_eval_adapter  # noqa: F401  (registers "smallinit")

    tm = TaskManager(include_path=str(setup["tasks"]), include_defaults=False)
    res = simple_evaluate(
        model="smallinit",
        model_args=f"path={setup['run']}",
        tasks=["tiny_mc"],
        task_manager=tm,
        device="cpu",
        batch_size=3,
        log_samples=True,
    )
    samples = sorted(res["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    assert len(samples) == N_ITEMS == ours["metrics"]["n"]
    preds = []
    for s, rec in zip(samples, ours["records"]):
        ll = [float(r[0]) for r in s["filtered_resps"]]
        assert ll == pytest.approx(rec["loglikelihoods"], abs=1e-5)
        assert max(ll) - min(ll) > 1e-2  # the choices are told apart, so agreement on argmax is meaningful
        preds.append(int(max(range(4), key=lambda j: ll[j])))
        assert preds[-1] == rec["pred"]
    assert res["results"]["tiny_mc"]["acc,none"] == pytest.approx(ours["metrics"]["acc"])
    assert len(set(preds)) > 1  # not one constant answer


def test_adapter_rolling_and_generation_use_the_scorer(setup):
    from lm_eval.api.instance import Instance

    from smallinit.eval import LMScorer
    from smallinit.eval.lm_eval_adapter import SmallinitLM

    lm = SmallinitLM.create_from_arg_string(
        f"path={setup['run']},max_gen_toks=5", {"batch_size": "auto", "device": None}
    )
    assert lm.scorer.batch_size == 16 and lm.scorer.max_gen_toks == 5
    scorer = LMScorer(load_checkpoint(setup["run"]), load_run_tokenizer(setup["run"]), batch_size=2)
    texts = ["the quick brown fox", "x" * 300]  # the second spans several 128-token windows
    reqs = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
    got = lm.loglikelihood_rolling(reqs, disable_tqdm=True)
    assert got == pytest.approx(scorer.loglikelihood_rolling(texts), abs=1e-4)
    assert all(isinstance(x, float) and x < 0 for x in got)
    gens = [
        Instance("generate_until", {}, ("Question: 2+2=", {"until": ["\n"], "max_gen_toks": 7, "temperature": 0}), 0)
    ]
    out = lm.generate_until(gens, disable_tqdm=True)
    assert out == scorer.generate_until([("Question: 2+2=", {"until": ["\n"], "max_gen_toks": 7})])
    assert 0 < len(out[0]) <= 7 and "\n" not in out[0]  # one byte token decodes to at most one character


def test_adapter_argument_errors(setup):
    from smallinit.eval.lm_eval_adapter import SmallinitLM, _batch_size

    assert _batch_size("8") == 8 and _batch_size("auto:4") == 16
    with pytest.raises(ValueError, match="batch_size"):
        _batch_size("0")
    with pytest.raises(ValueError, match="eot_token"):
        SmallinitLM(path=str(setup["run"]), eot_token="</s>")
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            lm = SmallinitLM(path=str(setup["run"]), device="cuda:0")
        assert lm.scorer.device.type == "cpu"


@pytest.mark.slow
def test_cli_command_line_works_offline(setup, ours):
    """The documented command line, in a fresh process with the network switched off for HF libraries."""
    out = setup["root"] / "cli_out"
    env = dict(
        os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false"
    )
    cmd = [
        sys.executable,
        "-m",
        "smallinit.eval.lm_eval_adapter",
        "--model",
        "smallinit",
        "--model_args",
        f"path={setup['run']}",
        "--tasks",
        "tiny_mc",
        "--include_path",
        str(setup["tasks"]),
        "--device",
        "cpu",
        "--batch_size",
        "8",
        "--output_path",
        str(out),
        "--local_tasks_only",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tiny_mc" in r.stdout and "acc" in r.stdout
    results = [json.loads(p.read_text()) for p in out.rglob("results_*.json")]
    assert len(results) == 1
    assert results[0]["results"]["tiny_mc"]["acc,none"] == pytest.approx(ours["metrics"]["acc"])


def test_lm_eval_hf_model_on_the_gated_export_agrees_with_smallinit_eval(setup, ours, monkeypatch):
    """lm-eval's own ``hf`` model (HFLM) on the `smallinit export` of the gated run (its code in the folder,
    trust_remote_code=True) gives `smallinit eval`'s per-item log-likelihoods and accuracy. Offline."""
    pytest.importorskip("accelerate")
    import lm_eval.models.huggingface  # noqa: F401  (registers "hf")
    import transformers.dynamic_module_utils as dmu
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from smallinit.interop.hf import export_hf

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    # the remote code is copied into this session's temporary cache, not ~/.cache/huggingface/modules
    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(Path(os.environ["SMALLINIT_CACHE"]) / "hf_modules"))
    assert load_checkpoint(setup["run"]).config.gate == "elementwise"
    hf = export_hf(setup["run"], setup["root"] / "hf_gated", force=True)
    tm = TaskManager(include_path=str(setup["tasks"]), include_defaults=False)
    res = simple_evaluate(
        model="hf",
        model_args=f"pretrained={hf},trust_remote_code=True,dtype=float32",
        tasks=["tiny_mc"],
        task_manager=tm,
        device="cpu",
        batch_size=4,
        log_samples=True,
        bootstrap_iters=0,
    )
    torch.set_num_threads(1)  # lm-eval may have changed it
    samples = sorted(res["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    assert len(samples) == N_ITEMS == ours["metrics"]["n"]
    for s, rec in zip(samples, ours["records"]):
        assert [float(r[0]) for r in s["filtered_resps"]] == pytest.approx(rec["loglikelihoods"], abs=1e-4)
    assert res["results"]["tiny_mc"]["acc,none"] == pytest.approx(ours["metrics"]["acc"])
    assert res["results"]["tiny_mc"]["acc_norm,none"] == pytest.approx(ours["metrics"]["acc_norm"])
