"""``Int8Embedding``: a token embedding table held in int8 with one float32 scale per row (per token), for inference.
:mod:`tformer.fast.quantize` swaps it in for an ``nn.Embedding`` of at least :data:`MIN_ROWS` rows.

Why. A model's token table is a large share of its weights: SmolLM2-135M's 49,152 × 576 table is 21% of them,
MiniLM's 30,522 × 384 half, a 6 × 384 GPT with 8,000 tokens about a fifth. Left in float32 beside int8 linear
layers, it alone keeps a quantized model above a third of float32's memory.

What it holds. Row v of the table W (V, D) becomes int8 values ``q[v] = round(W[v] / s[v])`` in −127…127 with
``s[v] = max |W[v, :]| / 127`` (:func:`tformer.fast.int8.quantize_rows`, as a linear layer's output channels): a
looked-up row ``q[v] · s[v]`` is within ``s[v] / 2`` of the float row. A lookup gathers the int8 rows and their
scales and returns floats (float32, or the scales' dtype). The buffers are ``weight_int8`` and ``weight_scale``;
an output head tied to the table (GPT, BERT's MLM decoder, the translator's generator) holds these very tensors
(:meth:`tformer.fast.int8.Int8Linear.share_values`) and packs its own copy for its products, so the file holds
the table once.

Why the bound. A table of fewer than :data:`MIN_ROWS` rows is a character vocabulary (65 tokens for Tiny
Shakespeare), a toy one or BERT's 2-row segment table: a few hundred KB at most, where int8 would change the
numbers of a small model for no memory worth having. Every subword vocabulary tformer trains or converts (8,000
for the benchmarks' GPT and translator, 30,522 for MiniLM, 49,152 for SmolLM2) is above it. Position tables are not
``nn.Embedding`` (:class:`tformer.nn.positional.LearnedPositionalEmbedding`) and stay float, as do the norms.

Dimension legend: V rows (tokens), D features, ``...`` the ids' shape.
"""

from __future__ import annotations

import torch
from torch import nn

from tformer.fast.int8 import quantize_rows

__all__ = ["Int8Embedding", "MIN_ROWS"]

MIN_ROWS = 4096  # an nn.Embedding with fewer rows stays float (see the module docstring)


class Int8Embedding(nn.Module):
    """``ids → q[ids] · s[ids]``, the int8 twin of an ``nn.Embedding``; see the module docstring.

    ``weight`` is the dequantized table ``q · s`` (made on each access). ``original``: the ``nn.Embedding`` this
    table replaced, when :func:`tformer.fast.quantize.quantize` kept it (not a submodule: not in the state dict)."""

    weight_int8: torch.Tensor  # (V, D) int8
    weight_scale: torch.Tensor  # (V,) float32
    original: nn.Module | None

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device=None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.register_buffer("weight_int8", torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(num_embeddings, device=device))
        self.__dict__.update(original=None, stale=False)

    @classmethod
    def from_embedding(
        cls,
        embedding: nn.Embedding,
        keep: bool = False,
        values: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> Int8Embedding:
        """The int8 twin of ``embedding`` (in the same train/eval mode); ``keep``: remember it as ``original``.
        ``values``: the (q, s) to hold, shared, not copied (two tables tied to one weight hold one int8 table)."""
        w = embedding.weight.detach()
        table = cls(embedding.num_embeddings, embedding.embedding_dim, embedding.padding_idx, device=w.device)
        q, s = quantize_rows(w) if values is None else values
        table.weight_int8, table.weight_scale = q, s
        table.__dict__["original"] = embedding if keep else None
        return table.train(embedding.training)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized table ``q · s`` (V, D), in the scales' dtype."""
        return self.weight_int8.to(self.weight_scale.dtype) * self.weight_scale[:, None]

    def to_embedding(self) -> nn.Embedding:
        """A new ``nn.Embedding`` holding ``q · s`` (float32, or the scales' float dtype)."""
        w = self.weight.detach()
        embedding = nn.Embedding(
            self.num_embeddings, self.embedding_dim, self.padding_idx, device=w.device, dtype=w.dtype
        )
        with torch.no_grad():
            embedding.weight.copy_(w)
        return embedding.train(self.training)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` (...) → (..., D): the int8 rows times their scales."""
        rows = self.weight_int8[ids].to(self.weight_scale.dtype)  # (..., D)
        return rows.mul_(self.weight_scale[ids].unsqueeze(-1))

    def _apply(self, fn, recurse: bool = True):
        """``.to()``, ``.half()``, ...: the float table kept goes along (dequantize gives it in the new dtype)."""
        if self.original is not None:
            self.original._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """The float table kept is no longer what loaded values are (``stale``: dequantize then gives q · s)."""
        self.__dict__["stale"] = True
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}, int8"
