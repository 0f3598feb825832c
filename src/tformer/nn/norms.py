"""Normalisation layers: LayerNorm (the paper, GPT-2, BERT) and RMSNorm (Llama, Qwen, Mistral, Gemma).

* LayerNorm:  ``y = (x − mean(x)) / √(var(x) + eps) · w + b`` over the last dimension (``torch.nn.LayerNorm``);
* RMSNorm (Zhang & Sennrich 2019):  ``y = x / √(mean(x²) + eps) · (offset + w)``: no centring, no shift.
  ``offset`` is 0 with ``w`` starting at 1 (Llama, Qwen, Mistral), or 1 with ``w`` starting at 0 (Gemma's
  ``1 + weight`` form); both start as the identity scale. ``scale=False`` drops the learned scale altogether
  (``y = x / √(mean(x²) + eps)``, a non-parametric norm; LayerNorm the same with ``elementwise_affine=False``). Computed in float32 whatever the input dtype, as
  Hugging Face's Llama and Gemma do, then cast back.

:func:`make_norm` builds the one a :class:`~tformer.nn.layers.LayerConfig` asks for (``norm``).

Dimension legend: D the normalised (last) dimension; any leading dimensions.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["NORMS", "RMSNorm", "make_norm"]

NORMS = ("layernorm", "rmsnorm")


class RMSNorm(nn.Module):
    """``x / √(mean(x²) + eps) · (weight_offset + weight)`` over the last dimension; ``weight`` (D,) is learned
    (``scale=False``: no weight, the normalised x as it is)."""

    weight: nn.Parameter | None

    def __init__(self, dim: int, eps: float = 1e-6, weight_offset: float = 0.0, scale: bool = True) -> None:
        super().__init__()
        self.dim, self.eps, self.weight_offset = dim, eps, weight_offset
        identity = torch.full((dim,), 1.0 - weight_offset)  # the weight that starts as the identity scale
        self.weight = nn.Parameter(identity) if scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # (..., D)
        h = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + self.eps)  # (..., D) / (..., 1)
        if self.weight is not None:
            h = h * (self.weight_offset + self.weight.float())
        return h.to(x.dtype)  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, weight_offset={self.weight_offset}, scale={self.weight is not None}"


def make_norm(
    kind: str, dim: int, eps: float, bias: bool = True, weight_offset: float = 0.0, scale: bool = True
) -> nn.Module:
    """``nn.LayerNorm`` (``bias`` = learned shift) for ``"layernorm"``, :class:`RMSNorm` for ``"rmsnorm"``;
    ``scale=False``: neither learns a scale (nor a shift)."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, elementwise_affine=scale, bias=bias and scale)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps, weight_offset=weight_offset, scale=scale)
    raise ValueError(f"norm must be one of {', '.join(map(repr, NORMS))}, got {kind!r}")
