"""smallinit train --config CONFIG_OR_YAML --out RUN_DIR [section.key=value ...] | --resume RUN_DIR"""

from __future__ import annotations

import argparse

HELP = "pretrain a model: --config CONFIG_OR_YAML --out RUN_DIR [model.gamma=1.0 ...], or --resume RUN_DIR"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", metavar="CONFIG_OR_YAML", help="a config name (tiny, small, small-moe, 0.1b, ...) or a YAML file"
    )
    p.add_argument("--out", help="run directory to create")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last good checkpoint")
    p.add_argument(
        "--max-steps",
        type=int,
        help="with --resume: extend the run to this many steps (only larger "
        "than its train.max_steps; a complete run is left as it is)",
    )
    p.add_argument(
        "--allow-change",
        action="append",
        default=[],
        metavar="KEY,...",
        help="with --resume: config keys (e.g. optim.lr,train.dtype) that may differ from the checkpoint's copy "
        "of the config; any other difference in config.yaml is refused. The change is recorded in "
        "RUN_DIR/config_changes.jsonl, shown by doctor and summary.json",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="section.key=value",
        help="dotted overrides, e.g. model.gamma=0.5 model.norm_eps=1e-5 model.gate=none optim.lr=3e-3",
    )


def _check_vocab_override(cfg, overrides: list[str]) -> None:
    """The data decides the vocabulary: an explicit model.vocab_size that differs from the data's is refused
    (below it, token ids would fall outside the embedding; above it, the value would be silently rewritten)."""
    from smallinit.core.errors import ConfigError
    from smallinit.data import TokenData

    given = [o for o in overrides if o.split("=", 1)[0].strip() == "model.vocab_size"]
    if not given:
        return
    have = TokenData(cfg.data.path).vocab_size
    if cfg.model.vocab_size != have:
        raise ConfigError(
            f"model.vocab_size={cfg.model.vocab_size} but the data {cfg.data.path} has a vocabulary of "
            f"{have}; the data decides the vocabulary: drop the override"
        )


def run(args: argparse.Namespace) -> int:
    import sys

    from smallinit.core.errors import ConfigError, Interrupted
    from smallinit.probes.training import attach, probe_callbacks
    from smallinit.train import load_config
    from smallinit.train.loop import Trainer

    if args.max_steps is not None and args.max_steps <= 0:
        raise ConfigError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.resume:
        if args.config or args.out or args.overrides:
            raise ConfigError(
                "--resume takes only the run directory (and --max-steps, --allow-change); its config.yaml is reused"
            )
        trainer = Trainer(None, args.resume, resume=True, max_steps=args.max_steps, allow_change=args.allow_change)
    else:
        if args.max_steps is not None:
            raise ConfigError("--max-steps goes with --resume; for a new run write train.max_steps=N")
        if args.allow_change:
            raise ConfigError("--allow-change goes with --resume (a new run has no checkpoint to differ from)")
        if not args.config or not args.out:
            raise ConfigError("give --config CONFIG_OR_YAML and --out RUN_DIR (or --resume RUN_DIR)")
        cfg = load_config(args.config, args.overrides)
        _check_vocab_override(cfg, args.overrides)
        trainer = Trainer(cfg, args.out, callbacks=probe_callbacks(cfg.probe))
    if args.resume:
        attach(trainer)
    try:
        s = trainer.run()
    except Interrupted as e:
        print(str(e), file=sys.stderr)
        return 128 + e.signum
    if s.get("already_complete"):
        print(
            f"already complete: {trainer.run_dir} finished at step {s.get('step')} (train.max_steps "
            f"{trainer.cfg.train.max_steps}); nothing to do (extend it with --max-steps N, N larger)"
        )
        return 0
    if trainer.dist.is_main if hasattr(trainer, "dist") else True:

        def f(key: str) -> str:
            v = s.get(key)
            return f"{v:.4f}" if isinstance(v, (int, float)) else "n/a"

        print(
            f"done: step {s['step']}, tokens {s['tokens']:,}, final loss {f('final_loss')}, "
            f"val loss {f('final_val_loss')}, {s.get('wall_time', 0.0):.1f}s → {trainer.run_dir}"
        )
    return 0
