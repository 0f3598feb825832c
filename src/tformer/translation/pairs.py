"""Parallel sentence pairs: reading, normalising, filtering and splitting.

Two on-disk formats:

* a tab-separated file, ``English<TAB>French[<TAB>attribution]`` (Tatoeba / manythings.org);
* two aligned plain-text files, line N of one translating line N of the other (Multi30k).

Normalisation (:func:`tformer.text.normalize`) is Unicode NFC plus one space kind: the French side of
Tatoeba mixes U+202F, U+00A0 and plain spaces before ``? ! : ;``; all become plain spaces.

Splits are grouped by source sentence, so one English sentence never lands in two splits and all
its references stay together (multi-reference BLEU).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tformer.checks import check_settings, check_yes_no
from tformer.text import normalize, read_lines, read_tsv
from tformer.translation.toy_corpus import builtin_pairs

__all__ = [
    "normalize",
    "read_tsv",
    "check_languages",
    "read_aligned",
    "load_corpus",
    "load_splits",
    "filter_pairs",
    "split_pairs",
    "split_corpus",
    "group_references",
    "Split",
    "FilterStats",
]


def read_aligned(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Read two aligned plain-text files (same number of lines)."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)  # strict UTF-8, split at "\n" only
    if len(src) != len(tgt):
        raise ValueError(f"aligned files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    return [(normalize(s), normalize(t)) for s, t in zip(src, tgt)]


def _aligned_pair(directory: Path, part: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path] | None:
    """``(DIR/part.src, DIR/part.tgt)`` when both exist, None when neither does; one alone is an error."""
    src, tgt = directory / f"{part}.{src_lang}", directory / f"{part}.{tgt_lang}"
    if src.is_file() and tgt.is_file():
        return src, tgt
    if src.is_file() or tgt.is_file():
        have, missing = (src, tgt) if src.is_file() else (tgt, src)
        raise FileNotFoundError(f"--data {str(directory)!r} has {have.name} but no {missing.name}")
    return None


def check_languages(data: str | os.PathLike | None, src_lang: str, tgt_lang: str) -> None:
    """``--src-lang`` / ``--tgt-lang`` name a Multi30k directory's files (train.LANG) only: other than en and fr with
    the built-in corpus, a TSV or a folder prepared from one, which are read as they are (source, then target), they
    are refused rather than trained the other way."""
    from tformer.data.prepare import is_prepared

    path = None if data in (None, "builtin") else Path(data)
    read_as_is = path is None or not path.is_dir() or is_prepared(path)  # not a Multi30k directory
    if read_as_is and (src_lang, tgt_lang) != ("en", "fr"):
        what = (
            "the built-in corpus is English→French" if path is None else f"{str(data)!r} is read as source<TAB>target"
        )
        raise ValueError(
            f"--src-lang {src_lang} --tgt-lang {tgt_lang}: {what}, whatever they say; they name a Multi30k directory's "
            "files (train.LANG): leave them out"
            + ("" if path is None else ", and swap the columns to go the other way")
        )


def load_corpus(data: str | None, src_lang: str = "en", tgt_lang: str = "fr") -> list[tuple[str, str]]:
    """Pairs from ``data``: ``None``/``"builtin"`` (the built-in corpus), a ``.tsv`` file, or a
    directory with ``train.<src_lang>`` and ``train.<tgt_lang>`` (Multi30k layout: its training pairs); languages the
    other two cannot follow are refused (:func:`check_languages`)."""
    check_languages(data, src_lang, tgt_lang)
    path = None if data in (None, "builtin") else Path(data)
    if path is None:
        return builtin_pairs()
    if path.is_dir():
        train = _aligned_pair(path, "train", src_lang, tgt_lang)
        if train is None:
            raise FileNotFoundError(
                f"--data {data!r}: a corpus directory needs train.{src_lang} and train.{tgt_lang} "
                f"(Multi30k layout; val.{src_lang} and val.{tgt_lang} are used for validation when present)"
            )
        return read_aligned(*train)
    if path.is_file():
        return read_tsv(path)
    raise FileNotFoundError(
        f"--data {data!r}: no such file or directory (expected a .tsv file or a Multi30k-style directory)"
    )


@dataclass
class FilterStats:
    kept: int = 0
    empty: int = 0
    too_long: int = 0

    def __str__(self) -> str:
        return f"kept {self.kept} pairs, dropped {self.empty} empty and {self.too_long} over-long"


def filter_pairs(pairs: list[tuple[str, str]], max_chars: int = 300) -> tuple[list[tuple[str, str]], FilterStats]:
    """Drop pairs with an empty side or a side longer than ``max_chars`` characters; count both."""
    stats, kept = FilterStats(), []
    for src, tgt in pairs:
        if not src or not tgt:
            stats.empty += 1
        elif len(src) > max_chars or len(tgt) > max_chars:
            stats.too_long += 1
        else:
            kept.append((src, tgt))
    stats.kept = len(kept)
    return kept, stats


@dataclass
class Split:
    train: list[tuple[str, str]] = field(default_factory=list)
    valid: list[tuple[str, str]] = field(default_factory=list)
    test: list[tuple[str, str]] = field(default_factory=list)


def split_pairs(
    pairs: list[tuple[str, str]], valid: float | int = 0.05, test: float | int = 0.05, seed: int = 0
) -> Split:
    """Deterministic train/valid/test split grouped by source sentence.

    ``valid``/``test`` are fractions of the distinct source sentences (or counts, when ≥ 1).
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    for src, tgt in pairs:
        groups.setdefault(src, []).append((src, tgt))
    sources = sorted(groups)
    random.Random(seed).shuffle(sources)
    n_valid = int(valid) if valid >= 1 else round(valid * len(sources))
    n_test = int(test) if test >= 1 else round(test * len(sources))
    if n_valid + n_test >= len(sources):
        raise ValueError(
            f"valid + test ({n_valid} + {n_test}) leave no training data out of {len(sources)} source sentences"
        )
    split = Split()
    for i, src in enumerate(sources):
        part = split.valid if i < n_valid else split.test if i < n_valid + n_test else split.train
        part.extend(groups[src])
    return split


def group_references(pairs: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Sources (each once, in first-seen order) and their references, as sacreBLEU wants them:
    ``refs[k][i]`` is the k-th reference of source i (missing ones are empty strings, which
    :func:`tformer.translation.translator.corpus_bleu` passes to sacreBLEU as None, skipped)."""
    by_src: dict[str, list[str]] = {}
    for src, tgt in pairs:
        by_src.setdefault(src, []).append(tgt)
    sources = list(by_src)
    n_refs = max((len(v) for v in by_src.values()), default=0)
    refs = [[by_src[s][k] if k < len(by_src[s]) else "" for s in sources] for k in range(n_refs)]
    return sources, refs


def load_splits(
    data: str | None,
    src_lang: str = "en",
    tgt_lang: str = "fr",
    seed: int = 0,
    valid: float | int = 0.05,
    test: float | int = 0.05,
    max_chars: int = 300,
    verbose: bool = True,
    log: Callable[[str], None] = print,
) -> Split:
    """The train / valid / test pairs of ``data``, as the user gave them where they can.

    A directory with ``val.<src>`` and ``val.<tgt>`` next to ``train.*`` (Multi30k) trains on all of
    ``train.*`` and validates on ``val.*`` (and tests on ``test.*`` if present; else there is no test part);
    ``valid`` and ``test`` are not used then. Any other input (a TSV, the built-in corpus, a directory
    without ``val.*``) is split by :func:`split_corpus` (``valid`` / ``test`` held out, grouped by source).
    """
    check_settings(locals())  # the seed, the parts held out, the language codes: the flags' bounds and words
    check_yes_no(verbose=verbose)
    path = Path(data) if data not in (None, "builtin") else None
    val_files = _aligned_pair(path, "val", src_lang, tgt_lang) if path is not None and path.is_dir() else None
    if val_files is None:
        return split_corpus(load_corpus(data, src_lang, tgt_lang), seed, valid, test, max_chars, verbose, log)
    assert path is not None
    parts = {"train": load_corpus(data, src_lang, tgt_lang), "valid": read_aligned(*val_files)}
    test_files = _aligned_pair(path, "test", src_lang, tgt_lang)
    parts["test"] = read_aligned(*test_files) if test_files else []
    split, dropped = Split(), 0
    for name, pairs in parts.items():
        kept, stats = filter_pairs(pairs, max_chars)
        setattr(split, name, kept)
        dropped += stats.empty + stats.too_long
    if not split.train:
        raise ValueError(f"--data {data!r}: train.{src_lang} / train.{tgt_lang} hold no usable pairs")
    if verbose:
        log(
            f"data: {len(split.train)} train pairs (all of train.*), {len(split.valid)} validation pairs (val.*), "
            f"{len(split.test)} test pairs{' (test.*)' if test_files else ''}: the directory's own split "
            f"(--valid/--test not used)" + (f"; dropped {dropped} empty or over-long pairs" if dropped else "")
        )
    return split


def split_corpus(
    pairs: list[tuple[str, str]],
    seed: int = 0,
    valid: float | int = 0.05,
    test: float | int = 0.05,
    max_chars: int = 300,
    verbose: bool = True,
    log: Callable[[str], None] = print,
):
    """Filter (empty / over-long) and split grouped by source; deterministic for a given seed."""
    check_settings(locals())  # the seed and the parts held out: the flags' bounds and words
    check_yes_no(verbose=verbose)
    kept, stats = filter_pairs(pairs, max_chars)
    split = split_pairs(kept, valid, test, seed)
    if verbose:
        none = " (no validation data)" if not split.valid else ""
        log(
            f"data: {stats}; split into {len(split.train)} train / {len(split.valid)} valid{none} / "
            f"{len(split.test)} test pairs, held out by source sentence (seed {seed})"
        )
    return split
