"""tformer.linear.Linear: nn.Linear's numbers and state dict, with a transposed copy for few-row inference
that is never stale."""

import pytest
import torch
import torch.nn.functional as F

from tformer.linear import FEW_ROWS, Linear


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
    assert "_transposed" not in layer.__dict__
    assert layer.weight.grad is not None and layer.weight.grad.shape == (80, 48)
    with torch.no_grad():
        layer(torch.randn(FEW_ROWS + 1, 48))  # too many rows: F.linear, still no copy
    assert "_transposed" not in layer.__dict__
    with torch.no_grad():
        layer(torch.randn(1, 48))
    wt = layer.transposed_weight()
    assert wt.shape == (48, 80) and wt.is_contiguous()
    torch.testing.assert_close(wt, layer.weight.detach().t(), rtol=0, atol=0)


def test_the_copy_follows_optimizer_steps_load_state_dict_and_replaced_weights():
    layer = _layer()
    x = torch.randn(1, 48)

    def check():
        with torch.inference_mode():
            got = layer(x)
        torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-5, atol=1e-6)

    check()
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(torch.randn(4, 48)).pow(2).sum().backward()
    opt.step()  # in-place update of the weight
    check()
    layer.load_state_dict(_layer(seed=1).state_dict())  # in-place copy_
    check()
    layer.weight = torch.nn.Parameter(torch.randn(80, 48))  # a new tensor
    check()
    layer.weight.data = torch.randn(80, 48)  # new storage behind the same Parameter
    check()


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
