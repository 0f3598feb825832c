"""Parity with PyTorch's own Transformer modules through ``tformer.from_torch``.

tformer is always batch-first and takes bool masks with True = may attend (B|1, 1, Tq, Tk);
PyTorch takes key-padding masks (B, S) with True = padding and attention masks with True/−∞ = blocked.
Outputs are compared at real (non-padded) query positions only: PyTorch's fast path may leave
padded rows with different values.
"""

import pytest
import torch
from torch import nn

from tformer import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, MultiHeadAttention, from_torch
from tformer.nn.masks import combine_masks
from tformer.nn.masks import from_torch as mask_from_torch

D, H, F = 16, 4, 32
TOL = 1e-5
# lengths of the real tokens of each batch row; the rest is padding
SRC_LENS, TGT_LENS = [7, 4, 5], [5, 3, 2]


def _key_padding(lengths, total):
    """PyTorch key-padding mask (B, T), True = padding."""
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


def _ours(kpm):
    """PyTorch (B, T) key-padding mask → tformer (B, 1, 1, T) "may attend" mask."""
    return mask_from_torch(kpm)[:, None, None, :]


def _causal(t):
    """PyTorch boolean look-ahead mask (T, T), True = blocked."""
    return nn.Transformer.generate_square_subsequent_mask(t) == float("-inf")


def _to_batch_first(x, batch_first):
    return x if batch_first else x.transpose(0, 1)


def _assert_close_at_real(theirs, ours, lengths, batch_first):
    theirs = _to_batch_first(theirs, batch_first)
    assert theirs.shape == ours.shape
    for b, n in enumerate(lengths):
        diff = (theirs[b, :n] - ours[b, :n]).abs().max().item()
        assert diff <= TOL, f"batch row {b}: max abs diff {diff}"


def _inputs(batch_first, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(3, 7, D, generator=g)  # (B, S, D)
    tgt = torch.randn(3, 5, D, generator=g)  # (B, T, D)
    return src, tgt, _to_batch_first(src, batch_first), _to_batch_first(tgt, batch_first)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("float_attn_mask", [True, False], ids=["float_mask", "bool_mask"])
def test_multihead_self_attention(batch_first, float_attn_mask):
    theirs = nn.MultiheadAttention(D, H, batch_first=batch_first).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, MultiHeadAttention)
    src, _, x, _ = _inputs(batch_first)
    kpm = _key_padding(SRC_LENS, 7)
    attn_mask = nn.Transformer.generate_square_subsequent_mask(7)  # 0 / -inf
    if float_attn_mask:
        kpm = torch.zeros(kpm.shape).masked_fill(kpm, float("-inf"))  # PyTorch wants both of one kind
    else:
        attn_mask = attn_mask == float("-inf")
    expected, _ = theirs(x, x, x, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=False)
    got = ours(src, mask=combine_masks(mask_from_torch(attn_mask)[None, None], _ours(kpm)))
    _assert_close_at_real(expected, got, SRC_LENS, batch_first)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_cross_attention(batch_first):
    theirs = nn.MultiheadAttention(D, H, batch_first=batch_first).eval()
    ours = from_torch(theirs)
    src, tgt, memory, query = _inputs(batch_first)  # Tq = 5, Tk = 7
    kpm = _key_padding(SRC_LENS, 7)
    expected, _ = theirs(query, memory, memory, key_padding_mask=kpm, need_weights=False)
    got = ours(tgt, src, mask=_ours(kpm))
    _assert_close_at_real(expected, got, [5, 5, 5], batch_first)


LAYER_OPTIONS = pytest.mark.parametrize(
    "norm_first, activation", [(False, "relu"), (False, "gelu"), (True, "relu"), (True, "gelu")]
)


@LAYER_OPTIONS
@pytest.mark.parametrize("no_grad", [False, True], ids=["grad", "no_grad(fast path)"])
def test_encoder_layer(norm_first, activation, no_grad):
    theirs = nn.TransformerEncoderLayer(
        D, H, F, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, EncoderLayer)
    src, _, _, _ = _inputs(True)
    kpm = _key_padding(SRC_LENS, 7)
    with torch.set_grad_enabled(not no_grad):
        expected = theirs(src, src_key_padding_mask=kpm)
        got = ours(src, _ours(kpm))
    _assert_close_at_real(expected, got, SRC_LENS, True)


def test_a_tanh_gelu_layer_keeps_its_approximation():
    """torch flags every nn.GELU alike (activation_relu_or_gelu == 2): read off the module, the tanh approximation
    stays tanh (exact GELU was 1.2e-4 away on inputs x3). (With grad on: torch's own no-grad fast path computes the
    exact GELU for either.)"""
    theirs = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation=nn.GELU("tanh"), batch_first=True).eval()
    ours = from_torch(theirs)
    assert ours.ff.activation.__name__ == "gelu_tanh"
    src = _inputs(True)[0] * 3
    torch.testing.assert_close(ours(src), theirs(src), atol=TOL, rtol=0)  # (0.0 measured on avx2; exact GELU: 1.2e-4)


@LAYER_OPTIONS
def test_decoder_layer(norm_first, activation):
    theirs = nn.TransformerDecoderLayer(
        D, H, F, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, DecoderLayer)
    memory, tgt, _, _ = _inputs(True)
    tgt_kpm, mem_kpm = _key_padding(TGT_LENS, 5), _key_padding(SRC_LENS, 7)
    expected = theirs(tgt, memory, tgt_mask=_causal(5), tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm)
    got = ours(tgt, memory, self_mask=_ours(tgt_kpm), memory_mask=_ours(mem_kpm), causal=True)
    _assert_close_at_real(expected, got, TGT_LENS, True)


@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack(norm_first, final_norm):
    layer = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, norm_first=norm_first, batch_first=True)
    theirs = nn.TransformerEncoder(
        layer, num_layers=2, norm=nn.LayerNorm(D) if final_norm else None, enable_nested_tensor=False
    ).eval()
    with torch.no_grad():  # the clones start identical: make the layers differ
        for p in theirs.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = from_torch(theirs)
    assert isinstance(ours, Encoder) and len(ours.layers) == 2 and (ours.norm is not None) == final_norm
    src, _, _, _ = _inputs(True)
    kpm = _key_padding(SRC_LENS, 7)
    _assert_close_at_real(theirs(src, src_key_padding_mask=kpm), ours(src, _ours(kpm)), SRC_LENS, True)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack(norm_first):
    layer = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, norm_first=norm_first, batch_first=True)
    theirs = nn.TransformerDecoder(layer, num_layers=2, norm=nn.LayerNorm(D)).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = from_torch(theirs)
    assert isinstance(ours, Decoder) and len(ours.layers) == 2
    memory, tgt, _, _ = _inputs(True)
    tgt_kpm, mem_kpm = _key_padding(TGT_LENS, 5), _key_padding(SRC_LENS, 7)
    expected = theirs(
        tgt,
        memory,
        tgt_mask=_causal(5),
        tgt_is_causal=True,
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=mem_kpm,
    )
    got = ours(tgt, memory, _ours(tgt_kpm), _ours(mem_kpm), causal=True)
    _assert_close_at_real(expected, got, TGT_LENS, True)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_full_transformer(batch_first, norm_first):
    theirs = nn.Transformer(
        D,
        H,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=F,
        dropout=0.0,
        norm_first=norm_first,
        batch_first=batch_first,
    ).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = from_torch(theirs)
    assert isinstance(ours, EncoderDecoder)
    src, tgt, src_in, tgt_in = _inputs(batch_first)
    src_kpm, tgt_kpm = _key_padding(SRC_LENS, 7), _key_padding(TGT_LENS, 5)
    expected = theirs(
        src_in,
        tgt_in,
        tgt_mask=_causal(5),
        src_key_padding_mask=src_kpm,
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=src_kpm,
    )
    got = ours(src, tgt, src_mask=_ours(src_kpm), tgt_mask=_ours(tgt_kpm), memory_mask=_ours(src_kpm), causal=True)
    _assert_close_at_real(expected, got, TGT_LENS, batch_first)


def test_weights_really_copied():
    theirs = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True)
    ours = from_torch(theirs)
    assert torch.equal(ours.self_attn.qkv_proj.weight, theirs.self_attn.in_proj_weight)
    assert torch.equal(ours.ff.linear2.weight, theirs.linear2.weight)
    assert torch.equal(ours.add_norm2.norm.bias, theirs.norm2.bias)
    assert not ours.training


@pytest.mark.parametrize("module", [nn.Linear(4, 4), nn.LayerNorm(4), nn.Sequential()], ids=lambda m: type(m).__name__)
def test_unsupported_module_is_type_error(module):
    with pytest.raises(TypeError, match="from_torch expects"):
        from_torch(module)


def test_unsupported_attention_options_are_value_errors():
    with pytest.raises(ValueError, match="kdim"):
        from_torch(nn.MultiheadAttention(D, H, kdim=8, vdim=8))
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(nn.MultiheadAttention(D, H, add_bias_kv=True))
