"""``smallinit import-hf HF_DIR --out RUN_DIR``: a local Llama checkpoint as a smallinit run directory.

Reads config.json, safetensors weights (one file or shards with an index) and tokenizer.json, and
writes RUN_DIR with config.yaml, tokenizer.json, hf_config.json and a step-0 checkpoint that
``smallinit eval`` and ``load_checkpoint`` use. Settings our model cannot compute exactly (another
activation, biases, RoPE scaling, a head_dim other than hidden/heads) are refused with the reason.
Folders written by ``smallinit export`` (Llama or the gated layout) import back exactly.
"""

from __future__ import annotations

import argparse

HELP = "import a local Hugging Face Llama checkpoint folder into a run directory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hf_dir", metavar="HF_DIR", help="folder with config.json, *.safetensors and tokenizer.json")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to create")
    p.add_argument(
        "--max-seq-len",
        type=int,
        default=None,
        help="context length of the imported model (default: max_position_embeddings)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace RUN_DIR if it holds a previous run (never a folder that is, holds or lies inside HF_DIR)",
    )


def run(args: argparse.Namespace) -> int:
    from smallinit.interop.hf import import_hf

    out = import_hf(args.hf_dir, args.out, max_seq_len=args.max_seq_len, force=args.force)
    print(f"imported {args.hf_dir} -> {out}")
    return 0
