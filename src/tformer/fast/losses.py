"""``sequence_cross_entropy`` with a fused backward: the training loss of the tasks.

The plain loss (:func:`tformer.nn.losses.sequence_cross_entropy`, ``F.cross_entropy`` on the flattened
positions) gets its gradient

    ∂loss/∂logits = softmax(logits) − (1 − ε) · onehot(y) − ε / V

in three steps over the whole (N, V) logits: a zero-filled (N, V) gradient of the picked entries, the
label-smoothing term, then the backward of ``log_softmax``. On the CPU, in training, :func:`sequence_cross_entropy`
here writes it in one go from the saved ``lsm = log_softmax(logits)`` instead (``exp``, subtract at the targets,
scale each row; :class:`_CrossEntropy`): the same numbers to float rounding, fewer passes over a tensor that is
33 MB for 1,024 tokens × 8,000 words. Everywhere else (no gradient, ``reduction="none"``, GPUs,
``torch.compile``, inside :func:`reference`) it is the plain loss. ``python -m benchmarks.train_step`` times
both ("tformer, reference paths").

Dimension legend: B batch, T length, V vocabulary size, N = B·T rows.
"""

from __future__ import annotations

import torch

from tformer.nn import losses

__all__ = ["sequence_cross_entropy"]


def sequence_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """:func:`tformer.nn.losses.sequence_cross_entropy` (same arguments, same result) with the fused CPU backward."""
    losses.check_loss_arguments(logits, labels, label_smoothing, reduction)
    if reduction == "none" or not _uses_fused(logits):
        return losses.sequence_cross_entropy(logits, labels, ignore_index, label_smoothing, reduction)
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()  # (B, T, V) -> (N, V)
    flat_labels = labels.reshape(-1)  # (B, T) -> (N,)
    try:  # the gather of the targets checks their range, so the labels are not read before (issue 48)
        return _CrossEntropy.apply(flat_logits, flat_labels, ignore_index, label_smoothing, reduction == "mean")
    except RuntimeError:
        _check_labels(flat_labels, ignore_index, flat_logits.shape[-1])  # a bad label: say which
        raise


def _uses_fused(logits: torch.Tensor) -> bool:
    return (
        logits.device.type == "cpu"
        and logits.requires_grad
        and torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
    )


def _check_labels(labels: torch.Tensor, ignore_index: int, n_classes: int) -> None:
    outside = ((labels < 0) | (labels >= n_classes)) & (labels != ignore_index)
    if not outside.any():  # one read of the values
        return
    bad = int(labels[outside][0])
    raise ValueError(f"labels contain class {bad}, outside [0, {n_classes}) (and not ignore_index={ignore_index})")


class _CrossEntropy(torch.autograd.Function):
    """Cross-entropy whose backward writes softmax − smoothed one-hot directly (see the module docstring)."""

    @staticmethod
    def forward(ctx, logits, labels, ignore_index: int, smoothing: float, mean: bool):  # (N, V), (N,)
        lsm = torch.log_softmax(logits, dim=-1)  # (N, V)
        real = labels != ignore_index  # (N,)
        targets = labels.masked_fill(~real, 0)[:, None]  # (N,) -> (N, 1); ignored rows point anywhere, weighted 0
        per_row = -lsm.gather(1, targets).squeeze(1)  # −log p(target): (N, 1) -> (N,)
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
        row_scale = real.to(lsm.dtype)[:, None] * scale  # (N,) -> (N, 1): 0 for ignored rows
        grad = lsm.exp()  # softmax: (N, V)
        if ctx.smoothing:
            grad.sub_(ctx.smoothing / lsm.shape[-1])
        grad.scatter_add_(1, targets, torch.full_like(row_scale, -(1.0 - ctx.smoothing)))
        return grad.mul_(row_scale), None, None, None, None
