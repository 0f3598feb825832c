"""The output projection and the cross-entropy together, a chunk of positions at a time: the (N, V) logits are never
held whole, in float32 or otherwise (issue 48; Liger-Kernel's "fused linear cross entropy" does the same on GPUs).

A language model's largest tensors in training are its logits: GPT-2's 8 × 1024 positions × 50,257 words are 1.6 GB in
float32, with as much again for their gradient. :func:`linear_cross_entropy` takes the final hidden states (N, D) and
the output weight (V, D) instead, and for each chunk of ``rows`` positions

    z = h W^T (r, V)  [· softcap]  →  the chunk's summed loss
    g = softmax(z) − (1 − ε) onehot(y) − ε / V  (0 for an ignored position)  →  ∂h = g W,  ∂W += gᵀ h

so the gradient is computed in the forward pass, chunk by chunk, and the backward only scales it by the incoming
gradient (a scalar: the loss is a sum). Peak memory: one chunk's logits and the gradients of h and W, instead of
the whole logits and their gradient. The arithmetic is the same as the projection then
:func:`tformer.nn.losses.sequence_cross_entropy` (under autocast the products in its dtype, the softmax in float32);
``tests/test_chunked_loss.py`` checks the loss and both gradients against it.

Dimension legend: N positions, D model dim, V vocabulary size, r rows of a chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["LOGITS_AT_ONCE", "ALIGNED", "chunk_rows", "plain_head", "linear_cross_entropy"]

LOGITS_AT_ONCE = 1 << 25  # logits computed at once at most (r × V): 128 MB in float32
# the devices whose products take a padded head's every row (its matrix tiles want the aligned count); elsewhere the
# words' rows only
ALIGNED = ("cuda",)


def plain_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """``model.output`` where :func:`linear_cross_entropy` can take its place: a plain projection without a bias (not
    LoRA's, not one with a bias); None otherwise (the model's own logits, whole)."""
    output = getattr(model, "output", None)
    return output if isinstance(output, torch.nn.Linear) and output.bias is None else None


def chunk_rows(positions: int, vocab_size: int) -> int | None:
    """The rows a chunk of :func:`linear_cross_entropy` takes for a batch of ``positions`` over ``vocab_size`` words;
    None where the whole logits fit :data:`LOGITS_AT_ONCE` (no chunks: the plain loss)."""
    if positions * vocab_size <= LOGITS_AT_ONCE:
        return None
    return max(LOGITS_AT_ONCE // vocab_size, 1)


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    rows: int,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    classes: int | None = None,
) -> torch.Tensor:
    """The summed cross-entropy of ``hidden`` (..., D) projected by ``weight`` (V, D) (no bias), against ``labels``
    (...), ``rows`` positions at a time; ``softcap``: the logits capped as ``softcap · tanh(z / softcap)`` first.
    ``classes``: the first rows of ``weight`` that are words (a head padded to a multiple of rows, ``GPTConfig.
    vocab_multiple``): the others' logits are left out, as the model cuts them off; None: every row."""
    flat = hidden.reshape(-1, hidden.shape[-1])  # (N, D)
    classes = weight.shape[0] if classes is None else classes
    return _LinearCrossEntropy.apply(
        flat, weight, labels.reshape(-1), rows, ignore_index, label_smoothing, softcap, classes
    )


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, rows, ignore_index, smoothing, softcap, vocab):  # type: ignore[override]
        n = hidden.shape[0]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if hidden.requires_grad else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if weight.requires_grad else None
        kind = hidden.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype
        # the rows multiplied: a GPU's every row, padding included (GPTConfig.vocab_multiple: its matrix tiles want the
        # aligned count), their logits then cut off; a CPU's the words' only (no tiles to fill: no copies to cut)
        used = weight.shape[0] if kind in ALIGNED else vocab
        w = weight[:used].to(dtype)  # (U, D) once, in the products' dtype (autocast's, as the projection's)
        for start in range(0, n, rows):
            h, y = hidden[start : start + rows].to(dtype), labels[start : start + rows]  # (r, D), (r,)
            z = F.linear(h, w)  # (r, U)
            if used != vocab:
                z = z[:, :vocab]  # (r, V)
            capped = None
            if softcap is not None:
                capped = torch.tanh(z.float() / softcap)
                z = softcap * capped
            lsm = torch.log_softmax(z, -1, dtype=torch.float32)  # (r, V), float32 whatever the products' dtype
            del z
            real = y != ignore_index
            target = y.where(real, 0)[:, None]  # (r, 1)
            loss = -lsm.gather(1, target).squeeze(1)  # (r,)
            if smoothing:
                loss = (1.0 - smoothing) * loss - smoothing * lsm.mean(-1)
            total += (loss * real).sum()
            g = lsm.exp_()  # (r, V) the softmax, in place; then minus the target distribution
            g.scatter_add_(1, target, torch.full_like(target, smoothing - 1.0, dtype=g.dtype))
            if smoothing:
                g -= smoothing / vocab
            if capped is not None:
                g *= 1.0 - capped * capped
            g = g.to(dtype)  # an ignored position's row is not 0 here: its products are masked below, (r, D) not (r, V)
            if used != vocab:
                g = F.pad(g, (0, used - vocab))  # (r, U): the padding rows' gradient 0
            keep = real[:, None].to(dtype)  # (r, 1)
            if grad_hidden is not None:
                grad_hidden[start : start + rows] = (g @ w) * keep
            if grad_weight is not None:
                grad_weight[:used] += g.t() @ (h * keep)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):  # type: ignore[override]
        grad_hidden, grad_weight = ctx.saved_tensors
        gh = None if grad_hidden is None else grad_hidden * grad_total.to(grad_hidden.dtype)
        gw = None if grad_weight is None else (grad_weight * grad_total).to(ctx.weight_dtype)
        return gh, gw, None, None, None, None, None, None
