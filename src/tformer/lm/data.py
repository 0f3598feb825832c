"""Language-model data: documents → one stream of ids → train/validation parts → blocks.

* :func:`read_documents` reads a text file, a JSONL file with a ``"text"`` field, Parquet, Arrow, or a folder of them
  (each document one string, in memory: a corpus of any size is streamed into shards by :mod:`tformer.data`);
* :func:`encode_documents` joins the documents with ``<|endoftext|>`` into one stream of ids;
* :func:`split_ids` keeps the last 10% for validation (as nanoGPT does);
* :func:`blocks` cuts rows of consecutive ids out of the stream.

Dimension legend: B batch, N tokens in a stream.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tformer.data import read_documents as data_documents
from tformer.tokens import LM_PAD as PAD

__all__ = ["read_documents", "encode_documents", "split_ids", "blocks"]


def read_documents(path: str | Path, text_field: str = "text") -> list[str]:
    """Every document of ``path`` whole, in memory: a UTF-8 text file (one document), a JSONL file with a string
    ``text_field`` per line, a Parquet or Arrow file, a saved ``datasets`` dataset, or a folder of those files
    (:mod:`tformer.data.sources`). For a small text (scoring, the lessons); training streams a corpus of any size
    through :mod:`tformer.data` instead.

    Strict UTF-8 (:mod:`tformer.text`): a byte that is not, or a JSON ``\\ud800`` escape that makes no
    character, is refused with the file and line, as is a JSONL line that is not an object with a string field."""
    return data_documents(path, text_field)


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
    """Rows ``ids[s : s + length]`` for each start s, ``fill`` (``<pad>``) past the end → (B, length); the stream itself
    is indexed, never copied (a memory-mapped one: :meth:`tformer.data.TokenStream.rows`)."""
    index = starts[:, None] + torch.arange(length)  # (B, length)
    rows = ids[index.clamp(max=len(ids) - 1)]
    rows[index >= len(ids)] = fill
    return rows
