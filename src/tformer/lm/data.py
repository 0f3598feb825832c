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

from tformer.lm.tokenizer import EOT, PAD

__all__ = ["read_documents", "encode_documents", "split_ids", "blocks"]


def read_documents(path: str | Path) -> list[str]:
    """A UTF-8 text file (one document), a folder of ``.txt`` files, or a JSONL file with a ``"text"`` field."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise FileNotFoundError(f"--data {str(path)!r}: the folder holds no .txt files")
        return [f.read_text(encoding="utf-8") for f in files]
    if not path.is_file():
        raise FileNotFoundError(f"--data {str(path)!r}: no such file or folder")
    if path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise ValueError(f"{path}:{n}: each JSONL line must be an object with a string 'text' field")
                docs.append(record["text"])
        return docs
    return [path.read_text(encoding="utf-8")]


def encode_documents(tokenizer, documents: list[str]) -> torch.Tensor:
    """One stream of ids (N,): the documents joined with ``<|endoftext|>``."""
    ids: list[int] = []
    for i, doc in enumerate(documents):
        if i:
            ids.append(EOT)
        ids.extend(tokenizer.encode(doc))
    return torch.tensor(ids, dtype=torch.long)


def split_ids(ids: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation): the last ``val_fraction`` of the stream is the validation part (nanoGPT's split).

    ``val_fraction=0``: no validation part (the run says so and keeps its latest model)."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n = int(len(ids) * (1 - val_fraction))
    return ids[:n], ids[n:]


def blocks(ids: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """Rows ``ids[s : s + length]`` for each start s, right-padded with ``<pad>`` past the end → (B, length)."""
    index = starts[:, None] + torch.arange(length)  # (B, length)
    padded = torch.cat([ids, torch.full((length,), PAD, dtype=ids.dtype)])
    return padded[index]
