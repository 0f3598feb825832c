"""Solutions to the exercises of lesson 3, attention and masks.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def lookahead_blocked(n: int) -> torch.Tensor:
    """The notes' second form of the look-ahead mask: (n, n), 1 = blocked."""
    return torch.triu(torch.ones(n, n), diagonal=1)


def to_may_attend(blocked: torch.Tensor) -> torch.Tensor:
    """A 0/1 'blocked' mask → tformer's convention: boolean, True = may attend."""
    return blocked == 0


def stable_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, the maximum subtracted first: exp never
    overflows, and the result is the same (softmax ignores a shift)."""
    shifted = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return shifted / shifted.sum(dim=-1, keepdim=True)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` over the keys where ``mask`` is True (may attend).

    A row with no True gives zeros, never NaN: the blocked scores become −∞ (which
    every dtype holds, unlike −1e9 in float16), the softmax runs in float32, and
    the empty rows are set to 0 afterwards — as tformer does."""
    filled = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(filled.float(), dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights.to(scores.dtype)
