"""Language-model data: documents → one stream of ids → train/validation parts → blocks.

* :func:`read_documents` reads a text file, a folder of ``.txt`` files or a JSONL file with a ``"text"``
  field (each document one string);
* :func:`encode_documents` joins the documents with ``<|endoftext|>`` into one stream of ids;
* :func:`split_ids` keeps the last 10% for validation (as nanoGPT does);
* :func:`blocks` cuts rows of consecutive ids out of the stream.

Dimension legend: B batch, N tokens in a stream.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tformer.text import check_text, read_lines, read_text
from tformer.tokens import LM_PAD as PAD

__all__ = ["read_documents", "encode_documents", "split_ids", "blocks"]


def read_documents(path: str | Path) -> list[str]:
    """A UTF-8 text file (one document), a folder of ``.txt`` files, or a JSONL file with a ``"text"`` field.

    Strict UTF-8 (:mod:`tformer.text`): a byte that is not, or a JSON ``\\ud800`` escape that makes no
    character, is refused with the file and line, as is a JSONL line that is not an object with a string
    ``"text"``."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise FileNotFoundError(f"--data {str(path)!r}: the folder holds no .txt files")
        return [read_text(f) for f in files]
    if not path.is_file():
        raise FileNotFoundError(f"--data {str(path)!r}: no such file or folder")
    if path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(read_lines(path), 1):
            if line.strip():
                docs.append(_jsonl_text(line, f"{path}:{n}"))
        return docs
    return [read_text(path)]


def _jsonl_text(line: str, where: str) -> str:
    """The ``"text"`` of one JSONL line; anything else is a ``ValueError`` naming ``where`` (FILE:LINE)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise ValueError(f"{where}: not a JSON object ({reason})") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise ValueError(f"{where}: each JSONL line must be an object with a string 'text' field")
    return check_text(record["text"], f"{where}: field 'text'")


def encode_documents(tokenizer, documents: list[str]) -> torch.Tensor:
    """One stream of ids (N,): the documents joined with the tokenizer's end of text (``<|endoftext|>``)."""
    ids: list[int] = []
    for i, doc in enumerate(documents):
        if i:
            ids.append(tokenizer.eos_id)
        ids.extend(tokenizer.encode(doc))
    return torch.tensor(ids, dtype=torch.long)


def split_ids(ids: torch.Tensor, valid: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation): the last ``valid`` of the stream is the validation part (nanoGPT's split).

    ``valid=0``: no validation part (the run says so and keeps its latest model)."""
    if not 0 <= valid < 1:
        raise ValueError(f"valid must be in [0, 1), got {valid}")
    n = int(len(ids) * (1 - valid))
    return ids[:n], ids[n:]


def blocks(ids: torch.Tensor, starts: torch.Tensor, length: int, fill: int = PAD) -> torch.Tensor:
    """Rows ``ids[s : s + length]`` for each start s, right-padded with ``fill`` (``<pad>``) past the end → (B, length)."""
    index = starts[:, None] + torch.arange(length)  # (B, length)
    padded = torch.cat([ids, torch.full((length,), fill, dtype=ids.dtype)])
    return padded[index]
