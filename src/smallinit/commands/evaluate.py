"""``smallinit eval CKPT --tasks T1,T2 --out FILE.json``: benchmark a checkpoint on local files.

CKPT is a run directory or a checkpoint directory. Tasks: hellaswag, arc_easy, arc_challenge,
cmmlu, lambada, blimp, gsm8k, math500, or a path to a YAML multiple-choice task (formats in
``smallinit.eval``). Writes the results JSON atomically and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from smallinit.core.io import atomic_write_text, json_safe

HELP = "evaluate a checkpoint on benchmarks (HellaSwag, ARC, CMMLU, LAMBADA, BLiMP, GSM8K, MATH500, YAML tasks)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ckpt", help="run directory or checkpoint directory")
    p.add_argument(
        "--tasks",
        required=True,
        help="comma-separated: hellaswag,arc_easy,arc_challenge,cmmlu,lambada,blimp,gsm8k,math500 "
        "or paths to YAML multiple-choice tasks",
    )
    p.add_argument("--data-dir", default=None, help="benchmark folder (default: ../shared/data or $SMALLINIT_DATA)")
    p.add_argument(
        "--limit", type=int, default=None, help="first N items per task (per paradigm/subject for BLiMP/CMMLU)"
    )
    p.add_argument("--shots", type=int, default=None, help="few-shot examples (default: 0; GSM8K 5, MATH500 4)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    p.add_argument(
        "--max-gen-toks",
        type=int,
        default=None,
        help="new-token limit for generation tasks (default: GSM8K 256, MATH500 512)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument("--no-records", action="store_true", help="omit per-item records from the JSON")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--out", required=True, help="results JSON file")


def evaluate(
    model: Any,
    tokenizer: Any,
    tasks: str | list[str],
    *,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    shots: int | None = None,
    batch_size: int = 16,
    device: str = "cpu",
    max_gen_toks: int | None = None,
    progress: bool = True,
    records: bool = True,
) -> dict[str, Any]:
    """Score ``model`` (``model(idx) -> logits``) with ``tokenizer`` on ``tasks``; the results dict of
    ``smallinit.eval.run_tasks`` plus timing."""
    from smallinit.eval import LMScorer, run_tasks

    scorer = LMScorer(model, tokenizer, batch_size=batch_size, device=device)
    t0 = time.perf_counter()
    results = run_tasks(
        scorer,
        tasks,
        data_dir=data_dir,
        limit=limit,
        shots=shots,
        progress=progress,
        max_gen_toks=max_gen_toks,
        records=records,
    )
    results["config"].update({"batch_size": batch_size, "device": str(device), "max_seq_len": scorer.max_length})
    results["seconds"] = round(time.perf_counter() - t0, 3)
    return results


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temporary file + rename); non-finite floats become null (strict JSON)."""
    atomic_write_text(path, json.dumps(json_safe(obj), indent=1, ensure_ascii=False) + "\n")


def _device(name: str) -> str:
    from smallinit.core.device import resolve_device

    return str(resolve_device(name))


def run(args: argparse.Namespace) -> int:
    from smallinit.core.errors import ConfigError
    from smallinit.core.outputs import check_out_file
    from smallinit.eval import parse_tasks, results_markdown
    from smallinit.eval.tasks import needs_data_dir, resolve_data_dir
    from smallinit.runs.checkpoint import load_checkpoint, load_run_tokenizer

    # every check before the work: the output file (not a folder, not the input, writable), counts, tasks
    check_out_file(args.out, "eval", inputs=[args.ckpt])
    for name in ("limit", "shots", "batch_size", "max_gen_toks"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "shots" else 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {0 if name == 'shots' else 1}, got {v}")
    tasks = parse_tasks(args.tasks)  # fail on a bad task name, task file or data dir before loading the model
    if needs_data_dir(tasks):
        resolve_data_dir(args.data_dir)
    model = load_checkpoint(args.ckpt)
    tokenizer = load_run_tokenizer(args.ckpt)
    results = evaluate(
        model,
        tokenizer,
        tasks,
        data_dir=args.data_dir,
        limit=args.limit,
        shots=args.shots,
        batch_size=args.batch_size,
        device=_device(args.device),
        max_gen_toks=args.max_gen_toks,
        progress=not args.no_progress,
        records=not args.no_records,
    )
    results["checkpoint"] = str(args.ckpt)
    write_json_atomic(args.out, results)
    print(results_markdown(results))
    print(f"\nresults: {args.out}")
    return 0
