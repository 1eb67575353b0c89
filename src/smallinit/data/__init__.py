"""Data: corpora -> tokenizer + memory-mapped token shards -> training and validation batches.

Public API::

    prepare_corpus(inputs, out_dir, tokenizer="bpe", vocab_size=8192, val_fraction=0.01, weights=None,
                   text_field="text", seed=0, num_workers=2, progress=True, *, max_bytes=None) -> dict
    load_tokenizer(dir_or_file) -> tokenizers.Tokenizer
    TokenData(dir)                      # .train / .val memmaps, .vocab_size, .eot_id, .bos_id, .tokenizer, .meta
    BatchLoader(tokens, seq_len, global_batch_size, seed, bos_id=None)   # .offsets(step), .get(step, start, count)
    val_batches(tokens, seq_len, batch_size, max_batches=None, bos_id=None)
"""

from smallinit.data.loader import BatchLoader, val_batches, val_offsets
from smallinit.data.prepare import prepare_corpus
from smallinit.data.sources import DataWarning
from smallinit.data.tokenizer import EOT_TOKEN, byte_tokenizer, load_tokenizer, train_bpe
from smallinit.data.tokens import TokenData

__all__ = [
    "EOT_TOKEN",
    "BatchLoader",
    "DataWarning",
    "TokenData",
    "byte_tokenizer",
    "load_tokenizer",
    "prepare_corpus",
    "train_bpe",
    "val_batches",
    "val_offsets",
]
