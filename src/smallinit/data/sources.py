"""Corpus inputs: parse an INPUT spec and stream its text as bounded *pieces*.

INPUT forms (a document ends with ``<|endoftext|>`` in the token files):

- ``FILE`` (any suffix but the two below): UTF-8 text; the whole file is one document.
- ``DIR``: every ``.txt`` / ``.md`` file below DIR (recursive, sorted by path; compressed ones too, e.g.
  ``a.txt.gz``); one document per file.
- ``FILE.jsonl``: one JSON object per line, string field ``text_field``; one document per line.
- ``FILE.parquet``: string column ``text_field``; one document per row.
- ``builtin:stdlib``: the running Python's standard-library ``*.py`` files, site-/dist-packages
  excluded (~30 MB on CPython 3.11), each decoded with its PEP 263 coding declaration; one per file.
- ``hf:NAME[:CONFIG][:SPLIT]``: a Hugging Face dataset streamed with ``datasets`` (online; the split
  defaults to ``train``; ``hf:NAME::SPLIT`` means no config); one document per row. Offline it fails at once.
- ``hf:/path/to/dir[:SPLIT]``: a dataset saved with ``save_to_disk`` (works offline); one per row. Opening
  both ``hf:`` forms (and the Hub probe): :mod:`smallinit.data.hf_sources`.

Documents are streamed as pieces of at most ``piece_chars`` characters (4096; less for files under
256 KB, see :func:`piece_chars_for`), cut after a newline where one falls in the last 3/4 of the
window, else after a space, else anywhere. Concatenating a document's pieces gives the document back
exactly; pieces are the unit of val selection and of mixing (sub)sampling.

Text and JSON Lines files may be gzip, bzip2, xz or zstd compressed (``FILE.jsonl.gz``): the compression is
detected by the first bytes and read transparently (:mod:`smallinit.core.containers`); what a file holds is named by
its suffix without the compression's (``a.jsonl.gz`` is JSON Lines). Sizes, characters and chars/token count the
decompressed text; a file's hash is that of its bytes on disk. :func:`parse_source` refuses, before any work, a
file that is neither text nor a compressed file holding text (a zip or tar archive, binary data, text that is
mostly not UTF-8), and :func:`check_no_overlap` refuses a file read twice (given twice, or given and inside a
folder also given, links resolved): its validation pieces would be trained on.

Invalid UTF-8 (or, for stdlib files, bytes invalid in the declared encoding) is replaced by U+FFFD with
a :class:`DataWarning` naming the file and the byte count.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import sysconfig
import tokenize
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from smallinit.core.containers import (
    SUFFIXES,
    check_text_input,
    compression_of,
    content_size,
    inner_stem,
    inner_suffix,
    open_input,
)
from smallinit.core.errors import DataError
from smallinit.data.hf_sources import (  # noqa: F401 (re-exported: the hf: inputs live in hf_sources)
    HF_DEFAULT_ENDPOINT,
    HF_PROBE_TIMEOUT_S,
    hf_offline_flag,
    hf_probe_address,
    hf_unreachable_reason,
    load_hf_disk,
    load_hf_online,
)

PIECE_CHARS = 4096
MIN_PIECE_CHARS = 256
READ_BYTES = 1 << 20
TEXT_SUFFIXES = (".txt", ".md")


class DataWarning(UserWarning):
    """A recoverable problem with the input (e.g. invalid UTF-8 bytes were replaced)."""


# ---------------------------------------------------------------------------------------------
# invalid UTF-8: replace and count
_bad_bytes = 0


def _count_and_replace(exc: UnicodeError) -> tuple[str, int]:
    global _bad_bytes
    if isinstance(exc, UnicodeDecodeError):
        _bad_bytes += exc.end - exc.start
        return "\ufffd", exc.end
    if isinstance(exc, UnicodeEncodeError):  # lone surrogates from JSON "\ud800"
        _bad_bytes += exc.end - exc.start
        return "\ufffd" * (exc.end - exc.start), exc.end
    raise exc


_ERRORS = "smallinit-count-replace"
codecs.register_error(_ERRORS, _count_and_replace)


def _clean(text: str) -> str:
    """``text`` with lone surrogates (unencodable in UTF-8) replaced by U+FFFD, counted as invalid."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", _ERRORS).decode("utf-8")


# ---------------------------------------------------------------------------------------------
@dataclass
class Source:
    """One parsed INPUT."""

    spec: str
    kind: str  # text | dir | jsonl | parquet | stdlib | hf | hf-disk
    name: str
    path: Path | None = None
    files: list[Path] = field(default_factory=list)
    hf_name: str | None = None
    hf_config: str | None = None
    hf_split: str | None = None
    dataset: object = field(default=None, repr=False)  # the opened ``datasets`` object (hf kinds)

    def open(self, text_field: str = "text") -> None:
        """Check now that the input can be read (hf: reachable / saved dataset valid), not half-way."""
        if self.kind == "hf" and self.dataset is None:
            self.dataset = load_hf_online(self)
        elif self.kind == "hf-disk" and self.dataset is None:
            self.dataset = load_hf_disk(self, text_field)

    @cached_property
    def total_bytes(self) -> int | None:
        """Bytes of text the files hold (for the progress bar and the BPE sample's order); None when unknown
        (hf inputs, parquet, compressed files: their size would need a full pass)."""
        if self.kind in ("text", "dir", "jsonl", "stdlib") and not any(compression_of(f) for f in self.files):
            return sum(f.stat().st_size for f in self.files)
        return None

    def content_bytes(self, upto: int) -> int | None:
        """``min(bytes of text the files hold, upto)``, compressed files decompressed as far as needed; None for
        inputs read through other libraries (hf, parquet)."""
        if self.kind not in ("text", "dir", "jsonl", "stdlib"):
            return None
        n = 0
        for f in self.files:
            if n >= upto:
                break
            n += content_size(f, upto - n)
        return min(n, upto)


@dataclass
class SourceStats:
    """What was read from a source: sizes, documents, invalid bytes and file hashes."""

    bytes: int = 0  # UTF-8 bytes of the text yielded (after replacement)
    chars: int = 0  # Unicode code points yielded
    documents: int = 0
    pieces: int = 0
    invalid_bytes: int = 0
    truncated: bool = False  # stopped early by max_bytes
    file_hashes: list[tuple[str, str]] = field(default_factory=list)  # (relative name, sha256)
    extra: dict = field(default_factory=dict)  # e.g. hf fingerprint

    def digest(self) -> dict:
        """Hashes for meta.json: one file -> its sha256; several -> sha256 of their ``sha256sum`` listing."""
        d: dict = {"files": len(self.file_hashes), "complete": not self.truncated}
        if len(self.file_hashes) == 1:
            d["sha256"] = self.file_hashes[0][1]
        elif self.file_hashes:
            listing = "".join(f"{h}  {name}\n" for name, h in self.file_hashes)
            d["sha256_of_sha256sums"] = hashlib.sha256(listing.encode("utf-8")).hexdigest()
        d.update(self.extra)
        return d


def piece_chars_for(src: Source) -> int:
    """Piece size for ``src``: PIECE_CHARS, smaller for small files so that a source has >= ~64 pieces
    (never under MIN_PIECE_CHARS); finer pieces let small corpora still get a val split and exact shares."""
    size = src.content_bytes(PIECE_CHARS * 64)  # a compressed file counts what it holds, as its plain copy would
    if size is None:
        return PIECE_CHARS
    return int(min(PIECE_CHARS, max(MIN_PIECE_CHARS, size // 64)))


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> list[Path]:
    """The standard library's ``*.py`` files, sorted, excluding site-packages and dist-packages."""
    root = stdlib_dir()
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts) and p.is_file())


def parse_source(spec: str) -> Source:
    """Parse one INPUT; raises DataError for a missing path or a directory without text files."""
    if spec == "builtin:stdlib":
        return Source(spec, "stdlib", "stdlib", path=stdlib_dir(), files=stdlib_files())
    if spec.startswith("builtin:"):
        raise DataError(f"{spec}: unknown built-in corpus (available: builtin:stdlib)")
    if spec.startswith("hf:"):
        return _parse_hf(spec)
    p = Path(spec).expanduser()
    if not p.exists():
        raise DataError(f"{spec}: no such file or directory")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if inner_suffix(f) in TEXT_SUFFIXES and f.is_file())
        if not files:
            raise DataError(f"{spec}: directory has no .txt or .md files")
        inner: dict[Path, Path] = {}
        for f in files:  # a.txt beside a.txt.gz: most likely the same text twice (its val would be trained on)
            key = f.with_suffix("") if f.suffix.lower() in SUFFIXES else f
            if key in inner:
                raise DataError(f"{spec}: holds both {inner[key].name} and {f.name} (the same text twice?); keep one")
            inner[key] = f
            check_text_input(f)
        return Source(spec, "dir", p.resolve().name or "dir", path=p, files=files)
    if not p.is_file():  # a pipe (<(zcat a.gz)) cannot be read twice: its start is examined first
        raise DataError(f"{spec}: not a regular file or directory (give a compressed file itself: it is read as such)")
    suffix = inner_suffix(p)
    kind = {".jsonl": "jsonl", ".parquet": "parquet"}.get(suffix, "text")
    if kind == "parquet":
        if p.suffix.lower() in SUFFIXES or compression_of(p):
            raise DataError(f"{spec}: a compressed parquet file; decompress it first (parquet compresses inside)")
    else:
        check_text_input(p, "JSON Lines" if kind == "jsonl" else "text")
    return Source(spec, kind, inner_stem(p), path=p, files=[p])


def parse_sources(specs: list[str]) -> list[Source]:
    """Parse every INPUT (:func:`parse_source`), refuse a file read twice (:func:`check_no_overlap`) and give the
    sources unique names (a second ``a`` becomes ``a#2``)."""
    sources = [parse_source(spec) for spec in specs]
    check_no_overlap(sources)
    seen: dict[str, int] = {}
    for s in sources:
        seen[s.name] = seen.get(s.name, 0) + 1
        s.name = s.name if seen[s.name] == 1 else f"{s.name}#{seen[s.name]}"
    return sources


def check_no_overlap(sources: list[Source]) -> None:
    """Refuse a file read twice: given twice, given and inside a folder also given, or reached twice through links
    (symbolic or hard: files are compared by device and inode). Its pieces would be chosen for validation in one
    copy and trained on in the other."""
    seen: dict[tuple[int, int], tuple[Path, Source]] = {}
    for src in sources:
        for f in src.files if src.kind in ("text", "dir", "jsonl", "parquet", "stdlib") else []:
            st = f.stat()
            key = (st.st_dev, st.st_ino)
            if key in seen:
                first, other = seen[key]
                raise DataError(
                    f"{f.resolve()} would be read twice ({_as_part(first, other)} and {_as_part(f, src)}): its "
                    "validation pieces would also be trained on; give each file once"
                )
            seen[key] = (f, src)


def _as_part(f: Path, src: Source) -> str:
    return f"as {f} in folder {src.spec}" if src.kind in ("dir", "stdlib") else f"given as {src.spec}"


def _parse_hf(spec: str) -> Source:
    rest = spec[3:]
    if not rest:
        raise DataError(f"{spec}: expected hf:NAME[:CONFIG][:SPLIT] or hf:/path/to/saved/dataset")
    head, _, tail = rest.partition(":")
    local = Path(head).expanduser()
    if head.startswith(("/", ".", "~")) or local.exists():
        if not local.exists():
            raise DataError(f"{spec}: no such directory {head}")
        return Source(spec, "hf-disk", local.resolve().name, path=local, hf_split=tail or None)
    parts = rest.split(":")
    if len(parts) > 3:
        raise DataError(f"{spec}: expected hf:NAME[:CONFIG][:SPLIT]")
    name, config, split = (parts + [None, None])[:3]
    return Source(spec, "hf", name.replace("/", "_"), hf_name=name, hf_config=config or None, hf_split=split or None)


# ---------------------------------------------------------------------------------------------
def _cut(buf: str, pos: int, n: int) -> int:
    """End of the piece starting at ``pos``: after the last newline (else space) in the window's last 3/4."""
    end = pos + n
    if end >= len(buf):
        return len(buf)
    lo = pos + n // 4
    i = buf.rfind("\n", lo, end)
    if i < 0:
        i = buf.rfind(" ", lo, end)
    return i + 1 if i >= 0 else end


def _string_pieces(text: str, n: int) -> Iterator[str]:
    pos = 0
    while pos < len(text):
        cut = _cut(text, pos, n)
        yield text[pos:cut]
        pos = cut


def python_source_encoding(path: Path) -> str:
    """The PEP 263 encoding of a Python source file (UTF-8 when absent or invalid)."""
    with open(path, "rb") as f:
        try:
            return tokenize.detect_encoding(f.readline)[0]
        except SyntaxError:
            return "utf-8"


def _file_pieces(path: Path, hasher, n: int, encoding: str = "utf-8") -> Iterator[str]:
    """Stream one text file (decompressed when compressed) as pieces, decoding incrementally; the file's bytes as
    on disk are fed to ``hasher``."""
    dec = codecs.getincrementaldecoder(encoding)(errors=_ERRORS)
    buf = ""
    with open_input(path, hasher) as f:
        while True:
            block = f.read(READ_BYTES)
            final = not block
            buf += dec.decode(block, final=final)
            pos = 0
            while len(buf) - pos > n or (final and pos < len(buf)):
                cut = _cut(buf, pos, n)
                yield buf[pos:cut]
                pos = cut
            buf = buf[pos:]
            if final:
                return


def _mark_last(pieces: Iterator[str]) -> Iterator[tuple[str, bool]]:
    prev = None
    for p in pieces:
        if prev is not None:
            yield prev, False
        prev = p
    if prev is not None:
        yield prev, True


class _Reader:
    """Produces (piece, doc_end) for a source and fills its SourceStats."""

    def __init__(self, src: Source, stats: SourceStats, text_field: str, n: int, warn: bool):
        self.src, self.stats, self.field, self.n, self.warn = src, stats, text_field, n, warn

    # files -------------------------------------------------------------------------------------
    def _files(self) -> Iterator[tuple[str, bool]]:
        global _bad_bytes
        root = self.src.path if self.src.kind in ("dir", "stdlib") else None
        for f in self.src.files:
            name = str(f.relative_to(root)) if root is not None else f.name
            h = hashlib.sha256()
            _bad_bytes = 0
            enc = python_source_encoding(f) if self.src.kind == "stdlib" else "utf-8"
            yield from _mark_last(_file_pieces(f, h, self.n, enc))
            self._note_invalid(str(f))
            self.stats.file_hashes.append((name, h.hexdigest()))

    def _jsonl(self) -> Iterator[tuple[str, bool]]:
        global _bad_bytes
        f_path = self.src.files[0]
        h = hashlib.sha256()
        _bad_bytes = 0
        with open_input(f_path, h) as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                line = raw.decode("utf-8", _ERRORS)
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{f_path}:{lineno}: invalid JSON ({e.msg})") from None
                text = self._field(obj, f"{f_path}:{lineno}")
                if text:
                    yield from _mark_last(_string_pieces(_clean(text), self.n))
        self._note_invalid(str(f_path))
        self.stats.file_hashes.append((f_path.name, h.hexdigest()))

    def _field(self, row, where: str):
        if not isinstance(row, dict) or self.field not in row:
            have = ", ".join(sorted(map(str, row))) if isinstance(row, dict) else type(row).__name__
            raise DataError(f"{where}: no {self.field!r} field (have: {have}); choose one with --text-field")
        text = row[self.field]
        if text is not None and not isinstance(text, str):
            raise DataError(f"{where}: field {self.field!r} is {type(text).__name__}, not a string")
        return text

    def _rows(self, batches: Iterator[list], where: str) -> Iterator[tuple[str, bool]]:
        global _bad_bytes
        _bad_bytes = 0
        for texts in batches:
            for text in texts:
                if text is not None and not isinstance(text, str):
                    raise DataError(f"{where}: column {self.field!r} holds {type(text).__name__}, not strings")
                if text:
                    yield from _mark_last(_string_pieces(_clean(text), self.n))
        self._note_invalid(where)

    def _parquet(self) -> Iterator[tuple[str, bool]]:
        import pyarrow.parquet as pq

        path = self.src.files[0]
        self.stats.file_hashes.append((path.name, _sha256_file(path)))
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise DataError(f"{path}: not a readable parquet file ({e})") from None
        cols = pf.schema_arrow.names
        if self.field not in cols:
            raise DataError(f"{path}: no column {self.field!r} (have: {', '.join(cols)}); use --text-field")
        batches = (b.column(0).to_pylist() for b in pf.iter_batches(batch_size=1024, columns=[self.field]))
        yield from self._rows(batches, str(path))

    def _hf_disk(self) -> Iterator[tuple[str, bool]]:
        self.src.open(self.field)
        ds = self.src.dataset
        for f in sorted(p for p in self.src.path.rglob("*") if p.is_file()):
            self.stats.file_hashes.append((str(f.relative_to(self.src.path)), _sha256_file(f)))
        self.stats.extra["fingerprint"] = getattr(ds, "_fingerprint", None)
        batches = (b[self.field] for b in ds.iter(batch_size=1000))
        yield from self._rows(batches, self.src.spec)

    def _hf(self) -> Iterator[tuple[str, bool]]:
        self.src.open(self.field)
        ds = self.src.dataset
        self.stats.extra.update(
            {"dataset": self.src.hf_name, "config": self.src.hf_config, "split": self.src.hf_split or "train"}
        )

        def batches():
            for i, row in enumerate(ds):
                yield [self._field(row, f"{self.src.spec} row {i}")]

        yield from self._rows(batches(), self.src.spec)

    def _note_invalid(self, where: str) -> None:
        if _bad_bytes:
            self.stats.invalid_bytes += _bad_bytes
            if self.warn:
                warnings.warn(
                    f"{where}: replaced {_bad_bytes} invalid UTF-8 byte(s) with U+FFFD", DataWarning, stacklevel=2
                )

    # all kinds ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[str, bool]]:
        kind = self.src.kind
        if kind in ("text", "dir", "stdlib"):
            return self._files()
        return {"jsonl": self._jsonl, "parquet": self._parquet, "hf-disk": self._hf_disk, "hf": self._hf}[kind]()


def iter_pieces(
    src: Source,
    stats: SourceStats,
    text_field: str = "text",
    max_bytes: int | None = None,
    piece_chars: int = PIECE_CHARS,
    warn: bool = True,
) -> Iterator[tuple[str, bool]]:
    """Yield ``(piece, doc_end)`` for ``src`` and fill ``stats``.

    With ``max_bytes`` the stream yields at most that many UTF-8 bytes: the piece that reaches the limit is cut
    there (at the last whole character before it) and ends its document, and reading stops.
    """
    for text, end in _Reader(src, stats, text_field, piece_chars, warn):
        raw = text.encode("utf-8")
        nbytes = len(raw)
        if max_bytes is not None and stats.bytes + nbytes >= max_bytes:
            if stats.bytes + nbytes > max_bytes:  # cut at the limit, never inside a character
                text = raw[: max_bytes - stats.bytes].decode("utf-8", errors="ignore")
                nbytes = len(text.encode("utf-8"))
            stats.bytes += nbytes
            stats.chars += len(text)
            stats.pieces += 1
            stats.documents += 1
            stats.truncated = True
            yield text, True
            return
        stats.bytes += nbytes
        stats.chars += len(text)
        stats.pieces += 1
        stats.documents += end
        yield text, end


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(READ_BYTES), b""):
            h.update(block)
    return h.hexdigest()
