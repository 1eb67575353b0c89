"""What the trainer checks before the first step (and before the run directory is created), so that a failing check
leaves no folder behind: both data splits hold a window of ``seq_len`` and the validation split the evaluated
windows, every token id is below the vocabulary (:func:`check_data`), the memory estimate of a step
(:func:`memory_estimate`) against the machine's memory (:func:`check_memory`), and callbacks' own
``check(trainer)``, e.g. probe matrix names (:func:`check_callbacks`). The output folder's policy is
:mod:`smallinit.core.outputs` (:mod:`smallinit.train.run_dir`)."""

from __future__ import annotations

import os

import torch

from smallinit.config import RunConfig
from smallinit.core.errors import ConfigError, DataError


def memory_estimate(cfg: RunConfig, micro_batch: int) -> int:
    """Bytes one process needs for a training step (an estimate, used to refuse a batch that cannot fit):

        params · 16                      fp32 weights, gradients, AdamW m and v
      + L · b · T · d · (34 + 5·H·T/d) · w    activations kept for backward per block (Korthikanti et al.)
      + b · T · V · 12                  logits, their float32 copy and gradient

    with b = micro-batch, T = seq_len, d = d_model, H = heads, L = layers, V = vocab, w = 2 bytes per value in
    float32 (the formula counts 16-bit values) and 1 under bf16 autocast."""
    m = cfg.model
    T, b = cfg.data.seq_len, micro_batch
    w = 1 if cfg.train.dtype == "bf16" else 2
    params = m.num_params()
    act = m.n_layers * b * T * m.d_model * (34 + 5 * m.n_heads * T / m.d_model) * w
    return int(params * 16 + act + b * T * m.vocab_size * 12)


def machine_memory(device: torch.device) -> int | None:
    """Total memory of ``device`` in bytes (physical RAM for the CPU), or None when unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def _max_token(tokens, chunk: int = 1 << 24) -> int:
    """The largest token id of a (memory-mapped) array, read in chunks; -1 when empty."""
    top = -1
    for i in range(0, len(tokens), chunk):
        top = max(top, int(tokens[i : i + chunk].max()))
    return top


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_data(trainer) -> None:
    """Everything about the data that would otherwise fail (or silently shrink) after training steps: a window of
    seq_len in each split, every validation window data.tune_batches asks for after data.val_batches, token ids <
    vocab."""
    from smallinit.data.loader import val_offsets

    c, d = trainer.cfg, trainer.data
    d.check_seq_len(c.data.seq_len, bos=trainer.bos_id is not None)
    n_val = len(val_offsets(len(d.val), c.data.seq_len, trainer.bos_id))
    if c.data.tune_batches:  # the tune windows follow the val windows; every one asked for must exist
        b = c.train.batch_size
        need = (c.data.val_batches + c.data.tune_batches) * b
        if n_val < need:
            room = max(0, n_val // b - c.data.val_batches)
            raise DataError(
                f"{d.path}: the validation split holds {n_val} windows of seq_len {c.data.seq_len}; "
                f"data.tune_batches={c.data.tune_batches} after data.val_batches={c.data.val_batches} needs "
                f"({c.data.val_batches} + {c.data.tune_batches}) × batch_size {b} = {need}; lower data.tune_batches "
                f"(at most {room} here) / data.val_batches or prepare a larger --val-fraction"
            )
    if trainer.resume:
        return  # the token scan ran in Trainer._setup (rundir.data_mismatch), before the data set the vocabulary
    for name, split in (("train", d.train), ("val", d.val)):
        top = _max_token(split)
        if top >= c.model.vocab_size:
            raise DataError(
                f"{d.path}: {name}.bin holds token id {top}, but the vocabulary (meta.json "
                f"vocab_size) is {c.model.vocab_size}; the data is damaged or was prepared with "
                "another tokenizer: prepare it again"
            )


def check_memory(trainer) -> None:
    """Refuse a step whose estimated memory (:func:`memory_estimate`) exceeds the device's total memory."""
    need = memory_estimate(trainer.cfg, trainer.micro_batch)
    have = machine_memory(trainer.device)
    if have is not None and need > have:
        raise ConfigError(
            f"a training step needs about {_fmt_bytes(need)} (micro-batch {trainer.micro_batch} × "
            f"seq_len {trainer.cfg.data.seq_len}, {trainer.cfg.model.num_params():,} parameters), more "
            f"than this {trainer.device.type}'s {_fmt_bytes(have)}; lower train.batch_size (or set "
            "train.micro_batch_size), data.seq_len or the model size"
        )


def check_callbacks(trainer) -> None:
    """Callbacks' own up-front checks (``check(trainer)``, e.g. probe matrix names), before the folder exists."""
    for cb in trainer.callbacks:
        fn = getattr(cb, "check", None)
        if fn is not None:
            fn(trainer)
