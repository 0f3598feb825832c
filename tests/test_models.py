"""The three model families at their tiny presets: shapes, attention weights, KV cache, configs, ties, input checks."""

import inspect

import pytest
import torch

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.models import ModelConfig
from tformer.nn.masks import causal_mask

VOCAB = 50  # vocabulary of the conftest fixtures (the seq2seq target vocabulary is VOCAB + 7)

TOL = 1e-5
# source: row 0 fully real, row 1 padded after 3 tokens; target: row 1 padded after 2 tokens
SRC = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
TGT = torch.tensor([[1, 20, 21, 22, 23], [1, 24, 25, 0, 0]])


# --- shapes -------------------------------------------------------------------------------------


def test_seq2seq_shapes(seq2seq):
    assert seq2seq(SRC, TGT).shape == (2, 5, VOCAB + 7)
    memory = seq2seq.encode(SRC)
    assert memory.shape == (2, 6, 64)
    said = r"^src_mask must broadcast to \(B, H, Tq, Tk\) = \(2, 1, 6, 6\), got shape \(2, 6\)"
    with pytest.raises(ValueError, match=said):
        seq2seq.encode(SRC, SRC != 0)  # a (B, S) key-padding mask, as nn.Transformer takes it
    assert seq2seq.decode(TGT, memory).shape == (2, 5, VOCAB + 7)


def test_gpt_shapes(gpt):
    assert gpt(TGT).shape == (2, 5, VOCAB)


def test_bert_shapes(bert):
    hidden = bert(SRC, token_type_ids=torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]]))
    assert hidden.shape == (2, 6, 64)
    mlm, nsp = bert.pretraining_logits(SRC)
    assert mlm.shape == (2, 6, VOCAB) and nsp.shape == (2, 2)
    with pytest.raises(ValueError, match="num_labels"):
        bert.classify(SRC)
    torch.manual_seed(0)
    classifier = Bert(bert.config.replace(num_labels=3)).eval()
    assert classifier.classify(SRC).shape == (2, 3)
    # segments and mask by name: Hugging Face's BertModel(input_ids, attention_mask, ...) order, called here, would
    # read a mask of 0s and 1s as segments
    mask = SRC != 0
    for call in (bert, bert.pretraining_logits, classifier.classify):
        with pytest.raises(TypeError, match="positional argument"):
            call(SRC, mask)


# --- attention weights --------------------------------------------------------------------------


def _real(ids):
    return ids != 0  # (B, T)


def _expected_masks(family):
    """Module name pattern → bool "may attend" mask (B, 1, Tq, Tk) that the weights must respect."""
    src_keys = _real(SRC)[:, None, None, :]  # (B, 1, 1, S)
    tgt_self = causal_mask(5) & _real(TGT)[:, None, None, :]  # (B, 1, T, T)
    if family == "seq2seq":
        return {
            "encoder.layers.{}.self_attn": src_keys.expand(2, 1, 6, 6),
            "decoder.layers.{}.self_attn": tgt_self,
            "decoder.layers.{}.cross_attn": src_keys.expand(2, 1, 5, 6),
        }
    if family == "gpt":
        return {"decoder.layers.{}.self_attn": causal_mask(5).expand(2, 1, 5, 5)}
    return {"encoder.layers.{}.self_attn": src_keys.expand(2, 1, 6, 6)}


def _run(model, family, **kwargs):
    if family == "seq2seq":
        return model(SRC, TGT, **kwargs)
    if family == "gpt":
        return model(TGT, **kwargs)
    return model(SRC, **kwargs)


@pytest.mark.parametrize("family", ["seq2seq", "gpt", "bert"])
def test_return_attention(family, request):
    model = request.getfixturevalue(family)
    plain = _run(model, family)
    out, weights = _run(model, family, return_attention=True)
    assert (out - plain).abs().max() <= TOL  # reference path = fused path
    expected = _expected_masks(family)
    names = {pattern.format(i) for pattern in expected for i in range(2)}
    assert set(weights) == names
    for pattern, mask in expected.items():
        for i in range(2):
            w = weights[pattern.format(i)]
            assert w.shape == (2, 4, mask.shape[2], mask.shape[3])  # (B, H, Tq, Tk)
            assert torch.all(w[~mask.expand_as(w)] == 0), pattern
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


# --- KV cache -----------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [1, 3])
def test_seq2seq_cached_decoding_equals_full(seq2seq, prefix):
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 0, 0]])
    tgt = torch.tensor([[1, 20, 21, 22, 23, 24, 25], [1, 26, 27, 28, 29, 30, 31]])
    memory_mask = (src != 0)[:, None, None, :]
    memory = seq2seq.encode(src, memory_mask)
    full = seq2seq.decode(tgt, memory, memory_mask)
    cache = seq2seq.new_cache()
    steps = [seq2seq.decode(tgt[:, :prefix], memory, memory_mask, cache=cache)]
    cross_k = [layer.cross_k for layer in cache.layers]
    assert all(k is not None for k in cross_k)
    for t in range(prefix, tgt.shape[1]):
        steps.append(seq2seq.decode(tgt[:, t : t + 1], memory, memory_mask, cache=cache))
        # cross-attention keys/values are computed once per source, not per step
        assert all(layer.cross_k is k for layer, k in zip(cache.layers, cross_k))
    assert cache.length == tgt.shape[1]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= TOL


@pytest.mark.parametrize("capacity", [None, 2], ids=["preallocated", "growing"])
@pytest.mark.parametrize("prefix", [1, 4])
def test_gpt_cached_decoding_equals_full(gpt, prefix, capacity):
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5], [2, 7, 1, 8, 2, 8, 1, 8, 2]])
    full = gpt(ids)
    cache = gpt.new_cache(capacity)
    steps = [gpt(ids[:, :prefix], cache=cache)]
    for t in range(prefix, ids.shape[1]):
        steps.append(gpt(ids[:, t : t + 1], cache=cache))
    assert cache.length == ids.shape[1]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= TOL


@pytest.mark.parametrize("cross", [True, False])
def test_cache_reorder_follows_the_rows(seq2seq, cross):
    """Reordering the cache = decoding the reordered rows from scratch (beam search relies on it)."""
    src = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [9, 10, 11, 12]])
    tgt = torch.tensor([[1, 20, 21, 22], [1, 23, 24, 25], [1, 26, 27, 28]])
    memory = seq2seq.encode(src)
    cache = seq2seq.new_cache(8)
    seq2seq.decode(tgt[:, :3], memory, cache=cache)
    cross_k = cache.layers[0].cross_k
    rows = torch.tensor([1, 1, 2]) if not cross else torch.tensor([2, 0, 1])  # cross=False: rows stay within a source
    cache.reorder(rows, cross=cross)
    assert (cache.layers[0].cross_k is cross_k) != cross and cache.length == 3
    step = seq2seq.decode(tgt[rows, 3:4], memory[rows], cache=cache)
    fresh = seq2seq.decode(tgt[rows], memory[rows])[:, 3:4]
    assert (step - fresh).abs().max() <= TOL


def test_cache_reorder_with_cross_rows_of_their_own(seq2seq):
    """Beam search with per-source memory: K rows per source, one cross-attention cache row per source; a done
    source leaves with its rows (``cross`` = the sources kept)."""
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    tgt = torch.tensor([[1, 20, 21, 22], [1, 23, 24, 25], [1, 26, 27, 28], [1, 29, 30, 31]])  # 2 beams per source
    memory = seq2seq.encode(src)  # (2, S, D): one row per source
    cache = seq2seq.new_cache(8)
    seq2seq.decode(tgt[:, :3], memory, cache=cache)
    assert cache.layers[0].cross_k.shape[0] == 2
    cache.reorder(torch.tensor([3, 2]), cross=torch.tensor([1]))  # source 0 is done; source 1's beams swap
    assert cache.layers[0].cross_k.shape[0] == 1 and cache.length == 3
    step = seq2seq.decode(tgt[[3, 2], 3:4], memory[1:], cache=cache)
    fresh = seq2seq.decode(tgt[[3, 2]], memory[1:])[:, 3:4]
    assert (step - fresh).abs().max() <= TOL


def test_repeated_reorders_reuse_two_buffers_and_follow_the_rows(seq2seq):
    """Beam search reorders every step; the second reorder writes into the buffer the first one left."""
    src = torch.tensor([[5, 6, 7, 8]] * 3)
    tgt = torch.tensor([[1, 20, 21, 22, 23], [1, 24, 25, 26, 27], [1, 28, 29, 30, 31]])
    memory = seq2seq.encode(src)
    with torch.inference_mode():
        cache = seq2seq.new_cache(8)
        for t in range(3):  # one position a step, as beam search decodes (a prompt's buffer would grow at step 4)
            seq2seq.decode(tgt[:, t : t + 1], memory, cache=cache)
        first = cache.layers[0].k
        r1, r2 = torch.tensor([2, 0, 0]), torch.tensor([1, 2, 2])
        cache.reorder(r1, cross=False)
        seq2seq.decode(tgt[r1, 3:4], memory, cache=cache)
        cache.reorder(r2, cross=False)
        assert cache.layers[0].k.data_ptr() == first.data_ptr()  # ping-pong: no new buffer
        step = seq2seq.decode(tgt[r1[r2], 4:5], memory, cache=cache)
    fresh = seq2seq.decode(tgt[r1[r2]], memory)[:, 4:5]  # every position of row j came from row r1[r2[j]]
    assert (step - fresh).abs().max() <= TOL


def test_gpt_cache_respects_max_len(gpt):
    cache = gpt.new_cache()
    gpt(torch.ones(1, 64, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="max_len"):
        gpt(torch.ones(1, 1, dtype=torch.long), cache=cache)


# --- configs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_presets(preset):
    s = Seq2SeqConfig.preset(preset, src_vocab_size=100, tgt_vocab_size=120)
    g = GPTConfig.preset(preset, vocab_size=100)
    b = BertConfig.preset(preset, vocab_size=100)
    for config in (s, g, b):
        assert config.d_model % config.n_heads == 0
        assert config.layer.d_model == config.d_model
    assert (s.src_vocab_size, s.tgt_vocab_size, g.vocab_size, b.vocab_size) == (100, 120, 100, 100)
    if preset == "base":
        assert (b.d_model, b.n_layers, b.n_heads) == (768, 12, 12)  # BERT-base
        assert (g.d_model, g.n_layers, g.max_len) == (768, 12, 1024)  # GPT-2 small
        assert (s.d_model, s.n_heads, s.d_ff) == (512, 8, 2048)  # the paper's base model


@pytest.mark.parametrize(
    "model_class, config",
    [
        (Seq2SeqTransformer, Seq2SeqConfig.preset("tiny", src_vocab_size=100, tgt_vocab_size=100)),
        (GPT, GPTConfig.preset("tiny", vocab_size=100, ffn="swiglu")),
        (Bert, BertConfig.preset("tiny", vocab_size=100)),
    ],
)
def test_ffn_dropout_is_the_feed_forwards_own_rate_and_none_follows_dropout(model_class, config):
    """``ffn_dropout`` is the rate inside every feed-forward (after the activation) and nowhere else; None is
    ``dropout`` (the paper's layer, nn.Transformer's), 0 drops nothing there (GPT-2's, BERT's, nanoGPT's MLP)."""
    from torch import nn

    from tformer.nn.feedforward import FeedForward, GatedFeedForward

    for ffn_dropout, inside in ((None, 0.3), (0.0, 0.0), (0.1, 0.1)):
        model = model_class(config.replace(dropout=0.3, attn_dropout=0.0, ffn_dropout=ffn_dropout))
        ffns = [m for m in model.modules() if isinstance(m, (FeedForward, GatedFeedForward))]
        assert ffns and {f.dropout.p for f in ffns} == {inside}
        theirs = {id(f.dropout) for f in ffns}
        assert {m.p for m in model.modules() if isinstance(m, nn.Dropout) and id(m) not in theirs} == {0.3}
    # and it is the one used: with every other rate 0, two training forwards differ only when it is not 0
    torch.manual_seed(0)
    for ffn_dropout in (0.0, 0.5):
        model = model_class(config.replace(dropout=0.0, attn_dropout=0.0, ffn_dropout=ffn_dropout)).train()
        ids = torch.randint(4, 100, (2, 7))
        inputs = (ids, ids) if model_class is Seq2SeqTransformer else (ids,)
        first, second = (out[0] if isinstance(out, tuple) else out for out in (model(*inputs), model(*inputs)))
        assert torch.equal(first, second) == (ffn_dropout == 0.0)


@pytest.mark.parametrize(
    "config_class, vocab",
    [
        (Seq2SeqConfig, dict(src_vocab_size=10, tgt_vocab_size=10)),
        (GPTConfig, dict(vocab_size=10)),
        (BertConfig, dict(vocab_size=10)),
    ],
)
def test_unknown_preset(config_class, vocab):
    with pytest.raises(ValueError, match="preset must be one of"):
        config_class.preset("huge", **vocab)


S2S = dict(src_vocab_size=100, tgt_vocab_size=100)


@pytest.mark.parametrize(
    "config_class, fields, field",
    [
        (Seq2SeqConfig, dict(S2S, d_model=30, n_heads=4), "d_model"),
        (Seq2SeqConfig, dict(S2S, activation="swish"), "activation"),
        (Seq2SeqConfig, dict(src_vocab_size=100, tgt_vocab_size=90, share_embeddings=True), "share_embeddings"),
        (Seq2SeqConfig, dict(S2S, dropout=1.0), "dropout"),
        (Seq2SeqConfig, dict(S2S, n_encoder_layers=0), "n_encoder_layers"),
        (Seq2SeqConfig, dict(S2S, pad_id=100), "pad_id"),
        (Seq2SeqConfig, dict(S2S, positional="rotary"), "positional"),
        (GPTConfig, dict(vocab_size=0), "vocab_size"),
        (GPTConfig, dict(vocab_size=100, d_model=64, n_heads=5), "n_heads"),
        (GPTConfig, dict(vocab_size=100, attn_dropout=-0.1), "attn_dropout"),
        (BertConfig, dict(vocab_size=100, ffn_dropout=1.0), "ffn_dropout"),
        (GPTConfig, dict(vocab_size=100, pad_id=100), "pad_id"),
        (BertConfig, dict(vocab_size=100, max_len=0), "max_len"),
        (BertConfig, dict(vocab_size=100, num_labels=-1), "num_labels"),
        (BertConfig, dict(vocab_size=100, activation="tanh"), "activation"),
    ],
)
def test_invalid_config_names_the_field(config_class, fields, field):
    with pytest.raises(ValueError, match=field):
        config = config_class(**fields)
        # some fields are only checked when the model is built
        {Seq2SeqConfig: Seq2SeqTransformer, GPTConfig: GPT, BertConfig: Bert}[config_class](config)


@pytest.mark.parametrize(
    "config_class, vocab",
    [
        (Seq2SeqConfig, dict(src_vocab_size=30, tgt_vocab_size=40)),
        (GPTConfig, dict(vocab_size=30)),
        (BertConfig, dict(vocab_size=30)),
    ],
)
def test_config_base_dict_round_trip_and_replace(config_class, vocab):
    """One base for the three configs: to_dict / from_dict round trip, replace validates, the layer config is derived."""
    config = config_class.preset("tiny", **vocab)
    assert isinstance(config, ModelConfig)
    assert config_class.from_dict(config.to_dict()) == config
    assert config_class.from_dict({"model_type": "x", **config.to_dict()}) == config  # config.json's extra key
    assert config.replace(dropout=0.0).dropout == 0.0 and config.dropout == 0.1
    assert (config.layer.d_model, config.layer.n_heads, config.head_dim) == (64, 4, 16)
    with pytest.raises(ValueError, match="n_heads"):
        config.replace(n_heads=5)
    with pytest.raises(ValueError, match="has no field 'colour' \\(its fields: activation, "):
        config_class.from_dict({**config.to_dict(), "colour": "blue"})


@pytest.mark.parametrize(
    "config_class, fields, said",
    [
        (
            GPTConfig,
            dict(n_embd=384, n_head=6),
            "GPTConfig has no field 'n_embd': its name here is 'd_model'; 'n_head'",
        ),
        (GPTConfig, dict(block_size=256), "GPTConfig has no field 'block_size': its name here is 'max_len'"),
        (BertConfig, dict(hidden_size=384), "BertConfig has no field 'hidden_size': its name here is 'd_model'"),
        (BertConfig, dict(d_modle=64), "BertConfig has no field 'd_modle': its name here is 'd_model'"),
        (Seq2SeqConfig, dict(n_layer=3), "'n_layer': its names here are 'n_encoder_layers' and 'n_decoder_layers'"),
    ],
)
def test_a_field_the_family_lacks_is_refused_with_the_name_it_has_here(config_class, fields, said):
    """nanoGPT's and Hugging Face's names, and misspellings, name tformer's field rather than Python's bare
    ``__init__() got an unexpected keyword argument``; still a TypeError, as that was."""
    with pytest.raises(TypeError) as caught:
        config_class(
            **{"src_vocab_size": 9, "tgt_vocab_size": 9} if config_class is Seq2SeqConfig else {"vocab_size": 9},
            **fields,
        )
    assert said in str(caught.value) and "its fields" not in str(caught.value)
    for cls in (config_class, ModelConfig):  # the check is no constructor of theirs: help() reads their fields
        assert "d_model" in inspect.signature(cls).parameters


def test_seq2seq_from_dict_maps_the_old_tie_output_name():
    """tformer 0.1 wrote seq2seq's output tying as ``tie_output``; it is ``tie_embeddings`` in every family now."""
    old = dict(src_vocab_size=40, tgt_vocab_size=40, tie_output=False)
    assert Seq2SeqConfig.from_dict(old).tie_embeddings is False
    assert "tie_output" not in Seq2SeqConfig.from_dict(old).to_dict()


@pytest.mark.parametrize(
    "config_class, field, value, allowed",
    [
        (Seq2SeqConfig, "positional", "rope", "'sinusoidal', 'sinusoidal_halves', 'learned'"),
        (GPTConfig, "positional", "rotary", "'sinusoidal', 'learned', 'rope'"),
        (BertConfig, "activation", "tanh", "'gelu'"),
    ],
)
def test_invalid_choice_names_the_class_field_and_the_allowed_values(config_class, field, value, allowed):
    vocab = dict(src_vocab_size=10, tgt_vocab_size=10) if config_class is Seq2SeqConfig else dict(vocab_size=10)
    with pytest.raises(
        ValueError, match=rf"{config_class.__name__}\.{field} must be one of .*{allowed}.*got {value!r}"
    ):
        config_class(**vocab, **{field: value})


def test_seq2seq_attention_mask_is_the_source_padding_mask(seq2seq):
    """Seq2seq takes the padding mask under the name GPT and BERT use: (B, S), True = real token."""
    assert (seq2seq(SRC, TGT, attention_mask=SRC != 0) - seq2seq(SRC, TGT)).abs().max() == 0
    keep_all = seq2seq(SRC, TGT, attention_mask=torch.ones(2, 6, dtype=torch.bool))
    assert (keep_all[1] - seq2seq(SRC, TGT)[1]).abs().max() > 1e-4  # row 1's padding now attended
    with pytest.raises(ValueError, match="attention_mask"):
        seq2seq(SRC, TGT, attention_mask=torch.ones(2, 5, dtype=torch.bool))


@pytest.mark.parametrize("family", ["seq2seq", "gpt", "bert"])
def test_return_attention_is_keyword_only_and_documented(family, request):
    forward = request.getfixturevalue(family).forward
    param = inspect.signature(forward).parameters["return_attention"]
    assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is False


def test_bert_pretraining_logits_at_picked_positions(bert):
    picked = torch.zeros(SRC.shape, dtype=torch.bool)
    picked[0, 1], picked[0, 4], picked[1, 2] = True, True, True
    full_mlm, full_nsp = bert.pretraining_logits(SRC)
    mlm, nsp = bert.pretraining_logits(SRC, mlm_positions=picked)
    assert mlm.shape == (3, VOCAB)
    torch.testing.assert_close(mlm, full_mlm[picked], atol=1e-6, rtol=0)
    assert torch.equal(nsp, full_nsp)


# --- tied weights -------------------------------------------------------------------------------


def _tiny_seq2seq(**overrides):
    return Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40, **overrides))


@pytest.mark.parametrize("tie", [True, False])
def test_seq2seq_tie_embeddings(tie):
    model = _tiny_seq2seq(tie_embeddings=tie)
    assert (model.output.weight is model.tgt_embed.token.weight) == tie
    if tie:
        with torch.no_grad():
            model.tgt_embed.token.weight[3, 0] = 42.0
        assert model.output.weight[3, 0] == 42.0
        assert sum(p.numel() for p in model.parameters()) == sum(
            p.numel() for n, p in model.named_parameters(remove_duplicate=False) if n != "output.weight"
        )


@pytest.mark.parametrize("share", [True, False])
def test_seq2seq_share_embeddings(share):
    model = _tiny_seq2seq(share_embeddings=share)
    assert (model.tgt_embed.token.weight is model.src_embed.token.weight) == share


@pytest.mark.parametrize("tie", [True, False])
def test_gpt_tie_embeddings(tie):
    model = GPT(GPTConfig.preset("tiny", vocab_size=40, tie_embeddings=tie))
    assert (model.output.weight is model.embed.token.weight) == tie


def test_bert_mlm_decoder_is_the_token_embedding(bert):
    assert bert.mlm_head.decoder.weight is bert.embed.token.weight


# --- bad input ----------------------------------------------------------------------------------

GOOD = torch.tensor([[1, 2, 3]])


@pytest.mark.parametrize(
    "family, call, error, name",
    [
        ("seq2seq", lambda m: m(torch.tensor([[1, VOCAB]]), GOOD), ValueError, "src"),
        ("seq2seq", lambda m: m(GOOD, torch.tensor([[1, VOCAB + 7]])), ValueError, "tgt"),
        ("seq2seq", lambda m: m(GOOD, torch.tensor([[1, -1]])), ValueError, "tgt"),
        ("seq2seq", lambda m: m(GOOD.float(), GOOD), TypeError, "src"),
        ("seq2seq", lambda m: m(GOOD[:0], GOOD[:0]), ValueError, "empty"),
        ("gpt", lambda m: m(torch.tensor([[1, VOCAB]])), ValueError, "ids"),
        ("gpt", lambda m: m(GOOD.float()), TypeError, "ids"),
        ("gpt", lambda m: m(GOOD.bool()), TypeError, "ids"),
        ("gpt", lambda m: m(GOOD[:0]), ValueError, "empty"),
        ("gpt", lambda m: m(GOOD[:, :0]), ValueError, "empty"),
        ("gpt", lambda m: m(GOOD[0]), ValueError, "shape"),
        ("gpt", lambda m: m(GOOD, attention_mask=torch.ones(1, 4, dtype=torch.bool)), ValueError, "attention_mask"),
        ("bert", lambda m: m(torch.tensor([[1, VOCAB]])), ValueError, "ids"),
        ("bert", lambda m: m(GOOD, token_type_ids=torch.tensor([[0, 1, 2]])), ValueError, "token_type_ids"),
        ("bert", lambda m: m(GOOD.double()), TypeError, "ids"),
        ("bert", lambda m: m(GOOD[:0]), ValueError, "empty"),
        ("bert", lambda m: m(GOOD, attention_mask=torch.ones(3, dtype=torch.bool)), ValueError, "attention_mask"),
    ],
)
def test_bad_input(family, call, error, name, request):
    with pytest.raises(error, match=name):
        call(request.getfixturevalue(family))


def test_bert_attention_mask_overrides_pad_id(bert):
    ids = torch.tensor([[5, 6, 7, 8]])
    keep_all = bert(ids, attention_mask=torch.ones(1, 4, dtype=torch.long))
    drop_last = bert(ids, attention_mask=torch.tensor([[1, 1, 1, 0]]))
    assert (keep_all - bert(ids)).abs().max() <= TOL
    assert (drop_last[:, :3] - bert(ids[:, :3])).abs().max() <= TOL
    assert (drop_last[:, :3] - keep_all[:, :3]).abs().max() > 1e-3


def test_a_gpts_positions_are_checked_and_named(gpt):
    """A negative position read the learned table from its end (0.45 off, silently); past the table, a float or a
    shape of no T was an IndexError or a broadcast error. Good positions still give the model's numbers."""
    ids = torch.tensor([[5, 9, 3, 4], [7, 1, 2, 8]])
    torch.testing.assert_close(gpt(ids, positions=torch.arange(4)), gpt(ids), atol=0, rtol=0)
    assert gpt(ids, positions=torch.tensor([[0, 1, 2, 3], [0, 0, 1, 2]])).shape == (2, 4, VOCAB)
    for positions, error, said in (
        (torch.full((2, 4), -1), ValueError, r"positions holds -1, outside \[0, 64\) \(the model's max_len\)"),
        (torch.full((2, 4), 500), ValueError, r"positions holds 500, outside \[0, 64\)"),
        (torch.zeros(2, 4), TypeError, r"positions must hold integer positions, got dtype torch.float32"),
        (
            torch.zeros(2, 3, dtype=torch.long),
            ValueError,
            r"positions must have shape \(T,\) = \(4,\) or \(B, T\) = \(2, 4\), got \(2, 3\)",
        ),  # fmt: skip
        ([0, 1, 2, 3], TypeError, r"positions must be a tensor of integer positions, got list"),
    ):
        with pytest.raises(error, match=said):
            gpt(ids, positions=positions)
