"""Solutions to the exercises of lesson 10, from 2017 to today's decoders.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / √(mean(x²) + eps) · weight over the last dimension: no centring, no shift."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(v: torch.Tensor, position: int, base: float = 10000.0) -> torch.Tensor:
    """RoPE on one vector (Dh,), "rotate half" layout: the pair (v_i, v_{i+Dh/2}) is
    turned by the angle position · base^(−2i/Dh)."""
    half = v.shape[-1] // 2
    i = torch.arange(half, dtype=torch.float32)
    angle = position * base ** (-2 * i / v.shape[-1])  # (Dh/2,)
    first, second = v[:half], v[half:]
    cos, sin = angle.cos(), angle.sin()
    return torch.cat([first * cos - second * sin, first * sin + second * cos])


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, head_dim: int, positions: int, bytes_per_number: int
) -> int:
    """Keys and values (2) of every layer, key/value head and position."""
    return 2 * n_layers * n_kv_heads * head_dim * positions * bytes_per_number
