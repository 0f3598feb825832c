"""Scaled dot-product attention, the formula at the heart of every attention layer:

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V

Two paths compute it:

* the **fused** path, ``torch.nn.functional.scaled_dot_product_attention`` (:func:`scaled_dot_product_attention`);
* the **reference** path, written out step by step (matmul → scale (→ soft-cap) → mask → softmax → dropout →
  matmul: :func:`reference_attention`), used when someone wants to see the scores and weights
  (``return_details=True``, or a hook on one of those steps, :mod:`tformer.nn.hooks`). A test keeps the two equal.

Masks follow :mod:`tformer.nn.masks`: boolean, ``True`` = may attend. A query row with nothing to attend to
outputs zeros (never NaN), in every dtype. :mod:`tformer.nn.attention` builds multi-head attention on these; its
fused path calls a *kernel*, ``kernel(q, k, v, mask, causal, window, dropout_p, scale)`` → the context (B, H, Tq,
Dh) for K/V of Hkv heads and of B or B / G rows (G beams sharing a source): :func:`attend` here, the reference one,
or the one chosen in its place (:func:`tformer.fast.attention.attend`).

Dimension legend: B batch, H heads, Hkv key/value heads (grouped-query attention), Tq query length, Tk key length,
Dh head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tformer.nn.masks import causal_mask, combine_masks, sliding_window_mask

__all__ = [
    "AttentionDetails",
    "scaled_dot_product_attention",
    "reference_attention",
    "check_attention_mask",
    "Kernel",
    "attend",
    "spell_out",
]

Kernel = Callable[..., torch.Tensor]  # (q, k, v, mask, causal, window, dropout_p, scale) -> context (B, H, Tq, Dh)


@dataclass
class AttentionDetails:
    """The intermediate tensors of the reference path."""

    scores: torch.Tensor  # (B, H, Tq, Tk) Q·Kᵀ/√Dh (soft-capped when the layer caps)
    masked_scores: torch.Tensor  # (B, H, Tq, Tk) blocked entries set to −∞
    weights: torch.Tensor  # (B, H, Tq, Tk) softmax over Tk (before dropout); fully masked rows are 0
    raw_scores: torch.Tensor  # (B, H, Tq, Tk) Q·Kᵀ, before the scaling by 1/√Dh


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    return_details: bool = False,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, AttentionDetails]:
    """softmax(Q·Kᵀ/√Dh, masked) · V for ``q`` (B, H, Tq, Dh), ``k``/``v`` (B, H, Tk, Dh) (or (B, Hkv, Tk, Dh) with
    ``enable_gqa``: key/value head j serves query heads j·H/Hkv … (j + 1)·H/Hkv − 1, unrepeated).

    ``mask`` is boolean (``True`` = may attend) and broadcasts to (B, H, Tq, Tk). ``dropout_p`` is
    applied to the weights (pass 0 in eval mode). With ``return_details=True`` the readable reference
    path runs and returns ``(context, AttentionDetails)``; otherwise the fused kernel runs and only
    the context (B, H, Tq, Dh) is returned. ``is_causal=True`` (only without ``mask``, and only for Tq = Tk) is
    the look-ahead mask, applied inside the fused kernel without building a (Tq, Tk) tensor. ``scale`` replaces
    1/√Dh (Gemma's ``query_pre_attn_scalar`` ^ −½).
    """
    check_attention_mask(mask, is_causal, q.shape[-2], k.shape[-2])
    grouped = enable_gqa and k.shape[1] != q.shape[1]
    if grouped and return_details:  # the reference path repeats them; the fused kernel pairs the groups itself
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    if return_details:
        if is_causal:  # the reference path spells the look-ahead mask out
            mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (1, 1, Tq, Tk)
        return reference_attention(q, k, v, mask, dropout_p, scale=scale)
    gqa = {"enable_gqa": True} if grouped else {}  # (only then: the argument is new in torch 2.5)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **gqa
    )
    if mask is not None:  # some kernels give NaN for fully masked rows: make them exactly 0 (no branch on the data:
        # reading whether such a row exists would wait for the device, and a compiled graph cannot branch on it)
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # (B, H, Tq, Dh); the mask's rows (B, 1, Tq, 1)
    return out  # (B, H, Tq, Dh)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout: Callable[[torch.Tensor, float], torch.Tensor] = F.dropout,
    softcap: float | None = None,
    scale: float | None = None,
    watch: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, AttentionDetails]:
    """The reference path, step by step: returns the context (B, H, Tq, Dh) and the :class:`AttentionDetails`.

    ``dropout(weights, dropout_p)`` drops attention weights in training (``F.dropout``; ``tformer.fast``
    passes its cheaper CPU mask). ``softcap`` c bounds the scores softly to (−c, c): c·tanh(scores / c)
    (Gemma 2); the details' ``scores`` are then the capped ones (``raw_scores``: Q·Kᵀ before scaling). ``scale``
    replaces 1/√Dh: the scores are then Q·Kᵀ · scale. ``watch(step, tensor)``, if given, sees each step's tensor
    (``raw_scores``, ``scores``, ``masked_scores``, ``weights``) and returns the one to go on with (the hook points
    of :class:`MultiHeadAttention`)."""
    look = watch if watch is not None else _as_is
    raw = look("raw_scores", q @ k.transpose(-2, -1))  # (B, H, Tq, Dh) @ (B, H, Dh, Tk) -> (B, H, Tq, Tk)
    scores = raw / math.sqrt(q.shape[-1]) if scale is None else raw * scale  # (B, H, Tq, Tk)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = look("scores", scores)
    if mask is None:
        masked_scores = look("masked_scores", scores)
        weights = torch.softmax(masked_scores.float(), dim=-1).to(q.dtype)
    else:
        masked_scores = look("masked_scores", scores.masked_fill(~mask, float("-inf")))  # (B, H, Tq, Tk)
        weights = torch.softmax(masked_scores.float(), dim=-1).to(q.dtype)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # all −∞ row: NaN → 0
    weights = look("weights", weights)
    dropped = dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = dropped @ v  # (B, H, Tq, Tk) @ (B, H, Tk, Dh) -> (B, H, Tq, Dh)
    return out, AttentionDetails(scores=scores, masked_scores=masked_scores, weights=weights, raw_scores=raw)


def _as_is(_step: str, t: torch.Tensor) -> torch.Tensor:
    return t


def check_attention_mask(mask: torch.Tensor | None, is_causal: bool, tq: int = 0, tk: int = 0) -> None:
    """The attention functions take a boolean ``mask`` or ``is_causal=True``, not both; ``is_causal`` for as many
    queries as keys (``tq``, ``tk``): else where the queries sit among the keys is the caller's to say, by a mask
    (PyTorch's fused kernel would put the first query at the first key; :func:`~tformer.nn.masks.causal_mask`
    puts the last at the last, as a query after cached keys is)."""
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if is_causal and mask is not None:
        raise ValueError(
            "pass either mask or is_causal=True, not both (combine them with tformer.nn.masks.combine_masks)"
        )
    if is_causal and tq != tk:
        raise ValueError(
            f"is_causal=True needs as many queries as keys, got {tq} queries and {tk} keys: pass "
            f"mask=tformer.nn.masks.causal_mask({tq}, {tk}) (the last query at the last key) instead"
        )


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
    """The reference kernel of :class:`MultiHeadAttention`: the look-ahead mask (or the sliding window of ``window``
    positions) spelled out and added to ``mask``, the rows of K/V repeated for the beams that share them, then
    :func:`scaled_dot_product_attention`. ``q`` (B, H, Tq, Dh); ``k``, ``v`` (B or B / G, Hkv, Tk, Dh); ``mask``
    (B|B / G|1, 1, Tq|1, Tk) boolean or None; returns the context (B, H, Tq, Dh)."""
    k, v, mask = spell_out(q, k, v, mask, causal, window)
    grouped = k.shape[1] != q.shape[1]  # grouped-query K/V, not repeated (the kernel pairs them)
    return scaled_dot_product_attention(q, k, v, mask, dropout_p, scale=scale, enable_gqa=grouped)  # type: ignore[return-value]


def spell_out(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool, window: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """K, V and the mask as the formula reads them: with ``causal`` the look-ahead mask (or the sliding window)
    added to ``mask`` (B|1, 1, Tq, Tk); K/V (and the mask) of B / G rows repeated for the G beams of each source."""
    if causal:
        tq, tk = q.shape[2], k.shape[2]
        look = causal_mask(tq, tk, device=q.device) if window is None else sliding_window_mask(tq, tk, window, q.device)
        mask = combine_masks(look, mask)  # (B|1, 1, Tq, Tk)
    if k.shape[0] != q.shape[0]:  # beam search: source i serves rows i·G … i·G + G − 1 (copies)
        g = q.shape[0] // k.shape[0]
        k, v = k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)  # (B, Hkv, Tk, Dh)
        if mask is not None and mask.shape[0] > 1:
            mask = mask.repeat_interleave(g, dim=0)  # (B, 1, Tq, Tk)
    return k, v, mask
