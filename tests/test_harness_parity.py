"""Harness parity: HellaSwag and ARC-Easy scored through ``smallinit eval``'s library path and through
lm-evaluation-harness's own ``hf`` model (HFLM) on the Hugging Face export of the same checkpoint must give
identical acc and acc_norm, item by item.

The model is the `tiny` config trained for a few steps on the session's small corpus (seed fixed), exported with
``smallinit export``; lm-eval reads the same local JSON Lines files (its own task configs, ``dataset_path: json``)
with no network. Skips when ../shared/data (the benchmark files) or lm-eval/accelerate are absent.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import tiny_overrides

from smallinit.core.paths import shared_data_dir

N_ITEMS = 200
DATA = shared_data_dir()

pytestmark = pytest.mark.skipif(
    DATA is None
    or not (DATA / "hellaswag/hellaswag_val.jsonl").is_file()
    or not (DATA / "arc/arc_easy_val.jsonl").is_file(),
    reason="benchmark files (../shared/data/hellaswag, arc) absent",
)


def _harness_tasks(cache_dir: str) -> list[dict]:
    """lm-eval's own hellaswag and arc_easy task configs, pointed at the local files (no download)."""
    from lm_eval.tasks.hellaswag.utils import process_docs

    metrics = [
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
    ]

    def local(path):
        return {
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"validation": str(path)}, "cache_dir": cache_dir},
            "validation_split": "validation",
            "output_type": "multiple_choice",
            "metric_list": metrics,
        }

    hs = {
        "task": "hellaswag_local",
        **local(DATA / "hellaswag/hellaswag_val.jsonl"),
        "process_docs": process_docs,
        "doc_to_text": "{{query}}",
        "doc_to_target": "{{label}}",
        "doc_to_choice": "choices",
    }
    arc = {
        "task": "arc_easy_local",
        **local(DATA / "arc/arc_easy_val.jsonl"),
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{choices.label.index(answerKey)}}",
        "doc_to_choice": "{{choices.text}}",
    }
    return [hs, arc]


@pytest.mark.timeout(300)
def test_acc_and_acc_norm_match_lm_eval_hf(tmp_path, token_dir, monkeypatch):
    pytest.importorskip("accelerate")
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import torch
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from smallinit.cli import main as cli
    from smallinit.commands.evaluate import evaluate
    from smallinit.runs.checkpoint import load_checkpoint, load_run_tokenizer

    run, hf = tmp_path / "run", tmp_path / "hf"
    over = tiny_overrides(
        token_dir, **{"train.max_steps": 10, "model.max_seq_len": 1024, "model.gate": "none", "train.seed": 7}
    )
    assert cli(["train", "--config", "tiny", "--out", str(run), *over]) == 0
    assert cli(["export", str(run), "--to", "hf", str(hf)]) == 0

    t0 = time.perf_counter()
    ours = evaluate(
        load_checkpoint(run),
        load_run_tokenizer(run),
        ["hellaswag", "arc_easy"],
        data_dir=DATA,
        limit=N_ITEMS,
        batch_size=32,
        device="cpu",
        progress=False,
    )

    t_ours = time.perf_counter() - t0
    lm = HFLM(pretrained=str(hf), device="cpu", batch_size=32, dtype="float32")
    # include_defaults=False: the tasks are given whole; indexing lm-eval's ~10k task YAMLs would take a minute
    theirs = simple_evaluate(
        model=lm,
        tasks=_harness_tasks(str(tmp_path / "hf_datasets")),
        limit=N_ITEMS,
        task_manager=TaskManager(include_defaults=False),
        log_samples=True,
        bootstrap_iters=0,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )
    t_theirs = time.perf_counter() - t0 - t_ours
    torch.set_num_threads(1)  # lm-eval may have changed it
    figures = {"seconds": {"smallinit": round(t_ours, 1), "lm_eval_hf": round(t_theirs, 1)}}
    for ours_name, their_name in (("hellaswag", "hellaswag_local"), ("arc_easy", "arc_easy_local")):
        o = ours["tasks"][ours_name]
        t = theirs["results"][their_name]
        samples = sorted(theirs["samples"][their_name], key=lambda s: s["doc_id"])
        assert o["metrics"]["n"] == len(samples) == N_ITEMS
        # item by item: the same prediction under both rules
        assert [r["correct"] for r in o["records"]] == [bool(s["acc"]) for s in samples]
        assert [r["correct_norm"] for r in o["records"]] == [bool(s["acc_norm"]) for s in samples]
        assert o["metrics"]["acc"] == pytest.approx(t["acc,none"], abs=1e-12)
        assert o["metrics"]["acc_norm"] == pytest.approx(t["acc_norm,none"], abs=1e-12)
        figures[ours_name] = {
            "ours_acc": o["metrics"]["acc"],
            "ours_acc_norm": o["metrics"]["acc_norm"],
            "ours_acc_bytes": o["metrics"]["acc_bytes"],
            "harness_acc": t["acc,none"],
            "harness_acc_norm": t["acc_norm,none"],
            "n": N_ITEMS,
        }
    out = os.environ.get("SMALLINIT_PARITY_OUT")
    if out:  # the README's figures come from this file
        with open(out, "w") as f:
            json.dump(figures, f, indent=2)
