"""tformer → Hugging Face → tformer for every family: ``tformer.hf.export`` (and ``tformer export MODEL --to hf OUT``)
writes a directory that ``transformers`` loads with its own classes — every weight used, none missing — giving our
logits on a padded batch; ``tformer.hf.load`` reads it back to the same logits; the tokenizer files encode as ours.
A setting no Hugging Face class holds is refused naming the field, before anything is written."""

import json
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.generation import translate_ids  # noqa: E402
from tformer.hf import export, from_hf, load  # noqa: E402
from tformer.tokenizers import train_tokenizer  # noqa: E402
from tformer.tokens import TRANSLATION_EOS, TRANSLATION_SOS  # noqa: E402

ATOL = 1e-5
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "the cat sat on the mat, and the dog sat on the log.",
    "héllo ünïcode ✓ café — naïve\n  two spaces\tand a tab",
] * 4
SMALL = dict(d_model=32, n_heads=4, d_ff=64, max_len=24, dropout=0.0)
LLAMA = dict(norm="rmsnorm", ffn="swiglu", positional="rope", bias=False, activation="silu")

# name -> (tokenizer kind, build(vocab size) -> model, the transformers class it must load as)
CASES = {
    "gpt2": ("byte_bpe", lambda v: GPT(GPTConfig(vocab_size=v, n_layers=2, **SMALL)), "GPT2LMHeadModel"),
    "gpt2-char-untied": (
        "char",
        lambda v: GPT(GPTConfig(vocab_size=v, n_layers=1, tie_embeddings=False, **SMALL)),
        "GPT2LMHeadModel",
    ),
    "gpt-neox-char": (  # shakespeare-char-6min's block: RoPE with GPT-2's MLP (exact GELU), a character vocabulary
        "char",
        lambda v: GPT(GPTConfig(vocab_size=v, n_layers=2, positional="rope", activation="gelu", **SMALL)),
        "GPTNeoXForCausalLM",
    ),
    "llama-gqa": (
        "byte_bpe",
        lambda v: GPT(GPTConfig(vocab_size=v, n_layers=2, n_kv_heads=2, tie_embeddings=False, **SMALL, **LLAMA)),
        "LlamaForCausalLM",
    ),
    "qwen3": (
        "byte_bpe",
        lambda v: GPT(GPTConfig(vocab_size=v, n_layers=2, n_kv_heads=1, head_dim=12, qk_norm=True, **SMALL, **LLAMA)),
        "Qwen3ForCausalLM",
    ),
    "bert": ("wordpiece", lambda v: Bert(BertConfig(vocab_size=v, n_layers=2, **SMALL)), "BertForPreTraining"),
    "marian-shared": (
        "bpe",
        lambda v: Seq2SeqTransformer(
            Seq2SeqConfig(
                src_vocab_size=v,
                tgt_vocab_size=v,
                n_encoder_layers=2,
                n_decoder_layers=1,
                share_embeddings=True,
                **SMALL,
            )
        ),
        "MarianMTModel",
    ),
    "marian-apart-gelu": (
        "bpe-pair",
        lambda v: Seq2SeqTransformer(
            Seq2SeqConfig(
                src_vocab_size=v[0],
                tgt_vocab_size=v[1],
                n_encoder_layers=1,
                n_decoder_layers=2,
                activation="gelu",
                scale_embeddings=False,
                **SMALL,
            )
        ),
        "MarianMTModel",
    ),
}
AUTO = {"GPT": "AutoModelForCausalLM", "Bert": "AutoModelForPreTraining", "Seq2SeqTransformer": "AutoModelForSeq2SeqLM"}


def _tokenizer(kind: str):
    if kind == "bpe-pair":
        return _tokenizer("bpe"), train_tokenizer("bpe", [t.upper() for t in TEXTS], 90, 1)
    sizes = {"byte_bpe": (300, None), "char": (None, None), "wordpiece": (120, 1), "bpe": (90, 1)}
    return train_tokenizer(kind, TEXTS, *sizes[kind])


def _randomise(model, seed=0):
    """Norms start at 1 and biases at 0: move every weight so each one matters."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def _batch(tokenizer, texts, pad: int, length: int):
    """ids (B, T) of ``texts`` cut to ``length``, right-padded with ``pad``, and the real-token mask."""
    rows = [tokenizer.encode(t)[:length] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # (B, T)
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return ids, mask


TEXTS_IN = ["the dog sat on the log.", "héllo café", "The quick brown fox"]


def _ours(model, tokenizer):
    """Our logits on a padded batch, and the same call for a transformers model (logits at real positions)."""
    pad = 0 if model.config.pad_id is None else model.config.pad_id
    if isinstance(model, Seq2SeqTransformer):
        src_tok, tgt_tok = tokenizer if isinstance(tokenizer, tuple) else (tokenizer, tokenizer)
        src, src_mask = _batch(src_tok, TEXTS_IN, pad, 10)
        tgt, tgt_mask = _batch(tgt_tok, ["le chat", "un chien sur le tapis", "x"], pad, 8)
        tgt = torch.cat([torch.full((3, 1), TRANSLATION_SOS), tgt], 1)  # <sos> + target
        tgt_mask = torch.cat([torch.ones(3, 1, dtype=torch.bool), tgt_mask], 1)
        args = dict(
            input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt, decoder_attention_mask=tgt_mask.long()
        )
        return (lambda m: m(src, tgt)), (lambda hf: hf(**args).logits), tgt_mask
    ids, mask = _batch(tokenizer, TEXTS_IN, pad, 12)
    if isinstance(model, Bert):
        types = torch.zeros_like(ids)
        types[:, 3:] = 1
        args = dict(input_ids=ids, attention_mask=mask.long(), token_type_ids=types)

        def mine(m):
            mlm, nsp = m.pretraining_logits(ids, token_type_ids=types, attention_mask=mask)
            return torch.cat([mlm.flatten(), nsp.flatten()])

        def theirs(hf):
            out = hf(**args)
            return torch.cat([out.prediction_logits.flatten(), out.seq_relationship_logits.flatten()])

        return mine, theirs, None
    return (lambda m: m(ids, mask)), (lambda hf: hf(input_ids=ids, attention_mask=mask.long()).logits), mask


def _close(a, b, mask=None):
    if mask is not None:
        a, b = a[mask], b[mask]  # (N, V): the real positions
    return (a - b).abs().max().item()


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    kind, build, cls = CASES[request.param]
    tokenizer = _tokenizer(kind)
    sizes = tuple(t.vocab_size for t in tokenizer) if isinstance(tokenizer, tuple) else tokenizer.vocab_size
    model = _randomise(build(sizes))
    out = export(model, tmp_path_factory.mktemp(request.param) / "hf", tokenizer)
    auto = getattr(transformers, AUTO[type(model).__name__])
    theirs, info = auto.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    return request.param, model, tokenizer, out, cls, theirs.eval(), info


def test_transformers_loads_every_weight_with_its_own_class(exported):
    _, model, _, out, cls, theirs, info = exported
    assert type(theirs).__name__ == cls
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls]
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    weights = sum(p.numel() for n, p in theirs.named_parameters() if "embed_positions" not in n)  # Marian's table
    assert weights == sum(p.numel() for p in model.parameters())


def test_transformers_gives_our_logits_on_a_padded_batch(exported):
    _, model, tokenizer, _, _, theirs, _ = exported
    mine, call, mask = _ours(model, tokenizer)
    with torch.no_grad():
        ours, hf = mine(model), call(theirs)
    assert ours.abs().max().item() > 0.1  # not a vacuous comparison
    assert _close(ours, hf, mask) <= ATOL


def test_read_back_without_transformers_gives_the_same_logits(exported):
    _, model, tokenizer, out, _, theirs, _ = exported
    back, again = load(out), from_hf(theirs)
    assert type(back) is type(model) is type(again)
    mine, _, mask = _ours(model, tokenizer)
    with torch.no_grad():
        assert _close(mine(back), mine(model), mask) <= ATOL
        assert _close(mine(again), mine(model), mask) <= ATOL


def test_the_tokenizer_files_encode_as_ours(exported):
    name, model, tokenizer, out, _, hf_model, _ = exported
    source, target = tokenizer if isinstance(tokenizer, tuple) else (tokenizer, tokenizer)
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    special = isinstance(model, Bert)  # [CLS] … [SEP]: what BERT reads, added by tokenizer.json's post-processor
    for text in TEXTS_IN + ["two  spaces\nnew line", "", "zzz ✗ unknown"]:
        ids = source.encode(text, add_special_tokens=special)
        assert theirs(text)["input_ids"] == ids, text
        assert theirs.decode(ids, skip_special_tokens=True) == source.decode(ids) or name == "bert"
    assert theirs.pad_token_id == source.pad_id
    if isinstance(model, Bert):  # a pair: BERT's segment ids from the tokenizer, and our logits through them
        pair = theirs("the dog sat", "on the log.", return_tensors="pt")
        ids, types = pair["input_ids"], pair["token_type_ids"]  # (1, T)
        first = int((ids[0] == source.sep_id).nonzero()[0, 0])  # sentence A's [SEP]
        assert types[0].tolist() == [0] * (first + 1) + [1] * (ids.shape[1] - first - 1)
        with torch.no_grad():
            mlm, nsp = model.pretraining_logits(ids, token_type_ids=types, attention_mask=pair["attention_mask"].bool())
            hf = hf_model(**pair)
        assert _close(mlm, hf.prediction_logits) <= ATOL and _close(nsp, hf.seq_relationship_logits) <= ATOL
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    if isinstance(model, Seq2SeqTransformer):
        assert config["decoder_start_token_id"] == generation["decoder_start_token_id"] == target.bos_id
        assert config["eos_token_id"] == target.eos_id
        assert (out / "target_tokenizer.json").is_file() == (target is not source)
    elif isinstance(model, GPT):
        assert config["eos_token_id"] == generation["eos_token_id"] == source.eos_id


def test_exported_marian_generates_our_greedy_translation(tmp_path):
    """transformers' ``generate`` reads the start and end tokens from the exported configs."""
    tok = _tokenizer("bpe")
    config = Seq2SeqConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, n_encoder_layers=1,
                           n_decoder_layers=1, tie_embeddings=False, **SMALL)  # fmt: skip
    torch.manual_seed(2)
    model = _randomise(Seq2SeqTransformer(config), seed=2)
    with torch.no_grad():  # a larger <eos> row, so hypotheses end at varied lengths
        model.output.weight[TRANSLATION_EOS] *= 3
    theirs = transformers.MarianMTModel.from_pretrained(export(model, tmp_path / "hf", tok)).eval()
    src, mask = _batch(tok, TEXTS_IN + ["a cat", "the mat and the log"], 0, 10)
    expected = theirs.generate(
        input_ids=src, attention_mask=mask.long(), num_beams=1, do_sample=False, max_new_tokens=12
    )
    rows = [r[1 : r.index(TRANSLATION_EOS) if TRANSLATION_EOS in r else None] for r in expected.tolist()]
    ours = translate_ids(model, src, TRANSLATION_SOS, TRANSLATION_EOS, max_len=12)
    assert ours == rows
    assert len({len(r) for r in ours}) >= 3 and min(map(len, ours)) < 12  # not vacuous: ends at varied lengths


def test_a_classifier_exports_as_sequence_classification(tmp_path):
    tok = _tokenizer("wordpiece")
    model = _randomise(Bert(BertConfig(vocab_size=tok.vocab_size, n_layers=1, num_labels=3, **SMALL)))
    out = export(model, tmp_path / "hf", tok)
    theirs, info = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert type(theirs).__name__ == "BertForSequenceClassification" and not info["missing_keys"]
    ids, mask = _batch(tok, TEXTS_IN, tok.pad_id, 12)
    with torch.no_grad():
        ours = model.classify(ids, attention_mask=mask)
        assert _close(ours, theirs.eval()(input_ids=ids, attention_mask=mask.long()).logits) <= ATOL
        assert _close(load(out).classify(ids, attention_mask=mask), ours) <= ATOL


# ---------------------------------------------------------------------------------------------- refusals

REFUSED = [  # (model, the field named): settings no Hugging Face class holds
    (lambda: GPT(GPTConfig(vocab_size=50, n_layers=1, positional="sinusoidal", **SMALL)), "GPTConfig.positional"),
    (lambda: GPT(GPTConfig(vocab_size=50, n_layers=1, norm_first=False, **SMALL)), "GPTConfig.norm_first"),
    (lambda: Bert(BertConfig(vocab_size=50, n_layers=1, norm_first=True, **SMALL)), "BertConfig.norm_first"),
    (lambda: Bert(BertConfig(vocab_size=50, n_layers=1, ffn="swiglu", **SMALL)), "BertConfig.ffn"),
    (lambda: Bert(BertConfig(vocab_size=50, n_layers=1, n_kv_heads=2, **SMALL)), "BertConfig.n_kv_heads"),
    (lambda: Bert(BertConfig(vocab_size=50, n_layers=1, activation="silu", **SMALL)), "BertConfig.activation"),
    (lambda: _seq2seq(norm_first=True), "Seq2SeqConfig.norm_first"),
    (lambda: _seq2seq(final_norm=True), "Seq2SeqConfig.final_norm"),
    (lambda: _seq2seq(norm="rmsnorm"), "Seq2SeqConfig.norm"),
    (lambda: _seq2seq(qk_norm=True), "Seq2SeqConfig.qk_norm"),
    (lambda: _seq2seq(bias=False), "Seq2SeqConfig.bias"),
    (lambda: _seq2seq(norm_eps=1e-6), "Seq2SeqConfig.norm_eps"),
    (lambda: _randomise(_seq2seq(positional="learned")), "Seq2SeqConfig.positional"),  # a trained table
]


def _seq2seq(**changes):
    fields = dict(src_vocab_size=50, tgt_vocab_size=50, n_encoder_layers=1, n_decoder_layers=1, **SMALL)
    return Seq2SeqTransformer(Seq2SeqConfig(**fields | changes))


@pytest.mark.parametrize("build, field", REFUSED, ids=[f for _, f in REFUSED])
def test_a_setting_without_a_hugging_face_equivalent_is_refused_by_name(tmp_path, build, field):
    with pytest.raises(ValueError, match=f"^{field}=.* has no Hugging Face layout: ") as err:
        export(build(), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == []  # nothing written, not even a temp dir


def test_a_marian_model_read_from_hugging_face_exports_again(tmp_path):
    """A model read from Marian keeps Marian's [sin | cos] table as its own fixed one and goes back unchanged; one
    an earlier tformer read (the table copied into a learned one) goes back while the table is still Marian's."""
    from tformer.hf.marian import marian_table

    tok = _tokenizer("bpe")
    first = export(_randomise(_seq2seq(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size)), tmp_path / "a")
    model = load(first)
    assert model.config.positional == "sinusoidal_halves"
    src = torch.randint(4, tok.vocab_size, (2, 6))
    tgt = torch.cat([torch.full((2, 1), TRANSLATION_SOS), src[:, :3]], 1)
    with torch.no_grad():
        assert _close(load(export(model, tmp_path / "b"))(src, tgt), model(src, tgt)) <= ATOL
    old = Seq2SeqTransformer(model.config.replace(positional="learned")).eval()
    state = model.state_dict()
    for side in ("src", "tgt"):
        state[f"{side}_embed.position.weight"] = marian_table(model.config.max_len, model.config.d_model)
    old.load_state_dict(state)
    with torch.no_grad():
        assert _close(old(src, tgt), model(src, tgt)) <= ATOL
        assert _close(load(export(old, tmp_path / "c"))(src, tgt), model(src, tgt)) <= ATOL
        old.src_embed.position.weight[3, 0] += 0.1  # trained: no longer the table Marian recomputes
    with pytest.raises(ValueError, match="^Seq2SeqConfig.positional='learned' has no Hugging Face layout"):
        export(old, tmp_path / "d")


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    tok = _tokenizer("byte_bpe")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size - 1, n_layers=1, **SMALL))
    with pytest.raises(ValueError, match=f"tokenizer has {tok.vocab_size} ids but the model's vocab_size is"):
        export(model, tmp_path / "out", tok)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A `tformer train lm`-like run (best/ + log.jsonl) with a character tokenizer, and a translator's model
    directory with its source and target tokenizers."""
    root = tmp_path_factory.mktemp("runs")
    char = _tokenizer("char")
    gpt = _randomise(GPT(GPTConfig(vocab_size=char.vocab_size, n_layers=1, pad_id=char.pad_id, **SMALL)))
    gpt.save_pretrained(root / "lm" / "best")
    char.save(root / "lm" / "best")
    (root / "lm" / "log.jsonl").write_text(json.dumps({"step": 1, "train_loss": 1.0}) + "\n")
    src, tgt = _tokenizer("bpe-pair")
    translator = _randomise(_seq2seq(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size))
    translator.save_pretrained(root / "translator")
    src.save(root / "translator", prefix="src_")
    tgt.save(root / "translator", prefix="tgt_")
    return root, gpt, char, translator


def _cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(argv, capsys, *expected):
    code, out, err = _cli(argv, capsys)
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tformer export: error: "), err
    for text in expected:
        assert text in lines[0], (text, lines[0])


def test_the_command_exports_a_run_with_its_character_tokenizer(runs, tmp_path, capsys):
    root, gpt, char, _ = runs
    out = tmp_path / "gpt2"
    code, stdout, err = _cli(["export", str(root / "lm"), "--to", "hf", str(out)], capsys)
    assert code == 0, err
    assert stdout.startswith(
        f"wrote {out} (GPT2LMHeadModel): .tformer-output.json, config.json, generation_config.json"
    )
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "the cat sat\non the mat ✓"
    ids = char.encode(text)
    assert hf_tok(text)["input_ids"] == ids and hf_tok.decode(ids) == text  # one id per character, the same ids
    with torch.no_grad():
        assert _close(theirs(torch.tensor([ids])).logits, gpt(torch.tensor([ids]))) <= ATOL
    # evaluate-lm on an ASCII text: the export's bits per byte are the run's bits per character
    (tmp_path / "ascii.txt").write_text("the cat sat\non the mat\n" * 20, encoding="utf-8")
    scores = []
    for model, unit in ((root / "lm", "character"), (out, "byte")):
        code, stdout, err = _cli(["evaluate-lm", "--model", str(model), "--data", str(tmp_path / "ascii.txt")], capsys)
        assert code == 0 and f"bits per {unit} " in stdout, (stdout, err)
        scores.append(float(stdout.split(f"bits per {unit} ")[1]))
    assert scores[1] == pytest.approx(scores[0], abs=2e-4)


def test_the_command_exports_a_translator_with_both_tokenizers(runs, tmp_path, capsys):
    root, _, _, translator = runs
    out = tmp_path / "marian"
    code, stdout, err = _cli(["export", str(root / "translator"), "--to", "hf", str(out)], capsys)
    assert code == 0, err
    assert "(MarianMTModel)" in stdout and "target_tokenizer.json" in stdout and "tokenizer.json" in stdout
    src = torch.randint(4, translator.config.src_vocab_size, (2, 7))
    tgt = torch.cat([torch.full((2, 1), TRANSLATION_SOS), torch.randint(4, 20, (2, 4))], 1)
    with torch.no_grad():
        hf = transformers.MarianMTModel.from_pretrained(out).eval()(input_ids=src, decoder_input_ids=tgt).logits
        assert _close(hf, translator(src, tgt)) <= ATOL


def test_the_command_refuses_before_writing(runs, tmp_path, capsys):
    root, _, _, _ = runs
    model = str(root / "lm")
    # OUT inside the run it reads, or the run inside OUT: replacing OUT would destroy the input
    _one_line_error(["export", model, "--to", "hf", str(root / "lm" / "hf")], capsys, "OUT", "MODEL")
    _one_line_error(["export", model, "--to", "hf", str(root)], capsys, "OUT", "MODEL")
    _one_line_error(["export", model, "--to", "hf", str(tmp_path / "no" / "such")], capsys, "does not exist")
    # a setting with no Hugging Face equivalent: named, nothing written
    sinusoidal = tmp_path / "sin"
    GPT(GPTConfig(vocab_size=40, n_layers=1, positional="sinusoidal", **SMALL)).save_pretrained(sinusoidal)
    _one_line_error(["export", str(sinusoidal), "--to", "hf", str(tmp_path / "o")], capsys, "GPTConfig.positional=")
    assert not (tmp_path / "o").exists()
    # an unknown format: argparse's own refusal
    with pytest.raises(SystemExit):
        main(["export", model, "--to", "onnx", str(tmp_path / "o")])
    assert "invalid choice: 'onnx'" in capsys.readouterr().err


def test_an_earlier_export_is_replaced_only_with_overwrite(runs, tmp_path, capsys):
    root, _, _, _ = runs
    out = tmp_path / "hf"
    argv = ["export", str(root / "lm"), "--to", "hf", str(out)]
    assert _cli(argv, capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _one_line_error(argv, capsys, f"OUT {str(out)!r} is not empty", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _cli([*argv, "--overwrite"], capsys)[0] == 0
    assert sorted(os.listdir(tmp_path)) == ["hf"]  # replaced whole: no temp or old directory left beside it
    (out / "notes.txt").write_text("mine")  # a file no export writes: --overwrite will not delete it
    _one_line_error([*argv, "--overwrite"], capsys, "notes.txt", "nothing was deleted")
    assert (out / "notes.txt").read_text() == "mine" and (out / "config.json").is_file()


def test_the_command_runs_as_a_program(runs, tmp_path):
    root, _, _, _ = runs
    out = tmp_path / "hf"
    shutil.copytree(root / "translator", tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-m", "tformer", "export", str(tmp_path / "model"), "--to", "hf", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "config.json").read_text())["model_type"] == "marian"
