"""What a BERT directory's export leaves out and names: its pretraining heads that never trained, and a classifier's
label names. ``tformer export`` and :meth:`tformer.loader.Loaded.export` decide the same from these.

    untrained_heads("all-MiniLM-L6-v2/", hf=True)   # ("mlm_head", "nsp_head"): no cls.* weights, a random init here
    saved_labels("runs/clf/best")                   # ["negative", "positive"]: labels.json's, as written

A head that never trained computes noise; written as a checkpoint's own, ``transformers`` would load it without its
"newly initialized" warning. The label names are ``labels.json``'s (``tformer train classify``), written as
``id2label``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tformer.hf.bert import HEAD_PREFIXES
from tformer.hf.directory import weight_names
from tformer.readers import read_json_object

__all__ = ["LABELS_FILE", "UNTRAINED_MLM", "untrained_mlm", "untrained_heads", "saved_labels"]

LABELS_FILE = "labels.json"  # a classifier's label names, beside its model (tformer train classify)
UNTRAINED_MLM = "untrained_mlm_head"  # labels.json's key: the classifier was made from scratch, its MLM head random


def untrained_mlm(directory: str | os.PathLike) -> bool:
    """Whether the classifier in ``directory`` says its MLM head never trained (a ``train classify`` from scratch)."""
    path = Path(directory) / LABELS_FILE
    try:
        return bool(path.is_file() and json.loads(path.read_text(encoding="utf-8")).get(UNTRAINED_MLM))
    except (OSError, ValueError, AttributeError):
        return False


def untrained_heads(directory: str | os.PathLike, hf: bool) -> tuple[str, ...]:
    """The pretraining heads (``mlm_head``, ``nsp_head``) of the BERT in ``directory`` that never trained: those a
    Hugging Face directory (``hf``) has no weights for (a sentence-transformers encoder, a classifier), or both when
    a tformer classifier's ``labels.json`` says its MLM head never trained (and so neither did its NSP head)."""
    if hf:
        names = weight_names(directory)
        return tuple(head for head, prefix in HEAD_PREFIXES.items() if not any(n.startswith(prefix) for n in names))
    return tuple(HEAD_PREFIXES) if untrained_mlm(directory) else ()


def saved_labels(directory: str | os.PathLike) -> list[str] | None:
    """The label names of ``directory``'s ``labels.json`` (None: it has none); one that holds no non-empty list of
    strings is a ``ValueError`` naming it."""
    path = Path(directory) / LABELS_FILE
    if not path.is_file():
        return None
    labels = read_json_object(path, "labels file").get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise ValueError(f"labels file {str(path)!r} must hold {{'labels': [...]}}, a non-empty list of strings")
    return labels
