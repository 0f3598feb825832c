"""Scaled dot-product attention and multi-head attention (self and cross).

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V

Two paths compute the same thing:

* the **fused** path, ``torch.nn.functional.scaled_dot_product_attention``, used for training and
  generation;
* the **reference** path, written out step by step (matmul → scale (→ soft-cap) → mask → softmax → dropout →
  matmul), used when someone wants to see the scores and weights (``return_details=True`` or an
  active :class:`tformer.nn.recorder.Recorder`). A test keeps the two equal.

Masks follow :mod:`tformer.nn.masks`: boolean, ``True`` = may attend. A query row with nothing to
attend to outputs zeros (never NaN), in every dtype.

This module is plain PyTorch. :func:`tformer.fast.speed_up` swaps in faster CPU versions of two of its
pieces without changing the numbers: the projection of a slice of the fused W_Q/W_K/W_V rows
(:func:`project_rows`) and, in training, the attention function itself (a cheaper dropout mask).

Dimension legend: B batch, H heads, Hkv key/value heads (grouped-query attention; = H by default), Tq query
length, Tk key length, Dh head dim (D / H by default), D model dim, G rows of the queries per row of the memory
(beam search: the beams of one source).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tformer.nn.cache import LayerKV
from tformer.nn.masks import causal_mask, check_mask, combine_masks, sliding_window_mask
from tformer.nn.norms import RMSNorm
from tformer.nn.positional import apply_rotary
from tformer.nn.recorder import AttentionRecord, Recorder, current_recorder

__all__ = [
    "AttentionDetails",
    "scaled_dot_product_attention",
    "reference_attention",
    "check_attention_mask",
    "project_rows",
    "MultiHeadAttention",
]


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
    the context (B, H, Tq, Dh) is returned. ``is_causal=True`` (only without ``mask``) is the look-ahead
    mask for Tq = Tk, applied inside the fused kernel without building a (Tq, Tk) tensor. ``scale`` replaces
    1/√Dh (Gemma's ``query_pre_attn_scalar`` ^ −½).
    """
    check_attention_mask(mask, is_causal)
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
    if mask is not None:  # some kernels give NaN for fully masked rows: make them exactly 0
        has_key = mask.any(dim=-1, keepdim=True)  # (B, 1, Tq, 1)
        if not bool(has_key.all()):
            out = out.masked_fill(~has_key, 0.0)
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
) -> tuple[torch.Tensor, AttentionDetails]:
    """The reference path, step by step: returns the context (B, H, Tq, Dh) and the :class:`AttentionDetails`.

    ``dropout(weights, dropout_p)`` drops attention weights in training (``F.dropout``; ``tformer.fast``
    passes its cheaper CPU mask). ``softcap`` c bounds the scores softly to (−c, c): c·tanh(scores / c)
    (Gemma 2); the details' ``scores`` are then the capped ones (``raw_scores``: Q·Kᵀ before scaling). ``scale``
    replaces 1/√Dh: the scores are then Q·Kᵀ · scale."""
    raw = q @ k.transpose(-2, -1)  # (B, H, Tq, Dh) @ (B, H, Dh, Tk) -> (B, H, Tq, Tk)
    scores = raw / math.sqrt(q.shape[-1]) if scale is None else raw * scale  # (B, H, Tq, Tk)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is None:
        masked_scores = scores
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    else:
        masked_scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, Tq, Tk)
        weights = torch.softmax(masked_scores.float(), dim=-1).to(q.dtype)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # all −∞ row: NaN → 0
    dropped = dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = dropped @ v  # (B, H, Tq, Tk) @ (B, H, Tk, Dh) -> (B, H, Tq, Dh)
    return out, AttentionDetails(scores=scores, masked_scores=masked_scores, weights=weights, raw_scores=raw)


def check_attention_mask(mask: torch.Tensor | None, is_causal: bool) -> None:
    """The attention functions take a boolean ``mask`` or ``is_causal=True``, not both."""
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if is_causal and mask is not None:
        raise ValueError(
            "pass either mask or is_causal=True, not both (combine them with tformer.nn.masks.combine_masks)"
        )


def project_rows(layer: nn.Linear, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Output features ``start:end`` of ``layer(x)`` only: ``x · W[start:end]ᵀ + b[start:end]``, (..., end − start).

    Cross-attention needs only W_Q (for the decoder's states) or only W_K, W_V (for the encoder output) of the
    fused W_Q/W_K/W_V matrix. Here that is ``F.linear`` on a slice of the weight's rows. A layer that has its own
    ``forward_rows(x, start, end)`` computes it that way instead: :class:`tformer.fast.linear.Linear`, which
    ``tformer.fast.speed_up`` swaps in, keeps faster layouts of the weight for decoding (same numbers).
    """
    forward_rows = getattr(layer, "forward_rows", None)
    if forward_rows is not None:
        return forward_rows(x, start, end)
    bias = None if layer.bias is None else layer.bias[start:end]
    return F.linear(x, layer.weight[start:end], bias)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: project to Q, K, V, split into heads, attend, concatenate, project.

    * self-attention: ``mha(x)`` — Q, K and V all come from ``x``;
    * cross-attention: ``mha(x, memory)`` — Q comes from ``x`` (the decoder), K and V from
      ``memory`` (the encoder output). ``causal=True`` is refused there.

    The three input projections W_Q, W_K, W_V are stored as one ``(3D, D)`` matrix (rows in that
    order, as ``nn.MultiheadAttention`` does) so self-attention computes them in one matmul.
    ``dropout`` is the dropout rate of the attention weights.

    Options of today's decoders (defaults: the paper's multi-head attention):

    * ``n_kv_heads`` < ``n_heads``: grouped-query attention (Ainslie et al. 2023; 1 = multi-query, Shazeer 2019).
      W_K and W_V have ``n_kv_heads`` heads, so the matrix is ``(H·Dh + 2·Hkv·Dh, D)``; the KV cache stores
      only those heads, and each is repeated for the H / Hkv query heads of its group before attending;
    * ``head_dim``: Dh apart from D / H (Gemma); W_O is then ``(D, H·Dh)``;
    * ``qkv_bias``: a bias on W_Q/W_K/W_V other than ``bias`` (Qwen2: Q/K/V bias, no other bias);
    * ``qk_norm``: an RMSNorm (learned scale of Dh, ``norm_eps``) on each head's query and key before RoPE
      (Qwen3, Gemma 3);
    * ``sliding_window``: with ``causal=True``, each query sees only the last ``sliding_window`` positions
      (:func:`~tformer.nn.masks.sliding_window_mask`; Mistral). A :class:`~tformer.nn.cache.LayerKV` made with the
      same ``window`` keeps only the positions the window still needs;
    * ``scale``: the scores' factor in place of 1/√Dh (Gemma 3's ``query_pre_attn_scalar`` ^ −½);
    * ``norm_weight_offset``: the QK-norm's scale is offset + weight (Gemma 3's 1 + w, as its other RMSNorms);
    * ``softcap``: scores soft-capped to (−c, c) by c·tanh(scores / c) (Gemma 2); this runs the reference path,
      since the fused kernel has no such step.
    """

    # The attention function (fused and reference paths). ``tformer.fast.speed_up`` sets a per-module one that
    # computes the same with a cheaper CPU dropout mask in training.
    attention: Callable[..., Any] = staticmethod(scaled_dot_product_attention)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        qkv_bias: bool | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        sliding_window: int | None = None,
        softcap: float | None = None,
        scale: float | None = None,
        norm_weight_offset: float = 0.0,
    ) -> None:
        super().__init__()
        if head_dim is None and d_model % n_heads != 0:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads must divide n_heads={n_heads}, got n_kv_heads={n_kv_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim
        self.q_dim, self.kv_dim = n_heads * self.head_dim, n_kv_heads * self.head_dim  # H·Dh, Hkv·Dh
        self.dropout = dropout
        qkv_bias = bias if qkv_bias is None else qkv_bias
        self.qkv_proj = nn.Linear(d_model, self.q_dim + 2 * self.kv_dim, bias=qkv_bias)  # rows: W_Q, W_K, W_V
        self.out_proj = nn.Linear(self.q_dim, d_model, bias=bias)  # W_O
        self.q_norm = RMSNorm(self.head_dim, norm_eps, norm_weight_offset) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps, norm_weight_offset) if qk_norm else None
        self.sliding_window, self.softcap, self.scale = sliding_window, softcap, scale

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
        self._check_inputs(x, memory, causal, rotary)
        cross = memory is not None
        if memory is not None and memory.shape[0] != x.shape[0]:
            return self._grouped_cross_attention(x, memory, mask, cache)
        if memory is not None:
            q, k, v = self._cross_qkv(x, memory, cache)  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2
        else:
            q, k, v = self._self_qkv(x, cache, rotary)  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2
            if cache is not None and cache.offset and mask is not None and mask.shape[-1] > k.shape[2]:
                mask = mask[..., cache.offset :]  # a sliding window's store forgot the oldest positions
        recorder = current_recorder()
        explicit = recorder is not None or self.softcap is not None  # the reference path: spell the mask out
        if explicit:  # the reference path (and the record) sees every query head's own K/V; the fused kernel
            k, v = self._repeat_kv(k), self._repeat_kv(v)  # pairs the groups itself (enable_gqa), copying nothing
        mask, is_causal = self._prepare_mask(mask, causal, cross, q, k, recording=explicit)
        context, details = self._attend(q, k, v, mask, is_causal, recording=recorder is not None)  # (B, H, Tq, Dh)
        out = self.out_proj(self._merge_heads(context))  # (B, Tq, D)
        if recorder is not None and details is not None:  # details: always there while recording
            self._record(recorder, cross, q, k, v, mask, details, context, out)
        return out

    # ---------------------------------------------------------------- the steps of forward, in order
    def _check_inputs(self, x: torch.Tensor, memory: torch.Tensor | None, causal: bool, rotary) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        if memory is not None and causal:
            raise ValueError("causal=True is not allowed in cross-attention: the decoder may see the whole source")
        if memory is not None and rotary is not None:
            raise ValueError("rotary position embedding applies to self-attention only, not to cross-attention")

    def _grouped_cross_attention(
        self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None, cache: LayerKV | None
    ) -> torch.Tensor:
        """G rows of ``x`` per row of ``memory``: they attend to it as G·Tq query positions of one row."""
        sources, rows, tq = memory.shape[0], x.shape[0], x.shape[1]
        if sources == 0 or rows % sources != 0:
            raise ValueError(f"memory must have as many rows as x ({rows}) or a divisor of it, got {sources}")
        queries = x.reshape(sources, rows // sources * tq, self.d_model)  # (B, Tq, D) -> (B/G, G·Tq, D)
        return self.forward(queries, memory, mask, cache=cache).view(rows, tq, self.d_model)  # -> (B, Tq, D)

    def _self_qkv(
        self, x: torch.Tensor, cache: LayerKV | None, rotary
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of self-attention, one matmul; QK-norm, then RoPE rotates Q and K; the cache adds the earlier
        keys/values (Hkv heads); the K/V heads are repeated for their groups of query heads last."""
        q, k, v = self._split_qkv(self.qkv_proj(x))  # (B, T, D) -> (B, T, 3D) -> (B, H, T, Dh) each (K, V: Hkv)
        q, k = self._norm_qk(q, k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)  # the cache keeps rotated keys
        if cache is not None:
            k, v = cache.append(k, v)  # (B, Hkv, Tk, Dh) with the cached positions
        return q, k, v  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2

    def _cross_qkv(
        self, x: torch.Tensor, memory: torch.Tensor, cache: LayerKV | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q from the decoder states (rows W_Q); K, V from the memory (rows W_K, W_V), once per source with a cache."""
        q = self._split_heads(project_rows(self.qkv_proj, x, 0, self.q_dim), self.n_heads)  # (B, H, Tq, Dh)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if cache is not None and cache.cross_k is not None and cache.cross_v is not None:
            return q, cache.cross_k, cache.cross_v  # computed at the first step
        kv = project_rows(self.qkv_proj, memory, self.q_dim, self.q_dim + 2 * self.kv_dim)  # (B, Tk, 2·Hkv·Dh)
        k, v = (self._split_heads(t, self.n_kv_heads) for t in kv.chunk(2, dim=-1))  # (B, Hkv, Tk, Dh) each
        if self.k_norm is not None:
            k = self.k_norm(k)
        if cache is not None:
            cache.cross_k, cache.cross_v = k, v
        return q, k, v  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2

    def _prepare_mask(
        self, mask: torch.Tensor | None, causal: bool, cross: bool, q: torch.Tensor, k: torch.Tensor, recording: bool
    ) -> tuple[torch.Tensor | None, bool]:
        """Check ``mask`` and add the look-ahead part: returns ``(mask or None, is_causal)``."""
        b, tq, tk = q.shape[0], q.shape[2], k.shape[2]
        check_mask(mask, "mask", b, tq, tk, self.n_heads)
        if cross and mask is not None and mask.shape[-2] > 1:
            _refuse_query_dependent_mask(mask)
        if mask is not None and not recording and not torch.compiler.is_compiling() and bool(mask.all()):
            mask = None  # hides nothing (e.g. a batch without padding): the fused kernel's unmasked path is faster
        if not causal:
            return mask, False
        if self.sliding_window is not None and tk > self.sliding_window:  # (else the window hides nothing more)
            return combine_masks(sliding_window_mask(tq, tk, self.sliding_window, device=q.device), mask), False
        if not recording and mask is None and tq == tk:
            return None, True  # the fused kernel hides the future itself (no (Tq, Tk) mask tensor)
        if recording or tq > 1:  # a single new query sits after every key: nothing to hide
            mask = combine_masks(causal_mask(tq, tk, device=q.device), mask)  # (B, 1, Tq, Tk)
        return mask, False

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        recording: bool,
    ) -> tuple[torch.Tensor, AttentionDetails | None]:
        """The context (B, H, Tq, Dh): the fused path, or the reference path with its details while recording."""
        dropout_p = self.dropout if self.training else 0.0
        if self.softcap is not None:  # no fused kernel caps the scores
            context, details = reference_attention(q, k, v, mask, dropout_p, softcap=self.softcap, scale=self.scale)
            return context, details if recording else None
        if not recording:
            grouped = k.shape[1] != q.shape[1]  # grouped-query K/V, not repeated (the kernel pairs them)
            out = self.attention(q, k, v, mask, dropout_p, is_causal=is_causal, scale=self.scale, enable_gqa=grouped)
            return out, None
        return self.attention(q, k, v, mask, dropout_p, return_details=True, scale=self.scale)

    def _merge_heads(self, context: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Dh) -> (B, Tq, D): the heads side by side; one query position needs no transpose."""
        b, _, tq, _ = context.shape
        return (context if tq == 1 else context.transpose(1, 2)).reshape(b, tq, self.q_dim)

    def _record(self, recorder: Recorder, cross: bool, q, k, v, mask, details: AttentionDetails, context, out) -> None:
        recorder.add(
            AttentionRecord(
                name=recorder.name_of(self),
                kind="cross" if cross else "self",
                q=q,
                k=k,
                v=v,
                mask=mask,
                raw_scores=details.raw_scores,
                scores=details.scores,
                masked_scores=details.masked_scores,
                weights=details.weights,
                context=context,
                output=out,
            )
        )

    # ---------------------------------------------------------------- head reshapes
    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        if t == 1:  # one position (a decoding step): (B, 1, H·Dh) already reads as (B, H, 1, Dh)
            return x.view(b, heads, 1, self.head_dim)
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)  # (B, T, H·Dh) -> (B, T, H, Dh) -> (B, H, T, Dh)

    def _repeat_kv(self, t: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, Tk, Dh) -> (B, H, Tk, Dh): K/V head j serves query heads j·G … j·G + G − 1 (G = H / Hkv)."""
        if self.n_kv_heads == self.n_heads:
            return t
        return t.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)

    def _norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """QK-norm: each head's query and key through its RMSNorm (over Dh), if the layer has one."""
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)  # (B, H, T, Dh), (B, Hkv, T, Dh)

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, 3D) fused projections → Q, K, V as (B, H, T, Dh) views (one view, not a chunk and three splits)."""
        b, t, _ = qkv.shape
        if (
            self.n_kv_heads != self.n_heads
        ):  # grouped: (B, T, (H + 2·Hkv)·Dh) -> Q (B, H, T, Dh), K and V (B, Hkv, T, Dh)
            q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
            return (
                self._split_heads(q, self.n_heads),
                self._split_heads(k, self.n_kv_heads),
                self._split_heads(v, self.n_kv_heads),
            )
        if t == 1:  # a decoding step: (B, 1, 3D) reads as (B, 3, H, 1, Dh)
            q, k, v = qkv.view(b, 3, self.n_heads, 1, self.head_dim).unbind(1)
        else:  # (B, T, 3D) -> (B, T, 3, H, Dh) -> (3, B, H, T, Dh)
            q, k, v = qkv.view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v


def _refuse_query_dependent_mask(mask: torch.Tensor) -> None:
    """Cross-attention masks describe the source (keys) only; a mask whose rows differ is a look-ahead mask
    passed under the wrong name (a mistake in the course notes)."""
    if not torch.equal(mask, mask[..., :1, :].expand_as(mask)):
        raise ValueError(
            "cross-attention got a mask that differs between query positions (a causal/look-ahead mask?); "
            "cross-attention only takes the source padding mask of shape (B, 1, 1, Tk)"
        )
