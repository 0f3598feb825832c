"""Fill-mask: the MLM head's distribution at every ``[MASK]`` of a sentence.

    "the cat sat on the [MASK]." ─ [CLS] … [MASK] … [SEP] ─ Bert ─ hidden (1, T, D)
        ─ rows at the [MASK] positions (M, D) ─ MLM head ─ (M, V) ─ softmax ─ top-k per [MASK]

:func:`load_masked_lm` reads, through :func:`tformer.load`, a directory written by ``tformer train bert`` or a
Hugging Face BERT directory (``config.json`` that says so, ``model.safetensors`` holding the ``cls.predictions``
MLM head, ``tokenizer.json`` or ``vocab.txt``).

Dimension legend: T tokens, D model dim, V vocabulary, M number of [MASK] tokens, K top-k.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch

from tformer.checks import candidates
from tformer.hf.bert import HEAD_PREFIXES
from tformer.hf.heads import untrained_heads as untrained_heads_in
from tformer.loader import Loaded, load
from tformer.models.bert import Bert
from tformer.text import check_text
from tformer.tokenizers import WordPieceTokenizer

__all__ = ["load_masked_lm", "masked_lm", "fill_mask", "untrained_heads"]


def load_masked_lm(directory: str | Path, flag: str | None = None) -> tuple[Bert, WordPieceTokenizer]:
    """A BERT with its MLM head and its tokenizer, through :func:`tformer.load`: our model directory (a training
    run's: its best model) or a Hugging Face one; ``flag``: the argument messages name (``--model``)."""
    return masked_lm(load(directory, family="bert", flag=flag))


def masked_lm(loaded: Loaded) -> tuple[Bert, WordPieceTokenizer]:
    """The BERT and WordPiece tokenizer of a BERT :func:`tformer.load` read, checked to have a trained MLM head (a
    Hugging Face directory without ``cls.predictions.*``, e.g. a sentence-transformers encoder, has none)."""
    tokenizer = loaded.require_tokenizer()
    if "mlm_head" in untrained_heads(loaded):
        raise ValueError(no_head(loaded, "mlm_head") + ": fill-mask needs a `train bert` model or a pretrained BERT")
    assert isinstance(loaded.model, Bert)
    return loaded.model, cast(WordPieceTokenizer, tokenizer)  # a BERT's is WordPiece (tformer.loader)


def untrained_heads(loaded: Loaded) -> tuple[str, ...]:
    """The pretraining heads (``mlm_head``, ``nsp_head``) of a BERT :func:`tformer.load` read that never trained: a
    Hugging Face checkpoint without their weights (a sentence-transformers encoder, a classifier: tformer's Bert has
    them, at their random init), or a ``train classify`` model whose ``labels.json`` says its MLM head never trained
    (and so neither did its NSP head). What they compute is noise: fill-mask, trace, the explorer and export say so."""
    return untrained_heads_in(loaded.directory, loaded.kind.source == "hf") if loaded.family == "bert" else ()


def no_head(loaded: Loaded, head: str) -> str:
    """One line saying that ``loaded``'s ``head`` (``mlm_head``, ``nsp_head``) never trained, and why."""
    name = {"mlm_head": "MLM head", "nsp_head": "NSP head"}[head]
    if loaded.kind.source == "hf":
        where = f"{name} ({HEAD_PREFIXES[head]}*)"
        return f"{str(loaded.directory)!r} has no {where}, e.g. a sentence-transformers encoder or a classifier"
    return f"{str(loaded.directory)!r} is a classifier (tformer train classify) whose {name} never trained: noise"


@torch.no_grad()
def fill_mask(model: Bert, tokenizer: WordPieceTokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text`` (left to right), the ``top_k`` (token, probability) pairs."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string with [MASK] in it, got {type(text).__name__} {text!r:.40}")
    check_text(text, "text")  # no lone surrogate, no NUL
    candidates.check(top_k, "top_k")  # the bound and words of --candidates
    ids = tokenizer.encode(text, add_special_tokens=True, max_length=model.config.max_len)  # [CLS] … [SEP]
    types = [0] * len(ids)
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    if not positions:
        raise ValueError(f"no [MASK] token in {text!r} (within the first {model.config.max_len - 2} tokens)")
    model.eval()
    device = next(model.parameters()).device
    hidden = model(torch.tensor([ids], device=device), token_type_ids=torch.tensor([types], device=device))  # (1, T, D)
    probs = model.mlm_head(hidden[0, positions]).float().softmax(-1)  # (M, D) -> (M, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (M, K)
    return [
        [(tokenizer.id_to_token(i) or str(i), p) for i, p in zip(row_ids.tolist(), row_p.tolist())]
        for row_ids, row_p in zip(top.indices, top.values)
    ]
