"""Process-group set-up and model wrapping with PyTorch's own engine (torchrun + DDP / FSDP2).

Launch: ``torchrun --nproc_per_node N -m smallinit train ... train.parallel=ddp|fsdp``.
Backend: NCCL when training on CUDA, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from smallinit.core.errors import ConfigError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(parallel: str, device: torch.device) -> DistInfo:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if parallel == "none":
        if world > 1:
            raise ConfigError(
                f"launched with WORLD_SIZE={world} but train.parallel=none; set train.parallel=ddp or fsdp"
            )
        return DistInfo()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise ConfigError(
            f"train.parallel={parallel} needs a torchrun launch; missing environment variable(s): "
            f"{', '.join(missing)} (use: torchrun --nproc_per_node N -m smallinit train ...)"
        )
    info = DistInfo(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(backend=backend)
    return info


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, parallel: str, device: torch.device) -> nn.Module:
    """DDP, or FSDP2 ``fully_shard`` on every block and then the root; unchanged for "none"."""
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    return model


def all_reduce_mean(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        x /= info.world_size
    return x


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
