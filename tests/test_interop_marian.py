"""Parity with Hugging Face ``MarianMTModel`` (built from a small config, no download) converted by ``from_hf``:
same logits, same greedy tokens as ``generate(num_beams=1)``, same beam-5 translations as
``generate(num_beams=5, length_penalty=…, early_stopping=True)``."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tformer import Seq2SeqTransformer  # noqa: E402
from tformer.generation import beam_search, translate_ids  # noqa: E402
from tformer.hf import from_hf  # noqa: E402
from tformer.nn.positional import sinusoidal_table  # noqa: E402

ATOL = 1e-4
VOCAB, EOS = 32, 0
PAD = VOCAB - 1  # as in OPUS-MT: the pad token is the last id and doubles as the decoder start token


def _config(**overrides):
    kwargs = dict(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=PAD,
        decoder_start_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=None,
        scale_embedding=True,
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
    )
    return transformers.MarianConfig(**{**kwargs, **overrides})


def _random_marian(config, seed=0, eos_bias=0.0, logits_bias=0.0):
    """Random weights large enough that outputs depend on the source (HF's init gives near-constant outputs);
    ``logits_bias``: the spread of a random ``final_logits_bias`` (OPUS-MT's trained output bias; HF's init: zeros).

    ``eos_bias`` points the EOS row of the output layer along the last LayerNorm's shift, so EOS gets about
    that much extra logit and hypotheses end at varied lengths (needs an untied ``lm_head``).
    """
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue  # the fixed sinusoidal table
            if p.dim() > 1:
                p.normal_(0, 0.3 if "embed" in name or "shared" in name or "lm_head" in name else 0.2)
            else:
                p.add_(torch.randn_like(p) * 0.1)
        model.final_logits_bias.normal_(0, 1).mul_(logits_bias)
        if eos_bias:
            shift = model.model.decoder.layers[-1].final_layer_norm.bias
            model.lm_head.weight[EOS] = eos_bias * shift / shift.norm() ** 2
    return model


def _sources(seed, batch=6, length=9):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, PAD, (batch, length), generator=g)
    src[1, 6:] = PAD  # one padded row
    return src


def _hf_ids(rows: torch.Tensor) -> list[list[int]]:
    """HF ``generate`` output → ids after the start token, up to (without) the first EOS."""
    out = []
    for row in rows[:, 1:].tolist():
        out.append(row[: row.index(EOS)] if EOS in row else row)
    return out


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"activation_function": "gelu", "scale_embedding": False},
        {"activation_function": "swish"},
        {"tie_word_embeddings": False},
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": VOCAB + 5},
    ],
)
def test_marian_logits_match(overrides):
    hf = _random_marian(_config(**overrides), logits_bias=2.0)
    ours = from_hf(hf)
    assert isinstance(ours, Seq2SeqTransformer) and not ours.training
    src = _sources(1)
    tgt = torch.randint(1, PAD, (src.shape[0], 7), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = PAD  # the decoder start token (= pad) must not be masked as padding
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        got = ours(src, tgt)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_marian_positions_are_halves_not_interleaved_and_fixed():
    hf = _random_marian(_config())
    ours = from_hf(hf)
    assert ours.config.positional == "sinusoidal_halves"
    table = hf.model.encoder.embed_positions.weight
    torch.testing.assert_close(ours.src_embed.position.table, table)
    torch.testing.assert_close(ours.tgt_embed.position.table, table)
    assert not any("position" in name for name, _ in ours.named_parameters())  # fixed in Marian, fixed here
    half = table.shape[1] // 2  # [sin | cos] halves = our interleaved columns, reordered
    ref = sinusoidal_table(table.shape[0], table.shape[1])
    torch.testing.assert_close(table, torch.cat([ref[:, 0::2], ref[:, 1::2]], dim=1), atol=1e-5, rtol=0)
    assert not torch.allclose(table[1], ref[1])
    assert half == 16


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_marian_greedy_matches_generate(seed):
    hf = _random_marian(_config(tie_word_embeddings=False), seed=seed, eos_bias=3.0, logits_bias=0.5)
    ours = from_hf(hf)
    src = _sources(seed + 10)
    expected = hf.generate(
        input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False, max_new_tokens=16
    )
    assert translate_ids(ours, src, sos_id=PAD, eos_id=EOS, max_len=16) == _hf_ids(expected)


# Cases picked from a sweep of 960 sentences: (13, 16, 29) once caught an <eos> accepted outside the K best
# candidates, (28, 1) hypotheses at the length limit that HF finishes together with that step's <eos>.
@pytest.mark.parametrize(
    "seed,length_penalty,eos_bias",
    [
        (0, 1.0, 3.0),
        (16, 1.0, 3.0),
        (29, 1.0, 3.0),
        (13, 1.0, 5.0),
        (16, 0.6, 3.0),
        (28, 2.0, 4.0),
        (1, 2.0, 4.0),
    ],
)
def test_marian_beam5_matches_generate(seed, length_penalty, eos_bias):
    hf = _random_marian(_config(tie_word_embeddings=False), seed=seed, eos_bias=eos_bias)
    ours = from_hf(hf)
    src = _sources(seed + 100, batch=8)
    expected = hf.generate(
        input_ids=src,
        attention_mask=(src != PAD).long(),
        num_beams=5,
        do_sample=False,
        max_new_tokens=16,
        length_penalty=length_penalty,
        early_stopping=True,
    )
    got = beam_search(ours, src, sos_id=PAD, eos_id=EOS, beam_size=5, max_len=16, length_penalty=length_penalty)
    assert got == _hf_ids(expected)


def test_marian_beam_test_is_not_vacuous():
    """The beam parity test needs hypotheses that end at different lengths, some before the limit."""
    hf = _random_marian(_config(tie_word_embeddings=False), seed=0, eos_bias=3.0)
    lengths = {len(ids) for ids in beam_search(from_hf(hf), _sources(20, batch=8), PAD, EOS, 5, 16)}
    assert len(lengths) >= 2 and min(lengths) < 16


def test_marian_final_logits_bias_is_the_output_bias_frozen_and_exported_back(tmp_path):
    """OPUS-MT's output bias (Marian's decoder_ff_logit_out_b, nonzero in every trained checkpoint): read into
    ``output.bias`` and written back by an export."""
    from tformer.hf import export

    hf = _random_marian(_config(), logits_bias=2.0)
    ours = from_hf(hf)
    assert ours.config.output_bias
    torch.testing.assert_close(ours.output.bias, hf.final_logits_bias[0])
    export(ours, tmp_path / "hf")
    back = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(back.final_logits_bias, hf.final_logits_bias)
    src, tgt = _sources(3), torch.full((6, 1), PAD)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(
            back(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits,
            expected,
            atol=ATOL,
            rtol=0,
        )
    state = hf.state_dict()
    del state["final_logits_bias"]  # a file without one: transformers' zeros
    assert not from_hf(hf.config.to_dict(), state).output.bias.any()


def test_marian_dropouts_are_read_each_to_its_own_and_written_back(tmp_path):
    """Marian's three rates, the residual one, the attention weights' and the one inside the feed-forward
    (``activation_dropout``, 0 in OPUS-MT), are ours ``dropout``, ``attn_dropout``, ``ffn_dropout``, both ways."""
    import json

    from tformer.hf import export

    hf = _random_marian(_config(dropout=0.1, attention_dropout=0.05, activation_dropout=0.2))
    ours = from_hf(hf)
    assert (ours.config.dropout, ours.config.attn_dropout, ours.config.ffn_dropout) == (0.1, 0.05, 0.2)
    assert {layer.ff.dropout.p for layer in [*ours.encoder.layers, *ours.decoder.layers]} == {0.2}
    assert from_hf(_random_marian(_config(dropout=0.1))).config.ffn_dropout == 0.0  # transformers' default: none
    export(ours, tmp_path / "hf")
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["dropout"], written["attention_dropout"], written["activation_dropout"]) == (0.1, 0.05, 0.2)


def test_marian_unknown_activation_refused():
    with pytest.raises(ValueError, match="activation_function"):
        from_hf(transformers.MarianMTModel(_config(activation_function="tanh")))
