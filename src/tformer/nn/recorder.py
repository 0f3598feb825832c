"""Recording what the attention layers computed — the one inspection mechanism of tformer.

Inside ``with Recorder(model) as rec:`` every :class:`~tformer.nn.attention.MultiHeadAttention` call
switches to the readable reference path and appends an :class:`AttentionRecord` to ``rec.records``:
the very tensors of that forward pass (Q, K, V, raw and masked scores, weights, context, output).
Outside a recorder the models take the fused path and record nothing, so the normal path pays only
one context-variable lookup per attention call.

Dimension legend: B batch, H heads, Tq query length, Tk key length, Dh head dim, D model dim.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["AttentionRecord", "Recorder", "current_recorder"]

_ACTIVE: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("tformer_recorder", default=None)


@dataclass
class AttentionRecord:
    """One call of a multi-head attention module."""

    name: str  # module path inside the model, e.g. "decoder.layers.0.cross_attn"
    kind: str  # "self" or "cross"
    q: torch.Tensor  # (B, H, Tq, Dh)
    k: torch.Tensor  # (B, H, Tk, Dh)
    v: torch.Tensor  # (B, H, Tk, Dh)
    mask: torch.Tensor | None  # (B|1, 1, Tq, Tk) bool, True = may attend (None = everything allowed)
    raw_scores: torch.Tensor  # (B, H, Tq, Tk) Q·Kᵀ, before scaling
    scores: torch.Tensor  # (B, H, Tq, Tk) Q·Kᵀ/√Dh (soft-capped when the layer caps)
    masked_scores: torch.Tensor  # (B, H, Tq, Tk) blocked entries are −∞
    weights: torch.Tensor  # (B, H, Tq, Tk) softmax over Tk; fully masked rows are 0
    context: torch.Tensor  # (B, H, Tq, Dh) weights · V
    output: torch.Tensor  # (B, Tq, D) after concatenating heads and the output projection


class Recorder:
    """Context manager that collects an :class:`AttentionRecord` per attention call.

    >>> with Recorder(model) as rec:                      # doctest: +SKIP
    ...     logits = model(src, tgt)
    >>> rec.weights()["decoder.layers.0.cross_attn"].shape  # doctest: +SKIP
    torch.Size([1, 8, 4, 5])
    """

    def __init__(self, model: nn.Module | None = None) -> None:
        self._names = {id(m): name for name, m in model.named_modules()} if model is not None else {}
        self.records: list[AttentionRecord] = []
        self._token: contextvars.Token[Recorder | None] | None = None

    def name_of(self, module: nn.Module) -> str:
        return self._names.get(id(module), type(module).__name__)

    def add(self, record: AttentionRecord) -> None:
        self.records.append(record)

    def weights(self) -> dict[str, torch.Tensor]:
        """Attention weights by module name (the last call of each module wins)."""
        return {r.name: r.weights for r in self.records}

    def __enter__(self) -> Recorder:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)


def current_recorder() -> Recorder | None:
    """The recorder active in this context, or ``None``."""
    return _ACTIVE.get()
