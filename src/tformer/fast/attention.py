"""The fast attention kernel, :func:`attend`, and :func:`swap_attention`, which chooses it for every attention layer.

:class:`tformer.nn.attention.MultiHeadAttention` has one ``forward``; its fused path calls the layer's ``kernel``.
The reference kernel (:func:`tformer.nn.scaled_dot_product.attend`) reads like the paper: it spells the look-ahead
mask out and lets beams that share a source row repeat that row's keys and values. This one computes the same
numbers (to float rounding) faster:

* **the fused kernel's own look-ahead mask.** Causal self-attention over a whole sequence with no padding (training,
  a prompt) passes ``is_causal=True`` instead of a (Tq, Tk) mask tensor: no mask is built, and the kernel can skip
  the blocks above the diagonal (on GPUs the flash kernel only takes it this way). A single new query (a decoding
  step) sits after every key: no mask at all. A mask that hides nothing (a batch without padding) is dropped, so
  the kernel takes its unmasked path;
* **beams that share a source** (beam search: K/V with B / G rows for B rows of queries): the G beams of a source
  attend to its keys and values as G·Tq query positions of one row, (B/G, H, G·Tq, Dh), so nothing is repeated;
* **the cheaper CPU dropout mask** on the weights in training
  (:func:`tformer.fast.dropout.scaled_dot_product_attention`);
* **float32 for a bfloat16 or float16 training step on the CPU** (:func:`fused_in_float32`; autocast gives the kernel
  bfloat16 inputs): PyTorch's fused CPU kernel, forward and backward, ran 1.1-4.9x faster in float32 than in
  bfloat16 where a head's keys hold at most :data:`FLOAT32_MAX_KEY_ELEMENTS` numbers (keys x head dim; the character
  LM recipes' step: 1.26-1.51x), so there the inputs are cast up and the context back down. The numbers are float32's,
  closer to the float32 model's than bfloat16's own. Measured on the avx512_bf16 and amx classes (``python -m
  benchmarks.attention_precision``; docs/benchmarks.md, "Attention in float32 for a bfloat16 training step"); weights
  dropped in training take the dropout mask's path above instead, and decoding and evaluation keep their dtype.

A layer with a hook on a step inside the attention, or a soft-capped one, takes the reference path whatever its
kernel (:meth:`~tformer.nn.attention.MultiHeadAttention._attend`); inside :func:`reference` this kernel runs the
reference one. ``tests/test_fast.py`` holds the parity tests.

Dimension legend: B batch (rows of the queries), G rows of the queries per row of K/V, H heads, Hkv key/value
heads, Tq query length, Tk key length, Dh head dim.
"""

from __future__ import annotations

import torch
from torch import nn

from tformer.fast import dropout
from tformer.nn import scaled_dot_product
from tformer.nn.attention import MultiHeadAttention
from tformer.nn.masks import causal_mask, combine_masks, sliding_window_mask

__all__ = [
    "FLOAT32_MAX_KEY_ELEMENTS",
    "attend",
    "fast_mask",
    "fused_in_float32",
    "swap_attention",
    "use_reference_attention",
]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    window: int | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """:func:`tformer.nn.scaled_dot_product.attend` (same arguments, same numbers to float rounding) with the
    shortcuts of the module docstring; returns the context (B, H, Tq, Dh)."""
    if k.shape[0] != q.shape[0]:
        return _beams_sharing_keys(q, k, v, mask, dropout_p, scale)
    mask, is_causal = fast_mask(mask, causal, window, q, k)
    grouped = k.shape[1] != q.shape[1]  # grouped-query K/V, not repeated (the kernel pairs them)
    if dropout_p > 0:  # the weights' dropout (training) draws the cheaper CPU mask
        return dropout.scaled_dot_product_attention(  # type: ignore[return-value]
            q, k, v, mask, dropout_p, is_causal=is_causal, scale=scale, enable_gqa=grouped
        )
    if fused_in_float32(q, k):  # outside autocast, which would cast the float32 inputs back to q's dtype
        with torch.autocast(q.device.type, enabled=False):
            out = scaled_dot_product.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), mask, is_causal=is_causal, scale=scale, enable_gqa=grouped
            )
        return out.to(q.dtype)  # type: ignore[union-attr]
    return scaled_dot_product.scaled_dot_product_attention(  # type: ignore[return-value]
        q, k, v, mask, is_causal=is_causal, scale=scale, enable_gqa=grouped
    )


# the most numbers a head's keys may hold (keys x head dim) for the fused kernel to run in float32 in a bfloat16
# training step. Against bfloat16 it measured 1.1-4.9x at up to 8,192 (32-256 keys x 32 dims, 32-128 x 64, 64 x 128;
# avx512_bf16 and amx classes), level at 16,384 (0.93-1.07x: 256 x 64, 512 x 32, 128 x 128) and 0.67x at 32,768
# (256 x 128, amx); past the limit float32's copies of Q, K and V (3-4x the call's memory) buy nothing
FLOAT32_MAX_KEY_ELEMENTS = 8192


def fused_in_float32(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether the fused kernel runs in float32 for these bfloat16 or float16 queries and keys (and values): on the
    CPU while autograd records them (training), where keys x head dim is at most :data:`FLOAT32_MAX_KEY_ELEMENTS` (see
    the module docstring). Not inside a compiled graph, whose compiler chooses its own kernel."""
    return (
        q.device.type == "cpu"
        and q.dtype in (torch.bfloat16, torch.float16)
        and k.shape[-2] * k.shape[-1] <= FLOAT32_MAX_KEY_ELEMENTS
        and q.requires_grad
        and torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
    )


def _beams_sharing_keys(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float, scale: float | None
) -> torch.Tensor:
    """G rows of ``q`` per row of ``k``/``v`` (cross-attention: the mask is the source's, the same for every query):
    they attend as G·Tq query positions of one row."""
    rows, heads, tq, dh = q.shape
    sources = k.shape[0]
    g = rows // sources
    shared = q.view(sources, g, heads, tq, dh).transpose(1, 2).reshape(sources, heads, g * tq, dh)  # (B/G, H, G·Tq, Dh)
    if mask is not None:
        mask = mask[..., :1, :]  # (B/G|1, 1, 1, Tk): the source's padding, for every query
    out = attend(shared, k, v, mask, False, None, dropout_p, scale)  # (B/G, H, G·Tq, Dh)
    return out.view(sources, heads, g, tq, dh).transpose(1, 2).reshape(rows, heads, tq, dh)  # (B, H, Tq, Dh)


def fast_mask(
    mask: torch.Tensor | None, causal: bool, window: int | None, q: torch.Tensor, k: torch.Tensor
) -> tuple[torch.Tensor | None, bool]:
    """The mask the fused kernel needs: returns ``(mask or None, is_causal)``."""
    if not causal:
        return mask, False
    tq, tk = q.shape[2], k.shape[2]
    if window is not None and tk > window:  # (else the window hides nothing more)
        return combine_masks(sliding_window_mask(tq, tk, window, device=q.device), mask), False
    if mask is None and tq == tk:
        return None, True  # the fused kernel hides the future itself (no (Tq, Tk) mask tensor)
    if tq > 1:  # a single new query sits after every key: nothing to hide
        mask = combine_masks(causal_mask(tq, tk, device=q.device), mask)  # (B, 1, Tq, Tk)
    return mask, False


def swap_attention(model: nn.Module) -> nn.Module:
    """Choose :func:`attend` as the kernel of every :class:`~tformer.nn.attention.MultiHeadAttention` of ``model``
    (``model`` itself included) whose kernel is the reference one, in place: its parameters, hook points, hooks and
    state dict stay as they are. Idempotent; returns ``model``."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and module.kernel is scaled_dot_product.attend:
            module.kernel = attend
    return model


def use_reference_attention(model: nn.Module) -> nn.Module:
    """Choose the reference :func:`tformer.nn.scaled_dot_product.attend` as the kernel of every attention module of
    ``model`` whose kernel is :func:`attend`, in place (:func:`tformer.fast.use_reference`). Returns ``model``."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and module.kernel is attend:
            module.kernel = scaled_dot_product.attend
    return model
