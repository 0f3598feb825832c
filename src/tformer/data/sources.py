"""The text of a corpus, read as a stream of pieces: never the whole corpus, nor a list of its documents, in memory.

What ``--data`` may name (:func:`find_sources`):

* a UTF-8 text file: one document, read with universal newlines as Python's ``open`` and ``datasets`` read text (a
  CR LF or a lone CR is read as LF: a file saved on Windows gives the ids it gives on Linux). A large one is read in
  pieces of about :data:`PIECE_BYTES`, cut after a newline between two non-spaces: a byte-level BPE splits its words
  there anyway, so its ids and a character tokenizer's are those of the whole text; a ``bpe`` tokenizer
  (SentencePiece-style ▁) starts each piece as a new word; a text with no such newline for :data:`_LONG_LINE`
  pieces, text8 or a minified file, is cut before a space between two non-spaces, where the tokenizers split too, so
  that memory stays flat whatever its lines);
* a JSONL file: one document per line, the string field ``text_field`` (``"text"`` unless ``--text-field``);
* a Parquet file (``.parquet``) or an Arrow file (``.arrow``, the IPC file or stream format): one document per row of
  the string column ``text_field`` (read with ``pyarrow``, the optional extra ``tformer[data]``);
* a dataset saved by Hugging Face ``datasets`` (``save_to_disk``: a folder with ``state.json`` and its Arrow files;
  a ``DatasetDict``'s folder: its ``train`` split);
* a folder of any of these files (``.txt``, ``.jsonl``, ``.parquet``, ``.arrow``), in sorted order.

:func:`read_pieces` yields ``(starts_document, text)`` pairs: the preparation joins documents with the tokenizer's end
of text and encodes each piece as it comes. :func:`sample_text` takes pieces spread evenly over the corpus, for
training a tokenizer on a sample.

This module knows files and text; it knows nothing about tokenizers, models or the cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tformer.text import check_text, decode_utf8

__all__ = [
    "SUFFIXES",
    "PIECE_BYTES",
    "find_sources",
    "corpus_bytes",
    "read_pieces",
    "read_documents",
    "sample_text",
    "NEWLINES",
]

MANIFEST = "manifest.json"  # a prepared folder's (tformer.data.prepare)
SUFFIXES = (".txt", ".jsonl", ".parquet", ".arrow")  # what a folder's files may be
PIECE_BYTES = 1 << 18  # a large text file is read in pieces of about this size (256 KiB)
_LONG_LINE = 4  # pieces: one with no newline to cut after grows to this many PIECE_BYTES, then is cut before a space
_MAX_PIECE = 64 << 20  # a piece with no clean cut grows to this, then is cut at any newline (or character)
_SPACE_BYTES = frozenset(b" \t\r\n\x0b\x0c")
NEWLINES = "universal"  # how a text file's line ends are read; in the cache keys of what is made from them
_ROWS = 1024  # rows of a Parquet or Arrow file read at a time


def find_sources(data: str | Path, flag: str = "--data") -> list[Path]:
    """The files of ``data`` in reading order: the file itself, a saved ``datasets`` dataset's Arrow files, or a
    folder's :data:`SUFFIXES` files (sorted; linked folders followed, once each; hidden files and folders, and
    tformer's own runs, models and prepared folders inside it, left out: :func:`_folder_files`). Missing or empty: a
    ``FileNotFoundError`` naming ``flag``."""
    path = Path(data)
    if path.is_dir():
        from tformer.files import dir_kind

        kind = dir_kind(path)  # its log.jsonl or a tokenizer's JSON would be read as text
        if kind is not None:
            raise ValueError(f"{flag} {str(path)!r} is a tformer {kind}, not training data")
        saved = _saved_dataset(path)
        if saved is not None:
            return saved
        files = _folder_files(path)
        if not files:
            raise FileNotFoundError(
                f"{flag} {str(path)!r}: the folder holds no {', '.join(SUFFIXES)} files (nor a dataset saved by "
                "Hugging Face datasets)"
            )
        return files
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {str(path)!r}: no such file or folder")
    return [path]


def _folder_files(folder: Path) -> list[Path]:
    """A folder's :data:`SUFFIXES` files, sorted: its linked folders followed (each real folder once: a link back up
    makes no loop); what is hidden (``.git``, ``.ipynb_checkpoints``, ``.venv``) and what tformer wrote there (a run
    whose ``--out`` lies in ``--data``, a model, a prepared folder) is not the user's text and is left out."""
    from tformer.files import dir_kind

    files, seen = [], set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        here = Path(root)
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not dir_kind(here / d) and not is_prepared(here / d)]
        files += [
            here / n for n in names if not n.startswith(".") and Path(n).suffix in SUFFIXES and (here / n).is_file()
        ]
    return sorted(files)


def is_prepared(path: str | Path, task: str | None = None) -> bool:
    """Whether ``path`` is a prepared folder (a ``manifest.json`` of tformer's tokens). ``task`` (lm, translation,
    bert): the family that would read it; a folder prepared for another is a ValueError naming both, before anything
    reads its tokenizer or shards."""
    manifest = Path(path) / MANIFEST
    if not manifest.is_file():
        return False
    try:
        found = json.loads(manifest.read_text())
        ours = found.get("kind") == "tformer-tokens"
    except (ValueError, OSError, AttributeError):
        return False
    if ours and task is not None and found.get("task") != task:
        raise ValueError(
            f"--data {str(path)!r} is a folder prepared for {found.get('task')!r}, not {task!r}: give it to tformer "
            f"train {found.get('task')}, or prepare the text for {task} (tformer data prepare {task} --data TEXT)"
        )
    return ours


def _saved_dataset(folder: Path) -> list[Path] | None:
    """The Arrow files of a Hugging Face ``datasets`` ``save_to_disk`` folder (a ``DatasetDict``'s: its train split),
    else None."""
    if (folder / "dataset_dict.json").is_file():
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        if "train" not in splits:
            raise ValueError(f"--data {str(folder)!r}: a saved DatasetDict without a 'train' split (it has {splits})")
        folder = folder / "train"
    state = folder / "state.json"
    if not state.is_file():
        return None
    try:
        names = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{state}: not the state.json of a dataset saved by Hugging Face datasets") from None
    files = [folder / n for n in names]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"{state} names {f.name}, which is missing")
    return files


def corpus_bytes(files: list[Path]) -> int:
    """The files' size on disk, in bytes."""
    return sum(f.stat().st_size for f in files)


def read_pieces(files: list[Path], text_field: str = "text") -> Iterator[tuple[bool, str]]:
    """``(starts_document, text)`` for each piece of each document of ``files``, in order (see the module)."""
    for path in files:
        if path.suffix == ".jsonl":
            yield from ((True, text) for text in _jsonl_texts(path, text_field))
        elif path.suffix in (".parquet", ".arrow"):
            yield from ((True, text) for text in _table_texts(path, text_field))
        else:
            first = True
            for text in _text_pieces(path):
                yield first, text
                first = False


def read_documents(data: str | Path, text_field: str = "text") -> list[str]:
    """Every document of ``data`` whole, in memory (for small inputs: scoring, the lessons)."""
    docs: list[str] = []
    for starts, text in read_pieces(find_sources(data), text_field):
        if starts or not docs:
            docs.append(text)
        else:
            docs[-1] += text
    return docs


def sample_text(files: list[Path], size: int, text_field: str = "text") -> Iterator[str]:
    """About ``size`` bytes of the corpus's text, pieces taken evenly over the whole of it: each piece adds its share
    (``size`` / the corpus's bytes) of its length to a credit, and is taken when the credit covers its length. All of
    it when the corpus is no larger."""
    total = corpus_bytes(files)
    if size >= total:
        yield from (text for _, text in read_pieces(files, text_field))
        return
    ratio, credit, taken = size / max(total, 1), 0.0, 0
    for _, text in read_pieces(files, text_field):
        n = len(text.encode("utf-8"))
        credit += n * ratio
        if credit >= n or taken == 0:
            credit -= n
            taken += n
            yield text
            if taken >= size:
                return


def _text_pieces(path: Path) -> Iterator[str]:
    """The text of one UTF-8 file in pieces of about :data:`PIECE_BYTES`, each cut after a newline (see the module)."""
    line, first, rest = 1, True, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(PIECE_BYTES)
            data = rest + block
            if not block or not f.peek(1):  # the end: what is left is the last piece (a small file: the only one)
                if data or first:
                    yield _universal(decode_utf8(data, str(path), 1 if first else line))
                return
            cut = _cut(data, len(data) >= _MAX_PIECE)
            if cut == 0 and len(data) >= _LONG_LINE * PIECE_BYTES:  # a long line: cut before a space instead
                cut = _space_cut(data)
            if cut == 0:
                rest = data
                continue
            piece, rest = data[:cut], data[cut:]
            yield _universal(decode_utf8(piece, str(path), 1 if first else line))
            line += piece.count(b"\n")
            first = False


def _universal(text: str) -> str:
    """``text`` with each CR LF and each lone CR read as LF (a piece ends after an LF, not between a CR and its LF)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _cut(data: bytes, forced: bool) -> int:
    """Where a piece of ``data`` ends: after the last newline between two non-spaces (a BPE's pre-tokenizer reads a
    run of whitespace whole: a cut inside one, after a blank line, a CRLF or a trailing space, would read it
    otherwise); ``forced``: after the last newline, else at the last character boundary; 0: no cut (read on)."""
    end = len(data) - 1  # the byte after a newline must be in data
    while True:
        i = data.rfind(b"\n", 0, end)
        if i < 0:
            break
        if data[i + 1] not in _SPACE_BYTES and i > 0 and data[i - 1] not in _SPACE_BYTES:
            return i + 1
        end = i
    if not forced:
        return 0
    i = data.rfind(b"\n")
    if i >= 0:
        return i + 1
    i = len(data)
    while i > 1 and (data[i - 1] & 0xC0) == 0x80:  # back over a character's continuation bytes
        i -= 1
    cut = i - 1 if data[i - 1] >= 0xC0 else len(data)  # before a character that may be incomplete
    return cut - 1 if cut > 1 and data[cut - 1] == 0x0D else cut  # a CR kept with the LF that may follow it


def _space_cut(data: bytes) -> int:
    """Where a piece of a long line ends: before the last space that a non-space precedes and follows (``foo| bar``:
    every tokenizer here splits a word there, a byte-level BPE's next word starting with the space); 0: none."""
    end = len(data) - 1
    while True:
        i = data.rfind(b" ", 1, end)
        if i < 0:
            return 0
        if data[i - 1] not in _SPACE_BYTES and data[i + 1] not in _SPACE_BYTES:
            return i
        end = i


def _jsonl_texts(path: Path, field: str) -> Iterator[str]:
    """The ``field`` of each line of a JSONL file, read a line at a time."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            line = decode_utf8(raw, str(path), n) if n > 1 else decode_utf8(raw, str(path))
            line = line.removesuffix("\n").removesuffix("\r")  # the line itself, as read_lines gives it
            if not line.strip():
                continue
            text = _json_field(line, where, field)
            if text is not None:  # null: no text in this line, skipped (as a Parquet file's null row)
                yield text


def _json_field(line: str, where: str, field: str) -> str | None:
    """The string ``field`` of one JSONL line (None where it is null); anything else is a ``ValueError`` naming
    ``where`` (FILE:LINE), what the line has, and ``--text-field``."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise ValueError(f"{where}: not a JSON object ({reason})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: each JSONL line must be an object with a string {field!r} field, got a "
                         f"{type(record).__name__}")  # fmt: skip
    if field not in record:
        raise ValueError(
            f"{where}: no field {field!r} (--text-field names the field); its fields are {list(record)[:20]}"
        )
    value = record[field]
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {field!r} holds {type(value).__name__} {value!r:.40}, not text")
    return check_text(value, f"{where}: field {field!r}")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise ImportError(
            "reading Parquet or Arrow files needs pyarrow: pip install 'tformer[data]' (or pip install pyarrow)"
        ) from None
    return pyarrow


def _table_texts(path: Path, field: str) -> Iterator[str]:
    """The string column ``field`` of a Parquet or Arrow file, a batch of rows at a time; a null row is skipped."""
    pa = _pyarrow()
    if path.suffix == ".parquet":
        try:
            table = pa.parquet.ParquetFile(path)
        except pa.ArrowException as err:
            raise ValueError(f"{path}: not a Parquet file ({err})") from None
        schema = table.schema_arrow
        batches = table.iter_batches(batch_size=_ROWS, columns=[field] if field in schema.names else None)
    else:
        source = pa.memory_map(str(path))
        try:
            reader = pa.ipc.open_stream(source)  # what datasets writes
        except pa.ArrowInvalid:
            try:
                reader = pa.ipc.open_file(source)
            except pa.ArrowInvalid as err:
                raise ValueError(f"{path}: not an Arrow file ({err})") from None
        schema = reader.schema
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            batches = iter(reader)
    if field not in schema.names:
        raise ValueError(f"{path}: no column {field!r} (--text-field names the column); its columns are {schema.names}")
    kind = schema.field(field).type
    if pa.types.is_dictionary(kind):  # pandas' category dtype: strings, each stored once
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ValueError(f"{path}: column {field!r} holds {kind}, not text")
    row = 0
    for batch in batches:
        for value in batch.column(batch.schema.get_field_index(field)).to_pylist():
            row += 1
            if value is not None:
                yield check_text(value, f"{path}: row {row}, column {field!r}")
