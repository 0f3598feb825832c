"""Solutions to the exercises of lesson 2, positional encoding.

tests/test_lessons.py checks them."""

from __future__ import annotations

import math


def pe_entry(pos: int, j: int, d_model: int) -> float:
    """Entry j of row pos of the sinusoidal table.

    Columns 2i and 2i + 1 share the frequency 10000^(-2i/d_model); the even one
    holds a sine, the odd one a cosine."""
    two_i = j - j % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


def dot_at_distance(k: int, d_model: int) -> float:
    """PE[pos] · PE[pos + k], the same for every pos.

    Each pair of columns adds sin(a)·sin(b) + cos(a)·cos(b) = cos(a - b), that is
    cos(k·ω_i): only the frequencies matter. For k = 0 it is d_model / 2."""
    return sum(math.cos(k * 10000 ** (-2 * i / d_model)) for i in range(d_model // 2))


def wavelengths(d_model: int) -> list[float]:
    """The wavelength, in positions, of each column pair: 2π · 10000^(2i/d_model)."""
    return [2 * math.pi * 10000 ** (2 * i / d_model) for i in range(d_model // 2)]
