"""The projection and the cross-entropy a chunk of positions at a time (tformer.fast.chunked_loss, issue 48): the loss
and both gradients of the whole logits' loss, the logits never whole, and the language model's training loss on it
once a batch's logits pass LOGITS_AT_ONCE."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tformer.fast import chunked_loss
from tformer.fast.chunked_loss import LOGITS_AT_ONCE, chunk_rows, linear_cross_entropy
from tformer.models.gpt import GPT, GPTConfig
from tformer.nn.losses import sequence_cross_entropy

N, D, V = 300, 32, 1001


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, D, generator=g).requires_grad_()
    weight = (0.2 * torch.randn(V, D, generator=g)).requires_grad_()
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::7] = -100  # ignored positions
    return hidden, weight, labels


def _whole(hidden, weight, labels, smoothing, softcap, dtype=None):
    """The reference: the whole logits, then sequence_cross_entropy (summed); the loss and both gradients."""
    with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
        z = F.linear(hidden, weight).float()
        z = z if softcap is None else softcap * torch.tanh(z / softcap)
        loss = sequence_cross_entropy(z, labels, -100, smoothing, "sum")
    return _grads(loss, hidden, weight)


def _chunked(hidden, weight, labels, smoothing, softcap, dtype=None, rows=64):
    with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
        loss = linear_cross_entropy(hidden, weight, labels, rows, -100, smoothing, softcap)
    return _grads(loss, hidden, weight)


def _grads(loss, hidden, weight):
    gh, gw = torch.autograd.grad(loss, (hidden, weight))
    return loss.detach(), gh, gw


@pytest.mark.parametrize("smoothing, softcap", [(0.0, None), (0.1, None), (0.0, 5.0), (0.1, 5.0)])
def test_the_loss_and_both_gradients_are_the_whole_logits(smoothing, softcap):
    hidden, weight, labels = _inputs()
    want = _whole(hidden, weight, labels, smoothing, softcap)
    for rows in (64, 7, N):  # chunks that do not divide N, and one chunk
        got = _chunked(hidden, weight, labels, smoothing, softcap, rows=rows)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_in_bf16_it_is_as_close_to_float32_as_the_whole_logits():
    """Under bf16 autocast both round their products; the chunks' error against the float32 values is no larger."""
    hidden, weight, labels = _inputs(1)
    exact = _whole(hidden, weight, labels, 0.1, None)
    whole = _whole(hidden, weight, labels, 0.1, None, torch.bfloat16)
    chunked = _chunked(hidden, weight, labels, 0.1, None, torch.bfloat16)
    for c, w, e in zip(chunked, whole, exact):
        assert (c - e).abs().max() <= 1.5 * (w - e).abs().max() + 1e-6


@pytest.mark.parametrize("smoothing, softcap", [(0.0, None), (0.1, 5.0)])
@pytest.mark.parametrize("aligned", [False, True])
def test_a_padded_head_scores_its_words_only(smoothing, softcap, aligned, monkeypatch):
    """``classes``: the padding rows of a head (GPTConfig.vocab_multiple) are left out, multiplied (``aligned``: a
    GPU's way, here on the CPU) or not (the CPU's): the loss and gradients of the words' logits alone, the padding
    rows' gradient 0."""
    monkeypatch.setattr(chunked_loss, "ALIGNED", ("cpu",) if aligned else ())
    hidden, weight, labels = _inputs()
    padded = torch.cat([weight.detach(), torch.randn(23, D)]).requires_grad_()  # V + 23 rows
    want = _whole(hidden, weight, labels, smoothing, softcap)
    with torch.autocast("cpu", torch.bfloat16, enabled=False):
        loss = linear_cross_entropy(hidden, padded, labels, 64, -100, smoothing, softcap, classes=V)
    got = _grads(loss, hidden, padded)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2][:V], want[2], rtol=1e-5, atol=1e-5)
    assert not got[2][V:].any()


class _Largest(TorchDispatchMode):
    """The most elements of any tensor an op makes while it is open."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


def test_the_logits_are_never_whole():
    hidden, weight, labels = _inputs()
    with _Largest() as largest:
        _chunked(hidden, weight, labels, 0.1, 5.0, rows=64)
    assert largest.most <= 64 * V < N * V
    with _Largest() as largest:
        _whole(hidden, weight, labels, 0.1, 5.0)
    assert largest.most == N * V  # (what the check sees when they are)


def test_chunk_rows_keeps_each_chunk_within_logits_at_once():
    assert chunk_rows(1000, 1000) is None  # a million logits: whole
    rows = chunk_rows(8 * 1024, 50_257)  # GPT-2's batch: 1.6 GB of float32 logits whole
    assert rows is not None and rows * 50_257 <= LOGITS_AT_ONCE and (rows + 1) * 50_257 > LOGITS_AT_ONCE


@pytest.mark.parametrize(
    "family",
    [{}, dict(final_softcap=3.0, tie_embeddings=False), dict(vocab_multiple=64), dict(vocab_multiple=128, bias=False)],
)
def test_the_language_models_loss_in_chunks_is_the_whole_ones(tmp_path, monkeypatch, family):
    """A batch past LOGITS_AT_ONCE (made small here) trains on the chunked loss: the same loss and gradients as the
    whole logits (tied embeddings: the output's gradient joins the embedding's), and no tensor as large as them."""
    trainer = _lm_trainer(tmp_path)
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=2000, dropout=0.0, **family))
    batch = torch.randint(0, 2000, (4, 33), generator=torch.Generator().manual_seed(0))  # (B, T + 1)
    monkeypatch.setattr("tformer.lm.task.chunk_rows", lambda n, v: chunked_loss.chunk_rows(n, v) or 16)
    tokens, most, whole_most = _chunks_as_whole(trainer.task, model, batch)
    assert whole_most >= tokens * 2000 > most  # the whole logits, then never


def _chunks_as_whole(task, model, batch) -> tuple[int, int, int]:
    """``task.loss`` of ``batch`` chunked and whole: the same loss and gradients. Returns the positions scored and the
    most elements of any tensor made, chunked and then whole."""
    results = []
    for chunked in (True, False):
        task.chunked = chunked
        with _Largest() as largest:
            loss, tokens = task.loss(model, batch)
            grads = torch.autograd.grad(loss, list(model.parameters()))
        results.append((loss, grads, largest.most))
    (loss, grads, most), (whole_loss, whole_grads, whole_most) = results
    torch.testing.assert_close(loss, whole_loss, rtol=1e-5, atol=1e-4)
    for a, b in zip(grads, whole_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    return tokens, most, whole_most


@pytest.mark.parametrize("smoothing, shared", [(0.0, True), (0.1, True), (0.1, False)])
def test_the_translators_loss_in_chunks_is_the_whole_ones(monkeypatch, smoothing, shared):
    """A translation batch past LOGITS_AT_ONCE (made small here) trains on the chunked loss, label smoothing and the
    padded positions included: the same loss and gradients as the whole logits (shared embeddings: the output's
    gradient joins the embeddings'), and no tensor as large as them."""
    from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.tokenizers import train_tokenizer
    from tformer.translation.task import TranslationTask
    from tformer.translation.translator import Translator

    words = enumerate(["cat", "dog"] * 8)
    pairs = [(f"the {w} sat on mat {i}.", f"le {w} est {'très ' * (i % 5)}loin du tapis {i}.") for i, w in words]
    tok = train_tokenizer("bpe", [t for p in pairs for t in p], vocab_size=300, min_frequency=1)
    vocab = 4000  # a table larger than the tokenizer's ids need: the logits are then the largest tensor by far
    cfg = Seq2SeqConfig.preset("tiny", src_vocab_size=vocab, tgt_vocab_size=vocab, share_embeddings=shared, dropout=0.0)
    torch.manual_seed(0)
    translator = Translator(Seq2SeqTransformer(cfg), tok, tok)
    task = TranslationTask(translator, pairs, [], batch_tokens=4096, label_smoothing=smoothing)
    batch = task.fetch(task.train_batches(0)[0])
    assert (batch.tgt_out == batch.pad).any()  # padded positions are in the batch: the loss leaves them out
    monkeypatch.setattr("tformer.translation.task.chunk_rows", lambda n, v: chunked_loss.chunk_rows(n, v) or 16)
    _, most, whole_most = _chunks_as_whole(task, translator.model, batch)
    positions = batch.tgt_out.numel()
    assert whole_most >= positions * vocab > most  # the whole logits, then never


def test_the_reference_kernels_keep_the_logits_whole(tmp_path):
    assert _lm_trainer(tmp_path / "a").task.chunked is True
    assert _lm_trainer(tmp_path / "b", fast=False).task.chunked is False  # --no-fast: the reference loss


def _lm_trainer(tmp_path, **kw):
    import tformer.lm

    text = tmp_path / "t.txt"
    tmp_path.mkdir(parents=True, exist_ok=True)
    text.write_text("the cat sat on the mat, and the dog ran in the fog.\n" * 200)
    kw = dict(max_len=32, batch_size=4, max_steps=1, log=lambda s: None) | kw
    return tformer.lm.setup(text, tmp_path / "run", "tiny", **kw)
