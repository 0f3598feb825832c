"""Scaled dot-product attention (fused and reference paths) and multi-head attention."""

import math

import pytest
import torch

from tformer import MultiHeadAttention, hooks, scaled_dot_product_attention
from tformer.nn.masks import causal_mask, padding_mask

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _qkv(b=2, h=2, tq=4, tk=4, dh=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, t, dh, generator=g).to(dtype) for t in (tq, tk, tk))


def test_softmax_check_value_from_the_notes():
    vocab = ["bien", "Je", "vais"]
    logits = torch.tensor([45.0, 40.0, 49.0])
    probs = torch.softmax(logits, dim=-1)
    assert torch.allclose(probs, torch.tensor([0.0180, 0.0001, 0.9819]), atol=1e-4)
    assert vocab[int(probs.argmax())] == "vais"


def test_reference_path_scores_and_causal_masking():
    q, k, v = _qkv(tq=5, tk=5, dh=8)
    mask = causal_mask(5)
    out, details = scaled_dot_product_attention(q, k, v, mask, return_details=True)
    raw = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(details.scores, raw)
    assert torch.equal(details.raw_scores, q @ k.transpose(-2, -1))  # Q·Kᵀ, kept before the scaling
    assert torch.equal(details.scores, details.raw_scores / math.sqrt(8))
    above = ~causal_mask(5)[0, 0]  # strictly above the diagonal
    assert torch.all(details.masked_scores[..., above] == float("-inf"))
    assert torch.equal(details.masked_scores[..., ~above], details.scores[..., ~above])
    assert torch.all(details.weights[..., above] == 0)
    torch.testing.assert_close(details.weights.sum(-1), torch.ones(2, 2, 5))
    torch.testing.assert_close(out, details.weights @ v)
    # first query sees only the first key: its output is exactly v[0]
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])


def _padding():
    return padding_mask(torch.tensor([[3, 4, 5, 0, 0, 0], [3, 4, 5, 6, 7, 8]]), 0)  # (2, 1, 1, 6)


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "causal+padding"])
def test_fused_path_matches_reference_path(mask_name):
    q, k, v = _qkv(tq=6, tk=6)
    mask = {
        "none": None,
        "causal": causal_mask(6),
        "padding": _padding(),
        "causal+padding": causal_mask(6) & _padding(),
    }[mask_name]
    fused = scaled_dot_product_attention(q, k, v, mask)
    reference, _ = scaled_dot_product_attention(q, k, v, mask, return_details=True)
    assert (fused - reference).abs().max() <= 1e-5


@pytest.mark.parametrize("reference", [False, True], ids=["fused", "reference"])
def test_is_causal_equals_the_explicit_look_ahead_mask(reference):
    q, k, v = _qkv(tq=6, tk=6)
    flagged = scaled_dot_product_attention(q, k, v, is_causal=True, return_details=reference)
    explicit = scaled_dot_product_attention(q, k, v, causal_mask(6), return_details=reference)
    if reference:
        (flagged, details), (explicit, _) = flagged, explicit
        assert torch.all(details.weights[..., ~causal_mask(6)[0, 0]] == 0)
    assert (flagged - explicit).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="either mask or is_causal"):
        scaled_dot_product_attention(q, k, v, causal_mask(6), is_causal=True)
    # fewer queries than keys: PyTorch's fused kernel aligns them at the start, causal_mask at the end; neither is
    # guessed, in either path (they gave different numbers)
    q3, k6, v6 = _qkv(tq=3, tk=6)
    said = r"is_causal=True needs as many queries as keys, got 3 queries and 6 keys: pass mask=.*causal_mask\(3, 6\)"
    with pytest.raises(ValueError, match=said):
        scaled_dot_product_attention(q3, k6, v6, is_causal=True, return_details=reference)


def test_mask_must_be_boolean():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, causal_mask(4).float())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reference", [False, True], ids=["fused", "reference"])
def test_fully_masked_rows_are_zero_and_finite(dtype, reference):
    q, k, v = _qkv(tq=3, tk=5, dtype=dtype)
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[0, :, 1] = False  # batch 0, query 1: nothing to attend to
    mask[1] = False  # batch 1: nothing at all
    result = scaled_dot_product_attention(q, k, v, mask, return_details=reference)
    out = result[0] if reference else result
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    assert torch.all(out[0, :, 1] == 0) and torch.all(out[1] == 0)
    assert torch.any(out[0, :, 0] != 0)  # rows with keys are not zeroed
    if reference:
        weights = result[1].weights
        assert torch.isfinite(weights).all()
        assert torch.all(weights[0, :, 1] == 0) and torch.all(weights[1] == 0)
        torch.testing.assert_close(weights[0, :, 0].float().sum(-1), torch.ones(2), atol=1e-2, rtol=0)


@pytest.fixture
def mha():
    torch.manual_seed(0)
    return MultiHeadAttention(d_model=16, n_heads=4).eval()


def test_self_attention_shape_and_paths_agree(mha):
    x = torch.randn(2, 5, 16)
    out = mha(x, causal=True)
    assert out.shape == (2, 5, 16)
    with hooks.capture(mha) as cache:
        recorded = mha(x, causal=True)
    assert (out - recorded).abs().max() <= 1e-5
    assert cache["hook_weights"].shape == (2, 4, 5, 5)
    assert torch.all(cache["hook_weights"][..., ~causal_mask(5)[0, 0]] == 0)


@pytest.mark.parametrize("t", [1, 3])
def test_queries_keys_and_values_are_the_three_projections_split_into_heads(mha, t):
    """The fused (B, T, 3D) projection is read as Q, K, V views: each must be x·W_Xᵀ + b_X, heads in order."""
    x = torch.randn(2, t, 16)
    with hooks.capture(mha) as cache:
        mha(x)
    w, bias = mha.qkv_proj.weight.detach(), mha.qkv_proj.bias.detach()
    for i, got in enumerate((cache["hook_q"], cache["hook_k"], cache["hook_v"])):
        projected = x @ w[16 * i : 16 * (i + 1)].t() + bias[16 * i : 16 * (i + 1)]  # (B, T, D)
        expected = projected.view(2, t, 4, 4).transpose(1, 2)  # (B, H, T, Dh): head h = features 4h..4h+3
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_self_attention_causal_ignores_the_future(mha):
    x = torch.randn(1, 5, 16)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 16)
    assert (mha(x, causal=True)[:, :3] - mha(changed, causal=True)[:, :3]).abs().max() <= 1e-6
    assert (mha(x)[:, :3] - mha(changed)[:, :3]).abs().max() > 1e-3  # without the mask it does see it


def test_cross_attention_query_and_key_lengths_differ(mha):
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    src_mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7]), 0)
    out = mha(x, memory, mask=src_mask)
    assert out.shape == (2, 3, 16)
    # padded source positions are invisible: changing them changes nothing
    memory2 = memory.clone()
    memory2[0, 5:] = torch.randn(2, 16)
    assert (mha(x, memory2, mask=src_mask) - out).abs().max() <= 1e-6
    # Q comes from x, K/V from memory: changing memory changes the output
    assert (mha(x, torch.randn(2, 7, 16), mask=src_mask) - out).abs().max() > 1e-3


@pytest.mark.parametrize("tq", [1, 3])
def test_cross_attention_with_one_memory_row_per_group_of_rows_equals_the_repeated_memory(mha, tq):
    """Beam search: the G beams of a source share its memory (keys/values computed and cached once)."""
    from tformer.nn.cache import LayerKV

    sources, g = 2, 3
    x, memory = torch.randn(sources * g, tq, 16), torch.randn(sources, 7, 16)
    src_mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7]), 0)  # (2, 1, 1, 7)
    expected = mha(
        x, memory.repeat_interleave(g, 0), mask=src_mask.repeat_interleave(g, 0)
    )  # rows i·G … i·G + G − 1: source i
    with torch.no_grad():
        torch.testing.assert_close(mha(x, memory, mask=src_mask), expected, rtol=1e-5, atol=1e-6)
        cache = LayerKV()
        for _ in range(2):  # the second call reads the cached keys/values: one pair per source
            torch.testing.assert_close(mha(x, memory, mask=src_mask, cache=cache), expected, rtol=1e-5, atol=1e-6)
        assert cache.cross_k.shape == (sources, 4, 7, 4)
    with pytest.raises(ValueError, match="memory must have as many rows as x"):
        mha(torch.randn(5, tq, 16), memory)


def test_cross_attention_refuses_causal(mha):
    with pytest.raises(ValueError, match="causal"):
        mha(torch.randn(1, 3, 16), torch.randn(1, 3, 16), causal=True)


def test_inputs_of_another_width_are_refused_naming_the_layers_width(mha):
    """Not torch's "mat1 and mat2 shapes cannot be multiplied": the argument, its shape and the width it needs."""
    from tformer.nn.feedforward import FeedForward, GatedFeedForward

    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 16\), got \(1, 3, 8\)"):
        mha(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, 16\), got \(1, 5, 32\)"):
        mha(torch.randn(1, 3, 16), torch.randn(1, 5, 32))
    for ff in (FeedForward(16, 64), GatedFeedForward(16, 64, "swiglu")):
        assert ff(torch.randn(2, 3, 16)).shape == (2, 3, 16)
        with pytest.raises(
            ValueError, match=r"x must have shape \(\.\.\., 16\), the layer's d_model, got \(2, 3, 32\)"
        ):
            ff(torch.randn(2, 3, 32))


def test_cross_attention_refuses_query_varying_mask(mha):
    with pytest.raises(ValueError, match="cross-attention"):
        mha(torch.randn(1, 4, 16), torch.randn(1, 4, 16), mask=causal_mask(4))
    # a (B, 1, Tq, Tk) mask whose rows are all equal is fine
    mha(torch.randn(1, 4, 16), torch.randn(1, 4, 16), mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))


def test_d_model_must_divide_by_n_heads():
    with pytest.raises(ValueError, match="d_model.*n_heads"):
        MultiHeadAttention(d_model=10, n_heads=3)


def test_wrong_input_width_is_value_error(mha):
    with pytest.raises(ValueError, match=r"\(B, T, 16\)"):
        mha(torch.randn(2, 5, 8))


def test_mask_that_hides_nothing_equals_no_mask_and_a_real_one_still_counts(mha):
    x = torch.randn(2, 6, 16)
    full = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    assert torch.equal(mha(x, mask=full), mha(x))
    assert torch.equal(mha(x, mask=full, causal=True), mha(x, causal=True))
    padded = _padding()
    out = mha(x, mask=padded, causal=True)
    with hooks.capture(mha) as cache:
        recorded = mha(x, mask=padded, causal=True)
    assert (out - recorded).abs().max() <= 1e-5
    assert (out[0] - mha(x, causal=True)[0]).abs().max() > 1e-3  # row 0's padding is hidden
    assert torch.all(cache["hook_weights"][0, ..., 3:] == 0)
