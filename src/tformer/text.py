"""Plain-text readers shared by the families: strict UTF-8, one normalisation, one reader of tab-separated pairs.

Every text that comes in (a file, stdin, a command-line argument) is read here as UTF-8 and nothing else.
Bytes that are not UTF-8 are refused with one line that says where: ``FILE:LINE: not valid UTF-8 (byte 0xe9
at column 4)``. They are never replaced silently: a Latin-1 file read as "mostly right" would train on, and
score against, text that is not what the user has. Python hands over command-line arguments (and, in some
locales, stdin) that are not UTF-8 as lone surrogates (``surrogateescape``); :func:`check_text` finds them,
since the tokenizers refuse them with a ``TypeError`` deep inside.

Normalisation is Unicode NFC plus one space kind: the French side of Tatoeba mixes U+202F (narrow
no-break space), U+00A0 (no-break space) and plain spaces before ``? ! : ;``; all become plain
spaces, and runs of whitespace collapse to one.

This module knows nothing about tokenizers, models or any family: translation reads sentence pairs
with it, BERT's language-identification data reads the same Tatoeba file.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

__all__ = [
    "normalize",
    "decode_utf8",
    "check_text",
    "read_text",
    "read_lines",
    "split_lines",
    "read_stdin_lines",
    "read_tsv",
    "TSV_COLUMNS",
]

_SPACES = re.compile(r"[\s\u00a0\u202f\u2009\u2007]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
TSV_COLUMNS = (2, 3)  # source, target and an optional attribution (Tatoeba / manythings.org)


def normalize(text: str) -> str:
    """NFC, every kind of space → one plain space, stripped."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` (the bytes of ``where``: a file name or ``<stdin>``) decoded as strict UTF-8.

    The first invalid byte is a ``ValueError`` naming ``WHERE:LINE`` and the column (in characters, from 1)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line = data.count(b"\n", 0, err.start) + 1
        column = len(data[line_start : err.start].decode("utf-8", "replace")) + 1
        raise ValueError(f"{where}:{line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at column {column})") from None


def check_text(text: str, where: str) -> str:
    """``text`` itself when it holds no lone surrogate; else a ``ValueError`` naming ``where`` and the column.

    A surrogate U+DC80..U+DCFF is how Python passes on a byte that is not UTF-8 (``surrogateescape``, used for
    command-line arguments and some stdin), so the message names that byte; any other lone surrogate (from a
    JSON ``\\ud800`` escape, or a caller) is named as itself. Neither can be encoded, tokenized or printed."""
    found = _SURROGATE.search(text)
    if found is None:
        return text
    code = ord(found.group())
    what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    raise ValueError(f"{where}: not valid UTF-8 ({what} at column {column})")


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, split at ``\\n`` only (``\\r\\n`` too); no empty last line for a final newline.

    Not :meth:`str.splitlines`, which also splits at U+2028, U+0085, form feeds and more: a sentence holding
    one of those would become two lines and shift every line after it (aligned files, reported line numbers).
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_text(path: str | Path) -> str:
    """The text of the file ``path``, strict UTF-8 (see :func:`decode_utf8`)."""
    return decode_utf8(Path(path).read_bytes(), str(path))


def read_lines(path: str | Path) -> list[str]:
    """The lines of the UTF-8 file ``path`` (:func:`split_lines`): line N of the file is item N - 1."""
    return split_lines(read_text(path))


def read_stdin_lines() -> list[str]:
    """The lines of stdin, strict UTF-8 whatever the locale: ``<stdin>:LINE`` names a bad byte."""
    if sys.stdin is None:  # started with stdin closed
        raise ValueError("no input: stdin is closed; pass the text as arguments")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:  # the bytes themselves: the text layer may decode with surrogateescape
        return split_lines(decode_utf8(buffer.read(), "<stdin>"))
    lines = split_lines(sys.stdin.read())  # a text-only stream (tests, embedding): its surrogates are checked
    for n, line in enumerate(lines, 1):
        check_text(line, f"<stdin>:{n}")
    return lines


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read ``source<TAB>target[<TAB>attribution]`` lines (the attribution is ignored), normalised.

    Any other number of columns is refused with the file and line: a fourth column means the file is not what
    it seems (a tab inside a sentence, another format), and reading it anyway would train on shifted text."""
    pairs = []
    for lineno, line in enumerate(read_lines(path), 1):
        cols = line.split("\t")
        if cols == [""]:
            continue
        if len(cols) not in TSV_COLUMNS:
            raise ValueError(
                f"{path}:{lineno}: expected 2 or 3 tab-separated columns (source, target, optional attribution), "
                f"got {len(cols)}"
            )
        pairs.append((normalize(cols[0]), normalize(cols[1])))
    return pairs
