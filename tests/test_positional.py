"""Sinusoidal positional encoding (check values from the notes) and the input embedding."""

import math

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.positional import InputEmbedding, SinusoidalPositionalEncoding, sinusoidal_table


def test_sinusoidal_check_values():
    table = sinusoidal_table(10, 4)
    assert table.shape == (10, 4) and table.dtype == torch.float32
    expected = torch.tensor([0.84147098, 0.54030231, 0.00999983, 0.99995000])
    torch.testing.assert_close(table[1], expected, atol=1e-7, rtol=0)
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_sinusoidal_formula_interleaves_sin_and_cos():
    table = sinusoidal_table(50, 8)
    pos, i = 37, 3  # column pair (2i, 2i+1)
    angle = pos / 10000 ** (2 * i / 8)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_needs_even_width():
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_table(10, 5)


def test_table_is_a_non_persistent_buffer():
    module = SinusoidalPositionalEncoding(16, 8)
    assert list(module.parameters()) == []
    assert "table" in dict(module.named_buffers())
    assert module.state_dict() == {}
    model = InputEmbedding(vocab_size=11, d_model=8, max_len=16)
    assert all(p is not model.position.table for p in model.parameters())
    assert not any("table" in name for name in model.state_dict())


@pytest.mark.parametrize("scale", [True, False])
def test_input_embedding_scales_token_embedding_by_sqrt_d(scale):
    torch.manual_seed(0)
    d = 16
    embed = InputEmbedding(vocab_size=11, d_model=d, max_len=8, scale=scale).eval()
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    factor = math.sqrt(d) if scale else 1.0
    expected = embed.token.weight[ids] * factor + sinusoidal_table(8, d)[:5]
    torch.testing.assert_close(embed(ids), expected)


def test_input_embedding_positions_offset():
    embed = InputEmbedding(vocab_size=11, d_model=8, max_len=8).eval()
    ids = torch.tensor([[2, 3, 4]])
    full = embed(ids)
    torch.testing.assert_close(embed(ids[:, 2:], positions=torch.tensor([2])), full[:, 2:])


def test_sequence_longer_than_max_len_is_refused():
    model = GPT(GPTConfig.preset("tiny", vocab_size=20, max_len=8, dropout=0.0)).eval()
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))
