"""Solutions to the exercises of lesson 1, tokens and embeddings.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def teacher_forcing_pair(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder input and labels of a batch of ids (B, T), both (B, T - 1).

    The input drops the last token, the labels the first: position t reads tokens
    0..t and is scored on token t + 1."""
    return ids[:, :-1], ids[:, 1:]


def embed_one_hot(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """An embedding lookup as a product: one-hot rows (B, T, V) @ the table (V, D)."""
    one_hot = torch.nn.functional.one_hot(ids, num_classes=weight.shape[0])
    return one_hot.to(weight.dtype) @ weight  # (B, T, D)


def word_pieces(tokenizer, text: str) -> list[str]:
    """The WordPiece pieces of ``text``, without the [CLS] and [SEP] around them."""
    return tokenizer.encode(text).tokens[1:-1]
