"""Tokenization throughput and chars/token per language: byte-level BPE 8192 vs raw bytes.

Runs the real pipeline (``smallinit.data.prepare_corpus``) on the bilingual sample in the shared data
folder and reports, per language:

- MB/s: UTF-8 text bytes / wall time of the encode step for that language's sources (reading,
  piece cutting, ``encode_batch`` on ``--workers`` threads, writing tokens); also MB per CPU-second
  (process CPU time over all threads), which is what to compare when the machine is shared;
- chars/token: Unicode characters / tokens, separators excluded (higher = shorter sequences).

Languages: English = tinyshakespeare + gutenberg-nltk-tok (17 books); Chinese = zh-uer-samples
CLUECorpusSmall_sampled; en-zh = zh-uer-samples news-commentary pairs (English<TAB>Chinese lines).
The BPE is trained on all of it (one bilingual tokenizer), as ``smallinit prepare`` does.

    python benchmarks/tokenize_throughput.py [--data DIR] [--vocab-size 8192] [--workers 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def corpus_files(root: Path) -> dict[str, list[Path]]:
    en = [root / "tinyshakespeare" / "input.txt"] + sorted((root / "gutenberg-nltk-tok").glob("*.txt"))
    return {
        "English": en,
        "Chinese": [root / "zh-uer-samples" / "CLUECorpusSmall_sampled.txt"],
        "en-zh pairs": [root / "zh-uer-samples" / "news-commentary-v13-en-zh_sampled.txt"],
    }


def run(tokenizer: str, langs: dict[str, list[Path]], vocab_size: int, workers: int) -> dict:
    from smallinit.data import prepare_corpus

    inputs = [str(f) for files in langs.values() for f in files]
    lang_of = {str(f): lang for lang, files in langs.items() for f in files}
    tmp = Path(tempfile.mkdtemp(prefix="smallinit-bench-"))
    try:
        meta = prepare_corpus(
            inputs,
            tmp / "out",
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            val_fraction=0.0,
            num_workers=workers,
            progress=False,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per: dict[str, dict] = {}
    for s in meta["sources"]:
        d = per.setdefault(
            lang_of[s["input"]], {"bytes": 0, "chars": 0, "tokens": 0, "encode_s": 0.0, "encode_cpu_s": 0.0}
        )
        d["bytes"] += s["bytes"]
        d["chars"] += s["chars"]
        d["tokens"] += s["tokens"]["natural"] - s["documents"]
        d["encode_s"] += s["encode_s"]
        d["encode_cpu_s"] += s["encode_cpu_s"]
    for d in per.values():
        d["mb_per_s"] = d["bytes"] / 1e6 / d["encode_s"]
        d["mb_per_cpu_s"] = d["bytes"] / 1e6 / d["encode_cpu_s"]
        d["chars_per_token"] = d["chars"] / d["tokens"]
        d["bytes_per_token"] = d["bytes"] / d["tokens"]
    return {
        "tokenizer": tokenizer,
        "vocab_size": meta["vocab_size"],
        "tokenizer_train_s": meta["timing_s"]["tokenizer"],
        "encode_s": meta["timing_s"]["encode"],
        "total_s": meta["timing_s"]["total"],
        "mb_per_s": meta["encode_mb_per_s"],
        "languages": per,
    }


def main(argv: list[str] | None = None) -> int:
    from smallinit.core.paths import shared_data_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (default: ../shared/data)")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    root = args.data or shared_data_dir()
    if root is None:
        print("shared data folder not found (set SMALLINIT_DATA); nothing to measure", file=sys.stderr)
        return 1
    langs = corpus_files(root)
    missing = [str(f) for files in langs.values() for f in files if not f.is_file()]
    if missing:
        print(f"missing files: {missing}", file=sys.stderr)
        return 1
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.workers))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    t0 = time.time()
    results = [run(kind, langs, args.vocab_size, args.workers) for kind in ("bpe", "byte")]
    print(
        f"# tokenization on {root} ({os.cpu_count()} CPUs, {args.workers} encode threads, "
        f"load average {load:.1f} at start, {time.time() - t0:.0f} s)\n"
    )
    print("| language | MB | tokenizer | vocab | MB/s (wall) | MB per CPU-s | chars/token | bytes/token |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for lang in langs:
        for r in results:
            d = r["languages"][lang]
            print(
                f"| {lang} | {d['bytes'] / 1e6:.2f} | {r['tokenizer']} | {r['vocab_size']} | {d['mb_per_s']:.2f} | "
                f"{d['mb_per_cpu_s']:.2f} | "
                f"{d['chars_per_token']:.3f} | {d['bytes_per_token']:.3f} |"
            )
    for r in results:
        print(
            f"\n{r['tokenizer']}: all text {r['mb_per_s']:.2f} MB/s encode; tokenizer build/train "
            f"{r['tokenizer_train_s']:.1f} s; prepare total {r['total_s']:.1f} s"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
