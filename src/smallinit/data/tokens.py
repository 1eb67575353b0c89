"""A prepared data directory: ``meta.json`` + memory-mapped ``train.bin`` / ``val.bin`` + ``tokenizer.json``."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path

import numpy as np

from smallinit.core.errors import DataError
from smallinit.data.prepare import META_FORMAT, META_VERSION
from smallinit.data.tokenizer import load_tokenizer


class TokenData:
    """Open a directory written by ``smallinit prepare``.

    ``train`` and ``val`` are read-only ``np.memmap`` arrays opened once (an empty split is a
    zero-length array). ``tokenizer`` is loaded on first use.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{self.path}: not a prepared data directory (no meta.json); run smallinit prepare")
        try:
            self.meta: dict = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise DataError(f"{meta_path}: invalid JSON ({e})") from None
        if not isinstance(self.meta, dict):
            raise DataError(f"{meta_path}: expected a JSON object, got {type(self.meta).__name__}")
        if self.meta.get("format") != META_FORMAT or self.meta.get("format_version") != META_VERSION:
            raise DataError(
                f"{meta_path}: not a {META_FORMAT} v{META_VERSION} meta file "
                f"(format={self.meta.get('format')!r}, version={self.meta.get('format_version')!r})"
            )
        try:  # a hand-edited or damaged meta.json: one clear error, not a KeyError from deep inside
            self.dtype = np.dtype(self.meta["dtype"])
            if self.dtype.kind not in "ui":
                raise TypeError(f"dtype {self.dtype} is not an integer type")
            for key in ("vocab_size", "eot_id", "bos_id"):
                int(self.meta[key])
            self.train = self._open("train")
            self.val = self._open("val")
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise DataError(f"{meta_path}: malformed ({type(e).__name__}: {e}); prepare the data again") from None

    def _open(self, split: str) -> np.ndarray:
        f = self.path / self.meta["files"][split]
        want = int(self.meta["tokens"][split])
        if not f.is_file():
            raise DataError(f"{f}: missing")
        have = os.path.getsize(f) // self.dtype.itemsize
        if have != want or os.path.getsize(f) % self.dtype.itemsize:
            raise DataError(f"{f}: holds {have} tokens, meta.json says {want} (truncated or replaced?)")
        if want == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(f, dtype=self.dtype, mode="r")

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def eot_id(self) -> int:
        return int(self.meta["eot_id"])

    @property
    def bos_id(self) -> int:
        return int(self.meta["bos_id"])

    @cached_property
    def tokenizer(self):
        """The ``tokenizers.Tokenizer`` saved with the data."""
        return load_tokenizer(self.path / self.meta["files"]["tokenizer"])

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "val"):
            raise DataError(f"unknown split {name!r} (train or val)")
        return self.train if name == "train" else self.val

    def max_token(self, name: str, chunk: int = 1 << 24) -> int:
        """The largest token id in split ``name`` (read in chunks of the memory map); -1 when it is empty."""
        arr, top = self.split(name), -1
        for i in range(0, len(arr), chunk):
            top = max(top, int(arr[i : i + chunk].max()))
        return top

    def check_seq_len(self, seq_len: int, bos: bool = False, need_val: bool = True) -> None:
        """Raise DataError when a split holds fewer tokens than one window (seq_len + 1, or seq_len with BOS)."""
        need = seq_len if bos else seq_len + 1
        for name in ("train", "val") if need_val else ("train",):
            n = len(self.split(name))
            if n < need:
                raise DataError(
                    f"{self.path}: {name} split has {n} tokens, fewer than one window of {need} "
                    f"(seq_len {seq_len}{' with BOS' if bos else ' + 1'}); use more text or a shorter seq_len"
                )

    def __repr__(self) -> str:
        return (
            f"TokenData({str(self.path)!r}, vocab_size={self.vocab_size}, dtype={self.dtype.name}, "
            f"train={len(self.train)}, val={len(self.val)})"
        )
