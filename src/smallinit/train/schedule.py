"""Learning-rate schedules as pure functions of the step (so a resumed run needs no scheduler state)."""

from __future__ import annotations

import math

from smallinit.config import OptimConfig


def lr_at(step: int, max_steps: int, cfg: OptimConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based).

    warmup:   lr · (step+1)/warmup_steps                       for step < warmup_steps
    cosine:   min + (lr − min)·½(1 + cos(π·p)),  p = (step − warmup)/(max_steps − warmup) ∈ [0, 1]
    wsd:      lr until the last ``decay_fraction`` of steps, then linear to min at the final step
    constant: lr after warmup
    with min = lr · min_lr_ratio.
    """
    peak, low = cfg.lr, cfg.lr * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        return peak * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return peak
    if cfg.schedule == "cosine":
        span = max(1, max_steps - 1 - cfg.warmup_steps)
        p = min(1.0, (step - cfg.warmup_steps) / span)
        return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * p))
    # wsd
    decay_start = wsd_decay_start(max_steps, cfg)
    if step < decay_start:
        return peak
    p = min(1.0, (step - decay_start) / max(1, max_steps - 1 - decay_start))
    return peak + (low - peak) * p


def wsd_decay_start(max_steps: int, cfg: OptimConfig) -> int:
    """First step of a WSD run's decay: max(warmup_steps, max_steps − max(1, round(decay_fraction · max_steps))).

    Before it the WSD rate equals the constant schedule's, so a cooldown branch that resumes a constant-rate
    trunk's checkpoint at this step and decays to ``max_steps`` is the same run as WSD from the start.
    """
    decay_steps = max(1, round(cfg.decay_fraction * max_steps))
    return max(cfg.warmup_steps, max_steps - decay_steps)
