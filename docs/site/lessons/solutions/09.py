"""Solutions to the exercises of lesson 9, same weights, same numbers.

tests/test_lessons.py checks them."""

from __future__ import annotations

import re

import torch
from torch import nn

RENAMES = [  # nn.Transformer's names → tformer's, applied in order
    (r"(^|\.)in_proj_(weight|bias)$", r"\1qkv_proj.\2"),
    (r"(^|\.)multihead_attn\.", r"\1cross_attn."),
    (r"(^|\.)linear([12])\.", r"\1ff.linear\2."),
    (r"(^|\.)norm([123])\.", r"\1add_norm\2.norm."),
]


def rename_torch_key(key: str) -> str:
    """The tformer name of a weight of ``nn.Transformer`` (or of one of its layers)."""
    for pattern, replacement in RENAMES:
        key = re.sub(pattern, replacement, key)
    return key


def padding_to_tformer(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """PyTorch's (B, S) key-padding mask, True = padding → tformer's (B, 1, 1, S)
    mask, True = may attend."""
    return ~key_padding_mask.bool()[:, None, None, :]


def linear_from_conv1d(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    """GPT-2's Conv1D computes x @ weight + bias with weight (in, out); nn.Linear
    computes x @ Wᵀ + b with W (out, in): the same layer with the weight transposed."""
    n_in, n_out = weight.shape
    linear = nn.Linear(n_in, n_out)
    with torch.no_grad():
        linear.weight.copy_(weight.T)
        linear.bias.copy_(bias)
    return linear
