"""Plain-text readers shared by the families: strict UTF-8, one normalisation, one reader of tab-separated pairs.

Every text that comes in (a file, stdin, a command-line argument) is read here as UTF-8 and nothing else.
Bytes that are not UTF-8 are refused with one line that says where: ``FILE:LINE: not valid UTF-8 (byte 0xe9
at column 4)``. They are never replaced silently: a Latin-1 file read as "mostly right" would train on, and
score against, text that is not what the user has. Python hands over command-line arguments (and, in some
locales, stdin) that are not UTF-8 as lone surrogates (``surrogateescape``); :func:`check_text` finds them,
since the tokenizers refuse them with a ``TypeError`` deep inside.

The text is the one the user meant: a UTF-8 byte-order mark (U+FEFF, which Windows editors put first) is dropped,
never read as a character of the first line (a tokenizer would learn it as a token); a NUL is refused with its line
and column (``FILE:LINE: holds a NUL character``): UTF-16 text without a byte-order mark decodes as UTF-8 with a NUL
after every Latin character, and a binary file holds them; UTF-16 text with its byte-order mark is named as such.

Normalisation is Unicode NFC plus one space kind: the French side of Tatoeba mixes U+202F (narrow
no-break space), U+00A0 (no-break space) and plain spaces before ``? ! : ;``; all become plain
spaces, and runs of whitespace collapse to one.

This module knows nothing about tokenizers, models or any family: translation reads sentence pairs
with it, BERT's language-identification data reads the same Tatoeba file.
"""

from __future__ import annotations

import io
import os
import re
import select
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "normalize",
    "decode_utf8",
    "check_text",
    "check_texts",
    "read_text",
    "read_lines",
    "split_lines",
    "read_stdin_lines",
    "stdin_line_batches",
    "read_tsv",
    "TSV_COLUMNS",
    "BOM",
]

_SPACES = re.compile(r"[\s\u00a0\u202f\u2009\u2007]+")
_NOT_TEXT = re.compile("[\ud800-\udfff\x00]")  # a lone surrogate, or a NUL
_SURROGATE = re.compile("[\ud800-\udfff]")
BOM = "\ufeff"  # UTF-8's byte-order mark, dropped from the start of a text
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
TSV_COLUMNS = (2, 3)  # source, target and an optional attribution (Tatoeba / manythings.org)


def normalize(text: str) -> str:
    """NFC, every kind of space → one plain space, stripped."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()


def decode_utf8(data: bytes, where: str, first_line: int = 1) -> str:
    """``data`` (the bytes of ``where``: a file name or ``<stdin>``) decoded as strict UTF-8, without the byte-order
    mark a Windows editor may put first.

    The first invalid byte, or a NUL, is a ``ValueError`` naming ``WHERE:LINE`` and the column (in characters, from
    1); text in UTF-16 is named as such. ``first_line`` > 1: ``data`` is a later piece of the file, cut after a
    newline, starting at that line (:mod:`tformer.data.sources` reads a large file so); a byte-order mark is then
    a character like any other."""
    if first_line > 1:
        return _decode_piece(data, where, first_line)
    if data.startswith(_UTF16_BOMS):
        raise ValueError(
            f"{where}:1: UTF-16 text (it starts with the byte-order mark 0x{data[0]:02x} 0x{data[1]:02x}), not UTF-8: "
            "save it as UTF-8"
        )
    if data.startswith(b"\x1f\x8b"):  # gzip's magic number
        raise ValueError(f"{where}:1: gzip-compressed, not text: unpack it first (gunzip {where})")
    try:
        text = data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line = data.count(b"\n", 0, err.start) + 1
        column = len(data[line_start : err.start].decode("utf-8", "replace")) + 1
        raise ValueError(f"{where}:{line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at column {column})") from None
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        column = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise ValueError(f"{where}:{line}: {_NUL_AT} column {column}{_NUL_WHY}")
    return text


def _decode_piece(data: bytes, where: str, first_line: int) -> str:
    """:func:`decode_utf8` of a piece of a file that starts at line ``first_line`` (errors name the file's line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            decode_utf8(b"\n" * (first_line - 1) + data, where)  # the message, with the file's line number
        except ValueError as err:
            raise err from None
        raise
    if "\x00" in text:
        decode_utf8(b"\n" * (first_line - 1) + data, where)  # raises, naming the line
    return text


def check_text(text: str, where: str, nul: bool = False) -> str:
    """``text`` itself when it holds no lone surrogate and no NUL (``nul``: NULs allowed); else a ``ValueError``
    naming ``where`` and the column. A model's own reply may hold a NUL (a byte-level token 0x00): a chat's
    assistant turns are checked with ``nul=True``, so that a conversation never refuses what the model said.

    A surrogate U+DC80..U+DCFF is how Python passes on a byte that is not UTF-8 (``surrogateescape``, used for
    command-line arguments and some stdin), so the message names that byte; any other lone surrogate (from a
    JSON ``\\ud800`` escape, or a caller) is named as itself. Neither can be encoded, tokenized or printed. A NUL
    (a JSON ``\\u0000``, a caller's string read from a binary or UTF-16 file) is no text either."""
    found = (_SURROGATE if nul else _NOT_TEXT).search(text)
    if found is None:
        return text
    code = ord(found.group())
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    if code == 0:
        raise ValueError(f"{where}: {_NUL_AT} column {column}{_NUL_WHY}")
    what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
    raise ValueError(f"{where}: not valid UTF-8 ({what} at column {column})")


def check_texts(texts: Any, name: str, one: bool = True) -> list[str]:
    """The texts a caller of the library passes (``name``: the parameter), each checked by :func:`check_text`
    (``sentences[2]: not valid UTF-8 (lone surrogate U+D800 at column 4)``): a list or tuple of strings, or (``one``)
    a single string, which is taken as a list of one. Anything else is a ``TypeError`` naming what it got."""
    if isinstance(texts, str) and one:
        texts = [texts]
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        single = " (wrap one text in a list)" if isinstance(texts, str) else ""
        raise TypeError(f"{name} must be a list of strings{single}, got {_kind(texts)}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] must be a string, got {_kind(text)}")
        check_text(text, f"{name}[{i}]")
    return list(texts)


def _kind(value: Any) -> str:
    shown, kind = repr(value), type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({shown if len(shown) <= 40 else shown[:40] + '…'})"


_NUL_AT = "holds a NUL character at"
_NUL_WHY = " (UTF-16 text without a byte-order mark, or a binary file?): tformer reads UTF-8 text"


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
    lines = split_lines(sys.stdin.read().removeprefix(BOM))  # a text-only stream (tests, embedding): checked here
    for n, line in enumerate(lines, 1):
        check_text(line, f"<stdin>:{n}")
    return lines


def stdin_line_batches(most: int) -> Iterator[list[str]]:
    """The lines of stdin as they come (strict UTF-8, as :func:`read_stdin_lines` reads them), at most ``most`` at a
    time, and fewer whenever no more are waiting: a person typing, or a program writing a line and waiting for its
    answer, gets each line at once, while a file piped in is read in full batches.

    A stdin without a file descriptor (a test's, an embedding's stream) is read whole, then handed out in batches."""
    if sys.stdin is None:
        read_stdin_lines()  # the closed stdin's error
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None or getattr(sys.stdin, "buffer", None) is None:
        lines = read_stdin_lines()
        for start in range(0, len(lines), most):
            yield lines[start : start + most]
        return
    data, first, ended = b"", 1, False  # bytes not handed out yet, the line they start at, end of file seen
    while data or not ended:
        whole = data.count(b"\n")  # lines complete in data
        if ended or whole >= most or (whole and not _waiting(fd)):
            cut = len(data) if ended else _after_line(data, min(whole, most))
            text = decode_utf8(data[:cut], "<stdin>", first)  # (the first piece: a byte-order mark dropped)
            lines = split_lines(text)
            data, first = data[cut:], first + len(lines)
            for start in range(0, len(lines), most):
                yield lines[start : start + most]
            continue
        chunk = os.read(fd, 1 << 16)
        data, ended = data + chunk, not chunk


def _after_line(data: bytes, n: int) -> int:
    """The offset just after the ``n``-th newline of ``data``."""
    at = -1
    for _ in range(n):
        at = data.index(b"\n", at + 1)
    return at + 1


def _waiting(fd: int) -> bool:
    """Whether more input can be read from ``fd`` at once (where the system cannot say: yes, so reading waits)."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read ``source<TAB>target[<TAB>attribution]`` lines (the attribution is ignored), normalised.

    Any other number of columns is refused with the file and line: a fourth column means the file is not what
    it seems (a tab inside a sentence, another format), and reading it anyway would train on shifted text."""
    pairs = []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():  # a blank line, of spaces too, holds no pair
            continue
        cols = line.split("\t")
        if len(cols) not in TSV_COLUMNS:
            raise ValueError(
                f"{path}:{lineno}: expected 2 or 3 tab-separated columns (source, target, optional attribution), "
                f"got {len(cols)}"
            )
        pairs.append((normalize(cols[0]), normalize(cols[1])))
    return pairs
