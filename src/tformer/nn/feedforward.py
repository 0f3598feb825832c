"""The gated feed-forward of today's decoders (Shazeer 2020, "GLU Variants Improve Transformer"):

    FFN(x) = down( act(gate(x)) ⊙ up(x) )        gate, up: Linear(D, F);  down: Linear(F, D)

* ``swiglu``: act = SiLU (x·sigmoid(x)): Llama, Qwen, Mistral, SmolLM;
* ``geglu``:  act = GELU, tanh approximation: Gemma's ``gelu_pytorch_tanh`` (the paper's GEGLU uses exact GELU).

Three weight matrices instead of two: at the same ``d_ff`` it has 1.5× the parameters of the plain MLP
(:class:`~tformer.nn.layers.FeedForward`); Llama picks ``d_ff`` ≈ 8/3·D to keep the count of a 4·D MLP.

Dimension legend: B batch, T length, D model dim, F hidden (``d_ff``) dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GATED", "GatedFeedForward"]

GATED = {
    "swiglu": F.silu,
    "geglu": lambda x: F.gelu(x, approximate="tanh"),
}


class GatedFeedForward(nn.Module):
    """``down(act(gate(x)) * up(x))``; ``kind`` is ``"swiglu"`` or ``"geglu"``."""

    def __init__(self, d_model: int, d_ff: int, kind: str, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if kind not in GATED:
            raise ValueError(f"ffn must be one of {', '.join(map(repr, ['mlp', *GATED]))}, got {kind!r}")
        self.kind = kind
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = GATED[kind]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.gate_proj(x)) * self.up_proj(x)  # (B, T, D) -> (B, T, F)
        if self.training:  # as FeedForward: dropout on the hidden layer, skipped in evaluation
            h = self.dropout(h)
        return self.down_proj(h)  # (B, T, F) -> (B, T, D)
