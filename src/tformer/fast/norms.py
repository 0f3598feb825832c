"""The fast RMSNorm: PyTorch's ``F.rms_norm`` in place of :class:`tformer.nn.norms.RMSNorm`'s formula written out.

The reference computes ``x / √(mean(x²) + eps) · (weight_offset + weight)`` as the notes write it: a square, a mean,
an ``rsqrt`` and two products, each its own op. ``F.rms_norm`` is the same formula as one call: on float32 it gives
the same numbers (equal to the last bit in ``tests/test_fast.py``) in about half the time for a decoding row (a row
of 576: 13.5 µs against 7.3 on the avx512_bf16 class), and a Llama-shaped decoder runs two norms a layer per token.
Only float32 inputs and an offset of 0 take it (the reference computes in float32 whatever x's dtype, which
``F.rms_norm`` does not; Gemma's offset of 1 would need one more op); the rest runs the reference.

Dimension legend: D features.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tformer.fast.swap import replace_modules
from tformer.nn import norms

__all__ = ["RMSNorm", "swap_norms", "to_plain_norms"]


class RMSNorm(norms.RMSNorm):
    """:class:`tformer.nn.norms.RMSNorm` through ``F.rms_norm`` where the numbers are the same (see the module)."""

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fast"

    @classmethod
    def from_norm(cls, norm: norms.RMSNorm) -> RMSNorm:
        """A fast norm holding ``norm``'s weight Parameter itself (the state dict and training are unchanged)."""
        fast = cls(norm.dim, norm.eps, norm.weight_offset, scale=norm.weight is not None)
        fast.weight = norm.weight
        return fast.train(norm.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            x.dtype is torch.float32
            and self.weight_offset == 0
            and (w is None or w.dtype is torch.float32)
            and not torch.compiler.is_compiling()
        ):
            return F.rms_norm(x, (self.dim,), w, self.eps)  # (..., D)
        return super().forward(x)


def swap_norms(model: nn.Module) -> nn.Module:
    """Replace every :class:`tformer.nn.norms.RMSNorm` of ``model`` (exactly that class) by a fast :class:`RMSNorm`
    holding the same weight, in place. Idempotent; returns ``model``."""
    replace_modules(model, lambda m: RMSNorm.from_norm(m) if type(m) is norms.RMSNorm else None)
    return model


def to_plain_norms(model: nn.Module) -> nn.Module:
    """Put a :class:`tformer.nn.norms.RMSNorm` holding the same weight in place of every fast :class:`RMSNorm` of
    ``model``, in place (:func:`tformer.fast.use_reference`). Idempotent; returns ``model``."""

    def plain(m: nn.Module) -> nn.Module | None:
        if type(m) is not RMSNorm:
            return None
        norm = norms.RMSNorm(m.dim, m.eps, m.weight_offset, scale=m.weight is not None)
        norm.weight = m.weight
        return norm.train(m.training)

    replace_modules(model, plain)
    return model
