"""Attention masks — the one convention used everywhere in tformer.

Convention (the same meaning as ``torch.nn.functional.scaled_dot_product_attention``):

    a mask is a **boolean** tensor, ``True`` = "this query may attend to this key",
    with canonical shape ``(B, 1, Tq, Tk)`` (it broadcasts over the heads).

Every argument named ``*_mask`` in the library has exactly this meaning. Other conventions are
converted only at the boundary, with the functions at the bottom of this module:

==========================  =====================================  ===========================
convention                   example                               converter
==========================  =====================================  ===========================
tformer (this module)        ``True`` = may attend                  —
additive float (0 / −∞)      0 = may attend, −∞ = blocked           ``to_additive`` / ``from_additive``
the notes' ``−1e9 × mask``   1 = blocked, added as −1e9 × mask      ``to_additive(m, -1e9)`` / ``from_blocked``
PyTorch ``nn.Transformer``   bool ``True`` = blocked, or additive   ``to_torch`` / ``from_torch``
==========================  =====================================  ===========================

Dimension legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

import torch

__all__ = [
    "causal_mask",
    "sliding_window_mask",
    "padding_mask",
    "combine_masks",
    "to_additive",
    "from_additive",
    "from_blocked",
    "to_torch",
    "from_torch",
    "check_mask",
]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Look-ahead mask of shape ``(1, 1, Tq, Tk)``: query ``i`` may attend to keys ``j <= i``.

    The mask is right-aligned: the last query sits at the last key. With a KV cache the new
    queries are the last ``q_len`` positions of a ``k_len``-long sequence, so query ``i`` stands at
    absolute position ``k_len - q_len + i``.

    >>> causal_mask(3).int()[0, 0]
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    k_len = q_len if k_len is None else k_len
    if q_len < 1 or k_len < q_len:
        raise ValueError(f"causal_mask needs 1 <= q_len <= k_len, got q_len={q_len}, k_len={k_len}")
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=k_len - q_len)[None, None]  # (1, 1, Tq, Tk)


def sliding_window_mask(
    q_len: int, k_len: int | None = None, window: int = 1, device: torch.device | str | None = None
) -> torch.Tensor:
    """The look-ahead mask limited to the last ``window`` keys, ``(1, 1, Tq, Tk)``, right-aligned like
    :func:`causal_mask`: query ``i`` (at position ``p = k_len - q_len + i``) may attend to keys ``p - window < j <= p``
    (Mistral, Gemma's local layers).

    >>> sliding_window_mask(4, window=2).int()[0, 0]
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    if window < 1:
        raise ValueError(f"sliding_window_mask needs window >= 1, got window={window}")
    causal = causal_mask(q_len, k_len, device)  # (1, 1, Tq, Tk)
    k_len = causal.shape[-1]
    return causal & causal.new_ones(q_len, k_len).triu(diagonal=k_len - q_len - window + 1)  # (1, 1, Tq, Tk)


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Key-padding mask of shape ``(B, 1, 1, Tk)``: ``True`` where ``ids`` is a real token."""
    if ids.dim() != 2:
        raise ValueError(f"padding_mask expects ids of shape (B, T), got shape {tuple(ids.shape)}")
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, Tk)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of the given masks (``None`` entries are skipped); broadcasts their shapes."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        result = mask if result is None else result & mask
    return result


def to_additive(
    mask: torch.Tensor, neg_value: float = float("-inf"), dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Boolean "may attend" mask → additive float mask (0 where allowed, ``neg_value`` where blocked).

    ``neg_value=-1e9`` gives the style of the course notes; note that −1e9 overflows to −∞ in float16.
    """
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, neg_value)


def from_additive(mask: torch.Tensor, threshold: float = -1e4) -> torch.Tensor:
    """Additive float mask (0 / −∞ or 0 / −1e9) → boolean "may attend" mask.

    Entries at or below ``threshold`` count as blocked; any other entry must be 0.
    """
    if not mask.is_floating_point():
        raise TypeError(f"from_additive expects a float mask, got dtype {mask.dtype}")
    blocked = mask <= threshold
    if not torch.all(blocked | (mask == 0)):
        raise ValueError(
            "from_additive: mask has entries that are neither 0 nor a large negative value (a bias, not a mask)"
        )
    return ~blocked


def from_blocked(mask: torch.Tensor) -> torch.Tensor:
    """A 0/1 or boolean mask where 1/``True`` = blocked (the notes' upper-triangular mask) → tformer's convention."""
    return mask == 0 if not mask.dtype == torch.bool else ~mask


def to_torch(mask: torch.Tensor) -> torch.Tensor:
    """tformer mask → PyTorch ``nn.Transformer`` boolean mask (``True`` = blocked)."""
    return ~mask


def from_torch(mask: torch.Tensor) -> torch.Tensor:
    """PyTorch ``nn.Transformer``/``nn.MultiheadAttention`` mask (bool ``True`` = blocked, or additive float)
    → tformer mask (``True`` = may attend)."""
    if mask.dtype == torch.bool:
        return ~mask
    return from_additive(mask)


def check_mask(mask: torch.Tensor | None, name: str, batch: int, q_len: int, k_len: int, heads: int = 1) -> None:
    """Raise a clear error unless ``mask`` is a boolean tensor that broadcasts to ``(B, H, Tq, Tk)``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "convert float masks with tformer.nn.masks.from_additive and PyTorch masks with tformer.nn.masks.from_torch"
        )
    expected = (batch, heads, q_len, k_len)
    ok = mask.dim() == 4 and all(m in (1, e) for m, e in zip(mask.shape, expected))
    if not ok:
        raise ValueError(f"{name} must broadcast to (B, H, Tq, Tk) = {expected}, got shape {tuple(mask.shape)}")
