"""Training: run config, LR schedule, the loop with checkpoints and resume, distributed wrappers."""

from smallinit.config import DataConfig, OptimConfig, ProbeConfig, RunConfig, TrainConfig, load_config, save_config
from smallinit.train.loop import Trainer, resume, train
from smallinit.train.schedule import lr_at

__all__ = [
    "DataConfig",
    "OptimConfig",
    "ProbeConfig",
    "RunConfig",
    "TrainConfig",
    "Trainer",
    "load_config",
    "lr_at",
    "resume",
    "save_config",
    "train",
]
