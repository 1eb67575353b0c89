"""smallinit init-report --config PRESET [overrides]: print what the γ-rule draws for every parameter."""

from __future__ import annotations

import argparse

HELP = "show the γ-rule initialization (target and measured std per parameter) of a model config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="small", help="preset name or YAML (default: small)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="e.g. model.gamma=0.5")


def run(args: argparse.Namespace) -> int:
    import torch

    from smallinit import Transformer
    from smallinit.train import load_config

    cfg = load_config(args.config, args.overrides)
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    print(model.init_report)
    n, ne = model.num_params(), model.num_params(non_embedding=True)
    print(f"\nparameters: {n:,} total, {ne:,} non-embedding, {model.num_params(active=True):,} active; "
          f"max |measured/target − 1| = {model.init_report.max_rel_error():.2%}")
    return 0
