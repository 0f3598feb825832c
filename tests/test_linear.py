"""tformer.fast.linear.Linear: nn.Linear's numbers and state dict, with copies of the weight for inference that
are never stale: a split between the threads or a transposed copy (one row), a oneDNN-packed copy (2 to 256
rows)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from tformer.fast import linear
from tformer.fast.linear import FEW_ROWS, PACKED_MIN_WEIGHTS, PACKED_ROWS, SPLIT_MIN_COLUMNS, Linear


@pytest.fixture
def threads():
    """Set the number of torch threads for one test (the split of one-row products depends on it), then restore it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _made(layer: Linear, kind: str):
    """The copies of ``kind`` ("transposed", "splits", "packed") the layer has made; None or empty if none."""
    copies = layer.__dict__.get("_decoding_copies")
    return None if copies is None else getattr(copies, kind)


def _check_inference(layer: Linear, x: torch.Tensor, atol: float = 1e-5) -> None:
    """The layer in inference mode (whatever copy it uses) gives F.linear's numbers for its current weight and bias."""
    with torch.inference_mode():
        got = layer(x)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-5, atol=atol)


def _layer(seed: int = 0, bias: bool = True) -> Linear:
    torch.manual_seed(seed)
    return Linear(48, 80, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 5, FEW_ROWS, 64])
def test_same_numbers_as_f_linear_in_every_mode(rows, bias):
    layer = _layer(bias=bias)
    x = torch.randn(rows, 1, 48)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    with torch.inference_mode():
        fast = layer(x)
    with torch.no_grad():
        no_grad = layer(x)
    torch.testing.assert_close(fast, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(no_grad, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(x).detach(), expected, rtol=0, atol=0)  # training path: F.linear itself


def test_few_rows_in_inference_use_the_transposed_copy_and_training_does_not():
    layer = _layer()
    layer(torch.randn(1, 48)).sum().backward()  # grad enabled: plain F.linear, no copy made
    assert _made(layer, "transposed") is None
    assert layer.weight.grad is not None and layer.weight.grad.shape == (80, 48)
    with torch.no_grad():
        layer(torch.randn(FEW_ROWS + 1, 48))  # too many rows: F.linear, still no copy
    assert _made(layer, "transposed") is None
    with torch.no_grad():
        layer(torch.randn(1, 48))
    wt = layer.transposed_weight()
    assert wt.shape == (48, 80) and wt.is_contiguous()
    torch.testing.assert_close(wt, layer.weight.detach().t(), rtol=0, atol=0)


def test_the_copy_follows_optimizer_steps_load_state_dict_and_replaced_weights():
    layer = _layer()
    x = torch.randn(1, 48)
    _check_inference(layer, x, atol=1e-6)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(torch.randn(4, 48)).pow(2).sum().backward()
    opt.step()  # in-place update of the weight
    _check_inference(layer, x, atol=1e-6)
    layer.load_state_dict(_layer(seed=1).state_dict())  # in-place copy_
    _check_inference(layer, x, atol=1e-6)
    layer.weight = torch.nn.Parameter(torch.randn(80, 48))  # a new tensor
    _check_inference(layer, x, atol=1e-6)
    layer.weight.data = torch.randn(80, 48)  # new storage behind the same Parameter
    _check_inference(layer, x, atol=1e-6)


def test_state_dict_is_nn_linear_s_and_the_copy_is_not_saved():
    layer = _layer()
    with torch.no_grad():
        layer(torch.randn(1, 48))
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
    with torch.inference_mode():
        torch.testing.assert_close(layer.forward_rows(x[:1, :1], 16, 48), full[:1, :1, 16:48], rtol=1e-5, atol=1e-6)


def test_a_copy_made_in_inference_mode_serves_no_grad_calls_too():
    layer = _layer()
    x = torch.randn(1, 48)
    with torch.inference_mode():
        layer(x)
    with torch.no_grad():
        out = layer(x)
    out = out + 1  # an ordinary tensor, usable outside inference mode
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias).detach() + 1, rtol=1e-5, atol=1e-6)


def _big_layer(seed: int = 0) -> Linear:
    torch.manual_seed(seed)
    return Linear(128, 2 * PACKED_MIN_WEIGHTS // 128)  # twice the smallest matrix that gets the packed copy


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
@pytest.mark.parametrize("rows", [2, 5, 32, 64, 160])
def test_two_to_256_rows_use_the_onednn_packed_copy_with_the_same_numbers(rows):
    layer = _big_layer()
    x = torch.randn(rows, 1, 128)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    for step in (False, True):  # outside a decoding step (a prompt, an encoder) F.linear's; inside, packed
        with torch.inference_mode(), linear.decoding_step() if step else contextlib.nullcontext():
            got = layer(x)
            rows_only = layer.forward_rows(x, 100, 1500)  # W[100:1500] is big enough for a packing of its own
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rows_only, expected[..., 100:1500], rtol=1e-5, atol=1e-5)
        hint = 1 << max(rows - 1, 1).bit_length()  # packings are shared by row counts up to the next power of two
        assert set(_made(layer, "packed")) == ({(0, 2048, hint), (100, 1500, hint)} if step else set())


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
def test_the_packed_copy_follows_the_weight_and_stays_out_of_training_and_small_cases(threads):
    threads(1)
    layer = _big_layer()
    x = torch.randn(8, 128)
    layer(x).sum().backward()  # training: F.linear, no copy
    assert _made(layer, "packed") is None
    with torch.no_grad():
        layer(torch.randn(1, 128))  # one row, one thread: the transposed copy
        layer(torch.randn(PACKED_ROWS[1] + 1, 128))  # too many rows: F.linear
    assert not _made(layer, "packed") and _made(layer, "transposed") is not None
    small = Linear(48, 80)  # too small a matrix for packing
    with torch.no_grad():
        small(torch.randn(5, 48))
    assert not _made(small, "packed") and _made(small, "transposed") is not None
    _check_inference(layer, x)
    torch.optim.SGD(layer.parameters(), lr=0.5).step()  # the gradient from above changes the weight in place
    _check_inference(layer, x)
    layer.load_state_dict(_big_layer(seed=1).state_dict())
    _check_inference(layer, x)


def test_without_onednn_few_rows_fall_back_to_the_transposed_copy(monkeypatch):
    monkeypatch.setattr(linear, "_ONEDNN", False)
    layer = _big_layer()
    x = torch.randn(5, 128)
    with torch.no_grad():
        got = layer(x)
    assert not _made(layer, "packed") and _made(layer, "transposed") is not None
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
def test_packings_are_bounded_and_the_oldest_goes_first():
    layer = _big_layer()
    with torch.no_grad():
        for rows in (2, 5, 20, 40, 100):  # buckets 2, 8, 32, 64, 128
            with linear.decoding_step():
                assert layer(torch.randn(rows, 128)).shape == (rows, 2048)
    assert list(_made(layer, "packed")) == [(0, 2048, 32), (0, 2048, 64), (0, 2048, 128)]
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
    with torch.inference_mode():
        got = layer(x)
        slice_of_it = layer.forward_rows(x, 10, 10 + width)  # e.g. W_Q of a fused W_Q/W_K/W_V
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(slice_of_it, expected[..., 10 : 10 + width], rtol=1e-5, atol=1e-5)
    splits = _made(layer, "splits")
    assert set(splits) == {(0, out_features, 2), (10, 10 + width, 2)}
    split = splits[(0, out_features, 2)]
    assert split.by_inputs == by_inputs and split.padded == padded
    assert (split.bias is None) == (not bias)
    w = layer.weight.detach()
    if by_inputs:  # (2, in/2, out): halves of the transposed copy, the bias added once
        assert split.blocks.shape == (2, in_features // 2, out_features)
        torch.testing.assert_close(split.blocks[1], w[:, in_features // 2 :].t(), rtol=0, atol=0)
        assert split.blocks.data_ptr() == _made(layer, "transposed").data_ptr()  # a view, not one more copy
        if bias:
            torch.testing.assert_close(split.bias[:, 0], torch.stack([layer.bias.detach(), torch.zeros(out_features)]))
    else:  # (2, in, C): the weight's own rows, transposed, where no padding is needed
        columns = -(-out_features // 2)
        assert split.blocks.shape == (2, in_features, columns)
        torch.testing.assert_close(split.blocks[0], w[:columns].t(), rtol=0, atol=0)
        assert (split.blocks.data_ptr() == w.data_ptr()) == (not padded)
        assert _made(layer, "transposed") is None
        tall_slice = splits[(10, 10 + width, 2)]
        assert tall_slice.blocks.data_ptr() == w[10].data_ptr() and not tall_slice.padded  # rows 10:266, in place


def test_the_splits_follow_the_threads_and_stay_out_of_small_matrices_and_several_rows(threads):
    layer = Linear(64, 4 * SPLIT_MIN_COLUMNS)
    x = torch.randn(1, 64)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    for n in (1, 2, 4, 8):
        threads(n)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    # one thread: the transposed copy; 2 and 4 threads: split that many ways; 8 threads: no thinner than the minimum
    assert list(_made(layer, "splits")) == [(0, 4 * SPLIT_MIN_COLUMNS, 2), (0, 4 * SPLIT_MIN_COLUMNS, 4)]
    assert _made(layer, "transposed") is not None
    small = Linear(64, 2 * SPLIT_MIN_COLUMNS - 1)  # too few outputs for two threads
    with torch.no_grad():
        small(x)
        layer(torch.randn(3, 64))  # several rows: not split
    assert not _made(small, "splits") and _made(small, "transposed") is not None
    assert len(_made(layer, "splits")) == 2


def test_a_weight_made_in_inference_mode_gets_plain_products_and_no_copies(threads):
    threads(2)
    with torch.inference_mode():
        layer = Linear(64, 4 * SPLIT_MIN_COLUMNS)  # inference tensors: no version counter to say when a copy is stale
        for rows in (1, 5):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=0, atol=0)
        layer.weight.mul_(2.0)  # allowed in inference mode, and seen by the next product
        torch.testing.assert_close(layer(x[:1]), F.linear(x[:1], layer.weight, layer.bias), rtol=0, atol=0)
    assert "_decoding_copies" not in layer.__dict__


@pytest.mark.parametrize("in_features", [64, 256])  # split by inputs, by outputs
def test_the_splits_follow_changes_of_the_weight_and_of_the_bias_alone(threads, in_features):
    threads(2)
    torch.manual_seed(0)
    layer = Linear(in_features, 2 * SPLIT_MIN_COLUMNS)
    x = torch.randn(1, in_features)
    _check_inference(layer, x)
    with torch.no_grad():
        layer.bias.add_(1.0)  # the bias alone, in place
    _check_inference(layer, x)
    layer.bias = torch.nn.Parameter(torch.randn(2 * SPLIT_MIN_COLUMNS))  # a new bias tensor
    _check_inference(layer, x)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    _check_inference(layer, x)
    layer.load_state_dict(Linear(in_features, 2 * SPLIT_MIN_COLUMNS).state_dict())
    _check_inference(layer, x)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_a_wrong_input_width_gets_nn_linear_s_error_in_every_mode(threads, rows):
    threads(2)
    layer, plain = Linear(64, 4 * SPLIT_MIN_COLUMNS), torch.nn.Linear(64, 4 * SPLIT_MIN_COLUMNS)
    x = torch.randn(rows, 65)
    with pytest.raises(RuntimeError) as expected:
        plain(x)
    with torch.inference_mode(), pytest.raises(RuntimeError) as got:
        layer(x)
    assert str(got.value) == str(expected.value)


# Every way a weight can change, and which of the Linear's signals sees it: a test per signal, each alone (the others
# do not fire in its sequence), so that removing any one of them fails its test. ``prepare`` runs before the copies
# are made (a backward, say), ``change`` after them; the copies must then be remade from the new weight.
def _fused_adamw_step(layer):  # PyTorch's fused AdamW leaves the version counter as it was (torch 2.13, CPU)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.5, fused=True)
    return lambda: opt.step()


def _fused_sgd_step(layer):
    opt = torch.optim.SGD(layer.parameters(), lr=0.5, fused=True)
    return lambda: opt.step()


def _foreach_adamw_step(layer):
    opt = torch.optim.AdamW(layer.parameters(), lr=0.5, foreach=True)
    return lambda: opt.step()


def _loop_adam_step(layer):
    opt = torch.optim.Adam(layer.parameters(), lr=0.5, foreach=False)
    return lambda: opt.step()


def _weight_decay_alone(layer):  # a step with zero gradients and no forward at all: only weight decay moves the weight
    for p in layer.parameters():
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.5, weight_decay=0.5, fused=True)
    return lambda: opt.step()


def _numpy_write(layer):  # no version bump, no optimizer: only a training forward or a change of mode can tell
    return lambda: layer.weight.detach().numpy().__iadd__(0.25)


OPTIMIZER_STEPS = [_fused_adamw_step, _fused_sgd_step, _foreach_adamw_step, _loop_adam_step, _weight_decay_alone]


def _decode(layer, x):
    with torch.no_grad(), linear.decoding_step():  # as the decoding loop runs a step
        return layer(x)


@pytest.mark.parametrize("make_step", OPTIMIZER_STEPS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("rows", [1, 5, 32])  # the split (2 threads) or transposed copy; the packed copy
def test_an_optimizer_step_between_two_decodings_drops_the_copies_whatever_the_optimizer(make_step, rows, threads):
    threads(2)
    layer = _big_layer().eval()
    layer(torch.randn(3, 128)).pow(2).sum().backward()  # the gradients first: no training forward after the copies
    step = make_step(layer)
    x = torch.randn(rows, 128)
    before = _decode(layer, x)
    assert layer.__dict__.get("_decoding_copies") is not None  # a copy was made and is kept
    step()
    after = _decode(layer, x)
    assert not torch.allclose(before, after)  # the step did change the weight
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-4, atol=1e-4)
    linear.check_copies(layer)


@pytest.mark.parametrize("rows", [1, 32])
def test_a_training_forward_drops_the_copies(rows, threads):
    threads(2)
    layer = _big_layer().eval()
    x = torch.randn(rows, 128)
    _decode(layer, x)
    layer(torch.randn(3, 128))  # gradients on: the weight may change after it, without any signal
    _numpy_write(layer)()
    torch.testing.assert_close(_decode(layer, x), F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-4, atol=1e-4)


def test_a_training_forward_through_forward_rows_drops_the_copies_too():
    layer = _big_layer().eval()
    x = torch.randn(1, 128)
    _decode(layer, x)
    layer.forward_rows(torch.randn(3, 128), 0, 64)  # attention's slice of a fused W_QKV, gradients on
    _numpy_write(layer)()
    torch.testing.assert_close(_decode(layer, x), F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", [True, False])
def test_a_change_of_mode_on_a_parent_module_drops_the_copies(mode):
    model = torch.nn.Sequential(_big_layer()).eval()
    x = torch.randn(1, 128)
    _decode(model, x)
    _numpy_write(model[0])()
    model.train(mode)
    torch.testing.assert_close(
        _decode(model, x), F.linear(x, model[0].weight, model[0].bias).detach(), rtol=1e-4, atol=1e-4
    )


def test_a_write_no_signal_sees_is_caught_by_check_copies_and_mended_by_forget_copies(threads):
    threads(2)
    model = torch.nn.Sequential(_big_layer(), torch.nn.ReLU(), Linear(2048, 64))
    model.eval()
    for rows in (1, 32):  # the packed copy can go stale (the views of W cannot)
        _decode(model, torch.randn(rows, 128))
    linear.check_copies(model)  # current: nothing to say
    _numpy_write(model[0])()
    with pytest.raises(RuntimeError, match=r"decoding copy of 0 \(outputs 0:2048\) is stale.*bug in tformer"):
        linear.check_copies(model)
    linear.forget_copies(model)
    linear.check_copies(model)
    x = torch.randn(1, 128)
    torch.testing.assert_close(_decode(model, x), model(x).detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not linear._ONEDNN, reason="this PyTorch has no oneDNN: the packed layout is never used")
def test_a_layer_holding_a_packed_copy_deep_copies_and_pickles(threads):
    import copy
    import pickle

    layer = _big_layer().eval()
    x = torch.randn(32, 128)
    _decode(layer, x)
    assert _made(layer, "packed")  # an oneDNN tensor: no storage to copy
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert "_decoding_copies" not in twin.__dict__
        torch.testing.assert_close(_decode(twin, x), _decode(layer, x), rtol=1e-4, atol=1e-4)
        with torch.no_grad():
            twin.weight.add_(1.0)  # the twin's own weight: the original is untouched
        torch.testing.assert_close(
            _decode(layer, x), F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-4, atol=1e-4
        )


# ───────────────────────────── decoding in about the model's own size (issue 40): layouts, not copies ─────────────────
def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "n_threads, shape, kind",
    [  # shape: (out, in), the weight's
        (1, (80, 48), "transposed"),  # one thread: the product reads Wᵀ, which is the weight stored column-major
        (2, (2048, 128), "splits"),  # wide, two threads: split by inputs over Wᵀ, a view of the weight
        (2, (256, 2048), "splits"),  # tall, two threads: split by outputs over W's own rows
    ],
)
def test_a_one_row_product_in_eval_mode_reads_the_weight_itself_not_a_copy(threads, n_threads, shape, kind):
    threads(n_threads)
    torch.manual_seed(0)
    layer = Linear(shape[1], shape[0]).eval()
    before = layer.weight.detach().clone()
    x = torch.randn(1, 1, shape[1])
    with torch.no_grad():
        got = layer(x)
    torch.testing.assert_close(got, F.linear(x, before, layer.bias), rtol=1e-5, atol=1e-5)
    made = _made(layer, kind)
    layouts = [made] if kind == "transposed" else [split.blocks for split in made.values()]
    assert layouts and all(_shares_storage(t, layer.weight) for t in layouts)  # no second copy of the weight
    assert torch.equal(layer.weight, before)  # the same values (maybe another layout)
    assert torch.equal(layer.state_dict()["weight"], before)


def test_training_after_decoding_gets_pytorchs_layout_and_the_same_numbers_to_the_bit(threads):
    threads(1)
    torch.manual_seed(0)
    layer = Linear(48, 80).eval()
    x = torch.randn(4, 48)
    expected = F.linear(x, layer.weight, layer.bias)  # row-major, as PyTorch stores it
    with torch.no_grad():
        layer(torch.randn(1, 48))  # decoding: the weight now column-major
    assert not layer.weight.is_contiguous()
    assert torch.equal(layer(x), expected)  # a forward with gradients: PyTorch's layout again, the same bits
    assert layer.weight.is_contiguous()
    with torch.no_grad():
        layer(torch.randn(1, 48))
    layer.train()
    assert layer.weight.is_contiguous()


def test_prompts_and_encoders_make_no_packed_copy_and_decoding_steps_of_many_rows_do():
    layer = _big_layer().eval()
    with torch.no_grad():
        for _ in range(3):  # prompt after prompt (a chat, the explorer, translate's lines), each then decoded
            layer(torch.randn(16, 128))  # a 16-token prompt, or a source through an encoder layer
            for _ in range(3):
                with linear.decoding_step():
                    layer(torch.randn(1, 128))  # one-row steps
        assert not _made(layer, "packed")  # no copy of the weight for them (a second prompt doubled it, issue 40)
        with linear.decoding_step():
            layer(torch.randn(5, 128))  # a step of beam 5: packed
    assert list(_made(layer, "packed")) == [(0, 2048, 8)]


def test_a_model_that_decoded_saves_copies_and_moves_the_weights_it_was_given(tmp_path, threads):
    import copy
    import pickle

    from tformer import fast
    from tformer.generation import generate_lm
    from tformer.models.gpt import GPT, GPTConfig

    threads(1)
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=300)).eval()
    given = {k: v.clone() for k, v in model.state_dict().items()}
    generate_lm(model, [[1, 2, 3]], 6)  # decodes through a fast view sharing the Parameters
    fast.speed_up(model)
    with torch.no_grad():
        model(torch.tensor([[5]]))  # the model itself decoding too
    assert any(not p.is_contiguous() for p in model.parameters())  # some weights are column-major now
    for name, weights in [
        ("state_dict", model.state_dict()),
        ("deepcopy", copy.deepcopy(model).state_dict()),
        ("pickle", pickle.loads(pickle.dumps(model)).state_dict()),
        (".to()", copy.deepcopy(model).to(torch.float64).to(torch.float32).state_dict()),
    ]:
        assert weights.keys() == given.keys(), name
        assert all(torch.equal(weights[k], given[k]) for k in given), name
    model.save_pretrained(tmp_path / "m")
    loaded = GPT.from_pretrained(tmp_path / "m").state_dict()
    assert all(torch.equal(loaded[k], given[k]) for k in given)
