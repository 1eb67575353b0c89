"""Tokenizers: every one is a Hugging Face ``tokenizers`` ``tokenizer.json``, so all load the same way.

Three kinds (``--tokenizer``):

- ``bpe``  byte-level BPE trained offline on (a sample of) the corpus. Pre-tokenization is the GPT-2
  regex over UTF-8 bytes mapped to printable characters (``ByteLevel``, no prefix space, no normalizer),
  so ``decode(encode(s)) == s`` for every string: English, Chinese, emoji, rare CJK (4-byte UTF-8).
- ``byte`` raw bytes: token id b is byte b (0..255), plus the specials. Built with the same ``ByteLevel``
  machinery (a BPE model with no merges), so it is a ``tokenizer.json`` like the others.
- a path to an existing ``tokenizer.json`` (or a directory holding one).

Specials: ``<|endoftext|>`` separates documents and doubles as BOS. It is always present: a loaded
tokenizer without it gets it added as a special token.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from smallinit.core.errors import ConfigError, DataError

EOT_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = [EOT_TOKEN]
MIN_BPE_VOCAB = 256 + len(SPECIAL_TOKENS) + 1  # the byte alphabet, the specials and at least one merge


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map byte -> printable character (the alphabet of ``ByteLevel``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _byte_level(tok: Tokenizer, use_regex: bool = True) -> Tokenizer:
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = None
    return tok


def byte_tokenizer() -> Tokenizer:
    """Raw byte tokenizer: id b <-> byte b for b in 0..255, then ``<|endoftext|>`` = 256."""
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = _byte_level(Tokenizer(models.BPE(vocab=vocab, merges=[])), use_regex=False)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def train_bpe(
    texts: Iterable[str],
    vocab_size: int = 8192,
    min_frequency: int = 2,
    show_progress: bool = False,
    length: int | None = None,
) -> Tokenizer:
    """Train a byte-level BPE of at most ``vocab_size`` tokens (specials first: ``<|endoftext|>`` = 0).

    The vocabulary may come out smaller than requested when the text has too few distinct pairs.
    """
    check_vocab_size(vocab_size)
    tok = _byte_level(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    return tok


def check_vocab_size(vocab_size: int) -> None:
    if not isinstance(vocab_size, int) or not MIN_BPE_VOCAB <= vocab_size <= 2**31 - 1:
        raise ConfigError(f"vocab size must be an integer >= {MIN_BPE_VOCAB} for BPE, got {vocab_size!r}")


def load_tokenizer(dir_or_file: str | Path) -> Tokenizer:
    """Load ``tokenizer.json`` from a file path or from a directory that holds one."""
    p = Path(dir_or_file)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise DataError(f"{p}: no tokenizer file")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # tokenizers raises a plain Exception on malformed JSON
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{p}: not a valid tokenizer.json ({msg})") from None


def resolve_tokenizer_spec(spec: str) -> tuple[str, Path | None]:
    """``bpe`` | ``byte`` | path to a tokenizer.json (or a directory holding one) -> (kind, path)."""
    if spec in ("bpe", "byte"):
        return spec, None
    p = Path(spec).expanduser()
    if p.is_file() or (p.is_dir() and (p / "tokenizer.json").is_file()):
        return "file", p
    raise ConfigError(f"unknown tokenizer {spec!r}: use bpe, byte, or the path of a tokenizer.json")


def ensure_eot(tok: Tokenizer) -> int:
    """Id of ``<|endoftext|>``, adding it as a special token when the tokenizer lacks it."""
    i = tok.token_to_id(EOT_TOKEN)
    if i is None:
        tok.add_special_tokens(SPECIAL_TOKENS)
        i = tok.token_to_id(EOT_TOKEN)
    return int(i)


def token_dtype(vocab_size: int) -> str:
    """``uint16`` when every id fits (vocab_size <= 65536), else ``uint32``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"
