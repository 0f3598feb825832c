"""Translation end to end: overfitting, greedy/beam/batched decoding, BLEU, exact resume, the demo."""

import functools
import json
import math

import pytest
import sacrebleu
import torch

from tformer import Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.generation import beam_search, translate_ids
from tformer.tokenizers import train_tokenizer
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_SOS as SOS
from tformer.training.trainer import TrainConfig, Trainer
from tformer.translation import TranslationTask, Translator, corpus_bleu
from tformer.translation.toy_corpus import builtin_pairs

PAIRS = builtin_pairs()[::59][:20]  # 20 varied pairs


def _translator(pairs, seed=0, **overrides):
    tok = train_tokenizer("bpe", [t for p in pairs for t in p], vocab_size=200, min_frequency=1)
    cfg = Seq2SeqConfig.preset(
        "tiny",
        src_vocab_size=tok.vocab_size,
        tgt_vocab_size=tok.vocab_size,
        share_embeddings=True,
        max_len=64,
        **overrides,
    )
    torch.manual_seed(seed)
    return Translator(Seq2SeqTransformer(cfg), tok, tok)


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    """A tiny model trained on 20 pairs until it reproduces them."""
    translator = _translator(PAIRS, dropout=0.0)
    out = tmp_path_factory.mktemp("overfit")
    task = TranslationTask(translator, PAIRS, PAIRS, batch_tokens=512, label_smoothing=0.0, bleu_sentences=20)
    # float32 (auto is bf16 on some classes): the beam test below depends on when each source ends, the model's digits
    cfg = TrainConfig(
        out_dir=str(out), lr=3e-3, warmup_steps=20, max_steps=300, eval_every=300, progress=False, precision="fp32"
    )
    result = Trainer(translator.model, task, cfg).fit()
    return translator, out, result


def test_overfits_twenty_pairs_exactly(overfit):
    translator, out, result = overfit
    sources = [s for s, _ in PAIRS]
    assert translator.translate(sources) == [t for _, t in PAIRS]
    assert result["bleu"] == pytest.approx(100.0)
    assert Translator.load(out).translate(sources[:3]) == [t for _, t in PAIRS[:3]]  # saved with its tokenizers
    assert (out / "curves.png").stat().st_size > 0
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert records[0]["train_loss"] > 3 * records[-2]["train_loss"]  # the loss really fell


def test_beam_one_equals_greedy(overfit):
    translator = _translator(PAIRS, seed=5)  # untrained: many near-ties, a harder check
    src = translator.encode_sources([s for s, _ in PAIRS[:6]])
    model = translator.model.eval()
    assert beam_search(model, src, SOS, EOS, beam_size=1, max_len=12) == translate_ids(model, src, SOS, EOS, max_len=12)


@pytest.mark.parametrize("beam", [1, 4])
def test_batched_translation_equals_one_by_one(overfit, beam):
    translator = overfit[0]
    sentences = [s for s, _ in PAIRS[:8]] + ["I am good.", "We like the book every day."]
    batched = translator.translate(sentences, beam=beam, batch_size=16)
    single = [translator.translate([s], beam=beam)[0] for s in sentences]
    assert batched == single


def test_greedy_decoding_drops_finished_sources_from_the_batch(overfit, monkeypatch):
    translator = overfit[0]
    model = translator.model.eval()
    src = translator.encode_sources(["I am good.", "We do not eat bread today."])  # padded: a source mask too
    single = [translate_ids(model, src[i : i + 1], SOS, EOS, max_len=30)[0] for i in range(2)]
    rows, decode = [], model.decode
    monkeypatch.setattr(model, "decode", lambda tgt, *args: rows.append(tgt.shape[0]) or decode(tgt, *args))
    assert translate_ids(model, src, SOS, EOS, max_len=30) == single
    short, long = sorted(len(ids) for ids in single)
    assert short < long < 30
    assert rows == [2] * (short + 1) + [1] * (long - short)  # the short one's <eos> step, then one row


def test_beam_search_drops_done_sources_from_the_batch(overfit, monkeypatch):
    translator = overfit[0]
    model = translator.model.eval()
    src = translator.encode_sources(["I am good.", "We do not eat bread today.", "She is tired."])  # padded
    single = [beam_search(model, src[i : i + 1], SOS, EOS, beam_size=4, max_len=30)[0] for i in range(3)]
    rows, decode = [], model.decode
    monkeypatch.setattr(model, "decode", lambda tgt, *args: rows.append(tgt.shape[0]) or decode(tgt, *args))
    assert beam_search(model, src, SOS, EOS, beam_size=4, max_len=30) == single
    assert rows[0] == 3  # the first step: one row per source
    assert set(rows[1:]) >= {12, 4} and rows[1:] == sorted(rows[1:], reverse=True)  # 3, 2, then 1 source × 4 beams
    assert len(rows) < 30


class _ToyCache:
    """Remembers each row's prefix; follows reorder() like the real KV cache."""

    def __init__(self):
        self.prefix = None

    def reorder(self, index, cross=True):
        self.prefix = self.prefix.index_select(0, index)


class _ToyModel:
    """A 'model' whose next-token probabilities are set by hand, keyed by the prefix after <sos>.

    vocab: 0 <pad> 1 <unk> 2 <sos> 3 <eos> 4 A 5 B 6 C
    P(A)=.6 P(B)=.4; after A: C .4, B .3, <eos> .3; after A C: <eos> 1; after B: <eos> .9, C .1.
    Greedy: A C <eos> (p = .24). Best: B <eos> (p = .36).
    """

    config = type("C", (), {"pad_id": 0})()
    table = {
        (): {4: 0.6, 5: 0.4},
        (4,): {6: 0.4, 5: 0.3, 3: 0.3},
        (4, 6): {3: 1.0},
        (5,): {3: 0.9, 6: 0.1},
        (4, 5): {3: 1.0},
        (5, 6): {3: 1.0},
    }

    def encode(self, src, mask=None):
        return torch.zeros(src.shape[0], 1, 1)

    def new_cache(self, max_len=None):
        return _ToyCache()

    def decode(self, tokens, memory, memory_mask, cache):
        cache.prefix = tokens if cache.prefix is None else torch.cat([cache.prefix, tokens], 1)
        logits = torch.full((tokens.shape[0], 1, 7), -1e9)
        for row, prefix in enumerate(cache.prefix[:, 1:].tolist()):
            for tok, p in self.table.get(tuple(prefix), {3: 1.0}).items():
                logits[row, 0, tok] = math.log(p)
        return logits


def test_beam_search_finds_the_known_best_sequence():
    model, src = _ToyModel(), torch.ones(1, 3, dtype=torch.long)
    assert translate_ids(model, src, SOS, EOS, max_len=5) == [[4, 6]]  # greedy is fooled
    assert beam_search(model, src, SOS, EOS, beam_size=2, max_len=5, length_penalty=0.0) == [[5]]
    assert (
        beam_search(model, torch.ones(3, 2, dtype=torch.long), SOS, EOS, beam_size=3, max_len=5, length_penalty=0.0)
        == [[5]] * 3
    )
    # 2K = 8 candidates asked of a 7-token vocabulary at the first step, which decodes one row per source
    assert (
        beam_search(model, torch.ones(2, 2, dtype=torch.long), SOS, EOS, beam_size=4, max_len=5, length_penalty=0.0)
        == [[5]] * 2
    )


@pytest.mark.parametrize("kwargs, name", [(dict(max_len=0), "max_len"), (dict(beam_size=0), "beam_size")])
def test_decoding_lengths_and_beam_sizes_are_checked(kwargs, name):
    model, src = _ToyModel(), torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer"):
        beam_search(model, src, SOS, EOS, **{"beam_size": 2, "max_len": 5, **kwargs})
    if name == "max_len":
        with pytest.raises(ValueError, match=r"max_len must be a positive integer"):
            translate_ids(model, src, SOS, EOS, max_len=0)


def test_bleu_matches_sacrebleu_and_hand_value():
    hyp, ref = ["the cat sat on the mat"], [["the cat sat on a mat"]]
    bleu, chrf, bleu_sig, _ = corpus_bleu(hyp, ref)
    # precisions 5/6, 3/5, 2/4, 1/3, no brevity penalty: (5/6·3/5·2/4·1/3)^(1/4)
    assert bleu == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-9)
    assert bleu == pytest.approx(sacrebleu.corpus_bleu(hyp, ref).score)
    assert chrf == pytest.approx(sacrebleu.corpus_chrf(hyp, ref).score)
    assert "nrefs:1" in bleu_sig
    two_refs = corpus_bleu(
        ["the cat sat on the mat", "a dog"], [["the cat sat on a mat", "a dog"], ["the cat sat on the mat", ""]]
    )
    assert two_refs[0] == pytest.approx(100.0)


def _losses(out):
    return [
        (r["step"], r["train_loss"])
        for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
        if "train_loss" in r
    ]


def test_resume_reproduces_the_uninterrupted_run(tmp_path, capsys):
    pairs = builtin_pairs()[::7]
    args = [
        "train",
        "translation",
        "--preset",
        "tiny",
        "--vocab-size",
        "300",
        "--batch-tokens",
        "512",
        "--log-every",
        "1",
        "--warmup-steps",
        "5",
        "--eval-every",
        "6",
        "--bleu-sentences",
        "5",
        "--no-progress",
        "--accum-steps",
        "2",
    ]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    args += ["--data", str(data)]
    assert main(args + ["--out", str(tmp_path / "full"), "--max-steps", "14"]) == 0
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "8"]) == 0
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "14", "--resume"]) == 0
    full, cut = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in full] == list(range(1, 15))
    assert cut == full  # every step's loss, bit for bit
    # pairs changed since: another split, other pairs held out; refused as train lm refuses a changed text
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs[1:]), encoding="utf-8")
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "16", "--resume"]) == 2
    assert "the text of --data (SHA-256)" in capsys.readouterr().err and _losses(tmp_path / "cut") == full


def test_translate_and_evaluate_commands(overfit, tmp_path, capsys, monkeypatch):
    _, out, _ = overfit
    assert main(["translate", "--model", str(out), PAIRS[0][0], PAIRS[1][0]]) == 0
    assert capsys.readouterr().out.splitlines() == [PAIRS[0][1], PAIRS[1][1]]
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(PAIRS[2][0] + "\n"))
    assert main(["translate", "--model", str(out), "--beam", "3"]) == 0
    assert capsys.readouterr().out.strip() == PAIRS[2][1]
    (tmp_path / "src.txt").write_text("\n".join(s for s, _ in PAIRS) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(t for _, t in PAIRS) + "\n")
    assert (
        main(["evaluate", "--model", str(out), "--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")])
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("BLEU 100.00") and "nrefs:1" in text and "chrF 100.00" in text
    seen = []  # evaluate decodes with the flags it was given (it once dropped --length-penalty and --batch-size)
    real = Translator.translate

    @functools.wraps(real)  # the flags' defaults are read off its signature
    def spy(self, *args, **kwargs):
        seen.append(kwargs)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", spy)
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
    decoding = ["--beam", "2", "--length-penalty", "0.6", "--batch-size", "3"]
    assert main(["evaluate", "--model", str(out), *files, *decoding]) == 0
    assert {k: seen[-1][k] for k in ("beam", "length_penalty", "batch_size")} == {
        "beam": 2,
        "length_penalty": 0.6,
        "batch_size": 3,
    }


def test_demo_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert (
        main(
            ["demo", "--out", str(out), "--minutes", "0.05", "--preset", "tiny", "--vocab-size", "300", "--no-progress"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "I am good." in text and "validation: loss" in text
    for name in (
        "best/config.json",  # the best model and its tokenizers, swapped in together
        "best/model.safetensors",
        "best/src_tokenizer.json",
        "curves.png",
        "cross_attention.png",
        "log.jsonl",
    ):
        assert (out / name).stat().st_size > 0, name


def test_the_demo_takes_the_training_precision_flag(tmp_path, capsys):
    """``tformer demo --precision fp32`` trains in float32 as asked (its log's first record says so); int8, an
    inference precision, is refused in one line naming the flag."""
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--max-steps", "2", "--vocab-size", "300", "--no-progress"]
    assert main([*argv, "--precision", "fp32"]) == 0
    assert "precision: fp32 (as asked)" in capsys.readouterr().out
    first = json.loads((out / "log.jsonl").read_text().splitlines()[0])
    assert first["precision"] == "fp32" and first["label_smoothing"] == 0.1  # what train_loss is (the curves say it)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--overwrite", "--precision", "int8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "--precision" in err[-1] and "int8" in err[-1]


def test_the_length_penalty_is_tuned_on_validation_and_kept_with_the_model(overfit, tmp_path, capsys, monkeypatch):
    import shutil

    from tformer.models.checkpoint import model_dir
    from tformer.translation.translator import read_length_penalty, tune_length_penalty

    _, out, _ = overfit
    model = tmp_path / "model"
    shutil.copytree(model_dir(out), model)  # the fixture's run stays as it is
    (tmp_path / "src.txt").write_text("\n".join(s for s, _ in PAIRS) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(t for _, t in PAIRS) + "\n")
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
    assert main(["evaluate", "--model", str(model), *files, "--tune-length-penalty"]) != 0  # greedy: nothing to rank
    assert "needs --beam 2 or more" in capsys.readouterr().err
    for flag, value in (("--length-penalty", "0"), ("--out-hyp", str(tmp_path / "hyp.txt"))):  # not ignored: refused
        assert (
            main(["evaluate", "--model", str(model), *files, "--beam", "2", "--tune-length-penalty", flag, value]) == 2
        )
        assert f"writes no translations: drop {flag}" in capsys.readouterr().err
    assert not (tmp_path / "hyp.txt").exists()
    assert main(["evaluate", "--model", str(model), *files, "--beam", "2", "--tune-length-penalty"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("length penalty ")]
    scores = {float(r[2].rstrip(":")): float(r[4]) for r in rows}  # "length penalty 0.6: BLEU 93.61  chrF 96.68"
    assert sorted(scores) == [0.6, 0.8, 1.0, 1.2, 1.4]
    expected = max(scores, key=lambda lp: (scores[lp], -abs(lp - 1.0)))  # the best BLEU, ties to the nearest 1.0
    assert read_length_penalty(model) == expected
    translator = Translator.load(model)

    def fake(sources, references, beam, length_penalty, **_):  # BLEU peaks at 1.2
        return {"bleu": 50 - 10 * abs(length_penalty - 1.2), "chrf": 0.0}

    monkeypatch.setattr(translator, "evaluate", fake)
    best, table = tune_length_penalty(translator, ["a"], [["a"]], beam=3)
    assert best == 1.2 and [row["length_penalty"] for row in table] == [0.6, 0.8, 1.0, 1.2, 1.4]
    (model / "decoding.json").write_text('{"length_penalty": 1.2}')
    kept = Translator.load(model)
    assert kept.length_penalty == 1.2
    seen = []
    monkeypatch.setattr(
        "tformer.translation.translator.beam_search", lambda *a, **k: seen.append(a[6]) or [[3]] * len(a[1])
    )
    kept.translate(["I am good."], beam=2)
    kept.translate(["I am good."], beam=2, length_penalty=0.6)
    assert seen == [1.2, 0.6]  # the model's own, unless a call gives one
    (model / "decoding.json").write_text('{"length_penalty": "long"}')
    with pytest.raises(ValueError, match="decoding.json.*'length_penalty' is 'long'"):
        Translator.load(model)


def test_a_tuned_length_penalty_goes_to_hugging_face_and_back(overfit, tmp_path):
    import shutil

    from transformers import GenerationConfig

    from tformer.models.checkpoint import model_dir
    from tformer.translation.translator import save_length_penalty

    _, out, _ = overfit
    model = tmp_path / "model"
    shutil.copytree(model_dir(out), model)
    save_length_penalty(model, 1.2, beam=4)
    assert main(["export", str(model), "--to", "hf", str(tmp_path / "hf")]) == 0
    generation = GenerationConfig.from_pretrained(tmp_path / "hf")  # as transformers' generate reads it
    assert generation.length_penalty == 1.2 and generation.num_beams == 4
    assert Translator.load(tmp_path / "hf").length_penalty == 1.2  # and tformer, from the Hugging Face directory
    # tuned again in the Hugging Face directory: kept where transformers reads it, one setting, not two that disagree
    assert save_length_penalty(tmp_path / "hf", 0.8, beam=4) == tmp_path / "hf" / "generation_config.json"
    assert not (tmp_path / "hf" / "decoding.json").exists()
    assert GenerationConfig.from_pretrained(tmp_path / "hf").length_penalty == 0.8
    assert Translator.load(tmp_path / "hf").length_penalty == 0.8
    assert main(["export", str(model), "--to", "hf", str(tmp_path / "hf"), "--overwrite"]) == 0  # still tformer's
