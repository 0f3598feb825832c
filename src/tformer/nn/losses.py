"""Losses: cross-entropy over the vocabulary, averaged over real tokens only.

Label smoothing (ε) spreads ε of the target probability over the vocabulary, as in the paper
(ε = 0.1). Padding positions (``ignore_index``) contribute nothing.

With the log-probabilities ``lsm = log_softmax(logits)`` of one row, its target ``y`` and V classes:

    loss = (1 − ε) · (−lsm[y]) + ε · mean_j(−lsm[j])
    ∂loss/∂logits = softmax(logits) − (1 − ε) · onehot(y) − ε / V

PyTorch's ``F.cross_entropy`` gets that gradient in three steps over the whole (N, V) logits: a
zero-filled (N, V) gradient of the picked entries, the label-smoothing term, then the backward of
``log_softmax``. On the CPU, in training, :func:`sequence_cross_entropy` writes it in one go from the saved
``lsm`` instead (``exp``, subtract at the targets, scale each row; :class:`_CrossEntropy`): the same
numbers to float rounding, fewer passes over a tensor that is 33 MB for 1,024 tokens × 8,000 words. Everywhere
else (no gradient, GPUs, ``torch.compile``, inside :func:`reference`) it is exactly ``F.cross_entropy``.

Dimension legend: B batch, T length, V vocabulary size, N = B·T rows.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

__all__ = ["sequence_cross_entropy", "reference"]

_USE_FUSED = True


@contextlib.contextmanager
def reference():
    """Within this block :func:`sequence_cross_entropy` runs ``F.cross_entropy`` (for A/B benchmarks and tests)."""
    global _USE_FUSED
    previous, _USE_FUSED = _USE_FUSED, False
    try:
        yield
    finally:
        _USE_FUSED = previous


def sequence_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean"
) -> torch.Tensor:
    """``logits`` (B, T, V), ``labels`` (B, T) → loss averaged (``"mean"``) or summed (``"sum"``) over non-ignored
    tokens, or one loss per token (``"none"``, (B·T,), 0 where ignored)."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits (B, T, V) {tuple(logits.shape)} and labels (B, T) {tuple(labels.shape)} do not match")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()  # (N, V)
    flat_labels = labels.reshape(-1)  # (N,)
    if reduction != "none" and _uses_fused(flat_logits):
        _check_labels(flat_labels, ignore_index, flat_logits.shape[-1])
        return _CrossEntropy.apply(flat_logits, flat_labels, ignore_index, label_smoothing, reduction == "mean")
    return F.cross_entropy(flat_logits, flat_labels, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)


def _uses_fused(logits: torch.Tensor) -> bool:
    return (_USE_FUSED and logits.device.type == "cpu" and logits.requires_grad and torch.is_grad_enabled()
            and not torch.compiler.is_compiling())


def _check_labels(labels: torch.Tensor, ignore_index: int, n_classes: int) -> None:
    real = labels[labels != ignore_index]
    if real.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(real))  # one pass, one sync
    if lo < 0 or hi >= n_classes:
        bad = hi if hi >= n_classes else lo
        raise ValueError(f"labels contain class {bad}, outside [0, {n_classes}) (and not ignore_index={ignore_index})")


class _CrossEntropy(torch.autograd.Function):
    """Cross-entropy whose backward writes softmax − smoothed one-hot directly (see the module docstring)."""

    @staticmethod
    def forward(ctx, logits, labels, ignore_index: int, smoothing: float, mean: bool):  # (N, V), (N,)
        lsm = torch.log_softmax(logits, dim=-1)  # (N, V)
        real = labels != ignore_index  # (N,)
        targets = labels.masked_fill(~real, 0)[:, None]  # (N, 1); ignored rows point anywhere, weighted 0
        per_row = -lsm.gather(1, targets).squeeze(1)  # −log p(target): (N,)
        if smoothing:
            per_row = (1.0 - smoothing) * per_row - smoothing * lsm.mean(dim=-1)
        loss = per_row.masked_fill(~real, 0.0).sum()
        n_real = real.sum()
        if mean:
            loss = loss / n_real  # 0 / 0 = NaN when every label is ignored, as F.cross_entropy
        ctx.save_for_backward(lsm, targets, real, n_real)
        ctx.smoothing, ctx.mean = smoothing, mean
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        lsm, targets, real, n_real = ctx.saved_tensors
        scale = grad_loss / n_real if ctx.mean else grad_loss
        row_scale = real.to(lsm.dtype)[:, None] * scale  # (N, 1): 0 for ignored rows
        grad = lsm.exp()  # softmax: (N, V)
        if ctx.smoothing:
            grad.sub_(ctx.smoothing / lsm.shape[-1])
        grad.scatter_add_(1, targets, torch.full_like(row_scale, -(1.0 - ctx.smoothing)))
        return grad.mul_(row_scale), None, None, None, None
