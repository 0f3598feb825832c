"""Sentence pairs of any size: a TSV read a line at a time, tokenized once into shards with a length index.

    src_tok, tgt_tok = pairs_tokenizers("pairs.tsv", 8000, joint=True, seed=0, valid=0.05, test=0.05)
    directory = prepare_pairs("pairs.tsv", src_tok, tgt_tok)   # the first time: reads, encodes, writes; then: checks
    pairs = open_pairs(directory)                              # the index in memory, the ids memory-mapped
    src, tgt = pairs.ids(0)

A TSV holds ``source<TAB>target[<TAB>attribution]`` lines (Tatoeba / manythings.org). Each pair is normalised
(:func:`tformer.text.normalize`) and filtered (an empty side, a side over ``max_chars`` characters: dropped and
counted) exactly as the in-memory reader of :mod:`tformer.translation.pairs` does, then encoded a batch of pairs at a
time across the cores (:meth:`~tformer.tokenizers.Tokenizer.encode_arrays`). The prepared folder (through
:func:`tformer.data.prepare.prepared`: the cache, its checks, whole or not at all) holds::

    shard-00000.bin ...  the ids: each pair's source ids, then its target ids (uint16, or uint32 past 65,536 ids)
    lengths.npy          (N, 3): each pair's source ids, target ids and text bytes (uint16, or uint32 past 65,535);
                         where a pair starts in the shards and in text.bin is their running sum
    groups.npy           (N,) int32: the rank of its source sentence among the distinct ones, sorted (the split
                         holds out whole source sentences, as :func:`tformer.translation.pairs.split_pairs` does)
    text.bin             the pairs' normalised text (``source<TAB>target\\n``): the held-out pairs are read back
                         from it, for BLEU and ``OUT/data/*.tsv``
    tokenizer/           src_tokenizer.json and tgt_tokenizer.json

Training holds where each training pair starts and its two lengths (16 bytes a pair) and no Python object per pair;
the preparation holds each distinct source sentence once (to rank them), never the pairs. :func:`held_out_positions`
is the split's one rule (a part given as a fraction of the source sentences capped at ``valid_cap``), shared by the
tokenizer's sample, which is trained on the training pairs only: all of them when their text is no larger than
``sample`` bytes, else pairs spread evenly over them.

This module knows files, text and tokenizers; it knows nothing about models or training.
"""

from __future__ import annotations

import json
import random
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tformer.data import shards as shards_module
from tformer.data.prepare import (
    FORMAT,
    MANIFEST,
    TOKENIZER_SAMPLE,
    cache_key,
    cache_root,
    damaged_file,
    file_entry,
    prepared,
    read_manifest,
    size_text,
    source_records,
    stale,
)
from tformer.data.shards import ShardWriter, TokenStream, token_dtype
from tformer.data.sources import corpus_bytes, find_sources
from tformer.files import staged_dir
from tformer.text import TSV_COLUMNS, decode_utf8, normalize
from tformer.tokenizers import Tokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "MAX_CHARS",
    "read_pairs",
    "keep_pair",
    "held_out_positions",
    "shuffled",
    "pairs_tokenizers",
    "prepare_pairs",
    "open_pairs",
    "PairShards",
]

MAX_CHARS = 300  # a side longer than this many characters drops the pair (tformer.translation.pairs.filter_pairs)
_BATCH_PAIRS = 4096  # pairs encoded in one call (across the cores)
_REPORT_S = 5.0
_READ = 1 << 20  # bytes of text.bin read at a time
SHUFFLE_KEPT_FROM = 100_000  # source sentences from which the split's shuffle is kept in the cache (:func:`shuffled`)


def read_pairs(files: list[Path]) -> Iterator[tuple[str, str]]:
    """The normalised ``(source, target)`` of each line of the TSV ``files`` that is not blank, read a line at a time;
    a line of another number of columns is a ``ValueError`` naming ``FILE:LINE`` (as :func:`tformer.text.read_tsv`)."""
    for path in files:
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                line = decode_utf8(raw, str(path)) if n == 1 else decode_utf8(raw, str(path), n)
                line = line.removesuffix("\n").removesuffix("\r")
                if not line.strip():  # a blank line, of spaces too, holds no pair (as read_tsv skips it)
                    continue
                cols = line.split("\t")
                if len(cols) not in TSV_COLUMNS:
                    raise ValueError(
                        f"{path}:{n}: expected 2 or 3 tab-separated columns (source, target, optional attribution), "
                        f"got {len(cols)}"
                    )
                yield normalize(cols[0]), normalize(cols[1])


def keep_pair(src: str, tgt: str, max_chars: int = MAX_CHARS) -> str | None:
    """Why the pair is dropped (``"empty"``, ``"too_long"``), or None when it is kept (``filter_pairs``' rule)."""
    if not src or not tgt:
        return "empty"
    if len(src) > max_chars or len(tgt) > max_chars:
        return "too_long"
    return None


def held_out_positions(
    n_sources: int,
    seed: int,
    valid: float,
    test: float,
    valid_cap: int | None = None,
    cache: str | Path | None = None,
) -> tuple[np.ndarray, int, int, int]:
    """Where each of ``n_sources`` distinct source sentences (by sorted rank) lands: ``(position, n_valid, test_lo,
    test_hi)``, the sentence of rank r held out for validation when ``position[r] < n_valid``, for the test when
    ``test_lo <= position[r] < test_hi``, else trained on. The positions are those of the sorted sentences shuffled
    by ``random.Random(seed)`` (:func:`shuffled`, kept in ``cache``); ``valid``/``test``: fractions of the sentences,
    or counts when >= 1. A fraction of validation sentences over ``valid_cap`` is cut to it, the rest trained on (the
    test part stays where it was)."""
    asked = int(valid) if valid >= 1 else round(valid * n_sources)
    n_test = int(test) if test >= 1 else round(test * n_sources)
    if asked + n_test >= n_sources:
        raise ValueError(
            f"valid + test ({asked} + {n_test}) leave no training data out of {n_sources} source sentences"
        )
    n_valid = min(asked, valid_cap) if valid < 1 and valid_cap is not None else asked
    order = shuffled(n_sources, seed, cache)
    position = np.empty(n_sources, dtype=order.dtype)
    position[order] = np.arange(n_sources, dtype=order.dtype)
    return position, n_valid, asked, asked + n_test


def shuffled(n: int, seed: int, cache: str | Path | None = None) -> np.ndarray:
    """``range(n)`` shuffled as ``random.Random(seed).shuffle`` shuffles a list (int32 up to 2**31). Python's shuffle
    takes about 2 s for 5M sentences, so from :data:`SHUFFLE_KEPT_FROM` on the order is kept in the cache (checked by
    its SHA-256, written whole or not at all) and the next run with that seed reads it in milliseconds."""
    if n < SHUFFLE_KEPT_FROM:
        return _shuffle(n, seed)
    directory = cache_root(cache) / f"shuffle-{n}-{seed}"
    manifest = read_manifest(directory)
    if manifest is not None and manifest.get("format") == FORMAT and damaged_file(directory, manifest) is None:
        return np.load(directory / "order.npy")
    order = _shuffle(n, seed)
    try:
        with staged_dir(directory) as work:
            np.save(work / "order.npy", order)
            entry = file_entry(work / "order.npy")
            manifest = {"kind": "tformer-shuffle", "format": FORMAT, "n": n, "seed": seed, "files": [entry]}
            (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
    except OSError:  # a cache that cannot be written (read-only, full): this run has its order all the same
        pass
    return order


def _shuffle(n: int, seed: int) -> np.ndarray:
    order = array("q", range(n))  # 8 bytes a sentence, not a Python int each: the same swaps as a list's
    random.Random(seed).shuffle(order)
    return np.frombuffer(order, dtype=np.int64).astype(np.int32 if n < 2**31 else np.int64)


def _ranks(first_ids: array, distinct: dict[str, int]) -> np.ndarray:
    """Each pair's source rank among the distinct sources (sorted), from the id of its source's first sight."""
    rank_of_id = np.empty(len(distinct), dtype=np.int64)
    rank_of_id[np.asarray([distinct[s] for s in sorted(distinct)], dtype=np.int64)] = np.arange(len(distinct))
    return rank_of_id[np.frombuffer(first_ids, dtype=np.int64)] if len(first_ids) else np.zeros(0, np.int64)


def pairs_tokenizers(
    data: str | Path,
    vocab_size: int,
    joint: bool = True,
    *,
    seed: int = 0,
    valid: float = 0.05,
    test: float = 0.05,
    valid_cap: int | None = None,
    max_chars: int = MAX_CHARS,
    sample: int = TOKENIZER_SAMPLE,
    cache: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Tokenizer, Tokenizer]:
    """BPE tokenizers ``(source, target)`` (one shared when ``joint``) trained on the training pairs of the TSV
    ``data`` (the split of :func:`held_out_positions` for ``seed``, ``valid``, ``test``, ``valid_cap``): all of them
    when their text is no larger than ``sample`` bytes, else about ``sample`` bytes of pairs spread evenly over them.
    Kept in the cache, so the next run on the same pairs and settings loads them."""
    files = find_sources(data)
    sources = source_records(files)
    settings = dict(
        vocab_size=vocab_size, joint=joint, seed=seed, valid=valid, test=test, valid_cap=valid_cap, max_chars=max_chars
    )
    key = cache_key(format=FORMAT, kind="pairs", sources=[s["path"] for s in sources], sample=sample, **settings)
    directory = cache_root(cache) / f"pair-tokenizer-{key}"
    if directory.is_dir():
        problem = stale(directory, sources, "", "tokenizer")
        if problem is None:
            return _load_pair(directory / "tokenizer", joint)
        log(f"data cache {directory}: {problem}: training the tokenizers again")
    start = time.perf_counter()
    distinct: dict[str, int] = {}
    first_ids, sizes = array("q"), array("q")
    for src, tgt in read_pairs(files):  # the first pass: which pairs train, and their size
        if keep_pair(src, tgt, max_chars) is None:
            first_ids.append(distinct.setdefault(src, len(distinct)))
            sizes.append(len(src.encode()) + len(tgt.encode()))
    if not distinct:
        raise ValueError(f"--data {str(data)!r} holds no usable pairs (each empty, or a side over {max_chars} chars)")
    position, n_valid, test_lo, test_hi = held_out_positions(len(distinct), seed, valid, test, valid_cap, cache)
    where = position[_ranks(first_ids, distinct)]
    del distinct
    trains = (where >= n_valid) & ((where < test_lo) | (where >= test_hi))
    total = int(np.asarray(sizes, dtype=np.int64)[trains].sum())
    ratio = min(sample / max(total, 1), 1.0)

    def texts(sides: tuple[int, ...]) -> Iterator[str]:
        """The ``sides`` (0 source, 1 target) of the training pairs, sampled (the second pass)."""
        kept, credit = -1, 0.0
        for pair in read_pairs(files):
            if keep_pair(*pair, max_chars) is not None:
                continue
            kept += 1
            if not trains[kept]:
                continue
            credit += sizes[kept] * ratio  # a pair is taken once the bytes passed earn its own: evenly spread
            if credit >= sizes[kept] or ratio >= 1:
                credit -= sizes[kept]
                yield from (pair[s] for s in sides)

    if joint:
        src_tok = tgt_tok = train_tokenizer("bpe", texts((0, 1)), vocab_size)
    else:
        src_tok, tgt_tok = (
            train_tokenizer("bpe", texts((0,)), vocab_size),
            train_tokenizer("bpe", texts((1,)), vocab_size),
        )
    said = f"a {size_text(int(total * ratio))} sample (--tokenizer-sample) of " if ratio < 1 else ""
    log(
        f"tokenizer: bpe, {src_tok.vocab_size:,} ids{' (joint)' if joint else ' each side'}, from {said}the "
        f"{int(trains.sum()):,} training pairs ({size_text(total)} of text) in {time.perf_counter() - start:.1f} s"
    )
    with staged_dir(directory) as work:
        src_tok.save(work / "tokenizer", prefix="src_")
        tgt_tok.save(work / "tokenizer", prefix="tgt_")
        manifest = {"kind": "tformer-tokenizer", "format": FORMAT, "sources": sources, "sample": sample, **settings}
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return src_tok, tgt_tok


def _load_pair(directory: Path, joint: bool) -> tuple[Tokenizer, Tokenizer]:
    """The ``src_`` and ``tgt_`` tokenizers saved in ``directory`` (one object for both when ``joint``)."""
    src = load_tokenizer(directory, prefix="src_")
    return (src, src) if joint else (src, load_tokenizer(directory, prefix="tgt_"))


def prepare_pairs(
    data: str | Path,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    max_chars: int = MAX_CHARS,
    cache: str | Path | None = None,
    shard_tokens: int | None = None,
    tokenizer_split: dict | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """The folder of the TSV ``data``'s pairs in the tokenizers' ids (see the module): found in the cache and checked,
    else prepared. The source is encoded as the model reads it (``add_special_tokens=True``: an Opus-MT source ends
    with ``</s>``), the target bare. ``data`` may be a prepared folder itself (then checked, never rebuilt).
    ``shard_tokens``: ids per shard (default :data:`tformer.data.shards.SHARD_TOKENS`). ``tokenizer_split``: the
    ``seed``, ``valid`` and ``test`` whose training pairs the tokenizers were trained on, kept in the manifest."""
    tokenizers = {"src": src_tokenizer, "tgt": tgt_tokenizer}
    # the specials translate() reads a source with, added to the bare pieces of encode_arrays
    probe = "a b"
    src_bare, src_read = src_tokenizer.encode(probe), src_tokenizer.encode(probe, add_special_tokens=True)
    specials = src_bare != src_read

    def encode_sources(texts: list[str]) -> list[np.ndarray]:
        if specials:
            return [np.asarray(r, dtype=np.int64) for r in src_tokenizer.encode_batch(texts, add_special_tokens=True)]
        return src_tokenizer.encode_arrays(texts)

    def build(work: Path, files: list[Path]) -> dict:
        dtype = token_dtype(max(src_tokenizer.vocab_size, tgt_tokenizer.vocab_size))
        writer = ShardWriter(work, dtype, shard_tokens or shards_module.SHARD_TOKENS)
        distinct: dict[str, int] = {}
        first_ids, lengths = array("q"), array("q")  # lengths: source ids, target ids, text bytes, per pair
        dropped = {"empty": 0, "too_long": 0}
        total, start = corpus_bytes(files), time.perf_counter()
        last_report, done = start, 0
        batch: list[tuple[str, str]] = []
        with open(work / "text.bin", "wb") as text_file:

            def flush() -> None:
                for (src, tgt), s, t in zip(
                    batch, encode_sources([s for s, _ in batch]), tgt_tokenizer.encode_arrays([t for _, t in batch])
                ):
                    writer.write(s)
                    writer.write(t)
                    data = f"{src}\t{tgt}\n".encode()
                    text_file.write(data)
                    lengths.extend((len(s), len(t), len(data)))
                batch.clear()

            for src, tgt in read_pairs(files):
                why = keep_pair(src, tgt, max_chars)
                if why is not None:
                    dropped[why] += 1
                    continue
                first_ids.append(distinct.setdefault(src, len(distinct)))
                batch.append((src, tgt))
                done += len(src) + len(tgt) + 2
                if len(batch) >= _BATCH_PAIRS:
                    flush()
                    now = time.perf_counter()
                    if now - last_report >= _REPORT_S:
                        last_report = now
                        log(
                            f"preparing: {size_text(done)} of {size_text(total)} ({100 * done / max(total, 1):.0f}%), "
                            f"{len(lengths) // 3:,} pairs, {writer.count:,} ids"
                        )
            flush()
        shards = writer.close()
        n = len(lengths) // 3
        table = np.frombuffer(lengths, dtype=np.int64).reshape(n, 3)
        np.save(work / "lengths.npy", table.astype(_smallest(table, np.uint16, np.uint32)))
        groups = _ranks(first_ids, distinct)
        np.save(work / "groups.npy", groups.astype(_smallest(groups, np.int32, np.int64)))
        written = [file_entry(work / name) for name in ("lengths.npy", "groups.npy", "text.bin")]
        log(
            f"prepared: {n:,} pairs ({len(distinct):,} distinct sources; dropped {dropped['empty']:,} empty and "
            f"{dropped['too_long']:,} over-long), {writer.count:,} ids in {len(shards)} {dtype} shard(s)"
        )
        return {
            "dtype": dtype,
            "pairs": n,
            "distinct_sources": len(distinct),
            "dropped_empty": dropped["empty"],
            "dropped_too_long": dropped["too_long"],
            "tokens": writer.count,
            "shards": shards,
            "files": shards + written,
            **({"tokenizer_split": tokenizer_split} if tokenizer_split else {}),
        }

    key = {"max_chars": max_chars, "source_specials": specials, "layout": "pairs-2"}
    return prepared("translation", data, tokenizers, build, key=key, cache=cache, log=log)


class PairShards:
    """A prepared folder's pairs: the index in memory (``offsets``: where each pair starts in the shards, int64;
    ``src_len``, ``tgt_len``: (N,) each; ``groups``: each pair's source rank), the ids memory-mapped (:attr:`stream`),
    the text read back from its file (:meth:`texts`)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        manifest = read_manifest(self.directory)
        if manifest is None or manifest.get("task") != "translation":
            raise FileNotFoundError(f"{str(directory)!r} holds no {MANIFEST} of prepared translation pairs")
        self.manifest = manifest
        self.stream = TokenStream.open(self.directory, manifest["shards"], manifest["dtype"])
        lengths = np.load(self.directory / "lengths.npy")
        self.src_len, self.tgt_len, self._text_len = lengths[:, 0], lengths[:, 1], lengths[:, 2]
        self.offsets = _starts(self.src_len, self.tgt_len)
        self.groups = np.load(self.directory / "groups.npy")
        self.n_sources: int = manifest["distinct_sources"]

    def __len__(self) -> int:
        return len(self.offsets)

    def ids(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Pair ``i``'s source ids and target ids (int64)."""
        at, s, t = int(self.offsets[i]), int(self.src_len[i]), int(self.tgt_len[i])
        return self.stream.read(at, at + s), self.stream.read(at + s, at + s + t)

    def texts(self, indices) -> list[tuple[str, str]]:
        """The normalised ``(source, target)`` of the pairs ``indices``, in that order."""
        return [tuple(line.split("\t")) for line in self.lines(indices)]  # type: ignore[misc]

    def lines(self, indices) -> list[str]:
        """The text of the pairs ``indices`` as ``text.bin`` holds it (``source<TAB>target``), in that order. The file
        is read in order, a block at a time, with ``read`` (not a map: its pages do not count as this process's)."""
        wanted = np.asarray(indices, dtype=np.int64)
        ends = np.cumsum(self._text_len, dtype=np.int64)
        order = np.argsort(wanted, kind="stable")  # the file's order
        size = self._text_len[wanted[order]].astype(np.int64)
        start = ends[wanted[order]] - size
        del ends
        got = np.empty(int(size.sum()), dtype=np.uint8)  # the lines in the file's order
        at = 0
        with open(self.directory / "text.bin", "rb") as f:
            i = 0
            while i < len(order):  # the lines from i on within _READ bytes of the file (at least one)
                j = max(int(np.searchsorted(start, start[i] + _READ)), i + 1)
                f.seek(int(start[i]))
                block = np.frombuffer(f.read(int(start[j - 1] + size[j - 1] - start[i])), dtype=np.uint8)
                n = int(size[i:j].sum())
                gather = np.repeat(start[i:j] - start[i] - (np.cumsum(size[i:j]) - size[i:j]), size[i:j])
                got[at : at + n] = block[gather + np.arange(n)]
                at, i = at + n, j
        in_file_order = got.tobytes().decode().split("\n")
        out = [""] * len(order)
        for k, line in zip(order.tolist(), in_file_order):
            out[k] = line
        return out


def _starts(src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
    """Where each pair's ids start in the shards (int64): the running sum of the lengths before it."""
    ends = np.cumsum(src_len, dtype=np.int64)
    ends += np.cumsum(tgt_len, dtype=np.int64)
    return ends - src_len - tgt_len


def _smallest(values: np.ndarray, small, large):
    """``small`` when every value fits in it, else ``large`` (an index's dtype)."""
    return small if not len(values) or int(values.max()) <= np.iinfo(small).max else large


def open_pairs(directory: str | Path) -> PairShards:
    """The pairs of a prepared folder (:func:`prepare_pairs`)."""
    return PairShards(directory)
