"""Scaled dot-product attention and multi-head attention (self and cross).

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V

Two paths compute the same thing:

* the **fused** path, ``torch.nn.functional.scaled_dot_product_attention``, used for training and
  generation;
* the **reference** path, written out step by step (matmul → scale → mask → softmax → dropout →
  matmul), used when someone wants to see the scores and weights (``return_details=True`` or an
  active :class:`tformer.nn.recorder.Recorder`). A test keeps the two equal.

Masks follow :mod:`tformer.nn.masks`: boolean, ``True`` = may attend. A query row with nothing to
attend to outputs zeros (never NaN), in every dtype.

Dimension legend: B batch, H heads, Tq query length, Tk key length, Dh head dim, D model dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tformer.nn.cache import LayerKV
from tformer.fast.dropout import dropout, uses_fast_mask
from tformer.nn.recorder import AttentionRecord, current_recorder
from tformer.fast.linear import Linear
from tformer.nn.masks import causal_mask, check_mask, combine_masks
from tformer.nn.positional import apply_rotary

__all__ = ["AttentionDetails", "scaled_dot_product_attention", "MultiHeadAttention"]


@dataclass
class AttentionDetails:
    """The intermediate tensors of the reference path."""

    scores: torch.Tensor  # (B, H, Tq, Tk) Q·Kᵀ/√Dh
    masked_scores: torch.Tensor  # (B, H, Tq, Tk) blocked entries set to −∞
    weights: torch.Tensor  # (B, H, Tq, Tk) softmax over Tk (before dropout); fully masked rows are 0


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    return_details: bool = False,
    is_causal: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, AttentionDetails]:
    """softmax(Q·Kᵀ/√Dh, masked) · V for ``q`` (B, H, Tq, Dh), ``k``/``v`` (B, H, Tk, Dh).

    ``mask`` is boolean (``True`` = may attend) and broadcasts to (B, H, Tq, Tk). ``dropout_p`` is
    applied to the weights (pass 0 in eval mode). With ``return_details=True`` the readable reference
    path runs and returns ``(context, AttentionDetails)``; otherwise the fused kernel runs and only
    the context (B, H, Tq, Dh) is returned (with dropout on the CPU, the reference path with tformer's
    cheaper dropout mask: PyTorch's CPU kernels draw theirs one element at a time). ``is_causal=True`` (only without ``mask``) is the look-ahead
    mask for Tq = Tk, applied inside the fused kernel without building a (Tq, Tk) tensor.
    """
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if is_causal and mask is not None:
        raise ValueError("pass either mask or is_causal=True, not both (combine them with tformer.nn.masks.combine_masks)")
    # PyTorch's CPU kernels take dropout only on their unfused path, which draws the mask one element at a
    # time; the reference path below computes the same with tformer's cheaper mask (tformer.fast.dropout)
    spelled_out = return_details or (dropout_p > 0 and uses_fast_mask(q, dropout_p))
    if is_causal and spelled_out:  # the reference path spells the mask out
        mask, is_causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device), False
    if not spelled_out:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
        if mask is not None:  # some kernels give NaN for fully masked rows: make them exactly 0
            has_key = mask.any(dim=-1, keepdim=True)  # (B, 1, Tq, 1)
            if not bool(has_key.all()):
                out = out.masked_fill(~has_key, 0.0)
        return out

    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is None:
        masked_scores = scores
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    else:
        masked_scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, Tq, Tk)
        weights = torch.softmax(masked_scores.float(), dim=-1).to(q.dtype)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # all −∞ row: NaN → 0
    out = dropout(weights, dropout_p) @ v  # (B, H, Tq, Dh)
    if not return_details:
        return out
    return out, AttentionDetails(scores=scores, masked_scores=masked_scores, weights=weights)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: project to Q, K, V, split into heads, attend, concatenate, project.

    * self-attention: ``mha(x)`` — Q, K and V all come from ``x``;
    * cross-attention: ``mha(x, memory)`` — Q comes from ``x`` (the decoder), K and V from
      ``memory`` (the encoder output). ``causal=True`` is refused there.

    The three input projections W_Q, W_K, W_V are stored as one ``(3D, D)`` matrix (rows in that
    order, as ``nn.MultiheadAttention`` does) so self-attention computes them in one matmul.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias)  # rows: W_Q, W_K, W_V
        self.out_proj = Linear(d_model, d_model, bias=bias)  # W_O

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if t == 1:  # one position (a decoding step): (B, 1, D) already reads as (B, H, 1, Dh)
            return x.view(b, self.n_heads, 1, self.head_dim)
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, 3D) fused projections → Q, K, V as (B, H, T, Dh) views (one view, not a chunk and three splits)."""
        b, t, _ = qkv.shape
        if t == 1:  # a decoding step: (B, 1, 3D) reads as (B, 3, H, 1, Dh)
            return qkv.view(b, 3, self.n_heads, 1, self.head_dim).unbind(1)
        return qkv.view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)  # -> (3, B, H, T, Dh)

    def _project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.qkv_proj.forward_rows(memory, self.d_model, 3 * self.d_model).chunk(2, dim=-1)  # W_K, W_V: (B, Tk, D) each
        return self._split_heads(k), self._split_heads(v)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: LayerKV | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``x`` (B, Tq, D); ``memory`` (B, Tk, D) for cross-attention; returns (B, Tq, D).

        ``memory`` may also have B / G rows, each serving G consecutive rows of ``x`` (beam search: the G beams of
        one source); its keys and values are then computed, cached and read once per source, not once per beam,
        and ``mask`` must have B / G rows (or 1) like it.
        ``mask`` is boolean (``True`` = may attend), broadcastable to (B, 1, Tq, Tk); for self-attention
        with a ``cache``, Tk counts the cached positions too. ``causal=True`` adds the look-ahead mask.
        ``rotary`` = (cos, sin) of the new positions (:func:`~tformer.nn.positional.rotary_tables`, broadcastable
        to (B, H, Tq, Dh)) rotates queries and keys before the keys are cached (self-attention only).
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        cross = memory is not None
        if cross:
            if causal:
                raise ValueError("causal=True is not allowed in cross-attention: the decoder may see the whole source")
            if rotary is not None:
                raise ValueError("rotary position embedding applies to self-attention only, not to cross-attention")
            if memory.shape[0] != x.shape[0]:  # G rows of x per source: they attend as G·Tq query positions of it
                sources, rows, tq = memory.shape[0], x.shape[0], x.shape[1]
                if sources == 0 or rows % sources != 0:
                    raise ValueError(f"memory must have as many rows as x ({rows}) or a divisor of it, got {sources}")
                queries = x.reshape(sources, rows // sources * tq, self.d_model)  # (B, Tq, D) -> (B/G, G·Tq, D)
                return self.forward(queries, memory, mask, cache=cache).view(rows, tq, self.d_model)  # -> (B, Tq, D)
            q = self._split_heads(self.qkv_proj.forward_rows(x, 0, self.d_model))
            if cache is not None and cache.cross_k is not None:
                k, v = cache.cross_k, cache.cross_v  # computed once per source
            else:
                k, v = self._project_kv(memory)  # (B, H, Tk, Dh)
                if cache is not None:
                    cache.cross_k, cache.cross_v = k, v
        else:
            q, k, v = self._split_qkv(self.qkv_proj(x))  # (B, H, T, Dh) each
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)  # the cache keeps rotated keys
            if cache is not None:
                k, v = cache.append(k, v)  # (B, H, Tk, Dh) with the cached positions
        b, tq, tk = x.shape[0], q.shape[2], k.shape[2]
        check_mask(mask, "mask", b, tq, tk, self.n_heads)
        if cross and mask is not None and mask.shape[-2] > 1:
            _refuse_query_dependent_mask(mask)
        recorder = current_recorder()
        if mask is not None and recorder is None and not torch.compiler.is_compiling() and bool(mask.all()):
            mask = None  # hides nothing (e.g. a batch without padding): the fused kernel's unmasked path is faster
        is_causal = False
        if causal:
            if recorder is None and mask is None and tq == tk:
                is_causal = True  # the fused kernel hides the future itself (no (Tq, Tk) mask tensor)
            elif recorder is not None or tq > 1:  # a single new query sits after every key: nothing to hide
                mask = combine_masks(causal_mask(tq, tk, device=x.device), mask)
        dropout_p = self.dropout if self.training else 0.0
        if recorder is None:
            context = scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=is_causal)
        else:
            context, details = scaled_dot_product_attention(q, k, v, mask, dropout_p, return_details=True)
        # (B, H, Tq, Dh) -> (B, Tq, D); one query position needs no transpose
        merged = (context if tq == 1 else context.transpose(1, 2)).reshape(b, tq, self.d_model)
        out = self.out_proj(merged)  # (B, Tq, D)
        if recorder is not None:
            recorder.add(AttentionRecord(
                name=recorder.name_of(self), kind="cross" if cross else "self", q=q, k=k, v=v, mask=mask,
                scores=details.scores, masked_scores=details.masked_scores, weights=details.weights,
                context=context, output=out,
            ))
        return out


def _refuse_query_dependent_mask(mask: torch.Tensor) -> None:
    """Cross-attention masks describe the source (keys) only; a mask whose rows differ is a look-ahead mask
    passed under the wrong name (a mistake in the course notes)."""
    if not torch.equal(mask, mask[..., :1, :].expand_as(mask)):
        raise ValueError(
            "cross-attention got a mask that differs between query positions (a causal/look-ahead mask?); "
            "cross-attention only takes the source padding mask of shape (B, 1, 1, Tk)"
        )
