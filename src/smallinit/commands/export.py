"""``smallinit export RUN_DIR --to hf OUT_DIR [--ckpt STEP]``: a checkpoint as a Hugging Face folder.

Dense RMSNorm models without the attention gate become a ``LlamaForCausalLM`` folder that
``transformers`` loads offline; gated and MoE models become a ``SmallinitForCausalLM`` folder that carries
its own model code (``modeling_smallinit.py``, ``configuration_smallinit.py``, ``auto_map``), loaded with
``trust_remote_code=True`` (no ``transformers`` class computes them: see ``smallinit.interop.hf``); the gate is
folded into ``q_proj`` the way Qwen3-Next does it. LayerNorm models are refused. The folder is assembled
under a temporary name and renamed into place.
"""

from __future__ import annotations

import argparse

HELP = (
    "export a checkpoint to a Hugging Face folder (LlamaForCausalLM; gated/MoE models with their code, "
    "for trust_remote_code=True)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (latest good checkpoint) or checkpoint directory")
    p.add_argument("--to", choices=("hf",), default="hf", help="output format (only hf: Hugging Face transformers)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="folder to create")
    p.add_argument(
        "--ckpt", type=int, default=None, metavar="STEP", help="checkpoint step (default: the latest good one)"
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="weight dtype in model.safetensors (default float32)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace OUT_DIR if it holds a previous export (never a folder that is, holds or lies inside RUN_DIR)",
    )


def run(args: argparse.Namespace) -> int:
    from smallinit.interop.hf import export_hf

    out = export_hf(args.run_dir, args.out_dir, step=args.ckpt, dtype=args.dtype, force=args.force)
    print(f"exported {args.run_dir} -> {out}")
    return 0
