"""Losses: cross-entropy over the vocabulary, averaged over real tokens only.

Label smoothing (ε) spreads ε of the target probability over the vocabulary, as in the paper
(ε = 0.1). Padding positions (``ignore_index``) contribute nothing.

With the log-probabilities ``lsm = log_softmax(logits)`` of one row, its target ``y`` and V classes:

    loss = (1 − ε) · (−lsm[y]) + ε · mean_j(−lsm[j])

This is ``F.cross_entropy`` on the flattened positions. ``tformer.fast.losses.sequence_cross_entropy`` (the
training loss of the tasks) computes the same with a cheaper backward on the CPU.

Dimension legend: B batch, T length, V vocabulary size, N = B·T rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["sequence_cross_entropy", "check_loss_arguments"]


def sequence_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``logits`` (B, T, V), ``labels`` (B, T) → loss averaged (``"mean"``) or summed (``"sum"``) over non-ignored
    tokens, or one loss per token (``"none"``, (B·T,), 0 where ignored)."""
    check_loss_arguments(logits, labels, label_smoothing, reduction)
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()  # (B, T, V) -> (N, V)
    flat_labels = labels.reshape(-1)  # (B, T) -> (N,)
    return F.cross_entropy(
        flat_logits, flat_labels, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction
    )


def check_loss_arguments(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float, reduction: str) -> None:
    """Clear errors for mismatched shapes, an unknown reduction or a smoothing outside [0, 1]."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits (B, T, V) {tuple(logits.shape)} and labels (B, T) {tuple(labels.shape)} do not match")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
