"""Losses: cross-entropy over the vocabulary, averaged over real tokens only.

Label smoothing (ε) spreads ε of the target probability over the vocabulary, as in the paper
(ε = 0.1). Padding positions (``ignore_index``) contribute nothing.

Dimension legend: B batch, T length, V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["sequence_cross_entropy"]


def sequence_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean"
) -> torch.Tensor:
    """``logits`` (B, T, V), ``labels`` (B, T) → loss averaged (``"mean"``) or summed (``"sum"``) over non-ignored tokens."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits (B, T, V) {tuple(logits.shape)} and labels (B, T) {tuple(labels.shape)} do not match")
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),  # (B·T, V)
        labels.reshape(-1),  # (B·T,)
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )
