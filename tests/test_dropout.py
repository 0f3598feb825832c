"""tformer.fast.dropout: the fast CPU mask drops at the asked rate, keeps the expectation, and matches F.dropout's contract;
the attention function that uses it on the weights."""

import sys

import pytest
import torch
import torch.nn.functional as F

from tformer.fast.dropout import Dropout, dropout, fast_cpu_multiplier


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5])
def test_rate_and_scale_on_every_lane(p):
    torch.manual_seed(0)
    m = fast_cpu_multiplier(torch.Size([1000, 1000]), p)
    q = round(p * 65536)
    scale = 65536 / (65536 - q)
    values = torch.unique(m).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(scale, rel=1e-7)
    dropped = (m == 0).view(-1).float()
    sd = (p * (1 - p) / 2.5e5) ** 0.5  # each lane holds 250k draws
    for lane in (dropped[i::4] for i in range(4)):  # the four 16-bit lanes of each random 64-bit word
        assert abs(float(lane.mean()) - q / 65536) < 5 * sd
    assert abs(float(m.mean()) - 1.0) < 5 * scale * sd  # inverted dropout: the expectation is the input


def test_mask_is_the_lanes_of_the_generators_words():
    """An element is dropped exactly when its 16-bit lane of PyTorch's random 64-bit word, read as a signed
    int16, is below round(p·65536) − 32768."""
    torch.manual_seed(11)
    m = fast_cpu_multiplier(torch.Size([999]), 0.3)
    torch.manual_seed(11)
    words = torch.empty(250, dtype=torch.int64).random_(-(2**63), None).tolist()
    shifts = (0, 16, 32, 48) if sys.byteorder == "little" else (48, 32, 16, 0)  # memory order of the int16 lanes
    unsigned = [(w % 2**64) >> s & 0xFFFF for w in words for s in shifts][:999]
    signed = [u - 65536 if u >= 32768 else u for u in unsigned]  # what the int16 view holds
    assert torch.equal(m == 0, torch.tensor(signed) < round(0.3 * 65536) - 32768)


def test_odd_sizes_and_shapes():
    m = fast_cpu_multiplier(torch.Size([3, 5, 7]), 0.5)
    assert m.shape == (3, 5, 7) and m.dtype == torch.float32
    assert fast_cpu_multiplier(torch.Size([1]), 0.5).shape == (1,)


def test_identity_in_eval_and_for_p_zero():
    x = torch.randn(4, 8)
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    assert dropout(x, 0.0, training=True) is x
    assert dropout(x, 0.3, training=False) is x


def test_same_seed_same_mask_and_gradient_is_the_mask():
    x = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(5)
    y1 = Dropout(0.2).train()(x)
    torch.manual_seed(5)
    y2 = Dropout(0.2).train()(x)
    assert torch.equal(y1, y2)
    y1.sum().backward()
    kept = y1.detach() != 0
    scale = 65536 / (65536 - round(0.2 * 65536))
    assert torch.allclose(y1.detach()[kept], x.detach()[kept] * scale)
    assert torch.equal(x.grad, kept.float() * scale)  # d(sum)/dx = the multiplier


def test_the_reference_kernel_is_torch_dropout():
    from torch import nn

    from tformer.fast import use_reference

    x = torch.randn(128, 128)
    back = use_reference(nn.Sequential(Dropout(0.1)))[0]
    assert type(back) is nn.Dropout and back.p == 0.1
    torch.manual_seed(3)
    ours = back.train()(x)
    torch.manual_seed(3)
    assert torch.equal(ours, F.dropout(x, 0.1, training=True))


def test_rates_the_lanes_cannot_resolve_fall_back_to_torch():
    x = torch.randn(1000)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros(1000))  # as F.dropout: everything dropped
    torch.manual_seed(0)
    tiny = Dropout(1e-6).train()(x)
    torch.manual_seed(0)
    assert torch.equal(tiny, F.dropout(x, 1e-6, training=True))


def test_bad_rate_is_refused():
    with pytest.raises(ValueError, match="p must be in"):
        fast_cpu_multiplier(torch.Size([4]), 1.0)
    with pytest.raises(ValueError, match="rounds to 1"):
        fast_cpu_multiplier(torch.Size([4]), 1 - 1e-7)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_dropout_on_the_cpu_uses_the_fast_mask_on_the_weights(causal):
    from tformer.fast.dropout import scaled_dot_product_attention
    from tformer.nn import attention
    from tformer.nn.masks import causal_mask

    q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)  # (B=2, H=4, T=5, Dh=8) each
    torch.manual_seed(7)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=causal)
    scores = q @ k.transpose(-2, -1) / 8**0.5
    if causal:
        scores = scores.masked_fill(~causal_mask(5, 5), float("-inf"))
    torch.manual_seed(7)
    keep = fast_cpu_multiplier(torch.Size([2, 4, 5, 5]), 0.25)  # the same draws, on the (B, H, Tq, Tk) weights
    assert torch.allclose(out, (torch.softmax(scores, -1) * keep) @ v, atol=1e-6)
    assert (keep == 0).any() and (keep != 0).any()
    torch.manual_seed(7)  # the plain function of tformer.nn: PyTorch's own kernel and mask, same seed, same result
    ours = attention.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=causal)
    torch.manual_seed(7)
    assert torch.equal(ours, F.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=causal))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bfloat16_under_autocast_takes_the_fast_mask_with_its_scale_rounded_once(dtype):
    """bfloat16 autocast training: the same mask as float32 (the same seed drops the same elements), no
    aten::bernoulli_ (torch's one-draw-per-element mask, which the fast path replaces), and each survivor is
    x · 1/(1 − rate) rounded once to x's dtype — not x times the scale already rounded (1.1111 → 1.1094 at p = 0.1,
    0.16% too small on every survivor)."""
    x = torch.randn(200, 300).to(dtype)
    torch.manual_seed(7)
    with torch.profiler.profile() as prof:
        y = Dropout(0.1).train()(x)
    assert not [e for e in prof.events() if "bernoulli" in e.name]
    torch.manual_seed(7)
    kept = fast_cpu_multiplier(x.shape, 0.1) != 0
    assert y.dtype == dtype and torch.equal(y != 0, kept & (x != 0))
    scale = 65536 / (65536 - round(0.1 * 65536))
    assert torch.equal(y[kept], (x[kept].double() * scale).to(dtype))
    # under autocast a Linear's bfloat16 output goes through the same path, with a gradient of the mask
    w = torch.randn(300, 300, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = Dropout(0.1).train()(torch.nn.functional.linear(torch.randn(8, 300), w))
    assert h.dtype == torch.bfloat16
    h.float().sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
