"""Token shift: each sub-layer also reads the positions just before its own, through a slice of its features.

A pre-LN sub-layer reads ``norm(x)`` (B, T, D). With ``shift_tokens = n`` its features are cut into n + 1 groups of
D // (n + 1) and group i is taken from i positions back (zeros before the first position); the features left over
(D not a multiple of n + 1) stay where they are:

    n = 1:  read[t] = (norm(x)[t, :D/2],  norm(x)[t − 1, D/2:])

No weights are added. A character-level model then sees the last characters in every layer without spending
attention on them (RWKV's "token shift", without its learned mix; x-transformers' ``shift_tokens``, the same split).
The shift only looks back, so a decoder stays causal.

Incremental decoding gives the positions a few at a time: the n positions before them come from the cache
(:meth:`tformer.nn.cache.LayerCache.carry`), which keeps the last n a sub-layer read. Left padding reads as zeros
(``real``), so a padded row gives what the same row gives unpadded.

Dimension legend: B batch, T new positions, D model dim, n shift_tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["shift_tokens"]


def shift_tokens(
    x: torch.Tensor,
    n: int,
    real: torch.Tensor | None = None,
    carry: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``x`` (B, T, D) with feature group i (of n + 1, D // (n + 1) features each) taken from i positions back.

    ``real`` (B, T) bool: False where a position is padding (read as zeros by the positions after it). ``carry``: the
    cache's, given ``x`` (padding zeroed) returns (B, n + T, D), the n positions read before ``x`` (zeros at the start)
    followed by ``x``; without one the sequence starts here."""
    b, t, d = x.shape
    width = d // (n + 1)
    source = x if real is None else x * real[..., None].to(x.dtype)  # (B, T, D)
    if carry is not None:
        history = carry(source)  # (B, n + T, D)
    else:
        history = torch.cat([source.new_zeros(b, n, d), source], dim=1)  # (B, n + T, D)
    groups = [x[..., :width]]  # group 0: this position's own features (padding included: its own output)
    groups += [history[:, n - i : n - i + t, i * width : (i + 1) * width] for i in range(1, n + 1)]  # (B, T, width)
    if (n + 1) * width < d:
        groups.append(x[..., (n + 1) * width :])  # the features left over stay
    return torch.cat(groups, dim=-1)  # (B, T, D)
