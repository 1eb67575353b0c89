"""smallinit train --config PRESET_OR_YAML --out RUN_DIR [section.key=value ...] | --resume RUN_DIR"""

from __future__ import annotations

import argparse

HELP = "pretrain a model: --config PRESET_OR_YAML --out RUN_DIR [model.gamma=1.0 ...], or --resume RUN_DIR"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="preset name (tiny, small, small-moe, 0.1b, ...) or a YAML file")
    p.add_argument("--out", help="run directory to create")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last good checkpoint")
    p.add_argument("--max-steps", type=int, help="with --resume: extend the run to this many steps")
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="dotted overrides, e.g. model.gamma=0.5 model.norm_eps=1e-5 model.gate=none optim.lr=3e-3")


def run(args: argparse.Namespace) -> int:
    from smallinit.errors import ConfigError
    from smallinit.train import load_config
    from smallinit.train.loop import Trainer

    if args.resume:
        if args.config or args.out or args.overrides:
            raise ConfigError("--resume takes only the run directory (and --max-steps); its config.yaml is reused")
        trainer = Trainer(None, args.resume, resume=True)
        if args.max_steps:
            trainer.cfg.train.max_steps = args.max_steps
    else:
        if not args.config or not args.out:
            raise ConfigError("give --config PRESET_OR_YAML and --out RUN_DIR (or --resume RUN_DIR)")
        cfg = load_config(args.config, args.overrides)
        callbacks = []
        if cfg.probe.every:
            from smallinit.probes.training import TrainingProbe

            callbacks.append(TrainingProbe(cfg.probe))
        trainer = Trainer(cfg, args.out, callbacks=callbacks)
    if args.resume and trainer.cfg.probe.every:
        from smallinit.probes.training import TrainingProbe

        trainer.callbacks.append(TrainingProbe(trainer.cfg.probe))
    s = trainer.run()
    if trainer.dist.is_main if hasattr(trainer, "dist") else True:
        print(f"done: step {s['step']}, tokens {s['tokens']:,}, final loss {s['final_loss']:.4f}, "
              f"val loss {s['final_val_loss']:.4f}, {s['wall_time']:.1f}s → {trainer.run_dir}")
    return 0
