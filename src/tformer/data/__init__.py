"""Corpora of any size: read as a stream, tokenized once into memory-mapped shards, kept in a cache.

* :mod:`.sources` — what ``--data`` may be (text, folders, JSONL, Parquet, Arrow, a saved ``datasets`` dataset),
  read a piece at a time, and a sample spread over it for training a tokenizer;
* :mod:`.shards` — the shard files (``uint16``/``uint32`` ids) and :class:`TokenStream`, the stream over their
  memory maps that training reads its blocks from;
* :mod:`.stream` — the language model's stream of ids (:func:`prepare_lm`, :func:`open_tokens`);
* :mod:`.prepare` — the cache: a corpus prepared once per tokenizer, checked at every use (sources, tokenizer,
  shards), rebuilt when any changed, written whole or not at all;
* :mod:`.pairs` — translation's sentence pairs: a TSV streamed into shards with a length index (:func:`prepare_pairs`),
  its BPE trained on a sample of the training pairs (:func:`pairs_tokenizers`);
* :mod:`.sentences` — BERT's documents of sentences: each sentence's ids in shards, with an index of the sentences
  and documents, memory-mapped (:class:`Sentences`), its WordPiece trained on a sample (:func:`sentences_tokenizer`).

    tok = corpus_tokenizer("corpus/", "byte_bpe", 8192)    # BPE on a sample, cached
    manifest, stream = open_tokens(prepare_lm("corpus/", tok))
    rows = stream.rows(torch.tensor([0, 1000]), 257, fill=-100)

This package knows files, tokenizers and the cache; it knows nothing about models or training.
"""

from tformer.data.pairs import PairShards, open_pairs, pairs_tokenizers, prepare_pairs
from tformer.data.prepare import (
    TOKENIZER_SAMPLE,
    cache_root,
    corpus_tokenizer,
    fingerprint,
    is_prepared,
    prepared_vocab_size,
    read_manifest,
    tokenizer_hash,
)
from tformer.data.sentences import (
    Sentences,
    held_out_sentences,
    prepare_sentences,
    read_sentences,
    sentences_tokenizer,
)
from tformer.data.shards import ShardWriter, TokenStream, token_dtype
from tformer.data.sources import find_sources, read_documents, read_pieces, sample_text
from tformer.data.stream import open_tokens, prepare_lm

__all__ = [
    "TOKENIZER_SAMPLE",
    "cache_root",
    "corpus_tokenizer",
    "fingerprint",
    "is_prepared",
    "open_tokens",
    "prepare_lm",
    "read_manifest",
    "tokenizer_hash",
    "PairShards",
    "open_pairs",
    "pairs_tokenizers",
    "prepare_pairs",
    "prepared_vocab_size",
    "Sentences",
    "held_out_sentences",
    "prepare_sentences",
    "read_sentences",
    "sentences_tokenizer",
    "ShardWriter",
    "TokenStream",
    "token_dtype",
    "find_sources",
    "read_documents",
    "read_pieces",
    "sample_text",
]
