"""``MultiHeadAttention`` with the shortcuts of the fused kernel and of decoding, and :func:`swap_attention`, which
gives them to every attention module of a plain model.

:class:`tformer.nn.attention.MultiHeadAttention` reads like the paper: it spells the look-ahead mask out, reshapes
with the general views, and lets beams that share a source row repeat that row's keys and values. The same numbers
(to float rounding) come faster here:

* **the fused kernel's own look-ahead mask.** Causal self-attention over a whole sequence with no padding (training,
  a prompt) passes ``is_causal=True`` instead of a (Tq, Tk) mask tensor: no mask is built, and the kernel can skip
  the blocks above the diagonal (on GPUs the flash kernel only takes it this way). A single new query (a decoding
  step) sits after every key: no mask at all. A mask that hides nothing (a batch without padding) is dropped, so
  the kernel takes its unmasked path;
* **one decoding step's reshapes as views.** With one position, (B, 1, H·Dh) already reads as (B, H, 1, Dh) and back:
  no transpose (a decoding step does these a few times per layer);
* **beams that share a source** (beam search: ``memory`` with B / G rows for B rows of queries): the G beams of a
  source attend to its keys and values as G·Tq query positions of one row, (B/G, G·Tq, D), so nothing is repeated;
* **the faster weight layouts** of :class:`tformer.fast.linear.Linear` for the rows of the fused W_Q/W_K/W_V that
  cross-attention needs (``forward_rows``).

A layer with a hook attached (:mod:`tformer.nn.hooks`), a soft-capped one (the reference path), and every layer inside
:func:`reference`, runs the plain module's forward: what a hook sees is what the plain code computes.
``tests/test_fast.py`` holds the parity tests.

Dimension legend: B batch (rows of the queries), G rows of the queries per row of the memory, H heads, Hkv key/value
heads, Tq query length, Tk key length, Dh head dim, D model dim.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from tformer.fast.swap import Switch
from tformer.nn import attention
from tformer.nn.cache import LayerKV
from tformer.nn.hooks import HookPoint, watched
from tformer.nn.masks import causal_mask, combine_masks, sliding_window_mask
from tformer.nn.static_cache import StaticLayerKV

__all__ = ["MultiHeadAttention", "swap_attention", "reference"]

_SWITCH = Switch()  # off inside reference()


def reference():
    """Within this block every swapped attention module runs the plain forward of :mod:`tformer.nn.attention`."""
    return _SWITCH.off()


class MultiHeadAttention(attention.MultiHeadAttention):
    """:class:`tformer.nn.attention.MultiHeadAttention` (same parameters, hook points and state dict) with the
    shortcuts of the module docstring. :func:`swap_attention` turns a plain one into this one in place."""

    _hook_points: tuple[HookPoint, ...] = ()

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: LayerKV | StaticLayerKV | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if not _SWITCH.on or self.softcap is not None or watched(self._hook_points):
            return super().forward(x, memory, mask, causal, cache, rotary)
        self._check_inputs(x, memory, causal, rotary)
        if memory is not None and memory.shape[0] != x.shape[0]:
            return self._beams_sharing_memory(x, memory, mask, cache)
        if memory is None:
            q, k, v = self._self_qkv(x, cache, rotary)  # (B, H, Tq, Dh), (B, Hkv, Tk, Dh) × 2
            if isinstance(cache, StaticLayerKV):  # the whole fixed buffer, under the cache's own mask
                mask, causal = cache.mask, False  # (B, 1, Tq, C)
            elif cache is not None:
                mask = cache.kept(mask)
        else:
            q, k, v = self._cross_qkv(x, memory, cache)
        mask, is_causal = self._fast_mask(mask, causal, memory is not None, q, k)
        dropout_p = self.dropout if self.training else 0.0
        grouped = k.shape[1] != q.shape[1]  # grouped-query K/V, not repeated (the kernel pairs them)
        out = self.attention(q, k, v, mask, dropout_p, is_causal=is_causal, scale=self.scale, enable_gqa=grouped)
        return self.out_proj(self._merge_heads(out))  # (B, H, Tq, Dh) -> (B, Tq, D)

    def _beams_sharing_memory(
        self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None, cache: LayerKV | StaticLayerKV | None
    ) -> torch.Tensor:
        """G rows of ``x`` per row of ``memory``: they attend to it as G·Tq query positions of one row."""
        sources, rows, tq = memory.shape[0], x.shape[0], x.shape[1]
        queries = x.reshape(sources, rows // sources * tq, self.d_model)  # (B, Tq, D) -> (B/G, G·Tq, D)
        return self.forward(queries, memory, mask, cache=cache).view(rows, tq, self.d_model)  # -> (B, Tq, D)

    def _fast_mask(
        self, mask: torch.Tensor | None, causal: bool, cross: bool, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor | None, bool]:
        """The plain ``_mask`` for the fused kernel: returns ``(mask or None, is_causal)``."""
        self._check_mask(mask, cross, q, k)
        if mask is not None and not torch.compiler.is_compiling() and bool(mask.all()):
            mask = None  # hides nothing (e.g. a batch without padding): the fused kernel's unmasked path is faster
        if not causal:
            return mask, False
        tq, tk = q.shape[2], k.shape[2]
        if self.sliding_window is not None and tk > self.sliding_window:  # (else the window hides nothing more)
            return combine_masks(sliding_window_mask(tq, tk, self.sliding_window, device=q.device), mask), False
        if mask is None and tq == tk:
            return None, True  # the fused kernel hides the future itself (no (Tq, Tk) mask tensor)
        if tq > 1:  # a single new query sits after every key: nothing to hide
            mask = combine_masks(causal_mask(tq, tk, device=q.device), mask)  # (B, 1, Tq, Tk)
        return mask, False

    def _merge_heads(self, context: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Dh) -> (B, Tq, H·Dh); one query position needs no transpose."""
        b, _, tq, _ = context.shape
        return (context if tq == 1 else context.transpose(1, 2)).reshape(b, tq, self.q_dim)

    def _project_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Rows ``start:end`` of W_Q/W_K/W_V through the fast layer's own ``forward_rows`` where it has one."""
        forward_rows = getattr(self.qkv_proj, "forward_rows", None)
        if forward_rows is not None:
            return forward_rows(x, start, end)
        return super()._project_rows(x, start, end)

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        if t == 1:  # one position (a decoding step): (B, 1, H·Dh) already reads as (B, H, 1, Dh)
            return x.view(b, heads, 1, self.head_dim)
        return super()._split_heads(x, heads)

    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As the plain one, with one view (not a split and three) when Q, K and V have as many heads."""
        if self.n_kv_heads != self.n_heads:
            return super()._split_qkv(qkv)
        b, t, _ = qkv.shape
        if t == 1:  # a decoding step: (B, 1, 3D) reads as (B, 3, H, 1, Dh)
            q, k, v = qkv.view(b, 3, self.n_heads, 1, self.head_dim).unbind(1)
        else:  # (B, T, 3D) -> (B, T, 3, H, Dh) -> (3, B, H, T, Dh)
            q, k, v = qkv.view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v


def swap_attention(model: nn.Module) -> nn.Module:
    """Turn every plain :class:`tformer.nn.attention.MultiHeadAttention` of ``model`` (``model`` itself included) into
    the :class:`MultiHeadAttention` of this module, in place: the same object, its class changed, so its parameters,
    hook points, hooks and state dict stay as they are. Idempotent; returns ``model``."""
    for module in model.modules():
        if type(module) is attention.MultiHeadAttention:
            module.__class__ = MultiHeadAttention
            cast(MultiHeadAttention, module)._hook_points = tuple(
                m for m in module.children() if isinstance(m, HookPoint)
            )
    return model
