"""``Dropout``: inverted dropout, as ``nn.Dropout``, with a cheaper random mask on the CPU, and the swap that puts it
into a plain model (:func:`swap_dropout`: every ``nn.Dropout``; the fast attention kernel drops the attention
weights with it).

Training with dropout zeroes each element with probability p and scales the survivors by 1/(1 − p),
so the expected output equals the input. On the CPU, PyTorch draws that mask with one
double-precision Bernoulli draw per element from a single thread (random number generation is
serial so that a seed gives the same numbers on any thread count): about 8–12 ns per element on
this machine, with one thread or two. With dropout 0.1 on the residual paths a small language model
here made a third fewer steps than without it.

The fast path draws one random 64-bit word per four elements instead (``random_(-2**63, None)``, the
generator's full 64-bit range: two 32-bit draws of its Mersenne Twister per word, half a draw per element,
no bit thrown away). Viewed as int16, each word holds four 16-bit lanes, each
uniform on −32768…32767; an element is dropped when its lane is below ``q − 32768`` with
``q = round(p · 65536)``, so with probability exactly ``q / 65536``, and survivors are scaled by
``1 / (1 − q/65536)``. The rate is p to within 2⁻¹⁷ (0.1 → 0.100006), the expectation is exact, and the
mask comes from PyTorch's own generator (``torch.manual_seed`` reproduces it). The mask is made as int16 ones and
zeros (each lane clamped to the two values either side of the threshold, less the lower one), never booleans:
PyTorch's CPU kernels multiply a tensor by a boolean one element by element, by ones and zeros vectorised (one
dropout of a bfloat16 (16, 128, 512) tensor, forward and backward: 7.6 ms with the boolean mask, 5.3 with ones and
zeros, the amx class; docs/benchmarks.md). That and the scaling run on every thread. ``python -m
benchmarks.train_step`` times both paths (README).

A bfloat16 or float16 tensor (bfloat16 autocast) gets the same mask; its survivors are multiplied by the scale as
a Python number, which PyTorch's CPU kernels apply in float32 and round once (a multiplier tensor in bfloat16
would round 1/(1 − rate) first: 1.1111 → 1.1094 at p = 0.1, a bias of 0.16% on every survivor).

Elsewhere it is exactly ``F.dropout``: on GPUs (PyTorch's fused dropout kernel is already cheap), inside a
``torch.compile`` graph (dynamo cannot trace ``random_``, and the compiler fuses PyTorch's draw itself), in
eval mode, for p = 0, for rates the lanes cannot resolve (p < 2⁻¹⁷, or within 2⁻¹⁷ of 1), for other dtypes,
and inside :func:`reference`.

Attention weights: PyTorch's CPU attention kernels take dropout only on their unfused path, which draws the
mask one element at a time. :func:`scaled_dot_product_attention` here runs the reference path of
:mod:`tformer.nn.attention` with the cheaper mask instead when that mask applies (training on the CPU), and is
the plain function everywhere else. The fast attention kernel (:func:`tformer.fast.attention.attend`) calls it.

Dimension legend: B batch, H heads, Tq query length, Tk key length, Dh head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tformer.fast.swap import replace_modules
from tformer.nn import attention
from tformer.nn.attention import AttentionDetails
from tformer.nn.masks import causal_mask

__all__ = [
    "Dropout",
    "dropout",
    "fast_cpu_multiplier",
    "scaled_dot_product_attention",
    "swap_dropout",
    "to_plain_dropout",
]

_LEVELS = 65536  # each lane holds 16 random bits
_LANES = 4  # 16-bit lanes per 64-bit word, whatever the byte order


def fast_cpu_multiplier(
    shape: torch.Size, p: float, dtype: torch.dtype = torch.float32, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The (0 or 1/(1 − rate)) multiplier of the fast path for a tensor of ``shape``; rate = round(p·65536)/65536."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    q = round(p * _LEVELS)
    if q == _LEVELS:
        raise ValueError(f"p = {p} rounds to 1 in 16-bit lanes; use F.dropout for rates this close to 1")
    keep, scale = _keep(shape, q, generator)
    return keep.to(dtype).mul_(scale)


def _keep(shape: torch.Size, q: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
    """The kept elements as int16 ones and zeros (each dropped with probability q / 65536), and their scale. Ones
    and zeros, not booleans, which PyTorch's CPU kernels multiply element by element (the module docstring)."""
    n = shape.numel()
    words = torch.empty(-(-n // _LANES), dtype=torch.int64).random_(
        -(2**63), None, generator=generator
    )  # 64 random bits
    lanes = words.view(torch.int16)[:n]  # four lanes per word, each uniform on −32768…32767
    low = q - _LEVELS // 2 - 1  # dropped: the q lowest of the 65,536 values, those ≤ low
    keep = lanes.clamp(low, low + 1).sub_(low)  # 0 where dropped, 1 where kept (no overflow: low ≥ −32768)
    return keep.view(shape), _LEVELS / (_LEVELS - q)


_FLOATS = (torch.float32, torch.float64)  # the multiplier in x's dtype holds 1/(1 − rate) exactly enough
_HALVES = (torch.bfloat16, torch.float16)  # the scale goes in as a Python number (see the module docstring)


def uses_fast_mask(x: torch.Tensor, p: float) -> bool:
    """Whether :func:`dropout` of ``x`` at rate ``p`` (in training) takes the fast CPU mask rather than ``F.dropout``."""
    kind = x.dtype in _FLOATS or x.dtype in _HALVES
    if torch.compiler.is_compiling():  # a compiled graph draws F.dropout's mask (dynamo cannot trace random_)
        return False
    return x.device.type == "cpu" and kind and 0 < round(p * _LEVELS) < _LEVELS


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the fast CPU mask (see the module docstring)."""
    if not training or p == 0.0:
        return x
    if not uses_fast_mask(x, p):
        return F.dropout(x, p, training=True)
    if x.dtype in _FLOATS:
        return x * fast_cpu_multiplier(x.shape, p, x.dtype)
    keep, scale = _keep(x.shape, round(p * _LEVELS))
    return (x * keep.to(x.dtype)).mul_(scale)  # x · 0 or x (exact), then × the scale rounded once


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same argument, same state dict: none) with the fast CPU mask in training."""

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fast"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)


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
    """:func:`tformer.nn.attention.scaled_dot_product_attention` (same arguments, same results) whose weight dropout
    draws the fast CPU mask: the reference path with :func:`dropout`, where the fused kernel would draw PyTorch's."""
    if not (dropout_p > 0 and uses_fast_mask(q, dropout_p)):
        return attention.scaled_dot_product_attention(
            q, k, v, mask, dropout_p, return_details, is_causal, scale, enable_gqa
        )
    attention.check_attention_mask(mask, is_causal, q.shape[-2], k.shape[-2])
    if enable_gqa and k.shape[1] != q.shape[1]:  # the reference path needs every query head's own K/V
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    if is_causal:  # the reference path spells the look-ahead mask out
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (1, 1, Tq, Tk)
    out, details = attention.reference_attention(q, k, v, mask, dropout_p, dropout=dropout, scale=scale)
    return (out, details) if return_details else out


def swap_dropout(model: nn.Module) -> nn.Module:
    """Swap the fast CPU mask into ``model`` in place: every ``nn.Dropout`` becomes a :class:`Dropout` (same rate,
    same mode). (The attention weights' dropout is the attention kernel's: :func:`tformer.fast.attention.attend`
    draws this mask.) Idempotent; returns ``model``."""
    replace_modules(model, _fast_dropout)
    return model


def to_plain_dropout(model: nn.Module) -> nn.Module:
    """Put an ``nn.Dropout`` (same rate, same mode) in place of every :class:`Dropout` of ``model``, in place (the
    reference kernel: :func:`tformer.fast.use_reference`). Idempotent; returns ``model``."""

    def plain(m: nn.Module) -> nn.Module | None:
        return nn.Dropout(m.p, m.inplace).train(m.training) if type(m) is Dropout else None

    replace_modules(model, plain)
    return model


def _fast_dropout(module: nn.Module) -> Dropout | None:
    """The replacement of an ``nn.Dropout`` (exactly torch's: a subclass, ours included, may do something else)."""
    if type(module) is not nn.Dropout:
        return None
    return Dropout(module.p, module.inplace).train(module.training)
