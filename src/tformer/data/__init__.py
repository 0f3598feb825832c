"""Corpora of any size: read as a stream, tokenized once into memory-mapped shards, kept in a cache.

* :mod:`.sources` — what ``--data`` may be (text, folders, JSONL, Parquet, Arrow, a saved ``datasets`` dataset),
  read a piece at a time, and a sample spread over it for training a tokenizer;
* :mod:`.shards` — the shard files (``uint16``/``uint32`` ids) and :class:`TokenStream`, the stream over their
  memory maps that training reads its blocks from;
* :mod:`.prepare` — the cache: a corpus prepared once per tokenizer, checked at every use (sources, tokenizer,
  shards), rebuilt when any changed, written whole or not at all.

    tok = corpus_tokenizer("corpus/", "byte_bpe", 8192)    # BPE on a sample, cached
    manifest, stream = open_tokens(prepare_lm("corpus/", tok))
    rows = stream.rows(torch.tensor([0, 1000]), 257, fill=-100)

This package knows files, tokenizers and the cache; it knows nothing about models or training.
"""

from tformer.data.prepare import (
    TOKENIZER_SAMPLE,
    cache_root,
    corpus_tokenizer,
    is_prepared,
    open_tokens,
    prepare_lm,
    tokenizer_hash,
)
from tformer.data.shards import ShardWriter, TokenStream, token_dtype
from tformer.data.sources import find_sources, read_documents, read_pieces, sample_text

__all__ = [
    "TOKENIZER_SAMPLE",
    "cache_root",
    "corpus_tokenizer",
    "is_prepared",
    "open_tokens",
    "prepare_lm",
    "tokenizer_hash",
    "ShardWriter",
    "TokenStream",
    "token_dtype",
    "find_sources",
    "read_documents",
    "read_pieces",
    "sample_text",
]
