"""Sinusoidal positional encoding (check values from the notes) and the input embedding."""

import math

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.nn.positional import (
    InputEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    rotary_tables,
    sinusoidal_table,
)


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
    module = SinusoidalPositionalEncoding(max_len=16, d_model=8)
    with pytest.raises(TypeError):  # by name: PyTorch's tutorial orders them (d_model, max_len)
        SinusoidalPositionalEncoding(8, 16)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"positions must be integer position ids .* got dtype torch.float32"):
        module(torch.zeros(2, 5, 8))  # the embeddings in their place
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


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_consecutive_positions_as_a_slice_are_a_view_of_the_table_with_the_same_numbers(positional):
    embed = InputEmbedding(vocab_size=11, d_model=8, max_len=8, positional=positional).eval()
    table = embed.position.table if positional == "sinusoidal" else embed.position.weight
    rows = embed.position(slice(2, 5))
    assert torch.equal(rows, embed.position(torch.arange(2, 5))) and rows.data_ptr() == table[2].data_ptr()
    ids = torch.tensor([[2, 3, 4], [5, 6, 7]])
    torch.testing.assert_close(embed(ids, slice(2, 5)), embed(ids, torch.tensor([2, 3, 4])), rtol=0, atol=0)
    torch.testing.assert_close(embed(ids), embed(ids, torch.arange(3)), rtol=0, atol=0)  # the default: 0..T-1
    for wrong in (slice(2, 4), slice(6, 9)):  # not one position per token; past the table
        with pytest.raises(ValueError, match="positions"):
            embed(ids, wrong)


def test_sequence_longer_than_max_len_is_refused():
    model = GPT(GPTConfig.preset("tiny", vocab_size=20, max_len=8, dropout=0.0)).eval()
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))


# ------------------------------------------------------------------------------------------------ RoPE


def test_rotary_matches_hf_llama():
    """Our tables and rotation give the queries and keys of transformers' LLaMA rotary embedding."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 9, 16, generator=g), torch.randn(2, 4, 9, 16, generator=g)  # (B, H, T, Dh)
    positions = torch.tensor([list(range(9)), list(range(5, 14))])  # (B, T), the second row shifted
    cos_hf, sin_hf = modeling_llama.LlamaRotaryEmbedding(config)(q, positions)  # (B, T, Dh)
    q_hf, k_hf = modeling_llama.apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
    cos, sin = rotary_tables(positions, 16)
    torch.testing.assert_close(apply_rotary(q, cos[:, None], sin[:, None]), q_hf, atol=1e-6, rtol=0)
    torch.testing.assert_close(apply_rotary(k, cos[:, None], sin[:, None]), k_hf, atol=1e-6, rtol=0)


def test_rotary_check_values_and_norm():
    """Position 1, head dim 4: pairs (0, 2) and (1, 3) turn by 1 rad and 0.01 rad; lengths are kept."""
    cos, sin = rotary_tables(torch.tensor([1]), 4)
    torch.testing.assert_close(cos[0], torch.tensor([math.cos(1), math.cos(0.01), math.cos(1), math.cos(0.01)]))
    x = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])  # (1, 1, 1, 4)
    torch.testing.assert_close(apply_rotary(x, cos, sin)[0, 0, 0], torch.tensor([math.cos(1), 0.0, math.sin(1), 0.0]))
    y = torch.randn(2, 3, 5, 4)
    rotated = apply_rotary(y, *rotary_tables(torch.arange(5), 4))
    torch.testing.assert_close(rotated.norm(dim=-1), y.norm(dim=-1))


def test_rope_gpt_depends_on_relative_positions_only(gpt_rope, gpt):
    """Shifting every position by 7 leaves a rotary model's logits unchanged; a learned table's change."""
    ids = torch.tensor([[4, 9, 2, 33, 7, 7, 18, 1, 40, 12]])  # (1, 10)
    shifted = torch.arange(7, 17)
    with torch.no_grad():
        torch.testing.assert_close(gpt_rope(ids, positions=shifted), gpt_rope(ids), atol=1e-5, rtol=0)
        assert (gpt(ids, positions=shifted) - gpt(ids)).abs().max() > 1e-3
    assert not any("position" in name for name, _ in gpt_rope.named_parameters())  # no position table


def test_rope_needs_an_even_head_dimension():
    with pytest.raises(ValueError, match="even head dimension"):
        GPTConfig.preset("tiny", vocab_size=10, d_model=12, n_heads=4, positional="rope")  # head dim 3
    with pytest.raises(ValueError, match="'rope'"):
        GPTConfig.preset("tiny", vocab_size=10, positional="alibi")


def test_rope_frequencies_are_a_buffer_that_follows_the_model_and_stays_float32():
    """Issue 48: the frequencies are a non-persistent buffer (``.to(device)`` moves them; nothing is mutated in
    ``forward``), kept in float32 when the weights are cast, and made again when a meta model is materialised."""
    torch.manual_seed(0)
    config = GPTConfig.preset(
        "tiny", vocab_size=50, dropout=0.0, max_len=32, positional="rope", rope_local_base=500.0, sliding_window=8,
        sliding_window_pattern=2,
    )  # fmt: skip
    model = GPT(config).eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    fresh = model.rope_inv_freq.clone()
    assert fresh.shape == (2, config.head_dim // 2) and fresh.dtype == torch.float32
    assert "rope_inv_freq" in dict(model.named_buffers()) and "rope_inv_freq" not in model.state_dict()
    ids = torch.randint(1, 50, (2, 12))
    expected = model(ids)
    assert torch.equal(model.rope_inv_freq, fresh)  # the forward left it as it was
    model.to(torch.bfloat16)
    assert model.rope_inv_freq.dtype == torch.float32 and torch.equal(model.rope_inv_freq, fresh)
    model.to("meta")
    assert model.rope_inv_freq.device.type == "meta"
    model.to_empty(device="cpu").float()  # the weights are garbage until loaded; the frequencies are made again
    model.load_state_dict(weights)
    assert torch.equal(model.rope_inv_freq, fresh) and torch.equal(model(ids), expected)
