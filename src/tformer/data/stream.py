"""The language model's stream, prepared once: a corpus's documents in one tokenizer's ids, in shards in the cache.

    directory = prepare_lm("corpus/", tokenizer)          # the first time: reads, encodes, writes; then: checks
    manifest, stream = open_tokens(directory)            # the memory-mapped stream of ids

A language-model corpus becomes one stream: its documents joined with the tokenizer's end of text (as
:func:`tformer.lm.data.encode_documents` joins them in memory), encoded a batch of pieces at a time across the cores
(:meth:`~tformer.tokenizers.Tokenizer.encode_arrays`), written into :class:`~tformer.data.shards.ShardWriter` shards.
Neither the text nor a Python list of its ids is ever held whole. The cache, its checks and its folders are
:mod:`tformer.data.prepare`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tformer.data import shards as shards_module
from tformer.data.prepare import MANIFEST, prepared, progress_line, read_manifest
from tformer.data.shards import ShardWriter, TokenStream, token_dtype
from tformer.data.sources import NEWLINES, corpus_bytes, read_pieces
from tformer.tokenizers import Tokenizer

__all__ = ["prepare_lm", "open_tokens"]

_BATCH_BYTES = 4 << 20  # text encoded in one call (across the cores; its ids held until written)
_BATCH_PIECES = 4096
_REPORT_S = 5.0  # seconds between two progress lines


def prepare_lm(
    data: str | Path,
    tokenizer: Tokenizer,
    *,
    text_field: str = "text",
    cache: str | Path | None = None,
    shard_tokens: int | None = None,
    log: Callable[[str], None] = print,
    flag: str | None = None,
) -> Path:
    """The folder of ``data``'s language-model stream in ``tokenizer``'s ids: found in the cache and checked, else
    prepared (see the module). ``data`` may be a prepared folder itself (then checked, never rebuilt).
    ``shard_tokens``: ids per shard (default :data:`tformer.data.shards.SHARD_TOKENS`). ``flag``: the argument an
    empty text is refused under while it is prepared, with no folder kept (None: an empty text is prepared as such)."""
    eos = tokenizer.eos_id
    if eos is None:
        raise ValueError(f"this {tokenizer.kind} tokenizer has no end-of-text token to join the documents with")

    def build(work: Path, files: list[Path]) -> dict:
        dtype = token_dtype(tokenizer.vocab_size)
        writer = ShardWriter(work, dtype, shard_tokens or shards_module.SHARD_TOKENS)
        total, start = corpus_bytes(files), time.perf_counter()
        last_report, documents, done, size = start, 0, 0, 0
        batch: list[str] = []
        starts: list[bool] = []

        def flush() -> None:
            nonlocal documents
            for begins, ids in zip(starts, tokenizer.encode_arrays(batch)):
                if begins:
                    if documents:
                        writer.write([eos])
                    documents += 1
                writer.write(ids)
            batch.clear()
            starts.clear()

        for begins, text in read_pieces(files, text_field):
            batch.append(text)
            starts.append(begins)
            size += len(text)
            done += len(text)
            if size >= _BATCH_BYTES or len(batch) >= _BATCH_PIECES:
                flush()
                size = 0
                now = time.perf_counter()
                if now - last_report >= _REPORT_S:
                    last_report = now
                    log(progress_line(done, total, now - start, writer.count))
        flush()
        shards = writer.close()
        if not writer.count and flag is not None:  # refused before "prepared:" is said, no folder kept
            raise ValueError(f"{flag} {data}: the text is empty: no tokens to train on")
        log(f"prepared: {documents:,} document(s), {writer.count:,} ids in {len(shards)} {dtype} shard(s)")
        return {"dtype": dtype, "documents": documents, "tokens": writer.count, "shards": shards, "files": shards}

    return prepared(
        "lm", data, tokenizer, build, key={"text_field": text_field, "newlines": NEWLINES}, cache=cache, log=log
    )


def open_tokens(directory: str | Path) -> tuple[dict, TokenStream]:
    """The manifest and the memory-mapped stream of a prepared folder."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        raise FileNotFoundError(f"{str(directory)!r} holds no {MANIFEST}: not a prepared corpus")
    return manifest, TokenStream.open(directory, manifest["shards"], manifest["dtype"])
