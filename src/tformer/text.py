"""Plain-text readers shared by the families: one normalisation, one reader of tab-separated pairs.

Normalisation is Unicode NFC plus one space kind: the French side of Tatoeba mixes U+202F (narrow
no-break space), U+00A0 (no-break space) and plain spaces before ``? ! : ;``; all become plain
spaces, and runs of whitespace collapse to one.

This module knows nothing about tokenizers, models or any family: translation reads sentence pairs
with it, BERT's language-identification data reads the same Tatoeba file.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

__all__ = ["normalize", "read_tsv"]

_SPACES = re.compile(r"[\s\u00a0\u202f\u2009\u2007]+")


def normalize(text: str) -> str:
    """NFC, every kind of space → one plain space, stripped."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read ``source<TAB>target[<TAB>attribution]`` lines (the attribution is ignored), normalised."""
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
