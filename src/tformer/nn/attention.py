"""Scaled dot-product attention and multi-head attention (self and cross).

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V

Two paths compute the same thing:

* the **fused** path, ``torch.nn.functional.scaled_dot_product_attention``, used for training and
  generation;
* the **reference** path, written out step by step (matmul → scale (→ soft-cap) → mask → softmax → dropout →
  matmul), used when someone wants to see the scores and weights (``return_details=True``, or a hook on one of
  those steps, :mod:`tformer.nn.hooks`). A test keeps the two equal.

Masks follow :mod:`tformer.nn.masks`: boolean, ``True`` = may attend. A query row with nothing to
attend to outputs zeros (never NaN), in every dtype.

This module is plain PyTorch and reads like the paper. What exists only for speed (the fused kernel's own
look-ahead mask, one decoding step's reshapes as views, beams sharing one memory row without a copy, the faster
layouts of the weights) is in :mod:`tformer.fast.attention`, which :func:`tformer.fast.speed_up` swaps in.

Hook points of :class:`MultiHeadAttention`: ``hook_q`` (B, H, Tq, Dh); ``hook_k``, ``hook_v`` (B, Hkv, Tk, Dh), the
keys and values attended to (with a cache: every position kept); then, on the reference path only,
``hook_mask`` (B|1, 1, Tq, Tk) (when there is one), ``hook_raw_scores`` (Q·Kᵀ), ``hook_scores`` (÷ √Dh, soft-capped
when the layer caps), ``hook_masked_scores`` (blocked entries −∞), ``hook_weights`` (the softmax), each
(B, H, Tq, Tk); ``hook_context`` (B, H, Tq, Dh), weights · V; ``hook_out`` (B, Tq, D), after W_O.

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
from tformer.nn.hooks import HookPoint, keep_at_hand, watched
from tformer.nn.masks import causal_mask, check_mask, combine_masks, sliding_window_mask
from tformer.nn.norms import RMSNorm
from tformer.nn.positional import apply_rotary
from tformer.nn.static_cache import StaticLayerKV

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
        # eager: only when such a row exists; a compiled graph cannot branch on the data, so it always fills
        if torch.compiler.is_compiling() or not bool(has_key.all()):
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
    fused W_Q/W_K/W_V matrix: ``F.linear`` on a slice of the weight's rows. (:mod:`tformer.fast.attention` computes
    it with the faster layouts of :class:`tformer.fast.linear.Linear` where the layer has them.)
    """
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
      only those heads; the fused kernel pairs each with the H / Hkv query heads of its group, the reference path
      repeats it for them;
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
        # hook points (tformer.nn.hooks): the tensors of each step, by name
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_mask, self.hook_raw_scores, self.hook_scores = HookPoint(), HookPoint(), HookPoint()
        self.hook_masked_scores, self.hook_weights = HookPoint(), HookPoint()
        self.hook_context, self.hook_out = HookPoint(), HookPoint()
        keep_at_hand(self)
        # the steps only the reference path has: a hook on one of them sends this layer down that path
        self._inside = (
            self.hook_mask,
            self.hook_raw_scores,
            self.hook_scores,
            self.hook_masked_scores,
            self.hook_weights,
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: LayerKV | StaticLayerKV | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``x`` (B, Tq, D); ``memory`` (B, Tk, D) for cross-attention; returns (B, Tq, D).

        ``mask`` is boolean (``True`` = may attend), broadcastable to (B, 1, Tq, Tk); for self-attention
        with a ``cache``, Tk counts the cached positions too. ``causal=True`` adds the look-ahead mask. A
        :class:`~tformer.nn.static_cache.StaticLayerKV` brings its own mask over its fixed buffer (the look-ahead,
        the padding and the window in it), which replaces ``mask`` and ``causal`` in self-attention.
        ``rotary`` = (cos, sin) of the new positions (:func:`~tformer.nn.positional.rotary_tables`, broadcastable
        to (B, H, Tq, Dh)) rotates queries and keys before the keys are cached (self-attention only).
        ``memory`` may also have B / G rows, each serving G consecutive rows of ``x`` (beam search: the G beams of
        one source); its keys and values are then computed and cached once per source, and ``mask`` has B / G
        rows (or 1) like it.
        """
        self._check_inputs(x, memory, causal, rotary)
        if memory is None:
            q, k, v = self._self_qkv(x, cache, rotary)  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2
            if isinstance(cache, StaticLayerKV):  # its whole buffer: the cache's mask hides what is not to be seen
                mask, causal = cache.mask, False  # (B, 1, Tq, C): the look-ahead, padding and window included
            elif cache is not None:
                mask = cache.kept(mask)  # a sliding window's cache forgets the oldest positions: so does the mask
        else:
            q, k, v = self._cross_qkv(x, memory, cache)  # (B, H, Tq, Dh), (B or B/G, Hkv, Tk, Dh) × 2
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        mask = self._mask(mask, causal, memory is not None, q, k)  # (B|1, 1, Tq, Tk) or None
        if k.shape[0] != q.shape[0]:  # beam search: each source's keys, values and mask serve its G beams
            k, v, mask = _rows_for_beams(k, v, mask, q.shape[0])
        context = self.hook_context(self._attend(q, k, v, mask))  # (B, H, Tq, Dh)
        return self.hook_out(self.out_proj(self._merge_heads(context)))  # (B, Tq, D)

    # ---------------------------------------------------------------- the steps of forward, in order
    def _check_inputs(self, x: torch.Tensor, memory: torch.Tensor | None, causal: bool, rotary) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        if memory is not None and causal:
            raise ValueError("causal=True is not allowed in cross-attention: the decoder may see the whole source")
        if memory is not None and rotary is not None:
            raise ValueError("rotary position embedding applies to self-attention only, not to cross-attention")
        if memory is not None and (memory.shape[0] == 0 or x.shape[0] % memory.shape[0] != 0):
            raise ValueError(
                f"memory must have as many rows as x ({x.shape[0]}) or a divisor of it, got {memory.shape[0]}"
            )

    def _self_qkv(
        self, x: torch.Tensor, cache: LayerKV | StaticLayerKV | None, rotary
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of self-attention, one matmul; QK-norm, then RoPE rotates Q and K; the cache adds the earlier
        keys/values (Hkv heads)."""
        q, k, v = self._split_qkv(self.qkv_proj(x))  # (B, T, D) -> (B, T, 3D) -> (B, H, T, Dh) each (K, V: Hkv)
        q, k = self._norm_qk(q, k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)  # the cache keeps rotated keys
        if cache is not None:
            k, v = cache.append(k, v)  # (B, Hkv, Tk, Dh) with the cached positions
        return q, k, v  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2

    def _cross_qkv(
        self, x: torch.Tensor, memory: torch.Tensor, cache: LayerKV | StaticLayerKV | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q from the decoder states (rows W_Q); K, V from the memory (rows W_K, W_V), once per source with a cache."""
        q = self._split_heads(self._project_rows(x, 0, self.q_dim), self.n_heads)  # (B, H, Tq, Dh)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if cache is not None and cache.cross_k is not None and cache.cross_v is not None:
            return q, cache.cross_k, cache.cross_v  # computed at the first step
        kv = self._project_rows(memory, self.q_dim, self.q_dim + 2 * self.kv_dim)  # (B, Tk, 2·Hkv·Dh)
        k, v = (self._split_heads(t, self.n_kv_heads) for t in kv.chunk(2, dim=-1))  # (B, Hkv, Tk, Dh) each
        if self.k_norm is not None:
            k = self.k_norm(k)
        if cache is not None:
            cache.cross_k, cache.cross_v = k, v
        return q, k, v  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2

    def _mask(
        self, mask: torch.Tensor | None, causal: bool, cross: bool, q: torch.Tensor, k: torch.Tensor
    ) -> torch.Tensor | None:
        """``mask`` checked, and with ``causal`` the look-ahead mask (or the sliding window) added: the boolean mask
        this call attends with, (B|1, 1, Tq, Tk), or None."""
        self._check_mask(mask, cross, q, k)
        if not causal:
            return mask
        tq, tk = q.shape[2], k.shape[2]
        if self.sliding_window is None:
            return combine_masks(causal_mask(tq, tk, device=q.device), mask)  # (B|1, 1, Tq, Tk)
        return combine_masks(sliding_window_mask(tq, tk, self.sliding_window, device=q.device), mask)

    def _check_mask(self, mask: torch.Tensor | None, cross: bool, q: torch.Tensor, k: torch.Tensor) -> None:
        check_mask(mask, "mask", k.shape[0], q.shape[2], k.shape[2], self.n_heads)  # K's rows: B, or B/G for beams
        if cross and mask is not None and mask.shape[-2] > 1:
            _refuse_query_dependent_mask(mask)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The context (B, H, Tq, Dh): the fused kernel, or the reference path when the scores are soft-capped (no
        fused kernel caps them) or a hook watches a step inside it (then the numbers it sees are the ones used)."""
        dropout_p = self.dropout if self.training else 0.0
        if self.softcap is None and not watched(self._inside):
            grouped = k.shape[1] != q.shape[1]  # grouped-query K/V, not repeated (the kernel pairs them)
            return self.attention(q, k, v, mask, dropout_p, scale=self.scale, enable_gqa=grouped)
        k, v = self._repeat_kv(k), self._repeat_kv(v)  # (B, H, Tk, Dh): each query head its own K/V
        if mask is not None:
            mask = self.hook_mask(mask)
        watch = lambda step, t: getattr(self, "hook_" + step)(t)  # noqa: E731  (step "weights": hook_weights, ...)
        context, _ = reference_attention(q, k, v, mask, dropout_p, softcap=self.softcap, scale=self.scale, watch=watch)
        return context

    def _merge_heads(self, context: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Dh) -> (B, Tq, H, Dh) -> (B, Tq, H·Dh): the heads side by side."""
        b, _, tq, _ = context.shape
        return context.transpose(1, 2).reshape(b, tq, self.q_dim)

    # ---------------------------------------------------------------- projections and head reshapes
    def _project_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Output features ``start:end`` of the fused W_Q/W_K/W_V projection (:func:`project_rows`)."""
        return project_rows(self.qkv_proj, x, start, end)

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, H·Dh + 2·Hkv·Dh) fused projections → Q (B, H, T, Dh), K and V (B, Hkv, T, Dh), as views."""
        q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        return (
            self._split_heads(q, self.n_heads),
            self._split_heads(k, self.n_kv_heads),
            self._split_heads(v, self.n_kv_heads),
        )

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)  # (B, T, H·Dh) -> (B, T, H, Dh) -> (B, H, T, Dh)

    def _norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """QK-norm: each head's query and key through its RMSNorm (over Dh), if the layer has one."""
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)  # (B, H, T, Dh), (B, Hkv, T, Dh)

    def _repeat_kv(self, t: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, Tk, Dh) -> (B, H, Tk, Dh): K/V head j serves query heads j·G … j·G + G − 1 (G = H / Hkv)."""
        if self.n_kv_heads == self.n_heads:
            return t
        return t.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)


def _rows_for_beams(
    k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, rows: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """K, V (B/G, Hkv, Tk, Dh) and ``mask`` (B/G or 1, 1, Tq, Tk) of the sources → B rows: source i serves rows
    i·G … i·G + G − 1 (its G beams). Copies; :mod:`tformer.fast.attention` attends without copying."""
    g = rows // k.shape[0]
    k, v = k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)  # (B, Hkv, Tk, Dh)
    if mask is not None and mask.shape[0] > 1:
        mask = mask.repeat_interleave(g, dim=0)  # (B, 1, Tq, Tk)
    return k, v, mask


def _refuse_query_dependent_mask(mask: torch.Tensor) -> None:
    """Cross-attention masks describe the source (keys) only; a mask whose rows differ is a look-ahead mask
    passed under the wrong name (a mistake in the course notes)."""
    if not torch.equal(mask, mask[..., :1, :].expand_as(mask)):
        raise ValueError(
            "cross-attention got a mask that differs between query positions (a causal/look-ahead mask?); "
            "cross-attention only takes the source padding mask of shape (B, 1, 1, Tk)"
        )
