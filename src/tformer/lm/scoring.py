"""``tformer evaluate-lm``'s measure: a language model's loss per token, perplexity and, for a tokenizer whose units
are known (tformer's char and byte-BPE ones), bits per character or byte, on a text or on a prepared folder.

A Hugging Face tokenizer's tokens have no unit tformer knows: on a text, a model loaded from a Hugging Face directory
(or trained from one with ``--init``) gets bits per byte of the text itself (:func:`_text_bytes`), the measure that
compares models whatever their tokenizers; on a prepared folder (ids, no text), the loss and perplexity alone, as
training reports them for it.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tformer.data import is_prepared
from tformer.data.stream import open_tokens, prepare_lm
from tformer.lm.data import encode_documents, read_documents
from tformer.lm.task import evaluate_stream

__all__ = ["evaluate"]


def evaluate(model, tokenizer, data: str | Path, max_len: int | None = None, batch_size: int = 32) -> dict:
    """Loss per token, perplexity and (for a known unit) bits per unit of ``model`` on the documents of ``data``:
    a text (a file, a folder of them, JSONL), or a folder ``tformer data prepare lm`` made with this tokenizer (its
    stream scored whole, memory-mapped). ``unit`` says which unit (``"character"``, ``"byte"``: a Hugging Face
    tokenizer's on a text are the text's bytes; None: its tokens in a prepared folder, no bits per unit), ``tokens``
    how many were scored, ``unknown`` (when some) how many characters of the text a character model has no id for
    (scored as ``<unk>``). Documents are joined with the tokenizer's end of text; positions past the end are not
    scored. ``max_len`` is capped at the model's context."""
    documents = None
    if is_prepared(data, "lm"):  # checked against this tokenizer: a folder prepared with another one is refused
        ids: torch.Tensor | object = open_tokens(prepare_lm(data, tokenizer, log=lambda _: None))[1]
        unknown = None  # (not counted in a prepared stream)
    else:
        documents = read_documents(data)
        ids = encode_documents(tokenizer, documents)  # one text scored: in memory
        unknown = int((ids == tokenizer.unk_id).sum()) if tokenizer.kind == "char" else None  # read as <unk>
    if len(ids) < 2:  # type: ignore[arg-type]
        raise ValueError(f"--data {str(data)!r} has fewer than 2 tokens")
    block = min(max_len or model.config.max_len, model.config.max_len)
    lengths = torch.tensor(tokenizer.unit_lengths()) if tokenizer.unit is not None else None
    result = evaluate_stream(model, ids, lengths, block, batch_size)  # type: ignore[arg-type]
    unit = tokenizer.unit
    if unit is None and documents is not None:  # a Hugging Face tokenizer: bits per byte of the text
        unit = "byte"
        nats, held = result["val_loss"] * result["tokens"], _text_bytes(tokenizer, documents, ids)  # type: ignore[arg-type]
        result["val_bpc"] = nats / math.log(2) / max(held, 1)
    return {**result, "unit": unit, **({"unknown": unknown} if unknown else {})}


def _text_bytes(tokenizer, documents: list[str], ids: torch.Tensor) -> int:
    """What the predicted tokens (all but the first) hold of ``documents``, in UTF-8 bytes: the text's bytes less the
    first token's, plus one for each special token among them (the separators between documents, a BOS), as tformer's
    own byte tokenizer counts one. A model of tformer's character tokenizer exported to Hugging Face gets, on an ASCII
    text, the bits per character it had."""
    special = set(tokenizer.special_ids)
    first = int(ids[0])
    first_bytes = 0 if first in special else len(tokenizer.decode([first]).encode("utf-8"))
    specials = sum(1 for i in ids[1:].tolist() if i in special)
    return sum(len(doc.encode("utf-8")) for doc in documents) - first_bytes + specials
