"""Raw text -> ``tokenizer.json``, ``train.bin``, ``val.bin``, ``meta.json`` (``smallinit prepare``).

Steps, all streaming with bounded memory:

1. Tokenizer: train a byte-level BPE on a sample (at most ``bpe_sample_bytes``, split over the sources
   by weight, else evenly; the first bytes of each source), or build the byte tokenizer, or load a file.
2. Encode: each source is streamed as pieces (see :mod:`smallinit.data.sources`), encoded in batches of
   about 1 MB with ``Tokenizer.encode_batch`` (parallel in Rust on ``num_workers`` threads) and appended to
   a scratch token file; ``<|endoftext|>`` follows each document's last piece.
3. Mix: choose val and train pieces per source (:mod:`smallinit.data.mixing`).
4. Write: per source, its val pieces to ``val.bin`` and its train passes to ``train.bin`` (sources one after
   the other). An ``<|endoftext|>`` is also written wherever two written pieces were not adjacent in the
   source, so text never runs on across a cut.
5. ``meta.json`` last; everything is written in ``.DIR.tmp-*`` beside DIR and renamed to DIR at the end,
   so a failed or interrupted prepare never leaves a DIR that looks complete.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from smallinit.core.errors import ConfigError, DataError
from smallinit.core.outputs import install_dir, tmp_dir_for
from smallinit.data.mixing import plan_mix
from smallinit.data.sources import DataWarning, Source, SourceStats, iter_pieces, parse_sources, piece_chars_for
from smallinit.data.tokenizer import (
    EOT_TOKEN,
    byte_tokenizer,
    check_vocab_size,
    ensure_eot,
    load_tokenizer,
    resolve_tokenizer_spec,
    token_dtype,
    train_bpe,
)

META_FORMAT = "smallinit-tokens"
META_VERSION = 1
BATCH_BYTES = 1 << 20  # text per encode_batch call
BPE_SAMPLE_BYTES = 100_000_000
MIX_TOLERANCE = 0.05  # relative deviation of a token share from its weight that triggers a warning
GATHER_TOKENS = 1 << 22


def prepare_corpus(
    inputs: list[str],
    out_dir: str | os.PathLike,
    tokenizer: str = "bpe",
    vocab_size: int = 8192,
    val_fraction: float = 0.01,
    weights: list[float] | None = None,
    text_field: str = "text",
    seed: int = 0,
    num_workers: int = 2,
    progress: bool = True,
    *,
    max_bytes: int | None = None,
    bpe_sample_bytes: int = BPE_SAMPLE_BYTES,
    command: str | None = None,
    force: bool = False,
) -> dict:
    """Tokenize ``inputs`` into ``out_dir`` and return its meta (also written as ``meta.json``).

    ``weights`` (one per input) set the token share of each source (see :mod:`smallinit.data.mixing`);
    ``max_bytes`` caps the text read per source. ``num_workers`` sets RAYON_NUM_THREADS for the
    tokenizers library unless already set (it is read once per process).

    ``out_dir`` follows the output-folder policy (:mod:`smallinit.core.outputs`): absent or empty, or a previous
    prepared data directory replaced only with ``force`` (runs trained on it would otherwise be silently
    paired with another tokenizer); never an input, a folder holding one or one inside one.
    """
    t_start = time.time()
    inputs = list(inputs)
    _check_args(inputs, vocab_size, val_fraction, weights, num_workers, max_bytes, bpe_sample_bytes)
    tok_kind, tok_path = resolve_tokenizer_spec(tokenizer)
    if tok_kind == "bpe":
        check_vocab_size(vocab_size)
    sources = parse_sources(inputs)  # each input readable, no file read twice (its val would be trained on)
    names = [s.name for s in sources]
    for s in sources:
        s.open(text_field)  # hf: fail now when offline or malformed, before any work
    out = Path(out_dir)
    plan = _check_out_dir(out, inputs, tok_path, force)
    os.environ.setdefault("RAYON_NUM_THREADS", str(num_workers))

    tmp = tmp_dir_for(plan.path)  # beside the folder itself (through a link, beside its target: one filesystem)
    try:
        # 1. tokenizer -------------------------------------------------------------------------
        t0 = time.time()
        if tok_kind == "bpe":
            tok = _train_bpe_on_sample(sources, weights, text_field, vocab_size, max_bytes, bpe_sample_bytes, progress)
        elif tok_kind == "byte":
            tok = byte_tokenizer()
        else:
            tok = load_tokenizer(tok_path)
        eot = ensure_eot(tok)
        tok.save(str(tmp / "tokenizer.json"))
        tok.encode_special_tokens = True  # a literal "<|endoftext|>" in the corpus is text, not a separator
        tokenizer_s = time.time() - t0
        vocab = tok.get_vocab_size(with_added_tokens=True)
        dtype = np.dtype(token_dtype(vocab))

        # 2. encode ------------------------------------------------------------------------------
        t0 = time.time()
        encoded = [
            _encode_source(tok, src, tmp / f"_src{i}.bin", dtype, eot, text_field, max_bytes, progress)
            for i, src in enumerate(sources)
        ]
        encode_s = time.time() - t0

        # 3. mix and 4. write ------------------------------------------------------------------------
        plans = plan_mix([e.piece_tokens for e in encoded], names, weights, val_fraction, seed)
        t0 = time.time()
        train_spans, val_spans = _write_splits(tmp, sources, encoded, plans, dtype, eot)
        write_s = time.time() - t0

        # 5. meta ----------------------------------------------------------------------------------
        src_meta = _sources_meta(sources, encoded, plans, weights, train_spans, val_spans)
        read_bytes = sum(e.stats.bytes for e in encoded)
        meta = {
            "format": META_FORMAT,
            "format_version": META_VERSION,
            "vocab_size": vocab,
            "dtype": dtype.name,
            "eot_token": EOT_TOKEN,
            "eot_id": eot,
            "bos_id": eot,
            "tokenizer": {
                "kind": tok_kind,
                "source": str(tok_path) if tok_path else None,
                "vocab_size_requested": vocab_size if tok_kind == "bpe" else None,
                "bpe_sample_bytes": bpe_sample_bytes if tok_kind == "bpe" else None,
            },
            "tokens": {"train": _span_total(train_spans), "val": _span_total(val_spans)},
            "files": {"train": "train.bin", "val": "val.bin", "tokenizer": "tokenizer.json"},
            "sources": src_meta,
            "train_sources": train_spans,
            "val_sources": val_spans,
            "val_fraction": val_fraction,
            "weights": None if weights is None else [float(w) for w in weights],
            "seed": seed,
            "text_field": text_field,
            "max_bytes": max_bytes,
            "command": command
            or _api_command(inputs, out_dir, tokenizer, vocab_size, val_fraction, weights, text_field, seed, max_bytes),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "timing_s": {
                "tokenizer": round(tokenizer_s, 3),
                "encode": round(encode_s, 3),
                "write": round(write_s, 3),
                "total": round(time.time() - t_start, 3),
            },
            "text_bytes": read_bytes,
            "encode_mb_per_s": read_bytes / 1e6 / max(encode_s, 1e-9),
        }
        with open(tmp / "meta.json", "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1, ensure_ascii=False)
            f.write("\n")
        install_dir(tmp, plan)
    except OSError as e:  # a full disk, a folder made read-only meanwhile: one line, nothing left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(
            f"{out}: could not write the prepared data ({e.strerror or e}"
            f"{': ' + str(e.filename) if getattr(e, 'filename', None) else ''}); nothing was changed"
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


# ---------------------------------------------------------------------------------------------
def _check_args(inputs, vocab_size, val_fraction, weights, num_workers, max_bytes, bpe_sample_bytes) -> None:
    if not inputs:
        raise ConfigError("no INPUT given")
    if not 0 <= val_fraction < 0.5:
        raise ConfigError(f"val fraction must be in [0, 0.5), got {val_fraction}")
    if weights is not None:
        if len(weights) != len(inputs):
            raise ConfigError(f"--weights has {len(weights)} value(s) for {len(inputs)} input(s)")
        if not all(isinstance(w, (int, float)) and np.isfinite(w) and w > 0 for w in weights):
            raise ConfigError(f"weights must be positive numbers, got {list(weights)}")
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ConfigError(f"num_workers must be >= 1, got {num_workers!r}")
    if max_bytes is not None and max_bytes < 1:
        raise ConfigError(f"max bytes must be >= 1, got {max_bytes}")
    if bpe_sample_bytes < 1:
        raise ConfigError(f"BPE sample bytes must be >= 1, got {bpe_sample_bytes}")


def _is_prepared(d: Path) -> bool:
    try:
        return json.loads((d / "meta.json").read_text(encoding="utf-8")).get("format") == META_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _check_out_dir(out: Path, inputs: list[str], tok_path: Path | None, force: bool):
    """The output-folder policy (:mod:`smallinit.core.outputs`) for DIR; DataError naming the reason."""
    from smallinit.core.outputs import check_out_dir

    paths = [
        Path(i[3:].rsplit(":", 1)[0]) if i.startswith("hf:/") else Path(i)
        for i in inputs
        if not i.startswith(("builtin:", "hf:")) or i.startswith("hf:/")
    ]
    if tok_path is not None:
        paths.append(Path(tok_path))
    try:
        return check_out_dir(out, "data", inputs=[p for p in paths if p.exists()], force=force, verb="prepare")
    except ConfigError as e:
        raise DataError(f"{e}; refusing") from None


def _api_command(inputs, out_dir, tokenizer, vocab_size, val_fraction, weights, text_field, seed, max_bytes) -> str:
    return (
        f"smallinit.data.prepare_corpus({inputs!r}, {str(out_dir)!r}, tokenizer={tokenizer!r}, "
        f"vocab_size={vocab_size!r}, val_fraction={val_fraction!r}, weights={weights!r}, "
        f"text_field={text_field!r}, seed={seed!r}, max_bytes={max_bytes!r})"
    )


def _span_total(spans: list) -> int:
    return int(sum(b - a for a, b, _ in spans))


@dataclass
class _Encoded:
    """One source after encoding: its scratch token file and per-piece token counts / doc ends."""

    path: Path
    piece_tokens: np.ndarray  # int64, tokens per piece (<|endoftext|> included at document ends)
    doc_end: np.ndarray  # bool, piece ends a document
    stats: SourceStats
    wall_s: float
    cpu_s: float


def _write_splits(tmp: Path, sources, encoded, plans, dtype, eot) -> tuple[list, list]:
    """Write train.bin / val.bin source by source; return their [start, end, name] spans."""
    train_spans, val_spans = [], []
    n_train = n_val = 0
    with open(tmp / "train.bin", "wb") as ftrain, open(tmp / "val.bin", "wb") as fval:
        for src, enc, plan in zip(sources, encoded, plans):
            writer = _PieceWriter(enc.path, dtype, enc.piece_tokens, enc.doc_end, eot)
            try:
                nv = writer.write(fval, plan.val)
                nt = sum(writer.write(ftrain, plan.pool) for _ in range(plan.full_passes))
                nt += writer.write(ftrain, plan.partial)
            finally:
                writer.close()
            os.remove(enc.path)
            if nv:
                val_spans.append([n_val, n_val + nv, src.name])
            if nt:
                train_spans.append([n_train, n_train + nt, src.name])
            n_val += nv
            n_train += nt
    if n_train == 0:
        raise DataError("the train split is empty (weights leave no source any train tokens)")
    return train_spans, val_spans


def _sources_meta(sources, encoded, plans, weights, train_spans, val_spans) -> list[dict]:
    """Per-source entries of meta.json; warns when a weighted share misses its target by > 5 %."""
    train = {s.name: _span_total([r for r in train_spans if r[2] == s.name]) for s in sources}
    val = {s.name: _span_total([r for r in val_spans if r[2] == s.name]) for s in sources}
    total = sum(train.values()) + sum(val.values())
    total_target = sum(p.target for p in plans)
    out = []
    for i, (src, enc, plan) in enumerate(zip(sources, encoded, plans)):
        st = enc.stats
        natural = int(enc.piece_tokens.sum())
        text_tokens = max(1, natural - st.documents)  # without the <|endoftext|> separators
        share = (train[src.name] + val[src.name]) / total
        target_share = plan.target / total_target
        pool = max(1, int(enc.piece_tokens[plan.pool].sum()))
        out.append(
            {
                "name": src.name,
                "input": src.spec,
                "kind": src.kind,
                "weight": None if weights is None else float(weights[i]),
                "target_share": float(target_share),
                "share": float(share),
                "tokens": {"natural": natural, "train": train[src.name], "val": val[src.name]},
                "repeat": plan.train_tokens(enc.piece_tokens) / pool,  # train tokens / unique train tokens
                "documents": st.documents,
                "pieces": st.pieces,
                "chars": st.chars,
                "bytes": st.bytes,
                "chars_per_token": st.chars / text_tokens,
                "bytes_per_token": st.bytes / text_tokens,
                "encode_s": round(enc.wall_s, 4),
                "encode_cpu_s": round(enc.cpu_s, 4),  # all threads of this process
                "encode_mb_per_s": st.bytes / 1e6 / max(enc.wall_s, 1e-9),
                "invalid_utf8_bytes": st.invalid_bytes,
                "truncated_by_max_bytes": st.truncated,
                "hash": st.digest(),
            }
        )
        if weights is not None and abs(share / target_share - 1) > MIX_TOLERANCE:
            warnings.warn(
                f"source {src.name!r}: token share {share:.3f} is more than {MIX_TOLERANCE:.0%} away from "
                f"its weight share {target_share:.3f} (too few pieces to hit it)",
                DataWarning,
                stacklevel=3,
            )
    return out


def _progress_bar(total, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=True,
    )


def _train_bpe_on_sample(sources, weights, text_field, vocab_size, max_bytes, budget, progress):
    """Train BPE on the first bytes of each source: ``budget`` split by weight (else evenly, smallest
    known sources first, unused budget passed on to the next)."""
    cap = budget if max_bytes is None else min(budget, max_bytes * len(sources))
    order = list(range(len(sources)))
    if weights is None:
        order.sort(key=lambda i: sources[i].total_bytes if sources[i].total_bytes is not None else float("inf"))
    bar = _progress_bar(None, f"BPE sample (vocab {vocab_size})", progress)

    def texts():
        left = cap
        for j, i in enumerate(order):
            if weights is None:
                share = left / (len(order) - j)
            else:
                share = cap * weights[i] / sum(weights)
            limit = share if max_bytes is None else min(share, max_bytes)
            st = SourceStats()
            for text, _ in iter_pieces(sources[i], st, text_field, max(1, int(limit)), warn=False):
                bar.update(len(text.encode("utf-8")))
                yield text
            left -= st.bytes

    try:
        tok = train_bpe(texts(), vocab_size=vocab_size, show_progress=False)
    finally:
        bar.close()
    return tok


def _encode_source(tok, src: Source, path: Path, dtype, eot: int, text_field, max_bytes, progress) -> _Encoded:
    """Encode ``src`` to the scratch token file ``path`` (``<|endoftext|>`` after each document)."""
    t0, c0 = time.time(), time.process_time()
    st = SourceStats()
    lengths = array("q")
    ends = bytearray()
    total = src.total_bytes
    if max_bytes is not None and total is not None:
        total = min(total, max_bytes)
    bar = _progress_bar(total, f"encode {src.name}", progress)
    batch: list[str] = []
    batch_ends: list[bool] = []
    batch_bytes = 0

    def flush(f):
        nonlocal batch, batch_ends, batch_bytes
        if not batch:
            return
        ids = [e.ids for e in tok.encode_batch(batch, add_special_tokens=False)]
        for k, end in enumerate(batch_ends):
            if end:
                ids[k].append(eot)
        n = [len(x) for x in ids]
        arr = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=sum(n))
        f.write(arr.tobytes())
        lengths.extend(n)
        ends.extend(batch_ends)
        bar.update(batch_bytes)
        batch, batch_ends, batch_bytes = [], [], 0

    try:
        with open(path, "wb") as f:
            for text, end in iter_pieces(src, st, text_field, max_bytes, piece_chars_for(src)):
                batch.append(text)
                batch_ends.append(end)
                batch_bytes += len(text.encode("utf-8")) if not text.isascii() else len(text)
                if batch_bytes >= BATCH_BYTES:
                    flush(f)
            flush(f)
    finally:
        bar.close()
    if st.chars == 0:
        raise DataError(f"{src.spec}: empty corpus (no text)")
    return _Encoded(
        path,
        np.frombuffer(lengths, dtype=np.int64).copy(),
        np.frombuffer(bytes(ends), dtype=np.bool_).copy(),
        st,
        time.time() - t0,
        time.process_time() - c0,
    )


class _PieceWriter:
    """Copies chosen pieces of one source's token file into a split file, adding separators at cuts.

    Reads with plain file reads of at most GATHER_TOKENS tokens (no memory map), so memory stays
    bounded whatever the size of the source.
    """

    def __init__(self, path: Path, dtype, piece_tokens: np.ndarray, doc_end: np.ndarray, eot: int):
        self.f = open(path, "rb")
        self.offsets = np.concatenate([[0], np.cumsum(piece_tokens)]).astype(np.int64)
        self.doc_end = doc_end
        self.eot = eot
        self.dtype = np.dtype(dtype)

    def close(self) -> None:
        self.f.close()

    def _read(self, a: int, b: int) -> np.ndarray:
        self.f.seek(a * self.dtype.itemsize)
        out = np.fromfile(self.f, dtype=self.dtype, count=b - a)
        if len(out) != b - a:
            raise DataError(f"{self.f.name}: scratch token file is shorter than expected")
        return out

    def write(self, f, pieces: np.ndarray) -> int:
        """Write ``pieces`` (sorted piece indices) in order; return the number of tokens written.

        Adjacent pieces form a run copied as one slice; each run ends with ``<|endoftext|>``
        (its last piece's own, or an added one when the run stops inside a document).
        """
        if len(pieces) == 0:
            return 0
        brk = np.flatnonzero(np.diff(pieces) != 1)
        first = pieces[np.concatenate([[0], brk + 1])]
        last = pieces[np.concatenate([brk, [len(pieces) - 1]])]
        starts, ends = self.offsets[first], self.offsets[last + 1]
        add_eot = (~self.doc_end[last]).astype(np.int64)
        i, n, written = 0, len(starts), 0
        while i < n:
            if ends[i] - starts[i] > GATHER_TOKENS:  # one long run: stream it in slices
                for a in range(int(starts[i]), int(ends[i]), GATHER_TOKENS):
                    f.write(self._read(a, min(a + GATHER_TOKENS, int(ends[i]))).tobytes())
                if add_eot[i]:
                    f.write(np.array([self.eot], dtype=self.dtype).tobytes())
                written += int(ends[i] - starts[i] + add_eot[i])
                i += 1
                continue
            # runs i..j-1 all lie within one window of GATHER_TOKENS tokens: read it once, gather
            j = max(i + 1, int(np.searchsorted(ends, starts[i] + GATHER_TOKENS, side="right")))
            lo = int(starts[i])
            buf = self._read(lo, int(ends[j - 1]))
            chunk = self._gather(buf, starts[i:j] - lo, ends[i:j] - lo, add_eot[i:j])
            f.write(chunk.tobytes())
            written += len(chunk)
            i = j
        return written

    def _gather(self, buf, starts, ends, add_eot) -> np.ndarray:
        """concat_k(buf[starts[k]:ends[k]] + [eot if add_eot[k]]) by one fancy index."""
        lens = ends - starts
        out_len = lens + add_eot
        out_start = np.cumsum(out_len) - out_len
        idx = np.arange(int(out_len.sum()), dtype=np.int64) + np.repeat(starts - out_start, out_len)
        eot_pos = (out_start + lens)[add_eot.astype(bool)]
        idx[eot_pos] = 0
        out = buf[idx] if len(buf) else np.zeros(len(idx), self.dtype)
        out[eot_pos] = self.eot
        return out
