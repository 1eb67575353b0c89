"""Batches from a token array: random training windows and a fixed validation sweep.

Training (``BatchLoader``). Step s draws the global batch's B window starts
    o = default_rng([seed, s]).integers(0, n - L + 1, size=B),  L = T + 1 (or T with BOS)
so a batch depends on (seed, step) only: a resumed run sees exactly the batches it would have seen.
Window b gives
    without BOS:  x = tok[o_b : o_b + T],  y = tok[o_b + 1 : o_b + T + 1]
    with BOS:     c = tok[o_b : o_b + T],  x = [bos] + c[:-1],  y = c
Data parallelism: rank r of W with micro-batch m reads windows ``get(step, start, m)`` of disjoint
``start`` ranges (e.g. start = r * B / W + k * m), so ranks never read the same window slot.

Validation (``val_batches``). Non-overlapping windows starting at 0, T, 2T, ... in order, so each token
(but the first, without BOS) is a target exactly once: without BOS windows need T + 1 tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

from smallinit.core.errors import DataError


def _window_len(seq_len: int, bos_id: int | None) -> int:
    return seq_len if bos_id is not None else seq_len + 1


def _fingerprint(tokens: np.ndarray) -> str:
    """A cheap identity check of a token array: sha1 of 64 tokens at fixed, evenly spaced positions."""
    n = len(tokens)
    idx = np.linspace(0, n - 1, num=min(64, n)).astype(np.int64) if n else np.zeros(0, np.int64)
    return hashlib.sha1(np.asarray(tokens[idx], dtype=np.int64).tobytes()).hexdigest()[:16]


def _to_xy(win: np.ndarray, bos_id: int | None):
    """(count, L) windows -> torch int64 (x, y), each (count, T)."""
    import torch

    if bos_id is None:
        x, y = win[:, :-1], win[:, 1:]
    else:
        x = np.empty_like(win)
        x[:, 0] = bos_id
        x[:, 1:] = win[:, :-1]
        y = win
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))


class BatchLoader:
    """Deterministic random windows of a token array (see the module docstring for the formulas)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, global_batch_size: int, seed: int, bos_id: int | None = None):
        if seq_len < 1 or global_batch_size < 1:
            raise DataError(f"seq_len and global_batch_size must be >= 1, got {seq_len}, {global_batch_size}")
        self.tokens = tokens
        self.seq_len = int(seq_len)
        self.global_batch_size = int(global_batch_size)
        self.seed = int(seed)
        self.bos_id = None if bos_id is None else int(bos_id)
        self.window = _window_len(self.seq_len, self.bos_id)
        n = len(tokens)
        if n < self.window:
            raise DataError(
                f"train split has {n} tokens, fewer than one window of {self.window} "
                f"(seq_len {seq_len}{' with BOS' if bos_id is not None else ' + 1'}); "
                "use more text or a shorter seq_len"
            )
        self._arange = np.arange(self.window, dtype=np.int64)

    def offsets(self, step: int) -> np.ndarray:
        """Window starts (int64, length global_batch_size) of step ``step``: default_rng([seed, step])."""
        if step < 0:
            raise DataError(f"step must be >= 0, got {step}")
        rng = np.random.default_rng([self.seed, int(step)])
        return rng.integers(0, len(self.tokens) - self.window + 1, size=self.global_batch_size, dtype=np.int64)

    def get(self, step: int, start: int = 0, count: int | None = None):
        """Windows ``start .. start + count`` of step ``step``'s global batch as torch int64 (x, y)."""
        count = self.global_batch_size - start if count is None else count
        if start < 0 or count < 1 or start + count > self.global_batch_size:
            raise DataError(
                f"batch slice [{start}, {start + count}) is outside the global batch of {self.global_batch_size}"
            )
        offs = self.offsets(step)[start : start + count]
        win = np.asarray(self.tokens[offs[:, None] + self._arange], dtype=np.int64)
        return _to_xy(win, self.bos_id)

    def state_dict(self) -> dict:
        """What fixes the batch sequence; stored in checkpoints and checked on resume."""
        return {
            "seed": self.seed,
            "seq_len": self.seq_len,
            "global_batch_size": self.global_batch_size,
            "bos_id": self.bos_id,
            "n_tokens": int(len(self.tokens)),
            "fingerprint": _fingerprint(self.tokens),
        }

    def load_state_dict(self, state: dict) -> None:
        """Adopt ``state['seed']``; every other field must match this loader (else DataError)."""
        mine = self.state_dict()
        diff = [
            f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in mine if k != "seed" and state.get(k) != mine[k]
        ]
        if diff:
            raise DataError("data loader state does not match this data/config (" + "; ".join(diff) + ")")
        self.seed = int(state["seed"])


def val_offsets(n_tokens: int, seq_len: int, bos_id: int | None = None) -> np.ndarray:
    """Starts 0, T, 2T, ... of the validation windows that fit in ``n_tokens`` tokens."""
    count = (n_tokens - _window_len(seq_len, bos_id)) // seq_len + 1 if n_tokens >= _window_len(seq_len, bos_id) else 0
    return np.arange(count, dtype=np.int64) * seq_len


def val_batches(
    tokens: np.ndarray, seq_len: int, batch_size: int, max_batches: int | None = None, bos_id: int | None = None
) -> Iterator[tuple]:
    """Iterator of (x, y) torch int64 batches of the val windows in order (the last may be smaller).

    Sizes are checked at the call, not at the first ``next``.
    """
    offs = val_offsets(len(tokens), seq_len, bos_id)
    if len(offs) == 0:
        need = _window_len(seq_len, bos_id)
        raise DataError(
            f"val split has {len(tokens)} tokens, fewer than one window of {need} "
            f"(seq_len {seq_len}{' with BOS' if bos_id is not None else ' + 1'}); "
            "raise --val-fraction or shorten seq_len"
        )
    if batch_size < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")
    return _val_iter(tokens, offs, _window_len(seq_len, bos_id), batch_size, max_batches, bos_id)


def _val_iter(tokens, offs, window, batch_size, max_batches, bos_id) -> Iterator[tuple]:
    ar = np.arange(window, dtype=np.int64)
    for b, i in enumerate(range(0, len(offs), batch_size)):
        if max_batches is not None and b >= max_batches:
            return
        win = np.asarray(tokens[offs[i : i + batch_size, None] + ar], dtype=np.int64)
        yield _to_xy(win, bos_id)
