"""Multi-head attention (self and cross): project to Q, K, V, split into heads, attend, concatenate, project.

Each head attends by scaled dot-product attention (:mod:`tformer.nn.scaled_dot_product`): the fused path, or the
reference path written out step by step when a hook watches a step inside it or the scores are soft-capped. Masks
follow :mod:`tformer.nn.masks`: boolean, ``True`` = may attend.

This module is plain PyTorch and reads like the paper. :class:`MultiHeadAttention` has one ``forward``; the fused
path calls the layer's ``kernel``, a function chosen when the model is built (``module.kernel``): :func:`attend`
here, which spells the look-ahead mask out, or :func:`tformer.fast.attention.attend`, which computes the same with
the fused kernel's shortcuts (its own look-ahead mask, no mask where none hides anything, beams attending to their
shared source row without a copy, a cheaper CPU dropout mask). A kernel is ``kernel(q, k, v, mask, causal, window,
dropout_p, scale)`` → the context (B, H, Tq, Dh), with K/V of Hkv heads and of B or B / G rows.

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

import torch
import torch.nn.functional as F
from torch import nn

from tformer.nn.cache import LayerCache
from tformer.nn.hooks import HookPoint, keep_at_hand, watched
from tformer.nn.masks import check_mask
from tformer.nn.norms import RMSNorm
from tformer.nn.positional import apply_rotary
from tformer.nn.scaled_dot_product import (
    AttentionDetails,
    Kernel,
    attend,
    check_attention_mask,
    reference_attention,
    scaled_dot_product_attention,
    spell_out,
)

__all__ = [
    "AttentionDetails",
    "scaled_dot_product_attention",
    "reference_attention",
    "check_attention_mask",
    "project_rows",
    "Kernel",
    "attend",
    "spell_out",
    "MultiHeadAttention",
]


def project_rows(layer: nn.Linear, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Output features ``start:end`` of ``layer(x)`` only: ``x · W[start:end]ᵀ + b[start:end]``, (..., end − start).

    Cross-attention needs only W_Q (for the decoder's states) or only W_K, W_V (for the encoder output) of the
    fused W_Q/W_K/W_V matrix: ``F.linear`` on a slice of the weight's rows, or the layer's own ``forward_rows`` where
    its kind of product has one (:class:`tformer.fast.linear.Linear`: the same numbers in its faster layouts).
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

    ``kernel`` is the function of the fused path (see the module docstring): :func:`attend` unless another was
    chosen (``tformer.fast``); it can be read off the layer (``layer.kernel``).
    """

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
        kernel: Kernel = attend,
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
        self.kernel = kernel  # the fused path's function (see the module docstring)
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

    def extra_repr(self) -> str:  # its sizes, and the kernel chosen for it by qualified name: print(model) says it
        more = "".join(f", {k}={getattr(self, k)}" for k in ("sliding_window", "softcap") if getattr(self, k))
        kernel = f"{getattr(self.kernel, '__module__', '?')}.{getattr(self.kernel, '__qualname__', self.kernel)}"
        dims = f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}"
        return f"{dims}, dropout={self.dropout}{more}, kernel={kernel}"

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: LayerCache | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``x`` (B, Tq, D); ``memory`` (B, Tk, D) for cross-attention; returns (B, Tq, D).

        ``mask`` is boolean (``True`` = may attend), broadcastable to (B, 1, Tq, Tk); for self-attention
        with a ``cache``, Tk counts the cached positions too. ``causal=True`` adds the look-ahead mask. The cache
        (:mod:`tformer.nn.cache`'s protocol) stores the new keys and values and says what to attend to, and with
        which mask (a static cache brings its own, over its fixed buffer).
        ``rotary`` = (cos, sin) of the new positions (:func:`~tformer.nn.positional.rotary_tables`, broadcastable
        to (B, H, Tq, Dh)) rotates queries and keys before the keys are cached (self-attention only).
        ``memory`` may also have B / G rows, each serving G consecutive rows of ``x`` (beam search: the G beams of
        one source); its keys and values are then computed and cached once per source, and ``mask`` has B / G
        rows (or 1) like it.
        """
        self._check_inputs(x, memory, causal, rotary)
        if memory is None:
            q, k, v = self._self_qkv(x, rotary)  # (B, H, Tq, Dh), (B, Hkv, Tq, Dh) × 2
            if cache is not None:  # the earlier positions' keys and values join; the cache says with which mask
                k, v, mask, causal = cache.update(k, v, mask, causal)  # (B, Hkv, Tk, Dh) × 2
        else:
            q, k, v = self._cross_qkv(x, memory, cache)  # (B, H, Tq, Dh), (B or B/G, Hkv, Tk, Dh) × 2
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        self._check_mask(mask, memory is not None, q, k)
        context = self.hook_context(self._attend(q, k, v, mask, causal))  # (B, H, Tq, Dh)
        return self.hook_out(self.out_proj(self._merge_heads(context)))  # (B, Tq, D)

    # ---------------------------------------------------------------- the steps of forward, in order
    def _check_inputs(self, x: torch.Tensor, memory: torch.Tensor | None, causal: bool, rotary) -> None:
        for name, t in (("x", x), ("memory", memory)):  # (B, T, D) and (B, Tk, D): not torch's mat1 / mat2 error
            if t is not None and (t.dim() != 3 or t.shape[-1] != self.d_model):
                raise ValueError(f"{name} must have shape (B, T, {self.d_model}), got {tuple(t.shape)}")
        if memory is not None and causal:
            raise ValueError("causal=True is not allowed in cross-attention: the decoder may see the whole source")
        if memory is not None and rotary is not None:
            raise ValueError("rotary position embedding applies to self-attention only, not to cross-attention")
        if memory is not None and (memory.shape[0] == 0 or x.shape[0] % memory.shape[0] != 0):
            raise ValueError(
                f"memory must have as many rows as x ({x.shape[0]}) or a divisor of it, got {memory.shape[0]}"
            )

    def _self_qkv(self, x: torch.Tensor, rotary) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of self-attention, one matmul; QK-norm, then RoPE rotates Q and K (the cache keeps rotated keys)."""
        q, k, v = self._split_qkv(self.qkv_proj(x))  # (B, T, D) -> (B, T, 3D) -> (B, H, T, Dh) each (K, V: Hkv)
        q, k = self._norm_qk(q, k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        return q, k, v  # (B, H, T, Dh), (B, Hkv, T, Dh) × 2

    def _cross_qkv(
        self, x: torch.Tensor, memory: torch.Tensor, cache: LayerCache | None
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

    def _check_mask(self, mask: torch.Tensor | None, cross: bool, q: torch.Tensor, k: torch.Tensor) -> None:
        check_mask(mask, "mask", k.shape[0], q.shape[2], k.shape[2], self.n_heads)  # K's rows: B, or B/G for beams
        if cross and mask is not None and mask.shape[-2] > 1:
            _refuse_query_dependent_mask(mask)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ) -> torch.Tensor:
        """The context (B, H, Tq, Dh): the layer's kernel, or the reference path when the scores are soft-capped (no
        fused kernel caps them) or a hook watches a step inside it (then the numbers it sees are the ones used)."""
        dropout_p = self.dropout if self.training else 0.0
        if self.softcap is None and not watched(self._inside):
            return self.kernel(q, k, v, mask, causal, self.sliding_window, dropout_p, self.scale)
        k, v, mask = spell_out(q, k, v, mask, causal, self.sliding_window)
        if self.n_kv_heads != self.n_heads:  # K/V head j serves query heads j·G … j·G + G − 1 (G = H / Hkv)
            k, v = (t.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1) for t in (k, v))  # (B, H, Tk, Dh)
        if mask is not None:
            mask = self.hook_mask(mask)
        watch = lambda step, t: getattr(self, "hook_" + step)(t)  # noqa: E731  (step "weights": hook_weights, ...)
        context, _ = reference_attention(q, k, v, mask, dropout_p, softcap=self.softcap, scale=self.scale, watch=watch)
        return context

    def _merge_heads(self, context: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Dh) -> (B, Tq, H, Dh) -> (B, Tq, H·Dh): the heads side by side (one query position, a decoding
        step: (B, H, 1, Dh) already reads as (B, 1, H·Dh), no transpose)."""
        b, _, tq, _ = context.shape
        return (context if tq == 1 else context.transpose(1, 2)).reshape(b, tq, self.q_dim)

    # ---------------------------------------------------------------- projections and head reshapes
    def _split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, H·Dh + 2·Hkv·Dh) fused projections → Q (B, H, T, Dh), K and V (B, Hkv, T, Dh), as views (with as
        many K/V heads as Q heads: one view of (B, T, 3, H, Dh), the fewest ops for a decoding step)."""
        b, t, _ = qkv.shape
        if self.n_kv_heads == self.n_heads and t == 1:  # (B, 1, 3·H·Dh) reads as (B, 3, H, 1, Dh)
            q, k, v = qkv.view(b, 3, self.n_heads, 1, self.head_dim).unbind(1)
            return q, k, v
        if self.n_kv_heads == self.n_heads:  # (B, T, 3, H, Dh) -> (3, B, H, T, Dh)
            q, k, v = qkv.view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            return q, k, v
        q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        return (
            self._split_heads(q, self.n_heads),
            self._split_heads(k, self.n_kv_heads),
            self._split_heads(v, self.n_kv_heads),
        )

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        if t == 1:  # one position (a decoding step): (B, 1, H·Dh) already reads as (B, H, 1, Dh)
            return x.view(b, heads, 1, self.head_dim)
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)  # (B, T, H·Dh) -> (B, T, H, Dh) -> (B, H, T, Dh)

    def _norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """QK-norm: each head's query and key through its RMSNorm (over Dh), if the layer has one."""
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)  # (B, H, T, Dh), (B, Hkv, T, Dh)


def _refuse_query_dependent_mask(mask: torch.Tensor) -> None:
    """Cross-attention masks describe the source (keys) only; a mask whose rows differ is a look-ahead mask
    passed under the wrong name (a mistake in the course notes)."""
    if not torch.equal(mask, mask[..., :1, :].expand_as(mask)):
        raise ValueError(
            "cross-attention got a mask that differs between query positions (a causal/look-ahead mask?); "
            "cross-attention only takes the source padding mask of shape (B, 1, 1, Tk)"
        )
