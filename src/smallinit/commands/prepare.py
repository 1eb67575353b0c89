"""``smallinit prepare INPUT... --out DIR``: text -> tokenizer.json, train.bin, val.bin, meta.json."""

from __future__ import annotations

import argparse
import shlex

HELP = "tokenize text corpora into memory-mapped train/val token files (+ tokenizer, meta.json)"

EPILOG = """\
INPUT forms: a text file; a directory (all .txt/.md files, recursively); FILE.jsonl (field --text-field);
FILE.parquet (column --text-field); builtin:stdlib (this Python's standard library sources, ~30 MB);
hf:NAME[:CONFIG][:SPLIT] (Hugging Face hub, online); hf:/path/to/dir[:SPLIT] (a save_to_disk dataset).
A text file is one document; a jsonl line, parquet row or dataset row is one document.
Text and jsonl files may be gzip, bzip2, xz or zstd compressed (detected by their first bytes; zstd needs
`pip install zstandard`). A file that is not text, or one read twice (given twice, or inside a given
directory too), is refused before any work: its validation text would also be trained on.

--weights: the total stays the corpus's natural token count N; source i gets N * w_i / sum(w) tokens,
by repeating its text (whole passes, then a random part) or subsampling it. Val takes about
val_fraction of each source's tokens (never more than its own unique text) and never repeats.

examples:
  smallinit prepare builtin:stdlib --out data/stdlib
  smallinit prepare en/ zh.jsonl --weights 0.7,0.3 --out data/bilingual --vocab-size 16384
"""


def _weights(s: str) -> list[float]:
    try:
        return [float(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {s!r}") from None


def _size(s: str) -> int:
    """An integer byte count ≥ 1; accepts suffixes K, M, G (powers of 1000)."""
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    try:
        n = int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1:].upper() in mult else int(s)
    except (ValueError, OverflowError):  # OverflowError: inf, 1e999K
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a byte count >= 1 like 5000000 or 5M, got {s!r}")
    return n


def _seed(s: str) -> int:
    """A seed: an integer in [0, 2^63), as ``train.seed``."""
    try:
        n = int(s)
    except ValueError:
        n = -1
    if not 0 <= n < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2^63), got {s!r}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="corpora to read (see below)")
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output directory: new or empty (a previous prepare is replaced only with --force)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace DIR if it holds a previous prepare (never a folder that is, holds or lies inside "
        "an INPUT); runs trained on the old data would no longer match it",
    )
    p.add_argument(
        "--tokenizer", default="bpe", help="bpe (train byte-level BPE), byte, or a tokenizer.json path (default: bpe)"
    )
    p.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size (default: 8192)")
    p.add_argument(
        "--val-fraction", type=float, default=0.01, help="share of each source held out for val (default: 0.01)"
    )
    p.add_argument(
        "--weights",
        type=_weights,
        default=None,
        metavar="W1,W2,...",
        help="token share of each INPUT (repeat or subsample to reach it)",
    )
    p.add_argument("--text-field", default="text", help="jsonl field / parquet or dataset column (default: text)")
    p.add_argument(
        "--max-bytes",
        type=_size,
        default=None,
        metavar="N",
        help="read at most N bytes of UTF-8 text per source (e.g. 5M; the text is cut there, at a character boundary)",
    )
    p.add_argument(
        "--bpe-sample-bytes",
        type=_size,
        default=None,
        metavar="N",
        help="text used to train the BPE, over all sources (default: 100M)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the val/mixing selection (default: 0)")
    p.add_argument("--workers", type=int, default=2, help="encoding threads (default: 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    import warnings

    from smallinit.data import DataWarning, prepare_corpus
    from smallinit.data.prepare import BPE_SAMPLE_BYTES

    warnings.simplefilter("always", DataWarning)  # shown as `warning:` lines by the CLI (cli.main)
    meta = prepare_corpus(
        args.inputs,
        args.out,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        val_fraction=args.val_fraction,
        weights=args.weights,
        text_field=args.text_field,
        seed=args.seed,
        num_workers=args.workers,
        progress=not args.no_progress,
        max_bytes=args.max_bytes,
        bpe_sample_bytes=args.bpe_sample_bytes or BPE_SAMPLE_BYTES,
        command=command_line(args),
        force=args.force,
    )
    print(summary(meta, args.out))
    return 0


def command_line(args: argparse.Namespace) -> str:
    """The equivalent command line, every option spelled out (recorded in meta.json)."""
    argv = [
        "smallinit",
        "prepare",
        *args.inputs,
        "--out",
        str(args.out),
        "--tokenizer",
        args.tokenizer,
        "--vocab-size",
        str(args.vocab_size),
        "--val-fraction",
        str(args.val_fraction),
        "--text-field",
        args.text_field,
        "--seed",
        str(args.seed),
    ]
    if args.weights is not None:
        argv += ["--weights", ",".join(f"{w:g}" for w in args.weights)]
    if args.max_bytes is not None:
        argv += ["--max-bytes", str(args.max_bytes)]
    if args.bpe_sample_bytes is not None:
        argv += ["--bpe-sample-bytes", str(args.bpe_sample_bytes)]
    return shlex.join(argv)


def summary(meta: dict, out: str) -> str:
    """A short table: tokens per split and source, chars/token, throughput."""
    t = meta["tokens"]
    lines = [
        f"wrote {out}: vocab {meta['vocab_size']} ({meta['tokenizer']['kind']}), {meta['dtype']}, "
        f"train {t['train']:,} tokens, val {t['val']:,} tokens",
        f"  {'source':<24} {'train':>12} {'val':>10} {'share':>6} {'repeat':>6} {'chars/tok':>9} {'MB':>8}",
    ]
    for s in meta["sources"]:
        lines.append(
            f"  {s['name'][:24]:<24} {s['tokens']['train']:>12,} {s['tokens']['val']:>10,} {s['share']:>6.3f} "
            f"{s['repeat']:>6.2f} {s['chars_per_token']:>9.3f} {s['bytes'] / 1e6:>8.2f}"
        )
    tm = meta["timing_s"]
    lines.append(
        f"  encode {meta['text_bytes'] / 1e6:.1f} MB at {meta['encode_mb_per_s']:.2f} MB/s; "
        f"tokenizer {tm['tokenizer']:.1f} s, total {tm['total']:.1f} s"
    )
    return "\n".join(lines)
