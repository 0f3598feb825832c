"""The position-wise feed-forward networks: the paper's MLP and the gated one of today's decoders.

The paper's (§3.3), applied to each position alone:

    FFN(x) = W₂ · act(W₁ · x + b₁) + b₂        W₁: Linear(D, F);  W₂: Linear(F, D);  act = ReLU (GELU in GPT-2, BERT)

The gated one (Shazeer 2020, "GLU Variants Improve Transformer"):

    FFN(x) = down( act(gate(x)) ⊙ up(x) )        gate, up: Linear(D, F);  down: Linear(F, D)

* ``swiglu``: act = SiLU (x·sigmoid(x)): Llama, Qwen, Mistral, SmolLM;
* ``geglu``:  act = GELU, tanh approximation: Gemma's ``gelu_pytorch_tanh`` (the paper's GEGLU uses exact GELU).

Three weight matrices instead of two: at the same ``d_ff`` it has 1.5× the parameters of the plain MLP;
Llama picks ``d_ff`` ≈ 8/3·D to keep the count of a 4·D MLP.

Hook points (:mod:`tformer.nn.hooks`), each (B, T, F) but ``hook_out`` (B, T, D): the MLP's ``hook_hidden``
(W₁·x + b₁, before the activation), ``hook_activation`` (after it: what W₂ reads) and ``hook_out``; the gated one's
``hook_gate``, ``hook_up``, ``hook_activation`` (act(gate) ⊙ up: what ``down`` reads) and ``hook_out``.

Dimension legend: B batch, T length, D model dim, F hidden (``d_ff``) dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tformer.nn.hooks import HookPoint, keep_at_hand

__all__ = ["ACTIVATIONS", "GATED", "FeedForward", "GatedFeedForward"]


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation: GPT-2's "gelu_new"."""
    return F.gelu(x, approximate="tanh")


def relu2(x: torch.Tensor) -> torch.Tensor:
    """Squared ReLU (So et al. 2021, "Primer"); HF's "relu2"."""
    return F.relu(x).square()


# named functions, not lambdas: a model holding them pickles (torch.save of a whole model, multiprocessing)
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact erf GELU (BERT)
    "gelu_tanh": gelu_tanh,
    "silu": F.silu,  # x·sigmoid(x), "swish" (some Marian models)
    "relu2": relu2,
}

GATED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swiglu": F.silu,
    "geglu": gelu_tanh,
}


def check_width(x: torch.Tensor, d_model: int) -> None:
    """A feed-forward layer reads vectors of ``d_model`` numbers: another width is refused, naming both."""
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (..., {d_model}), the layer's d_model, got {tuple(x.shape)}")


class FeedForward(nn.Module):
    """The paper's position-wise feed-forward: Linear(D, F) → activation → dropout → Linear(F, D)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)
        self.hook_hidden, self.hook_activation, self.hook_out = HookPoint(), HookPoint(), HookPoint()
        keep_at_hand(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_width(x, self.d_model)
        h = self.hook_hidden(self.linear1(x))  # (B, T, D) -> (B, T, F)
        h = self.hook_activation(self.activation(h))
        if self.training:  # dropout is the identity in evaluation: decoding skips even the call
            h = self.dropout(h)
        return self.hook_out(self.linear2(h))  # (B, T, F) -> (B, T, D)


class GatedFeedForward(nn.Module):
    """``down(act(gate(x)) * up(x))``; ``kind`` is ``"swiglu"`` or ``"geglu"``."""

    def __init__(self, d_model: int, d_ff: int, kind: str, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if kind not in GATED:
            raise ValueError(f"ffn must be one of {', '.join(map(repr, ['mlp', *GATED]))}, got {kind!r}")
        self.kind = kind
        self.d_model = d_model
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = GATED[kind]
        self.dropout = nn.Dropout(dropout)
        self.hook_gate, self.hook_up = HookPoint(), HookPoint()
        self.hook_activation, self.hook_out = HookPoint(), HookPoint()
        keep_at_hand(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_width(x, self.d_model)
        gate, up = self.hook_gate(self.gate_proj(x)), self.hook_up(self.up_proj(x))  # (B, T, D) -> (B, T, F) each
        h = self.hook_activation(self.activation(gate) * up)  # (B, T, F)
        if self.training:  # as FeedForward: dropout on the hidden layer, skipped in evaluation
            h = self.dropout(h)
        return self.hook_out(self.down_proj(h))  # (B, T, F) -> (B, T, D)
