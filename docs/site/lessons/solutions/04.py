"""Solutions to the exercises of lesson 4, multi-head attention.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D / H): each head gets its own slice of every vector."""
    b, t, d = x.shape
    if d % n_heads:
        raise ValueError(f"d_model={d} is not divisible by n_heads={n_heads}")
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H·Dh): the heads' slices side by side again."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def mha_parameter_count(d_model: int, n_heads: int) -> int:
    """W_Q, W_K, W_V and W_O, each D × D with a bias of D: 4·D² + 4·D.

    The number of heads only cuts the same matrices into more slices."""
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return 4 * d_model * d_model + 4 * d_model


def cross_attention_shapes(
    batch: int, tgt_len: int, src_len: int, d_model: int, n_heads: int
) -> dict[str, tuple[int, ...]]:
    """The shapes in cross-attention, queries from the decoder (tgt_len), keys and
    values from the encoder (src_len).

    K, V and the weights' last axis have the source's length; the queries, the
    weights' rows and the output have the target's."""
    d_k = d_model // n_heads
    return {
        "q": (batch, n_heads, tgt_len, d_k),
        "k": (batch, n_heads, src_len, d_k),
        "v": (batch, n_heads, src_len, d_k),
        "weights": (batch, n_heads, tgt_len, src_len),
        "output": (batch, tgt_len, d_model),
    }
