"""Reading text inputs as what they are: compressed files opened transparently, other containers refused.

Every reader of a user's text or JSON Lines file (``smallinit prepare``'s inputs, benchmark files) opens it with
:func:`open_input`. The container is detected by the file's first bytes, never by its name alone, so
``corpus.jsonl.gz``, a gzip file named ``corpus.jsonl`` and a plain file named ``corpus.gz`` are all read right:

- gzip (``1f 8b``; several members are read one after the other), bzip2 (``BZh``) and xz (``fd 37 7a 58 5a 00``)
  with the standard library; zstd (``28 b5 2f fd``) with the ``zstandard`` package when it is installed, else a
  :class:`DataError` naming ``pip install zstandard``;
- zip, 7z, tar, lz4, parquet, PDF, images and executables: refused (:func:`check_text_input`), as is content that
  is not UTF-8 text (NUL bytes, or more than :data:`MAX_INVALID_SHARE` of its first bytes invalid UTF-8).

:func:`check_text_input` reads the first :data:`SNIFF_BYTES` of the content (decompressed), so a refusal comes before
any work. Decompression errors met later (a truncated or damaged file) are one :class:`DataError` naming the file.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import io
import lzma
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from smallinit.core.errors import DataError

SNIFF_BYTES = 1 << 14
"""Content bytes (after decompression) examined by :func:`check_text_input`."""
MAX_INVALID_SHARE = 0.3
"""Share of invalid UTF-8 bytes in the examined content above which an input is refused as not UTF-8 text (at least
:data:`MIN_INVALID` of them; below, invalid bytes are replaced by U+FFFD with a warning: a Latin-1 text with a few
accents is read, a Cyrillic cp1251 text, most of whose bytes are invalid UTF-8, is refused)."""
MIN_INVALID = 16
READ_BYTES = 1 << 20

COMPRESSED: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
"""Magic bytes of the compressed formats read transparently."""
SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
"""File name suffixes of those formats (stripped from a name to find what is inside: ``a.jsonl.gz`` → ``.jsonl``)."""
REFUSED: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "a zip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (b"\x04\x22\x4d\x18", "an lz4 file"),
    (b"Rar!", "a rar archive"),
    (b"PAR1", "a parquet file"),
    (b"%PDF", "a PDF document"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x7fELF", "an executable"),
    (b"\x93NUMPY", "a NumPy array"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
"""Magic bytes of containers that are not text (refused with their name)."""


def compression_of(path: str | os.PathLike) -> str | None:
    """The compression of a file by its first bytes: "gzip", "bzip2", "xz", "zstd", or None (not compressed)."""
    with open(path, "rb") as f:
        head = f.read(8)
    return next((name for magic, name in COMPRESSED if head.startswith(magic)), None)


def inner_suffix(path: str | os.PathLike) -> str:
    """The lower-case suffix of what a file holds: ``a.jsonl.gz`` → ``.jsonl``, ``a.txt`` → ``.txt``."""
    p = Path(path)
    if p.suffix.lower() in SUFFIXES:
        p = Path(p.stem)
    return p.suffix.lower()


def inner_stem(path: str | os.PathLike) -> str:
    """A file's name without its compression suffix and content suffix: ``en_train.jsonl.gz`` → ``en_train``."""
    p = Path(path)
    if p.suffix.lower() in SUFFIXES:
        p = Path(p.stem)
    return p.stem or p.name


class _Hashing(io.RawIOBase):
    """A raw reader that feeds every byte it reads from ``f`` (the file as on disk) to ``hasher``."""

    def __init__(self, f: BinaryIO, hasher):
        self.f, self.hasher = f, hasher

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        if n and self.hasher is not None:
            self.hasher.update(memoryview(b)[:n])
        return n or 0


def _zstd_reader(raw, path: Path):
    try:
        import zstandard
    except ImportError:
        raise DataError(
            f"{path}: zstd-compressed; reading it needs the zstandard package: pip install zstandard"
        ) from None
    return io.BufferedReader(
        zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False), READ_BYTES
    )


def _decompressor(kind: str | None, raw, path: Path):
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(raw, mode="rb")
    if kind == "xz":
        return lzma.LZMAFile(raw, mode="rb")
    if kind == "zstd":
        return _zstd_reader(raw, path)
    return raw


def _damaged(path: Path, kind: str | None, e: BaseException) -> DataError:
    what = f"{kind} data" if kind else "file"
    return DataError(f"{path}: damaged or truncated {what} ({e}); download or compress it again")


def decode_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a decompressor raises on damaged or truncated input (zstandard's when installed)."""
    errs: list[type[BaseException]] = [EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile]
    with contextlib.suppress(ImportError):
        import zstandard

        errs.append(zstandard.ZstdError)
    return tuple(errs)


@contextlib.contextmanager
def open_input(path: str | os.PathLike, hasher=None) -> Iterator[BinaryIO]:
    """Open ``path`` for reading its content as bytes, decompressed when its first bytes say it is compressed.

    ``hasher`` (a ``hashlib`` object) is fed the file's bytes as on disk (compressed), all of them once the caller
    has read the content to its end. Damaged or truncated compressed data raises a :class:`DataError` naming the file.
    """
    path = Path(path)
    kind = compression_of(path)
    with open(path, "rb", buffering=0) as f:
        raw = io.BufferedReader(_Hashing(f, hasher), READ_BYTES)
        stream = _decompressor(kind, raw, path)
        try:
            yield stream
            if hasher is not None:  # the rest of the file (a trailer the decompressor did not need)
                while raw.read(READ_BYTES):
                    pass
        except decode_errors() as e:
            raise _damaged(path, kind, e) from None
        except OSError as e:  # BZ2File / LZMAFile report bad data as OSError("Invalid data stream")
            if kind is None or getattr(e, "errno", None) is not None:
                raise
            raise _damaged(path, kind, e) from None
        finally:
            if stream is not raw:
                stream.close()


def content_size(path: str | os.PathLike, upto: int | None = None) -> int:
    """Bytes of ``path``'s content (decompressed): the size on disk for a plain file; for a compressed one, read
    (at most ``upto`` bytes when given: the result is then ``min(size, upto)``)."""
    if compression_of(path) is None:
        size = Path(path).stat().st_size
        return size if upto is None else min(size, upto)
    n = 0
    with open_input(path) as f:
        while upto is None or n < upto:
            block = f.read(READ_BYTES if upto is None else min(READ_BYTES, upto - n))
            if not block:
                break
            n += len(block)
    return n


def _head(path: Path, n: int) -> bytes:
    """The first ``n`` bytes of the content (decompressed)."""
    with open_input(path) as f:
        out = b""
        while len(out) < n:
            block = f.read(n - len(out))
            if not block:
                break
            out += block
        return out


def check_text_input(path: str | os.PathLike, what: str = "text") -> None:
    """Refuse, with one :class:`DataError` line, an input that is neither text nor a compressed file holding
    text: a known non-text container (zip, tar, parquet, ...), a zstd file without the zstandard package, damaged
    compressed data at its start, NUL bytes, or more than :data:`MAX_INVALID_SHARE` invalid UTF-8 in its first
    :data:`SNIFF_BYTES` bytes. ``what`` names the expected content in the message ("text", "JSON Lines")."""
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read(512)
    for magic, name in REFUSED:
        if raw.startswith(magic):
            raise DataError(f"{path}: {name}, not {what}; unpack or convert it first")
    kind = compression_of(path)
    head = _head(path, SNIFF_BYTES)
    inside = f"{kind}-compressed " if kind else ""
    if len(head) > 262 and head[257:262] == b"ustar":
        raise DataError(f"{path}: a {inside}tar archive, not {what}; unpack it first")
    for magic, name in REFUSED:
        if kind and head.startswith(magic):
            raise DataError(f"{path}: {name} ({kind}-compressed), not {what}; unpack or convert it first")
    nul = head.find(b"\x00")
    if nul >= 0:
        raise DataError(
            f"{path}: {inside}binary data, not {what} (a NUL byte at content offset {nul}; UTF-16 text must be "
            "converted to UTF-8 first)"
        )
    bad = _invalid_utf8(head)
    if bad >= MIN_INVALID and bad > MAX_INVALID_SHARE * len(head):
        raise DataError(
            f"{path}: not UTF-8 {what}: {bad} of its first {len(head)} {inside}content bytes are invalid UTF-8; "
            "convert it first (e.g. iconv -f LATIN1 -t UTF-8)"
        )


def _invalid_utf8(data: bytes) -> int:
    """Bytes of ``data`` that are invalid UTF-8 (a character cut at the end of ``data`` is not counted): each one
    decodes to a lone surrogate U+DC80..U+DCFF under ``surrogateescape``."""
    text = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape").decode(data, final=False)
    return sum(1 for ch in text if "\udc80" <= ch <= "\udcff")
