"""Opus-MT translators end to end (issue 40, item 4): a Hugging Face Marian directory in Opus-MT's layout (config.json,
model.safetensors, source.spm, target.spm, vocab.json, tokenizer_config.json) runs in tformer token for token as
``transformers``' MarianTokenizer + ``MarianMTModel.generate`` do: the tokenizer (encode, decode), ``translate`` and
``evaluate`` (greedy and beam 4), ``trace``, the explorer, and ``export --to hf`` back to that layout.

Offline: the test trains two small SentencePiece models (source and target) on the built-in corpus, writes vocab.json
as Opus-MT does (``</s>`` 0, ``<unk>`` 1, a language code, the pieces, ``<pad>`` last; one piece left out, so that it
reads as ``<unk>``), and saves a tiny random ``MarianMTModel`` beside them. Both layouts: one vocabulary for both
sides, and ``separate_vocabs`` (target_vocab.json, whose ``<pad>`` is not at vocab.json's id, with
``clean_up_tokenization_spaces``).
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

sentencepiece = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

import tformer  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.explore import Session  # noqa: E402
from tformer.explore.model import load_model  # noqa: E402
from tformer.tokenizers import MarianTokenizer, load_tokenizer, train_tokenizer  # noqa: E402
from tformer.translation import Translator  # noqa: E402
from tformer.translation.toy_corpus import builtin_pairs  # noqa: E402
from tformer.translation.translator import TranslationCut  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # transformers' own advice

MAX_NEW = 16  # the new tokens both decode at most
EOS = 0
SENTENCES = [
    "I am good.",
    "We do not eat bread today.",
    "Am I tired?",
    "She eats an apple.",
    "They are not going home.",
    "Do you like music?",
    "He is happy.",
    "You drink coffee.",
    ">>fra<< Are you cold?",  # a language code, read as one token
    "The café costs 5 €.",  # characters the SentencePiece models never saw: <unk>
]
TEXTS = [  # for the tokenizer alone: the special tokens' text, codes, spaces, nothing
    *SENTENCES,
    "We do not eat bread today. </s> x",
    "a<pad>b<unk>c",
    "  two   spaces ",
    ">>xx<<unknown code",
    "",
    "Je ne suis pas fatigué.",
]


# ------------------------------------------------------------------------------------------------ the directory


def _spm(lines: list[str], size: int) -> bytes:
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,  # the built-in corpus is small: as many pieces as it gives
        num_threads=1,
        minloglevel=2,
    )
    return out.getvalue()


def _pieces(model: bytes) -> list[str]:
    sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def _vocab(models: list[bytes], dropped: str, pad: str = "last") -> dict[str, int]:
    """Opus-MT's vocab.json: </s> 0, <unk> 1, a language code, every piece but ``dropped``, <pad> last; ``pad="3"``:
    <pad> at 3 instead; ``"code"``: another language code at 3 and <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1, ">>fra<<": 2} | {"3": {"<pad>": 3}, "code": {">>eng<<": 3}}.get(pad, {})
    for model in models:
        for piece in _pieces(model):
            if piece != dropped:
                vocab.setdefault(piece, len(vocab))
    return vocab | ({} if pad == "3" else {"<pad>": len(vocab)})


def _marian(
    vocab: int, pad: int, target_vocab: int | None, eos_bias: float, seed: int = 0
) -> transformers.MarianMTModel:
    """A tiny random MarianMTModel whose outputs depend on the source; ``eos_bias`` (along the last LayerNorm's
    shift, as in tests/test_interop_marian.py) makes some translations end early."""
    separate = {} if target_vocab is None else {"decoder_vocab_size": target_vocab}
    config = transformers.MarianConfig(
        vocab_size=vocab,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=pad,
        decoder_start_token_id=pad,  # Opus-MT starts the decoder from <pad>
        eos_token_id=EOS,
        forced_eos_token_id=None,
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        share_encoder_decoder_embeddings=target_vocab is None,
        **separate,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue  # Marian's fixed sinusoidal table
            if p.dim() > 1:
                p.normal_(0, 0.3 if "embed" in name or "shared" in name or "lm_head" in name else 0.2)
            else:
                p.add_(torch.randn_like(p) * 0.1)
        shift = model.model.decoder.layers[-1].final_layer_norm.bias
        model.lm_head.weight[EOS] = eos_bias * shift / shift.norm() ** 2
    # both decode the same way: no bad words, no forced end, at most MAX_NEW tokens, a beam stops when K are done
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad,
        eos_token_id=EOS,
        pad_token_id=pad,
        max_new_tokens=MAX_NEW,
        num_beams=4,  # as Opus-MT's; each call below names its own
        early_stopping=True,
    )
    return model


def _opus_dir(directory: Path, separate: bool) -> Path:
    pairs = builtin_pairs()
    source, target = _spm([en for en, _ in pairs], 150), _spm([fr for _, fr in pairs], 150)
    cut = sentencepiece.SentencePieceProcessor(model_proto=source).encode(SENTENCES[1], out_type=str)
    dropped = max(cut, key=len)  # a piece of a test sentence the vocabulary lacks: <unk>
    directory.mkdir()
    (directory / "source.spm").write_bytes(source)
    (directory / "target.spm").write_bytes(target)
    settings = {"source_lang": "en", "target_lang": "fr"}
    if separate:
        # the model's <pad> (its decoder start) is vocab.json's, 3; target_vocab.json has its own text <pad> last,
        # which transformers writes out as a special token (by its text) yet never skips (not its id). No piece of a
        # target is at 3: tformer's decoder would read it as padding when teacher-forced, where Marian reads it
        vocab, target_vocab = _vocab([source], dropped, "3"), _vocab([target], dropped, "code")
        (directory / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
        settings |= {"separate_vocabs": True, "clean_up_tokenization_spaces": True}
    else:
        vocab, target_vocab = _vocab([source, target], dropped), None
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    sizes = None if target_vocab is None else len(target_vocab)
    _marian(len(vocab), vocab["<pad>"], sizes, 2.5 if separate else 3.0, seed=1).save_pretrained(directory)
    assert (directory / "model.safetensors").is_file() and (directory / "config.json").is_file()
    return directory


@pytest.fixture(scope="module", params=["shared", "separate"])
def opus(request, tmp_path_factory) -> Path:
    return _opus_dir(tmp_path_factory.mktemp("opus") / f"opus-mt-en-fr-{request.param}", request.param == "separate")


@functools.cache
def _hf(directory: Path):
    """transformers' own reading of ``directory``: MarianTokenizer and MarianMTModel."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert type(tokenizer).__name__ == "MarianTokenizer"
    return tokenizer, transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()


def _generate(directory: Path, sentences: list[str], beam: int) -> tuple[list[list[int]], list[str]]:
    return _generated(directory, tuple(sentences), beam)


@functools.cache
def _generated(directory: Path, sentences: tuple[str, ...], beam: int) -> tuple[list[list[int]], list[str]]:
    """transformers' translations of ``sentences``: the ids after the start token (to the first </s>) and the text."""
    tokenizer, model = _hf(directory)
    batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
    out = model.generate(**batch, num_beams=beam, do_sample=False, max_new_tokens=MAX_NEW, early_stopping=True)
    ids = [row[1:][: row[1:].index(EOS)] if EOS in row[1:] else row[1:] for row in out.tolist()]
    return ids, tokenizer.batch_decode(out, skip_special_tokens=True)


# ------------------------------------------------------------------------------------------------ the tokenizer


def test_the_tokenizer_reads_and_writes_as_marian_tokenizer(opus):
    hf, _ = _hf(opus)
    loaded = tformer.load(opus)
    source, target = loaded.tokenizer, loaded.target_tokenizer
    assert isinstance(source, MarianTokenizer) and isinstance(target, MarianTokenizer)
    assert (source.side, target.side, loaded.start_id) == ("source", "target", hf.pad_token_id)
    assert (source.eos_id, source.unk_id, source.pad_id) == (hf.eos_token_id, hf.unk_token_id, hf.pad_token_id)
    # the source's pieces by vocab.json (transformers names them from target_vocab.json when the sides have their own)
    pieces = {i: piece for piece, i in json.loads((opus / "vocab.json").read_text()).items()}
    for text in TEXTS:
        assert source.encode(text, add_special_tokens=True) == hf(text)["input_ids"], text
        assert target.encode(text, add_special_tokens=True) == hf(text_target=text)["input_ids"], text
        assert source.tokens(text, True) == [pieces[i] for i in hf(text)["input_ids"]], text
    unknown = [source.encode(t, add_special_tokens=True).count(source.unk_id) for t in SENTENCES]
    assert unknown[1] and unknown[-1]  # the piece vocab.json lacks, the unseen characters: both <unk>
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(target.vocab_size) for _ in range(rng.randrange(12))]
        for skip in (True, False):
            assert target.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), ids


def test_a_translator_saved_and_loaded_keeps_the_opus_tokenizer(opus, tmp_path):
    """tformer's own layout (``Loaded.save``) keeps the SentencePiece files; read back, it translates the same."""
    saved = tformer.load(opus).save(tmp_path / "saved")
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in saved.iterdir()}
    again = tformer.load(saved)
    assert again.kind.source == "model" and load_tokenizer(saved, "tgt_").side == "target"
    assert again.start_id == tformer.load(opus).start_id
    translations = [Translator.load(d).translate(SENTENCES, max_new_tokens=MAX_NEW) for d in (saved, opus)]
    assert translations[0] == translations[1]


# ------------------------------------------------------------------------------------------------ translate, evaluate


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_is_generate_token_for_token(opus, beam, capsys):
    hf_ids, hf_text = _generate(opus, SENTENCES, beam)
    translator = Translator.load(opus)
    tokenizer, _ = _hf(opus)
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)["input_ids"]
    assert translator.encode_sources(SENTENCES).tolist() == batch.tolist()  # </s> after each, padded with <pad>
    assert [translator.tgt_tokenizer.decode(ids) for ids in hf_ids] == hf_text
    with pytest.warns(TranslationCut) as caught:
        assert translator.translate(SENTENCES, beam=beam, max_new_tokens=MAX_NEW) == hf_text
    capsys.readouterr()
    assert main(["translate", "--model", str(opus), *SENTENCES, "--beam", str(beam), "--max-new-tokens", "16"]) == 0
    out, err = capsys.readouterr()
    assert out.split("\n")[: len(SENTENCES)] == hf_text
    lengths = {len(ids) for ids in hf_ids}
    assert len(lengths) >= 3 and min(lengths) < MAX_NEW and any(hf_text)  # not vacuous: some end early, some say
    # the translations that reached the limit without </s> (transformers' too) are said, each by its place
    cut = [i + 1 for i, ids in enumerate(hf_ids) if len(ids) == MAX_NEW]
    said = "reached 16 tokens without its end token: cut there (--max-new-tokens 16)"
    assert 0 < len(cut) < len(SENTENCES)
    assert sorted(w.message.number for w in caught) == cut and {w.filename for w in caught} == {__file__}
    assert err.splitlines() == [f"tformer translate: warning: translation {i} {said}" for i in cut]


def test_evaluate_scores_generate_s_translations(opus, tmp_path, capsys):
    _, hf_text = _generate(opus, SENTENCES, 4)
    src, ref, hyp = tmp_path / "src.en", tmp_path / "ref.fr", tmp_path / "hyp.fr"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(hf_text) + "\n", encoding="utf-8")
    argv = ["--src", str(src), "--ref", str(ref), "--beam", "4", "--max-new-tokens", "16", "--out-hyp", str(hyp)]
    assert main(["evaluate", "--model", str(opus), *argv]) == 0
    assert hyp.read_text(encoding="utf-8").split("\n")[: len(SENTENCES)] == hf_text
    assert "chrF 100.00" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ trace, explore


def test_trace_reads_and_decodes_as_transformers(opus, tmp_path, capsys):
    tokenizer, model = _hf(opus)
    text = min(SENTENCES, key=lambda s: len(_generate(opus, [s], 1)[0][0]))  # one whose translation ends early
    target = "Je ne mange pas de pain."
    path = tmp_path / "trace.json"
    argv = ["trace", "--model", str(opus), text, "--target", target, "--max-new-tokens", "16", "--json", str(path)]
    assert main(argv) == 0
    capsys.readouterr()
    trace = json.loads(path.read_text())
    src = tokenizer(text)["input_ids"]
    tgt = [tokenizer.pad_token_id] + tokenizer(text_target=target)["input_ids"][:-1]  # shifted right, as in training
    pieces = {i: piece for piece, i in json.loads((opus / "vocab.json").read_text()).items()}  # the source's
    assert trace["tokens"]["encoder"] == [pieces[i] for i in src]
    assert trace["tokens"]["decoder"] == tokenizer.convert_ids_to_tokens(tgt)
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits
    logits = next(e for e in trace["entries"] if e["stage"] == "logits")
    torch.testing.assert_close(torch.tensor(logits["values"]), expected, atol=1e-4, rtol=0)
    greedy = _generate(opus, [text], 1)[0][0]
    steps = [step["id"] for step in trace["generation"]]
    assert steps == greedy + [EOS] and len(greedy) < MAX_NEW  # stopped by </s>


def test_the_explorer_decodes_as_generate(opus):
    session = Session(load_model(str(opus)))
    for beam in (1, 4):
        ids, text = _generate(opus, SENTENCES, beam)
        for i, sentence in [(i, SENTENCES[i]) for i in (0, 1, 4, 8, 9)]:  # an unknown piece, a code, unseen signs
            params = {"text": sentence, "max_len": MAX_NEW}
            if beam > 1:
                answer = session.call("decode", {**params, "mode": "beam", "beam_size": beam, "length_penalty": 1.0})
                assert answer["nodes"][0]["token_id"] == tformer.load(opus).start_id
            else:
                answer = session.call("decode", params)
                assert [s["id"] for s in answer["steps"] if s["id"] != EOS] == ids[i]
            assert answer["output"] == text[i], (beam, sentence)
    tokenizer, _ = _hf(opus)
    pieces = {i: piece for piece, i in json.loads((opus / "vocab.json").read_text()).items()}  # the source's
    traced = session.call("trace", {"text": SENTENCES[0]})
    assert traced["tokens"]["encoder"] == [pieces[i] for i in tokenizer(SENTENCES[0])["input_ids"]]


# ------------------------------------------------------------------------------------------------ export


def test_export_writes_the_opus_layout_transformers_reads(opus, tmp_path, capsys):
    """An Opus-MT directory, and a tformer model directory saved from one, export to the same layout:
    transformers' MarianTokenizer + MarianMTModel read it and translate as from the original."""
    saved = tformer.load(opus).save(tmp_path / "saved")
    _, expected = _generate(opus, SENTENCES, 4)
    for i, model in enumerate([opus, saved]):
        out = tmp_path / f"hf{i}"
        assert main(["export", str(model), "--to", "hf", str(out), "--tokenizer", "spm"]) == 0
        assert "tokenizer.json" not in {p.name for p in out.iterdir()}
        assert (out / "source.spm").read_bytes() == (opus / "source.spm").read_bytes()
        config = json.loads((out / "config.json").read_text())
        assert config["decoder_start_token_id"] == config["pad_token_id"] == tformer.load(opus).start_id
        assert _generate(out, SENTENCES, 4)[1] == expected
        assert Translator.load(out).translate(SENTENCES, beam=4, max_new_tokens=MAX_NEW) == expected
    capsys.readouterr()
    assert main(["export", str(opus), "--to", "hf", str(tmp_path / "json"), "--tokenizer", "json"]) == 2
    assert "--tokenizer json" in capsys.readouterr().err


def test_export_spm_of_a_bpe_translator_says_why_not(tmp_path, capsys):
    from tformer import Seq2SeqConfig, Seq2SeqTransformer

    pairs = builtin_pairs()[::59][:20]
    tok = train_tokenizer("bpe", [t for p in pairs for t in p], vocab_size=200, min_frequency=1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=64)
    Translator(Seq2SeqTransformer(config).eval(), tok, tok).save(tmp_path / "bpe")
    assert main(["export", str(tmp_path / "bpe"), "--to", "hf", str(tmp_path / "out"), "--tokenizer", "spm"]) == 2
    err = capsys.readouterr().err
    assert "not SentencePiece" in err and "tokenizer.json" in err and not (tmp_path / "out").exists()
    assert main(["export", str(tmp_path / "bpe"), "--to", "hf", str(tmp_path / "out")]) == 0  # tokenizer.json
    assert (tmp_path / "out" / "tokenizer.json").is_file() and not (tmp_path / "out" / "source.spm").exists()


# ------------------------------------------------------------------------------------------------ refusals


def test_a_vocabulary_that_does_not_fit_the_model_is_one_line(opus, tmp_path, capsys):
    broken = Path(shutil.copytree(opus, tmp_path / "broken"))
    vocab = json.loads((broken / "vocab.json").read_text())
    vocab["<pad>"], vocab["</s>"] = vocab["</s>"], vocab["<pad>"]  # <pad> is no longer the model's pad_token_id
    (broken / "vocab.json").write_text(json.dumps(vocab))
    assert main(["translate", "--model", str(broken), "I am good."]) == 2
    err = capsys.readouterr().err
    assert "vocab.json" in err and "the model pads with" in err and len(err.strip().splitlines()) == 1
    (broken / "source.spm").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="source.spm is not a SentencePiece model"):
        tformer.load(broken)
