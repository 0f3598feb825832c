"""tformer.fast.linear.Linear: nn.Linear's numbers and state dict; inside a decoding step, the weight read in the
layout the product wants (a split between the threads or Wᵀ for one row, a oneDNN-packed copy for 2 to 256 rows),
from a DecodingWeights the decoding call owns. The layer itself holds its Parameters and nothing else."""

import pytest
import torch
import torch.nn.functional as F

from tformer.fast import linear
from tformer.fast.linear import (
    FEW_ROWS,
    PACKED_MIN_WEIGHTS,
    PACKED_ROWS,
    SPLIT_MIN_COLUMNS,
    DecodingWeights,
    Linear,
    decoding_step,
    inference_layout,
    training_layout,
)


@pytest.fixture
def threads():
    """Set the number of torch threads for one test (the split of one-row products depends on it), then restore it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _step(layer: torch.nn.Module, x: torch.Tensor, weights: DecodingWeights | None = None, rows=None):
    """``layer(x)`` as a decoding step runs it (no gradients, inside ``decoding_step``); returns (y, the weights)."""
    weights = DecodingWeights() if weights is None else weights
    with torch.no_grad(), decoding_step(weights):
        y = layer(x) if rows is None else layer.forward_rows(x, *rows)
    return y, weights


def _made(weights: DecodingWeights, layer: Linear, kind: str):
    """The layouts of ``kind`` ("transposed", "splits", "packed") ``weights`` made for ``layer``; None if none."""
    found = weights._layouts.get(layer)
    return None if found is None else getattr(found, kind)


def _layer(seed: int = 0, bias: bool = True) -> Linear:
    torch.manual_seed(seed)
    return Linear(48, 80, bias=bias)


def _big_layer(seed: int = 0) -> Linear:
    torch.manual_seed(seed)
    return Linear(128, 2 * PACKED_MIN_WEIGHTS // 128)  # twice the smallest matrix that gets the packed copy


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 5, FEW_ROWS, 64])
def test_same_numbers_as_f_linear_in_every_mode(rows, bias):
    layer = _layer(bias=bias)
    x = torch.randn(rows, 1, 48)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    with torch.inference_mode():
        outside = layer(x)  # outside a decoding step: F.linear itself
    torch.testing.assert_close(outside, expected, rtol=0, atol=0)
    torch.testing.assert_close(_step(layer, x)[0], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(x).detach(), expected, rtol=0, atol=0)  # training path: F.linear itself


def test_the_layer_holds_its_parameters_and_nothing_else_whatever_runs_through_it(threads):
    """A decoding step, a training step, an optimizer step: the layer's attributes are the same objects after as
    before, and the layouts a step read are in its DecodingWeights, not on the layer."""
    threads(2)
    layer = _big_layer()
    before = {k: (id(v), dict(v) if isinstance(v, dict) else None) for k, v in vars(layer).items()}
    _, weights = _step(layer, torch.randn(1, 128))
    _step(layer, torch.randn(5, 128), weights)
    layer(torch.randn(3, 128)).sum().backward()
    torch.optim.AdamW(layer.parameters(), lr=0.5, fused=True).step()
    assert {k: (id(v), dict(v) if isinstance(v, dict) else None) for k, v in vars(layer).items()} == before
    assert list(weights._layouts) == [layer] and _made(weights, layer, "splits")


def test_outside_a_decoding_step_nothing_is_made_and_training_is_f_linear():
    layer = _layer()
    weights = DecodingWeights()
    layer(torch.randn(1, 48)).sum().backward()  # gradients on: F.linear
    with torch.no_grad():
        layer(torch.randn(1, 48))  # no decoding step: F.linear
    with decoding_step(weights):
        layer(torch.randn(1, 48)).sum().backward()  # a step, but gradients on: F.linear
    assert weights._layouts == {} and linear._STEP.get() is None
    assert layer.weight.grad is not None and layer.weight.grad.shape == (80, 48)


def test_few_rows_in_a_step_read_the_transposed_weight(threads):
    threads(1)
    layer = _layer()
    _, weights = _step(layer, torch.randn(FEW_ROWS + 1, 48))  # too many rows for a small matrix: F.linear
    assert _made(weights, layer, "transposed") is None
    _step(layer, torch.randn(1, 48), weights)
    wt = _made(weights, layer, "transposed")
    assert wt.shape == (48, 80) and wt.is_contiguous()
    torch.testing.assert_close(wt, layer.weight.detach().t(), rtol=0, atol=0)
    assert wt.data_ptr() != layer.weight.data_ptr()  # PyTorch's own layout: Wᵀ is a copy, the call's


def test_the_inference_layout_makes_the_transposed_weight_a_view_and_training_puts_pytorchs_back(threads):
    """inference_layout stores the weight column-major (its values unchanged, issue 40: a model decodes in about its
    own size); the one-row product then reads Wᵀ as a view; training_layout puts the (out, in) layout back."""
    threads(1)
    layer = _layer()
    values = layer.weight.detach().clone()
    inference_layout(layer)
    assert layer.weight.t().is_contiguous() and torch.equal(layer.weight, values)
    y, weights = _step(layer, torch.randn(1, 48))
    assert _made(weights, layer, "transposed").data_ptr() == layer.weight.data_ptr()  # a view: no copy
    training_layout(layer)
    assert layer.weight.is_contiguous() and torch.equal(layer.weight, values)


def test_the_inference_layout_keeps_w_s_rows_where_the_split_reads_them(threads):
    threads(2)
    tall, wide = Linear(512, 384), Linear(64, 384)  # split by outputs (W's rows), by inputs (Wᵀ's rows)
    inference_layout(tall)
    inference_layout(wide)
    assert tall.weight.is_contiguous() and not wide.weight.is_contiguous() and wide.weight.t().is_contiguous()


def test_state_dict_is_nn_linear_s():
    layer = _layer()
    _step(layer, torch.randn(1, 48))
    plain = torch.nn.Linear(48, 80)
    assert list(layer.state_dict()) == list(plain.state_dict()) == ["weight", "bias"]
    plain.load_state_dict(layer.state_dict())  # interchangeable both ways
    x = torch.randn(3, 48)
    torch.testing.assert_close(plain(x), layer(x), rtol=0, atol=0)


def test_forward_rows_is_a_slice_of_the_output():
    layer = _layer()
    x = torch.randn(2, 3, 48)
    full = F.linear(x, layer.weight, layer.bias).detach()
    torch.testing.assert_close(layer.forward_rows(x, 16, 48).detach(), full[..., 16:48], rtol=0, atol=0)
    got, _ = _step(layer, x[:1, :1], rows=(16, 48))
    torch.testing.assert_close(got, full[:1, :1, 16:48], rtol=1e-5, atol=1e-6)


def test_a_step_in_inference_mode_gives_ordinary_tensors_to_no_grad_code():
    layer = _layer()
    x = torch.randn(1, 48)
    weights = DecodingWeights()
    with torch.inference_mode(), decoding_step(weights):
        layer(x)
    out, _ = _step(layer, x, weights)  # the layouts made in inference mode serve a no_grad step too
    out = out + 1
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias).detach() + 1, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
@pytest.mark.parametrize("rows", [2, 5, 32, 64, 160])
def test_two_to_256_rows_use_the_onednn_packed_copy_with_the_same_numbers(rows):
    layer = _big_layer()
    x = torch.randn(rows, 1, 128)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    with torch.inference_mode():  # outside a decoding step (a prompt, an encoder): F.linear's
        torch.testing.assert_close(layer(x), expected, rtol=0, atol=0)
    got, weights = _step(layer, x)
    rows_only, _ = _step(layer, x, weights, rows=(100, 1500))  # W[100:1500] is big enough for a packing of its own
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows_only, expected[..., 100:1500], rtol=1e-5, atol=1e-5)
    hint = 1 << max(rows - 1, 1).bit_length()  # packings are shared by row counts up to the next power of two
    assert set(_made(weights, layer, "packed")) == {(0, 2048, hint), (100, 1500, hint)}


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
def test_the_packed_copy_stays_out_of_one_row_too_many_rows_and_small_matrices(threads):
    threads(1)
    layer = _big_layer()
    _, weights = _step(layer, torch.randn(1, 128))  # one row, one thread: Wᵀ
    _step(layer, torch.randn(PACKED_ROWS[1] + 1, 128), weights)  # too many rows: F.linear
    assert not _made(weights, layer, "packed") and _made(weights, layer, "transposed") is not None
    small = Linear(48, 80)  # too small a matrix for packing
    _step(small, torch.randn(5, 48), weights)
    assert not _made(weights, small, "packed") and _made(weights, small, "transposed") is not None


def test_without_onednn_few_rows_fall_back_to_the_transposed_weight(monkeypatch):
    monkeypatch.setattr(linear, "_ONEDNN", False)
    layer = _big_layer()
    x = torch.randn(5, 128)
    got, weights = _step(layer, x)
    assert not _made(weights, layer, "packed") and _made(weights, layer, "transposed") is not None
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
def test_packings_are_bounded_and_the_oldest_goes_first():
    layer = _big_layer()
    weights = DecodingWeights()
    for rows in (2, 5, 20, 40, 100):  # buckets 2, 8, 32, 64, 128
        assert _step(layer, torch.randn(rows, 128), weights)[0].shape == (rows, 2048)
    assert list(_made(weights, layer, "packed")) == [(0, 2048, 32), (0, 2048, 64), (0, 2048, 128)]
    assert linear.MAX_PACKINGS == 3


# (in, out) with 2 threads: wide (in < out / 2) is split by inputs, tall by outputs; 1001 outputs pad the last block,
# and an odd input width cannot be split by inputs
@pytest.mark.parametrize(
    "in_features, out_features, by_inputs, padded",
    [
        (64, 384, True, False),
        (64, 1001, True, False),
        (63, 1001, False, True),
        (512, 384, False, False),
        (512, 1001, False, True),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (1,), ()])
def test_one_row_is_split_between_the_threads_with_the_same_numbers(
    threads, in_features, out_features, by_inputs, padded, bias, shape
):
    threads(2)
    torch.manual_seed(0)
    layer = Linear(in_features, out_features, bias=bias)
    x = torch.randn(*shape, in_features)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    width = 2 * SPLIT_MIN_COLUMNS
    got, weights = _step(layer, x)
    slice_of_it, _ = _step(layer, x, weights, rows=(10, 10 + width))  # e.g. W_Q of a fused W_Q/W_K/W_V
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(slice_of_it, expected[..., 10 : 10 + width], rtol=1e-5, atol=1e-5)
    splits = _made(weights, layer, "splits")
    assert set(splits) == {(0, out_features, 2), (10, 10 + width, 2)}
    split = splits[(0, out_features, 2)]
    assert split.by_inputs == by_inputs and split.padded == padded
    assert (split.bias is None) == (not bias)
    w = layer.weight.detach()
    if by_inputs:  # (2, in/2, out): halves of Wᵀ, the bias added once
        assert split.blocks.shape == (2, in_features // 2, out_features)
        torch.testing.assert_close(split.blocks[1], w[:, in_features // 2 :].t(), rtol=0, atol=0)
        assert split.blocks.data_ptr() == _made(weights, layer, "transposed").data_ptr()  # a view, not one more copy
        if bias:
            torch.testing.assert_close(split.bias[:, 0], torch.stack([layer.bias.detach(), torch.zeros(out_features)]))
    else:  # (2, in, C): the weight's own rows, transposed, where no padding is needed
        columns = -(-out_features // 2)
        assert split.blocks.shape == (2, in_features, columns)
        torch.testing.assert_close(split.blocks[0], w[:columns].t(), rtol=0, atol=0)
        assert (split.blocks.data_ptr() == w.data_ptr()) == (not padded)
        assert _made(weights, layer, "transposed") is None
        tall_slice = splits[(10, 10 + width, 2)]
        assert tall_slice.blocks.data_ptr() == w[10].data_ptr() and not tall_slice.padded  # rows 10:266, in place


def test_the_splits_follow_the_threads_and_stay_out_of_small_matrices_and_several_rows(threads):
    layer = Linear(64, 4 * SPLIT_MIN_COLUMNS)
    x = torch.randn(1, 64)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    weights = DecodingWeights()
    for n in (1, 2, 4, 8):
        threads(n)
        torch.testing.assert_close(_step(layer, x, weights)[0], expected, rtol=1e-5, atol=1e-5)
    # one thread: Wᵀ whole; 2 and 4 threads: split that many ways; 8 threads: no thinner than the minimum
    assert list(_made(weights, layer, "splits")) == [(0, 4 * SPLIT_MIN_COLUMNS, 2), (0, 4 * SPLIT_MIN_COLUMNS, 4)]
    assert _made(weights, layer, "transposed") is not None
    small = Linear(64, 2 * SPLIT_MIN_COLUMNS - 1)  # too few outputs for two threads
    _step(small, x, weights)
    _step(layer, torch.randn(3, 64), weights)  # several rows: not split
    assert not _made(weights, small, "splits") and _made(weights, small, "transposed") is not None
    assert len(_made(weights, layer, "splits")) == 2


def test_a_weight_made_in_inference_mode_decodes_with_the_same_numbers(threads):
    threads(2)
    with torch.inference_mode():
        layer = Linear(64, 4 * SPLIT_MIN_COLUMNS)
    for rows in (1, 5):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(_step(layer, x)[0], F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_a_wrong_input_width_gets_nn_linear_s_error_in_every_mode(threads, rows):
    threads(2)
    layer, plain = Linear(64, 4 * SPLIT_MIN_COLUMNS), torch.nn.Linear(64, 4 * SPLIT_MIN_COLUMNS)
    x = torch.randn(rows, 65)
    with pytest.raises(RuntimeError) as expected:
        plain(x)
    with pytest.raises(RuntimeError) as got:
        _step(layer, x)
    assert str(got.value) == str(expected.value)


# Every way a weight can change between two decoding calls. The layouts are the call's, so the next call reads the
# weight as it is now, whatever changed it: no version counter, optimizer hook or change of mode is needed (PyTorch's
# fused AdamW and SGD leave the version counter as it was; a write through NumPy is seen by nothing at all).
def _fused_adamw_step(layer):
    layer(torch.randn(3, 128)).pow(2).sum().backward()
    torch.optim.AdamW(layer.parameters(), lr=0.5, fused=True).step()


def _fused_sgd_step(layer):
    layer(torch.randn(3, 128)).pow(2).sum().backward()
    torch.optim.SGD(layer.parameters(), lr=0.5, fused=True).step()


def _foreach_adamw_step(layer):
    layer(torch.randn(3, 128)).pow(2).sum().backward()
    torch.optim.AdamW(layer.parameters(), lr=0.5, foreach=True).step()


def _numpy_write(layer):
    layer.weight.detach().numpy().__iadd__(0.25)


def _load_state_dict(layer):
    layer.load_state_dict(_big_layer(seed=1).state_dict())


def _new_bias(layer):
    layer.bias = torch.nn.Parameter(torch.randn(layer.out_features))


CHANGES = [_fused_adamw_step, _fused_sgd_step, _foreach_adamw_step, _numpy_write, _load_state_dict, _new_bias]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("rows", [1, 5, 32])  # the split (2 threads), Wᵀ or the packed copy
@pytest.mark.parametrize("layout", ["training", "inference"])
def test_the_next_decoding_call_reads_the_weight_as_it_is_now_whatever_changed_it(change, rows, layout, threads):
    threads(2)
    layer = _big_layer().eval()
    if layout == "inference":
        inference_layout(layer)
    x = torch.randn(rows, 128)
    before, _ = _step(layer, x)
    change(layer)
    after, _ = _step(layer, x)  # a new call: a new DecodingWeights
    assert not torch.allclose(before, after)  # the change did change the product
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-4, atol=1e-4)


def test_tformer_load_reads_the_weights_straight_into_decodings_layout(tmp_path, monkeypatch):
    """tformer.load (fast) allocates each Wᵀ-reading weight column-major before the file is read, and reads the file's
    rows into it a block at a time (no whole copy of a matrix after the load): the same values as a load with the
    reference kernels, bit for bit, in the layout inference_layout chooses."""
    import tformer
    from tformer import GPT, GPTConfig
    from tformer.models import loading

    monkeypatch.setattr(loading, "_ROWS_BYTES", 1000)  # many blocks, the last one short
    torch.manual_seed(0)
    GPT(GPTConfig.preset("tiny", vocab_size=301, max_len=32)).save_pretrained(tmp_path)
    plain, fast = tformer.load(tmp_path, fast=False).model, tformer.load(tmp_path).model
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), fast.state_dict().values()))
    laid_out = [n for n, p in fast.named_parameters() if p.dim() == 2 and not p.is_contiguous()]
    assert laid_out and "embed.token.weight" in laid_out  # the table tied to the head: 301 rows, not a multiple
    for name, module in fast.named_modules():
        if isinstance(module, Linear) and min(module.weight.shape) > 1:
            wanted = linear.reads_transposed(module, torch.get_num_threads())
            assert module.weight.t().is_contiguous() == wanted, name  # what inference_layout chooses
    assert all(p.is_contiguous() for p in plain.parameters())
