"""Losses: tformer.nn.losses.sequence_cross_entropy is F.cross_entropy over the flattened positions; the training loss
tformer.fast.losses.sequence_cross_entropy (fused backward on the CPU) equals it, loss and gradient."""

import pytest
import torch
import torch.nn.functional as F

from tformer.fast.losses import sequence_cross_entropy
from tformer.nn import losses as plain


def _both(logits, labels, **kw):
    """(loss, gradient) from tformer's path and from F.cross_entropy, for the same logits and a non-unit upstream grad."""
    out = []
    for fn in (
        sequence_cross_entropy,
        lambda x, y, **k: F.cross_entropy(x.reshape(-1, x.shape[-1]), y.reshape(-1), **k),
    ):
        x = logits.detach().clone().requires_grad_()
        loss = fn(x, labels, **kw)
        (loss * 0.37).backward()
        out.append((loss.detach(), x.grad))
    return out


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fused_loss_and_gradient_equal_torch(smoothing, reduction):
    torch.manual_seed(0)
    logits = torch.randn(3, 6, 40) * 3
    labels = torch.randint(0, 40, (3, 6))
    labels[0, 2:] = 0  # padding, ignored
    (ours, g_ours), (ref, g_ref) = _both(logits, labels, ignore_index=0, label_smoothing=smoothing, reduction=reduction)
    assert torch.allclose(ours, ref, rtol=1e-6, atol=1e-6)
    assert torch.allclose(g_ours, g_ref, atol=1e-7)
    assert torch.equal(g_ours[0, 2:], torch.zeros(4, 40))  # ignored positions get no gradient


def test_fused_path_is_the_one_that_ran():
    """The custom backward, not F.cross_entropy's, produced the gradient in training on the CPU."""
    x = torch.randn(2, 3, 10, requires_grad=True)
    assert (
        type(sequence_cross_entropy(x, torch.zeros(2, 3, dtype=torch.long)).grad_fn).__name__ == "_CrossEntropyBackward"
    )
    assert "NllLoss" in type(plain.sequence_cross_entropy(x, torch.zeros(2, 3, dtype=torch.long)).grad_fn).__name__
    with torch.no_grad():
        assert sequence_cross_entropy(x, torch.zeros(2, 3, dtype=torch.long)).grad_fn is None


def test_backward_twice_with_retain_graph_gives_the_same_gradient():
    x = torch.randn(2, 5, 12, requires_grad=True)
    loss = sequence_cross_entropy(x, torch.randint(0, 12, (2, 5)), label_smoothing=0.1)
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    assert torch.allclose(x.grad, 2 * first)


def test_every_label_ignored_matches_torch():
    logits = torch.randn(2, 3, 7)
    labels = torch.full((2, 3), -100)
    (mean, g), _ = _both(logits, labels)
    assert torch.isnan(mean)  # 0 / 0, as F.cross_entropy
    (total, g), _ = _both(logits, labels, reduction="sum")
    assert total == 0 and torch.equal(g, torch.zeros_like(g))


def test_low_precision_logits_get_a_gradient_of_their_dtype():
    x = torch.randn(2, 4, 9).bfloat16().requires_grad_()
    sequence_cross_entropy(x, torch.randint(0, 9, (2, 4))).backward()
    assert x.grad.dtype == torch.bfloat16


def test_bad_arguments_are_named():
    x = torch.randn(2, 3, 10, requires_grad=True)
    with pytest.raises(ValueError, match="labels contain class 10"):
        sequence_cross_entropy(x, torch.full((2, 3), 10))
    for loss in (sequence_cross_entropy, plain.sequence_cross_entropy):
        with pytest.raises(ValueError, match="do not match"):
            loss(x, torch.zeros(2, 4, dtype=torch.long))
        with pytest.raises(ValueError, match="reduction must be"):
            loss(x, torch.zeros(2, 3, dtype=torch.long), reduction="avg")
        with pytest.raises(ValueError, match="label_smoothing must be"):
            loss(x, torch.zeros(2, 3, dtype=torch.long), label_smoothing=1.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_plain_loss_is_f_cross_entropy_over_the_flattened_positions(reduction):
    """The reference of the fused loss: exactly F.cross_entropy, in training too (no custom backward)."""
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 11, requires_grad=True)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = 0
    kw = dict(ignore_index=0, label_smoothing=0.1, reduction=reduction)
    ours = plain.sequence_cross_entropy(logits, labels, **kw)
    assert "_CrossEntropy" not in type(ours.grad_fn).__name__
    torch.testing.assert_close(ours, F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), **kw), rtol=0, atol=0)
