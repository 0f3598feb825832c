"""Positional information and input embeddings.

* :func:`sinusoidal_table` — the paper's fixed encoding, interleaved as in the paper::

      PE[pos, 2i]   = sin(pos / 10000^(2i/d))
      PE[pos, 2i+1] = cos(pos / 10000^(2i/d))

  (check value, d = 4, pos = 1: [0.84147098, 0.54030231, 0.00999983, 0.99995000]); or laid out as halves,
  ``[sin(pos·ω₀) … sin(pos·ω_{d/2-1}) | cos(pos·ω₀) …]``, as Marian (the OPUS-MT models) and tensor2tensor lay it out
  (``positional="sinusoidal_halves"``: the same columns in another order).
* :class:`LearnedPositionalEmbedding` — one trained vector per position (GPT-2, BERT).
* :func:`rotary_tables` / :func:`apply_rotary` — rotary position embedding (RoPE, Su et al. 2021, as in
  GPT-NeoX and LLaMA): nothing is added to the input; inside self-attention each query and key is rotated
  by an angle proportional to its position, so their dot product depends only on the distance.
  :func:`rope_frequencies` gives the angles' frequencies, stretched for longer contexts by a ``scaling``
  (Hugging Face's ``rope_scaling`` keys): ``linear`` (position interpolation), ``llama3`` (Llama 3.1: low
  frequencies slowed, high ones kept, a smooth ramp between) or ``yarn`` (a ramp by rotations per context, plus an
  attention factor on cos and sin).
* :class:`InputEmbedding` — token embedding (optionally × √d_model, as in the paper) + position
  (+ segment for BERT) (+ LayerNorm for BERT) → dropout. Its hook points (:mod:`tformer.nn.hooks`): ``hook_token``
  (B, T, D), the token vectors (× √D when scaled); ``hook_position`` (T, D), or (B, T, D) for positions given per
  row, the rows added (not with RoPE); ``hook_segment`` (B, T, D) (BERT); ``hook_out`` (B, T, D), what the first
  layer reads.

Dimension legend: B batch, T sequence length, D model dim, V vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tformer.nn.hooks import HookPoint, keep_at_hand

__all__ = [
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "ROPE_SCALINGS",
    "rope_frequencies",
    "rotary_tables",
    "apply_rotary",
    "InputEmbedding",
]


def sinusoidal_table(max_len: int, d_model: int, halves: bool = False) -> torch.Tensor:
    """The (max_len, d_model) sinusoidal table; even columns sin, odd columns cos (``halves``: the sin columns first,
    then the cos ones, Marian's layout)."""
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal positional encoding needs an even d_model, got d_model={d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    if halves:
        table = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)
    return table.float()  # (T, D)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed table lookup; the table is a (non-persistent) buffer, not a parameter (``halves``: Marian's layout)."""

    table: torch.Tensor  # (max_len, D)

    def __init__(self, *, max_len: int, d_model: int, halves: bool = False) -> None:
        """By name: PyTorch's tutorial takes ``(d_model, max_len)``, the table here is (``max_len``, ``d_model``)."""
        super().__init__()
        self.max_len, self.halves = max_len, halves
        self.register_buffer("table", sinusoidal_table(max_len, d_model, halves), persistent=False)

    def forward(self, positions: torch.Tensor | slice) -> torch.Tensor:
        """``positions``: a tensor of position ids, or a slice ``start:end`` (consecutive positions: a view, no gather);
        returns their rows (..., D), which the caller adds to the embeddings (not the embeddings plus them)."""
        return self.table[_position_ids(positions)]  # (..., D)


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position."""

    def __init__(self, *, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: torch.Tensor | slice) -> torch.Tensor:
        """``positions``: a tensor of position ids, or a slice ``start:end`` (consecutive positions: a view, no gather)."""
        return self.weight[_position_ids(positions)]  # (..., D)


def _position_ids(positions: torch.Tensor | slice) -> torch.Tensor | slice:
    """Position ids as a table reads them; embeddings given in their place are one line, not an indexing error."""
    if isinstance(positions, torch.Tensor) and (positions.is_floating_point() or positions.dtype == torch.bool):
        raise TypeError(
            f"positions must be integer position ids (T,) or (B, T), got dtype {positions.dtype}: the table gives "
            "their rows, which are added to the embeddings"
        )
    return positions


# the keys each RoPE scaling takes (Hugging Face's names); the first group is required
ROPE_SCALINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "linear": (("factor",), ()),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    ),
}


def rope_frequencies(
    head_dim: int, base: float = 10000.0, scaling: Mapping[str, Any] | None = None
) -> tuple[torch.Tensor, float]:
    """The inverse frequencies (Dh/2,) of RoPE, base^(−2i/Dh), as scaled by ``scaling``, and the factor on cos/sin.

    ``scaling`` is ``None`` or ``{"rope_type": "linear" | "llama3" | "yarn", ...}`` with the keys of
    :data:`ROPE_SCALINGS`; the factor is 1 except for YaRN (0.1·ln(factor) + 1 unless given).
    """
    if head_dim % 2 != 0:
        raise ValueError(f"rotary position embedding needs an even head dimension, got head_dim={head_dim}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim  # 2i/Dh
    inv_freq = 1.0 / (base**exponents)  # (Dh/2,): the angle per position of pair i
    kind = None if scaling is None else scaling.get("rope_type")
    if kind is None or kind == "default":
        return inv_freq, 1.0
    factor = float(scaling["factor"])  # type: ignore[index]  # kind is not None: scaling is a mapping
    if kind == "linear":  # positions / factor, the same as every frequency / factor
        return inv_freq / factor, 1.0
    if kind == "llama3":
        return _llama3(inv_freq, factor, scaling), 1.0  # type: ignore[arg-type]
    if kind == "yarn":
        return _yarn(inv_freq, head_dim, base, factor, scaling)  # type: ignore[arg-type]
    raise ValueError(f"rope_scaling rope_type must be one of {sorted(ROPE_SCALINGS)}, got {kind!r}")


def _llama3(inv_freq: torch.Tensor, factor: float, s: Mapping[str, Any]) -> torch.Tensor:
    """Llama 3.1: wavelengths longer than context / low_freq_factor slowed by ``factor``, shorter than
    context / high_freq_factor kept, a linear blend in 1/wavelength between."""
    context, low, high = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq  # (Dh/2,)
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)  # 0 at the slow end of the blend, 1 at the fast end
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


def _yarn(
    inv_freq: torch.Tensor, head_dim: int, base: float, factor: float, s: Mapping[str, Any]
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): pairs that turn fewer than ``beta_slow`` times over the original context are
    interpolated (÷ factor), more than ``beta_fast`` times kept, a linear ramp between; cos and sin × the factor."""

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = s.get("attention_factor")
    if attention is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    context = s["original_max_position_embeddings"]

    def pair_of(rotations: float) -> float:  # the pair that turns ``rotations`` times over the context
        return head_dim * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(s.get("beta_fast") or 32), pair_of(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low if high != low else 0.001)).clamp(
        0, 1
    )  # 0: keep (extrapolate), 1: interpolate
    keep = 1 - ramp  # (the blend written as Hugging Face writes it, so the floats are the same to the last bit)
    pos_freqs = base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolated, interpolated = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    return interpolated * (1 - keep) + extrapolated * keep, float(attention)


def rotary_tables(
    positions: torch.Tensor,
    head_dim: int,
    base: float = 10000.0,
    scaling: Mapping[str, Any] | None = None,
    frequencies: tuple[torch.Tensor, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, each (..., T, head_dim), for ``positions`` (T,) or (B, T).

    Dimension i and i + head_dim/2 form a pair (GPT-NeoX/LLaMA's "rotate half" layout) turned by
    position × base^(−2i/head_dim) (as :func:`rope_frequencies` scales it); both halves of the table repeat the same
    angles. ``frequencies``: that function's output, computed once by the caller.
    """
    inv_freq, factor = frequencies if frequencies is not None else rope_frequencies(head_dim, base, scaling)
    angles = positions.float()[..., None] * inv_freq.to(positions.device, torch.float32)  # (..., T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, Dh)
    if factor == 1.0:
        return angles.cos(), angles.sin()
    return angles.cos() * factor, angles.sin() * factor


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+Dh/2}) of ``x`` (B, H, T, Dh) by its angle: x·cos + rotate_half(x)·sin.

    The tables are computed in float32 and used in ``x``'s dtype (as Hugging Face does), so a bfloat16 model's
    queries and keys stay bfloat16 like its values."""
    if cos.dtype != x.dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    width = cos.shape[-1]
    if width != x.shape[-1]:  # a partial rotary (GPT-NeoX's rotary_pct): the first ``width`` dims turn, the rest pass
        return torch.cat([apply_rotary(x[..., :width], cos, sin), x[..., width:]], dim=-1)
    first, second = x.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class InputEmbedding(nn.Module):
    """ids → token embedding (× √D if ``scale``) + positional (none for RoPE) (+ segment) → (LayerNorm) → dropout."""

    hook_position: HookPoint  # only with a position table or encoding (not RoPE)
    hook_segment: HookPoint  # only with segments (BERT)

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
        rows: int | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        # ``rows`` (>= vocab_size; a GPT's vocab_multiple): the table's rows; those past the words are 0 and never read
        # (no id reaches them). The words' rows draw the random numbers a table of vocab_size rows draws (nn.Embedding's
        # N(0, 1), then this init's), so a padded model starts from the same weights as an unpadded one.
        table = torch.empty(rows or vocab_size, d_model)
        self.token = nn.Embedding(rows or vocab_size, d_model, _weight=table)
        words = self.token.weight[:vocab_size]  # (V, D): the whole table unless padded
        nn.init.normal_(words)  # what nn.Embedding(vocab_size, d_model) draws
        nn.init.normal_(words, std=d_model**-0.5 if scale else 0.02)
        with torch.no_grad():
            self.token.weight[vocab_size:].zero_()
        self.scale = math.sqrt(d_model) if scale else 1.0
        if positional in ("sinusoidal", "sinusoidal_halves"):
            self.position: nn.Module | None = SinusoidalPositionalEncoding(
                max_len=max_len, d_model=d_model, halves=positional == "sinusoidal_halves"
            )
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(max_len=max_len, d_model=d_model)
        elif positional == "rope":
            self.position = None  # positions enter inside self-attention (rotary_tables / apply_rotary)
        else:
            raise ValueError(
                f"positional must be 'sinusoidal', 'sinusoidal_halves', 'learned' or 'rope', got {positional!r}"
            )
        self.segment = nn.Embedding(n_segments, d_model) if n_segments else None
        if self.segment is not None:
            nn.init.normal_(self.segment.weight, std=0.02)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        self.hook_token = HookPoint()  # the hook points, in the order they run
        if self.position is not None:
            self.hook_position = HookPoint()
        if self.segment is not None:
            self.hook_segment = HookPoint()
        self.hook_out = HookPoint()
        keep_at_hand(self)

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor | slice | None = None, segments: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``ids`` (B, T) → (B, T, D). ``positions`` defaults to 0..T-1; a tensor (T,) or (B, T) of position ids, or a
        slice ``start:start + T`` of consecutive ones (decoding with a cache: the table rows as a view, no gather)."""
        if positions is None:  # 0..T-1 as ids (a slice would fix T in a compiled graph: one compilation per length)
            positions = torch.arange(ids.shape[1], device=ids.device)
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
        x = self.hook_token(x)
        if self.position is not None:
            x = x + self.hook_position(self.position(positions))  # + (T, D) or (B, T, D)
        if self.segment is not None:
            x = x + self.hook_segment(self.segment(torch.zeros_like(ids) if segments is None else segments))
        if self.norm is not None:
            x = self.norm(x)
        if self.training:  # the identity in evaluation: not even called
            x = self.dropout(x)
        return self.hook_out(x)
