"""smallinit anchor --gamma G [--steps N] [--seed S] --out DIR: the anchor-function reasoning probe."""

from __future__ import annotations

import argparse

HELP = "train and evaluate the anchor-function task (held-out anchor pairs: reasoning vs memorization)"

EPILOG = """\
Sequences of random tokens hold a key x and two anchors a1 a2 in {1,2,3,4}; the answer is x + s(a1) + s(a2)
with s = {1:+5, 2:+1, 3:-2, 4:-8}. The pairs (3,4) and (4,3) are never trained: a model that composes the
single-anchor rules answers them (x - 10, "inferential"); one that memorised pairs does not.

examples:
  smallinit anchor --gamma 1.0 --out out/anchor-g1
  smallinit anchor --gamma 0.5 --steps 3000 --seed 1 --out out/anchor-g05 --set d_model=128 --set n_layers=3
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (metrics.jsonl, result.json)")
    p.add_argument("--gamma", type=float, default=None, help="initialization exponent γ (default 1.0)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 2000)")
    p.add_argument("--seed", type=int, default=None, help="seed of data, init and order (default 0)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other setting of AnchorConfig (d_model, n_layers, n_heads, d_ff, batch_size, n_train, "
        "gate, norm_eps, weight_decay, held_out, threads, ...); repeatable",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from smallinit.config import parse_value
    from smallinit.core.errors import ConfigError
    from smallinit.experiments.anchor import ANSWER_KINDS, AnchorConfig, train_anchor

    kw = {}
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} must look like key=value")
        k, _, v = item.partition("=")
        kw[k.strip()] = parse_value(v)
    for k in ("gamma", "steps", "seed", "lr"):
        if getattr(args, k) is not None:
            kw[k] = getattr(args, k)
    cfg = AnchorConfig.from_dict(kw)
    log = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    r = train_anchor(cfg, args.out, log=log)
    f = r["final"]
    print(
        f"anchor γ={cfg.gamma:g} seed {cfg.seed}: in-distribution acc {f['in_acc']:.3f}, held-out-pair acc "
        f"{f['heldout_acc']:.3f} ({', '.join(f'{k} {v:.3f}' for k, v in f['heldout_acc_by_pair'].items())}); "
        f"{r['wall_time']:.1f}s → {args.out}"
    )
    print("held-out answers: " + ", ".join(f"{k} {f['answers'][k]:.3f}" for k in ANSWER_KINDS))
    return 0
