"""Documents of sentences of any size: read a line at a time, tokenized once into shards with a sentence index.

    tok = sentences_tokenizer("corpus.txt", 8000, valid=0.05)   # a WordPiece on the training sentences, cached
    directory = prepare_sentences("corpus.txt", tok)            # the first time: reads, encodes, writes; then: checks
    corpus = Sentences.open(directory)                         # the index and the ids memory-mapped
    train, valid = corpus.split(len(corpus) - held_out_sentences(len(corpus), 0.05))
    ids = train.ids(0)                                         # the first sentence's ids (int64)

What a sentence is (:func:`read_sentences`, BERT's rules): in a text file each non-blank line (stripped) is one
sentence and a blank line ends a document; a ``.tsv`` file is one document of its first column's sentences, a
sentence repeated on the next line read once (Tatoeba repeats a source per translation); a file ends its document,
and so does each record of a JSONL, Parquet or Arrow file (its text split into lines as a text file's). The
sentences are encoded a batch at a time across the cores (:meth:`~tformer.tokenizers.Tokenizer.encode_arrays`). The
prepared folder (through :func:`tformer.data.prepare.prepared`: the cache, its checks, whole or not at all) holds::

    shard-00000.bin ...  the ids of the sentences, one after another (uint16, or uint32 past 65,536 ids)
    sentences.bin        (N, 2) little-endian int64: each sentence's offset in the shards and its length in ids
    documents.bin        (D,) little-endian int64: the first sentence of each document
    tokenizer/           the tokenizer the ids are of

All three are written as they are read and memory-mapped when used: neither the preparation nor training holds a
Python object per sentence. :func:`held_out_sentences` is the split's one rule (the last sentences, a fraction capped
at a count or a count), shared by the tokenizer's sample, which is trained on the training sentences only when the
corpus is no larger than the sample (all of them, as an in-memory run trains it), else on sentences spread evenly
over the whole corpus.

This module knows files, text and tokenizers; it knows nothing about models or training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tformer.data import shards as shards_module
from tformer.data.prepare import (
    FORMAT,
    MANIFEST,
    TOKENIZER_SAMPLE,
    cache_key,
    cache_root,
    file_entry,
    prepared,
    progress_line,
    read_manifest,
    size_text,
    source_records,
    stale,
)
from tformer.data.shards import ShardWriter, TokenStream, token_dtype
from tformer.data.sources import corpus_bytes, find_sources, read_pieces
from tformer.files import staged_dir
from tformer.text import split_lines
from tformer.tokenizers import Tokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "read_sentences",
    "held_out_sentences",
    "sentences_tokenizer",
    "prepare_sentences",
    "Sentences",
]

_INDEX = np.dtype("<i8")  # the index files' integers
_BATCH_SENTENCES = 8192  # sentences encoded in one call (across the cores; their ids held until written)
_REPORT_S = 5.0  # seconds between two progress lines


def read_sentences(files: list[Path], text_field: str = "text") -> Iterator[tuple[bool, str]]:
    """``(starts_document, sentence)`` for each sentence of ``files`` in order, read a piece at a time (see the
    module for what a sentence and a document are)."""
    for path in files:
        tsv = path.suffix == ".tsv"
        new, previous = True, None  # previous: the .tsv's first column on the line before (empty or not)
        for starts, text in read_pieces([path], text_field):
            new = new or starts
            for raw in split_lines(text):
                line = raw.strip()
                if tsv:
                    if not line:
                        continue
                    first = line.split("\t")[0].strip()
                    if first and first != previous:
                        yield new, first
                        new = False
                    previous = first
                elif line:
                    yield new, line
                    new = False
                else:
                    new = True


def held_out_sentences(total: int, valid: float, cap: int | None = None) -> int:
    """How many of ``total`` sentences are held out from the end: a fraction ``valid`` < 1 (at least 3, for a
    sentence pair and another sentence; at most ``cap``), a count ``valid`` >= 1, none for 0. Too few left to train
    on (fewer than 3) is a ``ValueError``."""
    if total < 3:  # empty files, or one line: no split leaves enough, whatever valid is
        raise ValueError(f"the text holds {total} sentence(s), too few to train on: it needs at least 3")
    if valid >= 1 or valid == 0:
        n = int(valid)
    else:
        n = max(round(valid * total), 3)
        n = min(n, max(cap, 3)) if cap is not None else n
    if n >= total - 2:
        raise ValueError(f"valid={valid} leaves too little training text ({total} sentences in all)")
    return n


def sentences_tokenizer(
    data: str | Path,
    vocab_size: int | None,
    *,
    valid: float = 0.05,
    valid_cap: int | None = None,
    sample: int = TOKENIZER_SAMPLE,
    text_field: str = "text",
    cache: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> Tokenizer:
    """A WordPiece of ``vocab_size`` ids trained on the sentences of ``data``: when the corpus is no larger than
    ``sample`` bytes, on its training sentences (all but the :func:`held_out_sentences` of ``valid`` and
    ``valid_cap``), else on about ``sample`` bytes of sentences spread evenly over the whole corpus. Kept in the
    cache, so the next run on the same corpus and settings loads it."""
    files = find_sources(data)
    sources = source_records(files)
    total = corpus_bytes(files)
    small = total <= sample
    settings = dict(
        vocab_size=vocab_size,
        text_field=text_field,
        sample=sample,
        valid=valid if small else None,  # a sample spread over a larger corpus does not depend on the split
        valid_cap=valid_cap if small else None,
    )
    key = cache_key(format=FORMAT, kind="sentences-wordpiece", sources=[s["path"] for s in sources], **settings)
    directory = cache_root(cache) / f"sentence-tokenizer-{key}"
    if directory.is_dir():
        problem = stale(directory, sources, "", "tokenizer")
        if problem is None:
            return load_tokenizer(directory / "tokenizer")
        log(f"data cache {directory}: {problem}: training the tokenizer again")
    start = time.perf_counter()
    texts: Iterator[str]
    if small:  # a first pass counts the sentences, the second stops before the held-out ones
        count = sum(1 for _ in read_sentences(files, text_field))
        kept = count - held_out_sentences(count, valid, valid_cap)
        texts = islice((s for _, s in read_sentences(files, text_field)), kept)
        said = f"the {kept:,} training sentences ({size_text(total)} of text)"
    else:
        texts = _spread(files, sample / total, text_field)
        said = f"a {size_text(sample)} sample of {size_text(total)} (--tokenizer-sample)"
    tokenizer = train_tokenizer("wordpiece", texts, vocab_size)
    log(f"tokenizer: wordpiece, {tokenizer.vocab_size:,} ids, from {said} in {time.perf_counter() - start:.1f} s")
    with staged_dir(directory) as work:
        tokenizer.save(work / "tokenizer")
        manifest = {"kind": "tformer-tokenizer", "format": FORMAT, "sources": sources, **settings}
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return tokenizer


def _spread(files: list[Path], ratio: float, text_field: str) -> Iterator[str]:
    """Sentences spread evenly over ``files``, about ``ratio`` of their bytes: a sentence is taken whenever those
    taken so far are fewer bytes than ``ratio`` of those read."""
    seen = taken = 0
    for _, sentence in read_sentences(files, text_field):
        n = len(sentence.encode("utf-8")) + 1
        seen += n
        if taken < seen * ratio:
            yield sentence
            taken += n


def prepare_sentences(
    data: str | Path,
    tokenizer: Tokenizer,
    *,
    text_field: str = "text",
    cache: str | Path | None = None,
    shard_tokens: int | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """The folder of ``data``'s sentences in ``tokenizer``'s ids, with their index (see the module): found in the
    cache and checked, else prepared. ``data`` may be a prepared folder itself (then checked, never rebuilt).
    ``shard_tokens``: ids per shard (default :data:`tformer.data.shards.SHARD_TOKENS`)."""

    def build(work: Path, files: list[Path]) -> dict:
        dtype = token_dtype(tokenizer.vocab_size)
        writer = ShardWriter(work, dtype, shard_tokens or shards_module.SHARD_TOKENS)
        total, start = corpus_bytes(files), time.perf_counter()
        last_report, done, counts = start, 0, {"sentences": 0, "documents": 0}
        batch: list[str] = []
        starts: list[bool] = []
        with open(work / "sentences.bin", "wb") as spans, open(work / "documents.bin", "wb") as documents:

            def flush() -> None:
                arrays = tokenizer.encode_arrays(batch)
                lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
                offsets = writer.count + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
                _write(spans, np.stack([offsets, lengths], axis=1))
                firsts = counts["sentences"] + np.flatnonzero(np.asarray(starts, dtype=bool))
                _write(documents, firsts)
                if arrays:
                    writer.write(np.concatenate(arrays))
                counts["sentences"] += len(arrays)
                counts["documents"] += len(firsts)
                batch.clear()
                starts.clear()

            for begins, sentence in read_sentences(files, text_field):
                batch.append(sentence)
                starts.append(begins)
                done += len(sentence) + 1
                if len(batch) >= _BATCH_SENTENCES:
                    flush()
                    now = time.perf_counter()
                    if now - last_report >= _REPORT_S:
                        last_report = now
                        log(progress_line(done, total, now - start, writer.count))
            if batch:
                flush()
        shards = writer.close()
        log(
            f"prepared: {counts['documents']:,} document(s), {counts['sentences']:,} sentences, {writer.count:,} ids "
            f"in {len(shards)} {dtype} shard(s)"
        )
        index = [file_entry(work / name) for name in ("sentences.bin", "documents.bin")]
        return {
            "dtype": dtype,
            "documents": counts["documents"],
            "sentences": counts["sentences"],
            "tokens": writer.count,
            "shards": shards,
            "files": shards + index,
        }

    key = {"text_field": text_field, "layout": "sentences-1"}
    return prepared("bert", data, tokenizer, build, key=key, cache=cache, log=log)


def _write(f: BinaryIO, array: np.ndarray) -> None:
    f.write(np.ascontiguousarray(array, dtype=_INDEX).tobytes())


def _map(path: Path, columns: int = 1) -> np.ndarray:
    """An index file memory-mapped read-only ((N,) or (N, columns) int64); an empty one as an empty array."""
    if path.stat().st_size == 0:
        return np.zeros((0, columns) if columns > 1 else 0, dtype=_INDEX)
    array = np.memmap(path, dtype=_INDEX, mode="r")
    return array.reshape(-1, columns) if columns > 1 else array


class Sentences:
    """Sentences ``lo`` to ``hi`` of a corpus's documents: the ids of each (:meth:`ids`) and the documents' sizes
    (:meth:`document_sizes`), from a prepared folder (:meth:`open`: memory-mapped) or from ids in memory
    (:meth:`of`). :meth:`split` cuts it in two views; a document the cut falls in is cut too."""

    def __init__(
        self, stream: TokenStream, spans: np.ndarray, firsts: np.ndarray, lo: int = 0, hi: int | None = None
    ) -> None:
        self.stream, self.spans, self.firsts = stream, spans, firsts  # (N, 2) offset, length; (D,) first sentences
        self.lo, self.hi = lo, len(spans) if hi is None else hi

    @classmethod
    def open(cls, directory: str | Path) -> Sentences:
        """The sentences of a folder :func:`prepare_sentences` wrote."""
        directory = Path(directory)
        manifest = read_manifest(directory)
        if manifest is None or manifest.get("task") != "bert":
            raise FileNotFoundError(f"{str(directory)!r} holds no {MANIFEST} of prepared sentences")
        stream = TokenStream.open(directory, manifest["shards"], manifest["dtype"])
        return cls(stream, _map(directory / "sentences.bin", 2), _map(directory / "documents.bin"))

    @classmethod
    def of(cls, documents: list[list[list[int]]]) -> Sentences:
        """Documents of encoded sentences held in memory (each a list of ids)."""
        flat = [ids for doc in documents for ids in doc]
        lengths = np.asarray([len(ids) for ids in flat], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(flat) else lengths
        sizes = np.asarray([len(doc) for doc in documents if doc], dtype=np.int64)
        firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
        ids = np.asarray([i for sentence in flat for i in sentence], dtype=np.int64)
        return cls(TokenStream.of(ids), np.stack([offsets, lengths], axis=1).reshape(-1, 2), firsts)

    def __len__(self) -> int:
        return self.hi - self.lo

    def split(self, at: int) -> tuple[Sentences, Sentences]:
        """``(self[:at], self[at:])``, views."""
        at = self.lo + max(0, min(at, len(self)))
        return (
            Sentences(self.stream, self.spans, self.firsts, self.lo, at),
            Sentences(self.stream, self.spans, self.firsts, at, self.hi),
        )

    def ids(self, i: int, limit: int | None = None) -> np.ndarray:
        """The ids of sentence ``i`` of this view (int64), at most its first ``limit``."""
        offset, length = (int(x) for x in self.spans[self.lo + i])
        return self.stream.read(offset, offset + (length if limit is None else min(length, limit)))

    def document_sizes(self) -> np.ndarray:
        """The sentences of each document in this view, in order (a document cut by the view: its part in it)."""
        if len(self) == 0:
            return np.zeros(0, dtype=np.int64)
        inner = self.firsts[np.searchsorted(self.firsts, self.lo, "right") : np.searchsorted(self.firsts, self.hi)]
        return np.diff(np.concatenate([[self.lo], np.asarray(inner, dtype=np.int64), [self.hi]])).astype(np.int64)
