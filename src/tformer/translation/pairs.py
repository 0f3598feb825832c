"""Parallel sentence pairs: reading, normalising, filtering and splitting.

Two on-disk formats:

* a tab-separated file, ``English<TAB>French[<TAB>attribution]`` (Tatoeba / manythings.org);
* two aligned plain-text files, line N of one translating line N of the other (Multi30k).

Normalisation is Unicode NFC plus one space kind: the French side of Tatoeba mixes U+202F (narrow
no-break space), U+00A0 (no-break space) and plain spaces before ``? ! : ;``; all become plain
spaces, and runs of whitespace collapse to one.

Splits are grouped by source sentence, so one English sentence never lands in two splits and all
its references stay together (multi-reference BLEU).
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["normalize", "read_tsv", "read_aligned", "filter_pairs", "split_pairs", "group_references", "Split", "FilterStats"]

_SPACES = re.compile(r"[\s\u00a0\u202f\u2009\u2007]+")


def normalize(text: str) -> str:
    """NFC, every kind of space → one plain space, stripped."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read ``source<TAB>target[<TAB>attribution]`` lines (the attribution is ignored)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if cols == [""]:
                continue
            if len(cols) < 2:
                raise ValueError(f"{path}:{lineno}: expected 2 or 3 tab-separated columns, got {len(cols)}")
            pairs.append((normalize(cols[0]), normalize(cols[1])))
    return pairs


def read_aligned(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Read two aligned plain-text files (same number of lines)."""
    src = Path(src_path).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_path).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise ValueError(f"aligned files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    return [(normalize(s), normalize(t)) for s, t in zip(src, tgt)]


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


def split_pairs(pairs: list[tuple[str, str]], valid: float | int = 0.05, test: float | int = 0.05, seed: int = 0) -> Split:
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
        raise ValueError(f"valid + test ({n_valid} + {n_test}) leave no training data out of {len(sources)} source sentences")
    split = Split()
    for i, src in enumerate(sources):
        part = split.valid if i < n_valid else split.test if i < n_valid + n_test else split.train
        part.extend(groups[src])
    return split


def group_references(pairs: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Sources (each once, in first-seen order) and their references, as sacreBLEU wants them:
    ``refs[k][i]`` is the k-th reference of source i (missing ones are empty strings, which sacreBLEU skips)."""
    by_src: dict[str, list[str]] = {}
    for src, tgt in pairs:
        by_src.setdefault(src, []).append(tgt)
    sources = list(by_src)
    n_refs = max((len(v) for v in by_src.values()), default=0)
    refs = [[by_src[s][k] if k < len(by_src[s]) else "" for s in sources] for k in range(n_refs)]
    return sources, refs
