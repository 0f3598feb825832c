"""Properties that must hold for every input (hypothesis): causality, padding invariance, no NaN."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tformer import scaled_dot_product_attention

VOCAB = 50  # vocabulary of the conftest fixtures (the seq2seq target vocabulary is VOCAB + 7)

TOL = 1e-5
PROPERTY = settings(max_examples=30, deadline=None)

real_tokens = st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=10)  # 0 is the padding id


def _ids(tokens):
    return torch.tensor([tokens])


@PROPERTY
@given(data=st.data(), tokens=st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=12))
def test_gpt_is_causal(gpt, data, tokens):
    t = data.draw(st.integers(0, len(tokens) - 2), label="t")
    future = data.draw(
        st.lists(st.integers(0, VOCAB - 1), min_size=len(tokens) - t - 1, max_size=len(tokens) - t - 1), label="future"
    )
    changed = tokens[: t + 1] + future
    before, after = gpt(_ids(tokens)), gpt(_ids(changed))
    assert (before[:, : t + 1] - after[:, : t + 1]).abs().max() <= TOL


@PROPERTY
@given(data=st.data(), src=real_tokens, tokens=st.lists(st.integers(1, VOCAB + 6), min_size=2, max_size=10))
def test_seq2seq_decoder_is_causal(seq2seq, data, src, tokens):
    t = data.draw(st.integers(0, len(tokens) - 2), label="t")
    future = data.draw(
        st.lists(st.integers(0, VOCAB + 6), min_size=len(tokens) - t - 1, max_size=len(tokens) - t - 1), label="future"
    )
    changed = tokens[: t + 1] + future
    before, after = seq2seq(_ids(src), _ids(tokens)), seq2seq(_ids(src), _ids(changed))
    assert (before[:, : t + 1] - after[:, : t + 1]).abs().max() <= TOL


@PROPERTY
@given(tokens=real_tokens, n_pad=st.integers(1, 6))
def test_bert_encoder_padding_invariance(bert, tokens, n_pad):
    n = len(tokens)
    assert (bert(_ids(tokens + [0] * n_pad))[:, :n] - bert(_ids(tokens))).abs().max() <= TOL


@PROPERTY
@given(tokens=real_tokens, n_pad=st.integers(1, 6))
def test_seq2seq_encoder_padding_invariance(seq2seq, tokens, n_pad):
    n = len(tokens)
    assert (seq2seq.encode(_ids(tokens + [0] * n_pad))[:, :n] - seq2seq.encode(_ids(tokens))).abs().max() <= TOL


@PROPERTY
@given(
    src=real_tokens,
    tgt=st.lists(st.integers(1, VOCAB + 6), min_size=1, max_size=10),
    src_pad=st.integers(0, 5),
    tgt_pad=st.integers(0, 5),
)
def test_seq2seq_padding_invariance(seq2seq, src, tgt, src_pad, tgt_pad):
    """Extra source padding (cross-attention) and target padding (decoder) never change real positions."""
    reference = seq2seq(_ids(src), _ids(tgt))
    padded = seq2seq(_ids(src + [0] * src_pad), _ids(tgt + [0] * tgt_pad))
    assert (padded[:, : len(tgt)] - reference).abs().max() <= TOL


@PROPERTY
@given(
    lengths=st.lists(st.integers(1, 8), min_size=2, max_size=3),
    tgt=st.lists(st.integers(1, VOCAB + 6), min_size=1, max_size=6),
)
def test_seq2seq_batch_padding_matches_single_examples(seq2seq, lengths, tgt):
    """A batch padded to its longest source gives each row the output it gets alone."""
    g = torch.Generator().manual_seed(sum(lengths))
    srcs = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in lengths]
    width = max(lengths)
    batch = seq2seq(torch.tensor([s + [0] * (width - len(s)) for s in srcs]), torch.tensor([tgt] * len(srcs)))
    for row, src in enumerate(srcs):
        assert (batch[row : row + 1] - seq2seq(_ids(src), _ids(tgt))).abs().max() <= TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@settings(max_examples=25, deadline=None)
@given(data=st.data(), tq=st.integers(1, 5), tk=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_fully_masked_rows_are_zero_in_every_dtype(dtype, data, tq, tk, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, 1, tq, tk, generator=g) < data.draw(st.sampled_from([0.0, 0.3, 0.7]), label="density")
    q = torch.randn(2, 2, tq, 8, generator=g).to(dtype)
    k, v = (torch.randn(2, 2, tk, 8, generator=g).to(dtype) for _ in range(2))
    empty = ~mask.any(-1)  # (B, 1, Tq): rows with nothing to attend to
    fused = scaled_dot_product_attention(q, k, v, mask)
    reference, details = scaled_dot_product_attention(q, k, v, mask, return_details=True)
    for out in (fused, reference, details.weights):
        assert torch.isfinite(out).all()
        assert torch.all(out.masked_select(empty[..., None].expand_as(out)) == 0)
    assert torch.all(details.weights[~mask.expand_as(details.weights)] == 0)
    # low precision: the reference rounds the weights and the output, the fused kernel the output (each by half an
    # eps, relative); the weights sum to 1, so the outputs differ by at most 1.5 eps x max|v| (2 eps: some margin)
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps * v.float().abs().max()
    assert (fused.float() - reference.float()).abs().max() <= tol
