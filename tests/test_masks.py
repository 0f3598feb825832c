"""The one mask convention (bool, True = may attend) and its converters, pinned with known values."""

import pytest
import torch
from torch import nn

from tformer.nn.masks import (
    causal_mask,
    check_mask,
    combine_masks,
    from_additive,
    from_blocked,
    from_torch,
    padding_mask,
    to_additive,
    to_torch,
)

# The course notes' 4×4 look-ahead mask: 1 = blocked (upper triangle above the diagonal).
NOTES_BLOCKED = torch.tensor(
    [
        [0, 1, 1, 1],
        [0, 0, 1, 1],
        [0, 0, 0, 1],
        [0, 0, 0, 0],
    ]
)
MAY_ATTEND = torch.tensor(
    [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, True],
    ]
)


def test_causal_mask_is_lower_triangular_may_attend():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool
    assert mask.shape == (1, 1, 4, 4)
    assert torch.equal(mask[0, 0], MAY_ATTEND)


@pytest.mark.parametrize(
    "blocked", [NOTES_BLOCKED, NOTES_BLOCKED.float(), NOTES_BLOCKED.bool()], ids=["int", "float", "bool"]
)
def test_from_blocked_of_notes_mask_equals_causal_mask(blocked):
    assert torch.equal(from_blocked(blocked), causal_mask(4)[0, 0])


def test_to_torch_matches_generate_square_subsequent_mask():
    torch_float = nn.Transformer.generate_square_subsequent_mask(4)  # 0 / -inf, -inf above the diagonal
    assert torch.equal(to_torch(causal_mask(4))[0, 0], torch_float == float("-inf"))
    assert torch.equal(from_torch(torch_float), causal_mask(4)[0, 0])
    assert torch.equal(from_torch(torch_float == float("-inf")), causal_mask(4)[0, 0])  # bool True = blocked


def test_causal_mask_right_aligned_for_cached_queries():
    # 2 new queries at absolute positions 3 and 4 of a 5-long sequence.
    mask = causal_mask(2, 5)
    assert mask.shape == (1, 1, 2, 5)
    assert mask[0, 0].tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


@pytest.mark.parametrize("q_len, k_len", [(0, 0), (3, 2)])
def test_causal_mask_rejects_bad_lengths(q_len, k_len):
    with pytest.raises(ValueError, match="q_len"):
        causal_mask(q_len, k_len)


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, True]]
    with pytest.raises(ValueError, match="shape"):
        padding_mask(ids[0], pad_id=0)


def test_combine_masks_is_logical_and_with_broadcasting():
    pad = padding_mask(torch.tensor([[1, 2, 3, 0], [1, 0, 0, 0]]), pad_id=0)  # (2, 1, 1, 4)
    combined = combine_masks(causal_mask(4), None, pad)
    assert combined.shape == (2, 1, 4, 4)
    expected = MAY_ATTEND[None] & torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)[:, None, :]
    assert torch.equal(combined[:, 0], expected)
    assert combined[1, 0].tolist() == [[True, False, False, False]] * 4
    assert combine_masks(None, None) is None


@pytest.mark.parametrize("neg_value", [float("-inf"), -1e9])
def test_to_additive_and_back(neg_value):
    mask = causal_mask(4)
    additive = to_additive(mask, neg_value)
    assert additive.dtype == torch.float32
    assert torch.equal(additive[0, 0] == 0, MAY_ATTEND)
    assert torch.all(additive[0, 0][~MAY_ATTEND] == neg_value)
    assert torch.equal(from_additive(additive), mask)


def test_from_additive_refuses_a_bias():
    bias = torch.tensor([[0.0, -0.5], [0.3, 0.0]])  # ALiBi-like values: not a mask
    with pytest.raises(ValueError, match="bias"):
        from_additive(bias)
    with pytest.raises(TypeError):
        from_additive(MAY_ATTEND)


def test_check_mask_accepts_broadcastable_bool():
    check_mask(None, "mask", 2, 4, 4)
    check_mask(causal_mask(4), "mask", 2, 4, 4)
    check_mask(torch.ones(2, 1, 1, 4, dtype=torch.bool), "mask", 2, 4, 4, heads=3)


@pytest.mark.parametrize("bad", [to_additive(causal_mask(4)), causal_mask(4).long()], ids=["float", "long"])
def test_check_mask_wrong_dtype_is_type_error_naming_the_argument(bad):
    with pytest.raises(TypeError, match="tgt_mask"):
        check_mask(bad, "tgt_mask", 2, 4, 4)


@pytest.mark.parametrize("shape", [(4, 4), (2, 1, 4, 5), (3, 1, 4, 4), (1, 1, 1, 1, 4)])
def test_check_mask_wrong_shape_is_value_error(shape):
    with pytest.raises(ValueError, match="src_mask"):
        check_mask(torch.ones(shape, dtype=torch.bool), "src_mask", 2, 4, 4)
