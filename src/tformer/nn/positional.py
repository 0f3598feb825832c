"""Positional information and input embeddings.

* :func:`sinusoidal_table` — the paper's fixed encoding, interleaved as in the paper::

      PE[pos, 2i]   = sin(pos / 10000^(2i/d))
      PE[pos, 2i+1] = cos(pos / 10000^(2i/d))

  (check value, d = 4, pos = 1: [0.84147098, 0.54030231, 0.00999983, 0.99995000]).
* :class:`LearnedPositionalEmbedding` — one trained vector per position (GPT-2, BERT).
* :func:`rotary_tables` / :func:`apply_rotary` — rotary position embedding (RoPE, Su et al. 2021, as in
  GPT-NeoX and LLaMA): nothing is added to the input; inside self-attention each query and key is rotated
  by an angle proportional to its position, so their dot product depends only on the distance.
* :class:`InputEmbedding` — token embedding (optionally × √d_model, as in the paper) + position
  (+ segment for BERT) (+ LayerNorm for BERT) → dropout.

Dimension legend: B batch, T sequence length, D model dim, V vocabulary size.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "rotary_tables",
    "apply_rotary",
    "InputEmbedding",
]


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """The (max_len, d_model) sinusoidal table; even columns sin, odd columns cos."""
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal positional encoding needs an even d_model, got d_model={d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()  # (T, D)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed table lookup; the table is a (non-persistent) buffer, not a parameter."""

    table: torch.Tensor  # (max_len, D)

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, positions: torch.Tensor | slice) -> torch.Tensor:
        """``positions``: a tensor of position ids, or a slice ``start:end`` (consecutive positions: a view, no gather)."""
        return self.table[positions]  # (..., D)


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: torch.Tensor | slice) -> torch.Tensor:
        """``positions``: a tensor of position ids, or a slice ``start:end`` (consecutive positions: a view, no gather)."""
        return self.weight[positions]  # (..., D)


def rotary_tables(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, each (..., T, head_dim), for ``positions`` (T,) or (B, T).

    Dimension i and i + head_dim/2 form a pair (GPT-NeoX/LLaMA's "rotate half" layout) turned by
    position × base^(−2i/head_dim); both halves of the table repeat the same angles.
    """
    if head_dim % 2 != 0:
        raise ValueError(f"rotary position embedding needs an even head dimension, got head_dim={head_dim}")
    inv_freq = base ** (
        -torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim
    )  # (Dh/2,)
    angles = positions.float()[..., None] * inv_freq  # (..., T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, Dh)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+Dh/2}) of ``x`` (B, H, T, Dh) by its angle: x·cos + rotate_half(x)·sin."""
    first, second = x.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class InputEmbedding(nn.Module):
    """ids → token embedding (× √D if ``scale``) + positional (none for RoPE) (+ segment) → (LayerNorm) → dropout."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        positional: str = "sinusoidal",
        scale: bool = False,
        dropout: float = 0.0,
        n_segments: int = 0,
        norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        self.token = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.token.weight, std=d_model**-0.5 if scale else 0.02)
        self.scale = math.sqrt(d_model) if scale else 1.0
        if positional == "sinusoidal":
            self.position: nn.Module | None = SinusoidalPositionalEncoding(max_len, d_model)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(max_len, d_model)
        elif positional == "rope":
            self.position = None  # positions enter inside self-attention (rotary_tables / apply_rotary)
        else:
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or 'rope', got {positional!r}")
        self.segment = nn.Embedding(n_segments, d_model) if n_segments else None
        if self.segment is not None:
            nn.init.normal_(self.segment.weight, std=0.02)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor | slice | None = None, segments: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``ids`` (B, T) → (B, T, D). ``positions`` defaults to 0..T-1; a tensor (T,) or (B, T) of position ids, or a
        slice ``start:start + T`` of consecutive ones (decoding with a cache: the table rows as a view, no gather)."""
        if positions is None:
            positions = slice(0, ids.shape[1])  # 0..T-1
        elif isinstance(positions, slice) and (
            positions.stop - positions.start != ids.shape[1] or positions.stop > self.max_len
        ):
            raise ValueError(
                f"positions {positions.start}:{positions.stop} must cover the {ids.shape[1]} tokens of ids "
                f"and end within max_len={self.max_len}"
            )
        x = self.token(ids)  # (B, T, D)
        if self.scale != 1.0:  # × √D for the paper's embeddings; GPT and BERT leave it out (no multiply by 1)
            x = x * self.scale
        if self.position is not None:
            x = x + self.position(positions)
        if self.segment is not None:
            x = x + self.segment(torch.zeros_like(ids) if segments is None else segments)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x) if self.training else x  # the identity in evaluation: not even called
