"""smallinit init-report --config CONFIG_OR_YAML [overrides]: print what the γ-rule draws for every parameter."""

from __future__ import annotations

import argparse

HELP = "show the γ-rule initialization (target and measured std per parameter) of a model config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", default="small", metavar="CONFIG_OR_YAML", help="a config name or a YAML file (default: small)"
    )
    p.add_argument("overrides", nargs="*", default=[], metavar="section.key=value", help="e.g. model.gamma=0.5")


def run(args: argparse.Namespace) -> int:
    import torch

    from smallinit.core.errors import ConfigError
    from smallinit.model import Transformer
    from smallinit.train import load_config
    from smallinit.train.loop import machine_memory

    cfg = load_config(args.config, args.overrides)
    n_params, have = cfg.model.num_params(), machine_memory(torch.device("cpu"))
    need = 4 * n_params
    if have is not None and need > have:  # the report draws every weight: refuse before a swap storm
        raise ConfigError(
            f"the model has {n_params:,} parameters ({need / 2**30:.1f} GiB in float32), "
            f"more than this machine's {have / 2**30:.1f} GiB of memory; `smallinit audit` reports "
            "the same init on a copy with fewer blocks"
        )
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    print(model.init_report)
    n, ne = model.num_params(), model.num_params(non_embedding=True)
    print(
        f"\nparameters: {n:,} total, {ne:,} non-embedding, {model.num_params(active=True):,} active; "
        f"max |measured/target − 1| = {model.init_report.max_rel_error():.2%}"
    )
    return 0
