"""A bad input always gets a clear answer; a crafted file can do nothing (issue 22).

Two halves:

* every flag of every subcommand, found by walking ``build_parser()`` (so a new flag is covered without
  editing this file), given values it must refuse: argparse exits with status 2, names the flag, and prints
  no traceback. Flags that take no value (``store_true``) are skipped by that rule; free-text flags (no
  ``type=``) accept any string by rule; a bare ``type=int`` / ``type=float`` fails the walk.
* every kind of file the CLI reads (``config.json``, ``model.safetensors``, each tokenizer file, a Hugging
  Face-style BERT directory), emptied, truncated, replaced by binary noise or by JSON of the wrong shape, or
  holding hostile values: one line on stderr naming the file, a non-zero exit status, no traceback.

Most of it runs in-process through ``tformer.cli.main`` (fast); a few real ``python -m tformer`` runs show the
real boundary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.checks import Sinks, Text
from tformer.cli import build_parser, main
from tformer.cli.data import pairs_file
from tformer.cli.generate import stop_text
from tformer.cli.validate import Number, PathArg, device
from tformer.models.config import MAX_PARAMETERS

# ---------------------------------------------------------------------------------------- the parser walk


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(words that choose the subcommand, action) for every argument of every (sub)parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases point to the same parser
                    seen.add(id(sub))
                    yield from _walk(sub, (*words, name))
        else:
            yield words, action


# The walk's parser, also the one main() parses with in _expect_usage_error: building tformer's ~350 subparsers
# takes ~30 ms, and the walk refuses ~2,100 values (parsing leaves a parser as it was).
PARSER = build_parser()
ACTIONS = list(_walk(PARSER))


def _id(item) -> str:
    words, action = item
    return " ".join(words) + " " + (action.option_strings[0] if action.option_strings else action.dest)


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0  # store_true / store_const / help / version take none


def _bad_numbers(number: Number) -> list[str]:
    """Values ``number`` must refuse: non-numbers, non-finite, fractional ints, just outside each bound."""
    bad = ["abc", "", "nan", "inf", "-inf", "1e999x"]
    if number.kind is int:
        bad += ["1.5", "2e3"]
    step = 1 if number.kind is int else 1e-6
    if number.low is not None:
        bad.append(str(number.low if number.low_open else number.low - step))
        bad.append(str(number.low - 1000))
    if number.high is not None:
        bad.append(str(number.high if number.high_open else number.high + step))
    if number.whole_from is not None:
        bad.append(str(number.whole_from + 0.5))
    return bad


def _bad_paths(kind: str, tmp: Path) -> list[str]:
    """Paths a :class:`PathArg` of ``kind`` must refuse (made under ``tmp``)."""
    a_file = tmp / "a_file.txt"
    a_file.write_text("x\n", encoding="utf-8")
    empty = tmp / "empty.txt"
    empty.write_text("", encoding="utf-8")
    a_dir = tmp / "a_dir"
    a_dir.mkdir(exist_ok=True)
    missing = str(tmp / "no" / "such" / "path")
    under_file = str(a_file / "sub")
    return {
        "file": [missing, str(a_dir), ""],
        "nonempty_file": [missing, str(a_dir), str(empty)],
        "dir": [missing, str(a_file)],
        "path": [missing],
        "out_dir": [str(a_file), under_file],
        "out_file": [str(a_dir), under_file],
        "cache_dir": [str(a_file), under_file],  # an existing folder is read from even if it cannot be written
    }[kind]


def bad_values(action: argparse.Action, tmp: Path) -> list[str]:
    """The values ``action`` must refuse, chosen by its validator (never by the flag's name)."""
    kind = action.type
    if action.choices is not None:
        return ["not-a-choice"]
    if isinstance(kind, Number):
        return _bad_numbers(kind)
    if isinstance(kind, PathArg):
        return _bad_paths(kind.kind, tmp)
    if kind is pairs_file:  # data prepare translation's TSV: a file (a folder refused saying what reads it)
        return _bad_paths("file", tmp)
    if kind is stop_text:  # generate --stop: any text but the empty one
        return [""]
    if kind is device:
        return ["foo", "gpu", "cuda:x", "cpu:"] + ([] if torch.cuda.is_available() else ["cuda", "cuda:0"])
    if isinstance(kind, Text):
        return ["", "   "]
    if isinstance(kind, Sinks):
        return ["", "wandb", "csv,csv", "csv,"]
    raise AssertionError(f"no bad values known for type {kind!r}")


def _argv(words: tuple[str, ...], action: argparse.Action, value: str) -> list[str]:
    """``--flag=value`` (so that ``-inf`` is not taken for an option), or the value alone for a positional."""
    return [*words, f"{action.option_strings[0]}={value}"] if action.option_strings else [*words, value]


def _expect_usage_error(argv: list[str], action: argparse.Action, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info, mock.patch("tformer.cli.build_parser", return_value=PARSER):
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, (argv, err)
    assert "Traceback" not in err
    name = argparse._get_action_name(action)
    last = err.strip().splitlines()[-1]
    assert last.startswith("tformer") and f"argument {name}:" in last, (argv, err)
    return last


def test_the_walk_reaches_every_subcommand():
    commands = {words for words, _ in ACTIONS}
    for expected in [("train", "translation"), ("train", "lm"), ("train", "bert"), ("train", "classify")]:
        assert expected in commands
    for name in ["translate", "evaluate", "generate", "evaluate-lm", "fill-mask", "classify", "embed", "trace"]:
        assert (name,) in commands
    assert ("plot", "positional") in commands and ("data", "download") in commands
    assert len([a for _, a in ACTIONS if _takes_value(a)]) > 100


@pytest.mark.parametrize("item", ACTIONS, ids=_id)
def test_no_flag_takes_an_unchecked_number(item):
    _, action = item
    assert action.type not in (int, float), f"{_id(item)} uses a bare {action.type.__name__}: use cli.validate"


@pytest.mark.parametrize("item", [i for i in ACTIONS if isinstance(i[1].type, Number)], ids=_id)
def test_numeric_defaults_satisfy_their_own_validator(item):
    _, action = item
    if action.default is not None:
        assert action.type.ok(action.default), f"{_id(item)}: default {action.default!r} is not {action.type.allowed}"


CHECKED = [i for i in ACTIONS if _takes_value(i[1]) and (i[1].type is not None or i[1].choices is not None)]


@pytest.mark.parametrize("item", CHECKED, ids=_id)
def test_every_bad_value_of_every_flag_is_refused(item, tmp_path, capsys):
    words, action = item
    for value in bad_values(action, tmp_path):
        line = _expect_usage_error(_argv(words, action, value), action, capsys)
        if value:
            assert repr(value) in line or value in line, line  # it says what it got


NUMERIC = [i for i in ACTIONS if isinstance(i[1].type, Number)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hypothesis_draws_out_of_range_numbers(data, capsys):
    words, action = data.draw(st.sampled_from(NUMERIC), label="flag")
    number: Number = action.type
    value = data.draw(
        st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5)),
        label="value",
    )
    text = str(value)
    try:
        accepted = number.ok(number.kind(text))
    except (ValueError, OverflowError):
        accepted = False
    if accepted:
        return  # an allowed value: nothing to refuse
    _expect_usage_error(_argv(words, action, text), action, capsys)


@settings(deadline=None)  # a loaded CI machine may stall one example past hypothesis's 200 ms
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_number_accepts_exactly_its_interval(x):
    probability = Number(float, 0, 1, low_open=True)
    assert probability.ok(x) == (0 < x <= 1)
    count = Number(float, 0, whole_from=1)
    assert count.ok(x) == (x >= 0 and (x < 1 or x == int(x)))
    with pytest.raises(ValueError, match="must be"):  # a BadValue: the CLI prints it as the flag's one line
        probability(str(x)) if not 0 < x <= 1 else probability("nan")


def test_messages_name_the_flag_the_value_and_what_is_allowed(capsys):
    cases = {
        ("translate", "--model", ".", "--beam", "0"): "argument --beam: must be an integer in [1, 64], got 0",
        ("generate", "--model", ".", "--top-p", "1.5"): "argument --top-p: must be a probability in (0, 1], got 1.5",
        (
            "generate",
            "--model",
            ".",
            "--temperature",
            "0",
        ): "argument --temperature: must be a number in (0, 100] (0 would be greedy decoding, the most likely token: "
        "--greedy, or translate without --sample), got 0",
        ("generate", "--model", ".", "--top-k", "-3"): "argument --top-k: must be an integer in [0, 1000000] (0 = off)",
        ("generate", "--model", ".", "--num-samples", "0"): "argument --num-samples: must be an integer in [1, 1000]",
        ("generate", "--model", ".", "--max-new-tokens", "0"): "argument --max-new-tokens: must be an integer in [1,",
        ("train", "lm", "--data", ".", "--out", "o", "--max-steps", "0"): "argument --max-steps: must be a positive",
        ("train", "lm", "--data", ".", "--out", "o", "--minutes", "-1"): "argument --minutes: must be a finite number",
        ("train", "lm", "--data", ".", "--out", "o", "--log-every", "0"): "argument --log-every: must be a positive",
        ("train", "lm", "--data", ".", "--out", "o", "--lr", "nan"): "argument --lr: must be a finite number > 0",
        ("train", "lm", "--data", ".", "--out", "o", "--dropout", "1.5"): "argument --dropout: must be a fraction in",
        ("train", "translation", "--out", "o", "--vocab-size", "1"): "argument --vocab-size: must be an integer >= 5",
        ("train", "bert", "--data", "x", "--out", "o", "--batch-size", "-1"): "argument --data: 'x' does not exist",
        ("evaluate-lm", "--model", ".", "--data", ".", "--device", "foo"): "argument --device: must be cpu, cuda",
    }
    for argv, expected in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            main(list(argv))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and expected in err, (argv, err)


def test_cuda_that_is_not_there_is_one_line(monkeypatch, capsys):
    # a machine without CUDA, and one with a single device, on any machine (a GPU runner too): no skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        main(["evaluate-lm", "--model", ".", "--data", ".", "--device", "cuda"])
    err = capsys.readouterr().err
    assert "argument --device: 'cuda' is not available on this machine" in err and "Traceback" not in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device("cuda:0") == "cuda:0"
    with pytest.raises(SystemExit):
        main(["evaluate-lm", "--model", ".", "--data", ".", "--device", "cuda:1"])
    err = capsys.readouterr().err
    assert "argument --device: 'cuda:1' is not available: this machine has 1 CUDA device(s)" in err, err


def test_out_that_is_a_file_or_cannot_be_created(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for out, expected in [("f", "exists and is not a directory"), ("f/run", "is a file, not a directory")]:
        with pytest.raises(SystemExit):
            main(["train", "lm", "--data", str(tmp_path), "--out", str(tmp_path / out)])
        assert expected in capsys.readouterr().err


def test_out_in_an_unwritable_place(tmp_path, monkeypatch, capsys):
    """A directory this user may not write to. Root may write anywhere (CI runs as root), so the permission
    check itself (os.access) is told ``locked`` is read-only: the same answer a non-root user gets from it."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) == locked and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr("tformer.cli.validate.os.access", access)
    cases = [
        (["train", "lm", "--data", str(tmp_path), "--out", str(locked / "run")], "--out", "cannot be created"),
        (["train", "lm", "--data", str(tmp_path), "--out", str(locked)], "--out", "is not writable"),
        (["demo", "--out", str(locked / "deep" / "run")], "--out", "cannot be created"),
        (["plot", "curves", str(tmp_path), "--out", str(locked / "c.png")], "--out", "cannot be created"),
    ]
    for argv, flag, expected in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "Traceback" not in err, (argv, err)
        assert f"argument {flag}: " in err and expected in err and "(permission denied)" in err, (argv, err)
        assert str(locked) in err, (argv, err)
    assert list(locked.iterdir()) == []  # nothing was written there


def test_a_downloaded_corpus_is_found_by_its_name(tmp_path, monkeypatch, capsys):
    """After `tformer data download NAME`, --data NAME is that download (as load_dataset("name") finds a dataset);
    before it, the error says how to fetch it; a file or folder of that name here comes first."""
    from tformer.translation.download import SOURCES

    monkeypatch.setenv("TFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out = ["--out", str(tmp_path / "run")]
    for argv in (
        ["train", "lm", "--data", "tinyshakespeare", *out],
        ["data", "prepare", "translation", "--data", "tatoeba-eng-fra"],
        ["train", "translation", "--data", "multi30k", *out],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert (
            exit_info.value.code == 2
            and f"fetch it with `tformer data download {argv[argv.index('--data') + 1]}`" in err
        )
        assert "argument --data: " in err and str(tmp_path / "cache") in err, err
    for name in SOURCES:  # as `tformer data download` leaves them
        for remote in SOURCES[name]:
            (tmp_path / "cache" / name).mkdir(parents=True, exist_ok=True)
            (tmp_path / "cache" / name / remote.filename).write_text("A man walks.\tUn homme marche.\n")
    cache = tmp_path / "cache"
    assert PARSER.parse_args(["train", "lm", "--data", "tinyshakespeare", *out]).data == str(
        cache / "tinyshakespeare" / "tinyshakespeare.txt"
    )
    assert PARSER.parse_args(["train", "translation", "--data", "multi30k", *out]).data == str(cache / "multi30k")
    prepare = PARSER.parse_args(["data", "prepare", "translation", "--data", "tatoeba-eng-fra"])
    assert prepare.data == str(cache / "tatoeba-eng-fra" / "tatoeba-eng-fra.tsv")
    (tmp_path / "tinyshakespeare").write_text("a file of that name here\n")
    assert PARSER.parse_args(["train", "lm", "--data", "tinyshakespeare", *out]).data == "tinyshakespeare"


def test_an_empty_src_file_for_evaluate(tmp_path, capsys):
    (tmp_path / "src.txt").write_text("")
    (tmp_path / "ref.txt").write_text("bonjour\n")
    with pytest.raises(SystemExit):
        main(
            [
                "evaluate",
                "--model",
                str(tmp_path),
                "--src",
                str(tmp_path / "src.txt"),
                "--ref",
                str(tmp_path / "ref.txt"),
            ]
        )
    assert f"argument --src: '{tmp_path / 'src.txt'}' is empty" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- the error boundary


def _boom(exc: BaseException):
    def run(args):
        raise exc

    return run


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (ValueError("bad value"), 2, "bad value"),
        (FileNotFoundError("'x' is missing"), 2, "'x' is missing"),
        (PermissionError(13, "Permission denied", "/root/x"), 1, "Permission denied: '/root/x'"),
        (OSError(28, "No space left on device"), 1, "No space left on device"),
        (MemoryError(), 1, "out of memory"),
        (RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: you tried 9 TB"), 1, "out of memory"),
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB"), 1, "CUDA out of memory"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_expected_failures_are_one_line(exc, code, text, monkeypatch, capsys):
    monkeypatch.setattr("tformer.cli._run", _boom(exc))
    assert main(["info", "."]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tformer info: error: ") and text in err, err


@pytest.mark.parametrize("exc", [TypeError("a bug deep inside"), KeyError("bug"), RuntimeError("shape mismatch")])
def test_bugs_keep_their_traceback(exc, monkeypatch):
    monkeypatch.setattr("tformer.cli._run", _boom(exc))
    with pytest.raises(type(exc)):
        main(["info", "."])


def test_debug_reraises_expected_failures(monkeypatch):
    monkeypatch.setattr("tformer.cli._run", _boom(ValueError("bad value")))
    with pytest.raises(ValueError, match="bad value"):
        main(["--debug", "info", "."])


def test_the_command_words_name_the_subcommand(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("tformer.cli._run", _boom(ValueError("nope")))
    assert main(["train", "lm", "--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == "tformer train lm: error: nope\n"


# ------------------------------------------------------------------------------------------- crafted files

TEXT = "the cat sat on the mat. the dog ate the bone. a bird sang.\n"


def _tiny(cls, config_cls, **fields):
    torch.manual_seed(0)
    return cls(config_cls(d_model=8, n_heads=2, d_ff=16, max_len=32, dropout=0.0, **fields)).eval()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """One small model directory of each kind the CLI reads."""
    from tformer.tokenizers import ByteBPETokenizer, CharTokenizer, train_tokenizer
    from tformer.translation import Translator

    root = tmp_path_factory.mktemp("models")
    out = {}
    char = CharTokenizer.train([TEXT])
    out["lm_char"] = root / "lm_char"
    _tiny(GPT, GPTConfig, vocab_size=char.vocab_size, n_layers=1).save_pretrained(out["lm_char"])
    char.save(out["lm_char"])

    bpe = ByteBPETokenizer.train([TEXT] * 5, vocab_size=270)
    out["lm_bpe"] = root / "lm_bpe"
    _tiny(GPT, GPTConfig, vocab_size=bpe.vocab_size, n_layers=1).save_pretrained(out["lm_bpe"])
    bpe.save(out["lm_bpe"])

    tok = train_tokenizer("bpe", [TEXT] * 5, vocab_size=40, min_frequency=1)
    out["translation"] = root / "translation"
    model = _tiny(
        Seq2SeqTransformer,
        Seq2SeqConfig,
        src_vocab_size=tok.vocab_size,
        tgt_vocab_size=tok.vocab_size,
        n_encoder_layers=1,
        n_decoder_layers=1,
    )
    Translator(model, tok, tok).save(out["translation"])

    wp = train_tokenizer("wordpiece", [TEXT] * 5, vocab_size=60, min_frequency=1)
    out["bert"] = root / "bert"
    _tiny(Bert, BertConfig, vocab_size=wp.vocab_size, n_layers=1).save_pretrained(out["bert"])
    wp.save(out["bert"])

    out["bert_vocab_txt"] = root / "bert_vocab_txt"
    shutil.copytree(out["bert"], out["bert_vocab_txt"])
    (out["bert_vocab_txt"] / "tokenizer.json").unlink()
    (out["bert_vocab_txt"] / "vocab.txt").write_text("".join(t + "\n" for t in wp.vocabulary()), encoding="utf-8")

    out["hf_bert"] = root / "hf_bert"
    _hf_bert_dir(out["hf_bert"], _tiny(Bert, BertConfig, vocab_size=wp.vocab_size, n_layers=1), wp)
    return out


def _hf_bert_dir(directory: Path, bert: Bert, wp) -> None:
    """A Hugging Face BertForMaskedLM directory (config.json with HF names, model.safetensors) holding ``bert``."""
    directory.mkdir()
    c = bert.config
    config = dict(
        model_type="bert",
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        num_attention_heads=c.n_heads,
        num_hidden_layers=c.n_layers,
        intermediate_size=c.d_ff,
        max_position_embeddings=c.max_len,
        type_vocab_size=c.n_segments,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        hidden_act=c.activation,
        layer_norm_eps=c.norm_eps,
    )
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    s = {k: v.detach().clone().contiguous() for k, v in bert.state_dict().items()}
    hf = {
        "bert.embeddings.word_embeddings.weight": s["embed.token.weight"],
        "bert.embeddings.position_embeddings.weight": s["embed.position.weight"],
        "bert.embeddings.token_type_embeddings.weight": s["embed.segment.weight"],
        "bert.embeddings.LayerNorm.weight": s["embed.norm.weight"],
        "bert.embeddings.LayerNorm.bias": s["embed.norm.bias"],
        "cls.predictions.transform.dense.weight": s["mlm_head.dense.weight"],
        "cls.predictions.transform.dense.bias": s["mlm_head.dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": s["mlm_head.norm.weight"],
        "cls.predictions.transform.LayerNorm.bias": s["mlm_head.norm.bias"],
        "cls.predictions.bias": s["mlm_head.decoder.bias"],
    }
    layer = "encoder.layers.0."
    for kind in ("weight", "bias"):
        q, k, v = s[f"{layer}self_attn.qkv_proj.{kind}"].chunk(3, dim=0)
        for name, t in (("query", q), ("key", k), ("value", v)):
            hf[f"bert.encoder.layer.0.attention.self.{name}.{kind}"] = t.contiguous()
        hf[f"bert.encoder.layer.0.attention.output.dense.{kind}"] = s[f"{layer}self_attn.out_proj.{kind}"]
        hf[f"bert.encoder.layer.0.attention.output.LayerNorm.{kind}"] = s[f"{layer}add_norm1.norm.{kind}"]
        hf[f"bert.encoder.layer.0.intermediate.dense.{kind}"] = s[f"{layer}ff.linear1.{kind}"]
        hf[f"bert.encoder.layer.0.output.dense.{kind}"] = s[f"{layer}ff.linear2.{kind}"]
        hf[f"bert.encoder.layer.0.output.LayerNorm.{kind}"] = s[f"{layer}add_norm2.norm.{kind}"]
    save_file(hf, str(directory / "model.safetensors"))
    wp.save(directory)


# the command that reads each file: name -> (directory kind, file, argv after --model DIR)
READERS = {
    "config.json (gpt)": ("lm_char", "config.json", ["info"]),
    "model.safetensors (gpt)": ("lm_char", "model.safetensors", ["info"]),
    "char_tokenizer.json": ("lm_char", "char_tokenizer.json", ["generate", "--max-new-tokens", "2"]),
    "bpe tokenizer.json": ("lm_bpe", "tokenizer.json", ["generate", "--max-new-tokens", "2"]),
    "src_tokenizer.json": ("translation", "src_tokenizer.json", ["translate", "the cat"]),
    "tgt_tokenizer.json": ("translation", "tgt_tokenizer.json", ["translate", "the cat"]),
    "config.json (seq2seq)": ("translation", "config.json", ["translate", "the cat"]),
    "bert tokenizer.json": ("bert", "tokenizer.json", ["fill-mask", "the [MASK] sat"]),
    "bert vocab.txt": ("bert_vocab_txt", "vocab.txt", ["fill-mask", "the [MASK] sat"]),
    "hf config.json (fill-mask)": ("hf_bert", "config.json", ["fill-mask", "the [MASK] sat"]),
    "hf model.safetensors (fill-mask)": ("hf_bert", "model.safetensors", ["fill-mask", "the [MASK] sat"]),
    "hf config.json (embed)": ("hf_bert", "config.json", ["embed", "a cat", "a dog"]),
    "hf model.safetensors (embed)": ("hf_bert", "model.safetensors", ["embed", "a cat", "a dog"]),
    "hf tokenizer.json (embed)": ("hf_bert", "tokenizer.json", ["embed", "a cat", "a dog"]),
}


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _with_model(argv: list[str], directory: Path) -> list[str]:
    if argv[0] == "info":
        return ["info", str(directory)]
    return [argv[0], "--model", str(directory), *argv[1:]]


def _corruptions(original: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "truncated": original[: max(1, len(original) // 2)],
        "binary": bytes(range(256)) * 4,
        "nul bytes": b"\x00" * 64,
        "json list": b"[1, 2, 3]",
        "json number": b"42",
        "json string": b'"hello"',
        "deep nesting": b"[" * 100_000 + b"]" * 100_000,
        "a pickle": b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x94.",
    }


@pytest.mark.parametrize("reader", list(READERS))
def test_the_original_files_work(reader, dirs, capsys):
    kind, _, argv = READERS[reader]
    code, out, err = _run_cli(_with_model(argv, dirs[kind]), capsys)
    assert code == 0, err


@pytest.mark.parametrize("reader", list(READERS))
def test_corrupted_files_give_one_line_naming_the_file(reader, dirs, tmp_path, capsys):
    kind, name, argv = READERS[reader]
    original = (dirs[kind] / name).read_bytes()
    for label, content in _corruptions(original).items():
        work = tmp_path / label.replace(" ", "_")
        shutil.copytree(dirs[kind], work)
        (work / name).write_bytes(content)
        code, _, err = _run_cli(_with_model(argv, work), capsys)
        assert code != 0, (reader, label, err)
        assert err.count("\n") == 1 and err.startswith("tformer "), (reader, label, err)
        assert name in err and "Traceback" not in err, (reader, label, err)


def test_a_missing_file_is_named(dirs, tmp_path, capsys):
    for reader, (kind, name, argv) in READERS.items():
        work = tmp_path / reader.replace(" ", "_").replace("(", "").replace(")", "")
        shutil.copytree(dirs[kind], work)
        (work / name).unlink()
        code, _, err = _run_cli(_with_model(argv, work), capsys)
        assert code != 0 and err.count("\n") == 1 and "Traceback" not in err and name in err, (reader, err)


HOSTILE_CONFIG = {
    "d_model": ["64", 1e9, True, 0, -8, None, [64], 10**7],
    "n_heads": [0, -1, 3.5, "2", False],
    "vocab_size": [-5, 0, "50", 1.5, 10**12],
    "dropout": [2, -0.1, 1.0, "0.1", math.inf],
    "norm_first": [1, "yes", None],
    "max_len": [0, 10**11, 32.0],
    "norm_eps": [0, -1e-5, "small"],
    "activation": ["swish", 3, None],
    "positional": ["alibi", 0],
    "rogue_field": [1],
}


def test_hostile_config_values_are_refused_before_building(dirs, tmp_path, capsys, monkeypatch):
    built = []
    original_init = GPT.__init__

    def spy(self, config):
        built.append(config)
        original_init(self, config)

    monkeypatch.setattr(GPT, "__init__", spy)
    base = json.loads((dirs["lm_char"] / "config.json").read_text())
    for field, values in HOSTILE_CONFIG.items():
        for value in values:
            work = tmp_path / "work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(dirs["lm_char"], work)
            (work / "config.json").write_text(json.dumps({**base, field: value}))
            code, _, err = _run_cli(["info", str(work)], capsys)
            assert code == 2 and err.count("\n") == 1, (field, value, err)
            assert "config.json" in err and field in err and "Traceback" not in err, (field, value, err)
    assert not built  # no model was ever constructed


def test_the_parameter_cap(dirs, tmp_path, capsys):
    base = json.loads((dirs["lm_char"] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**base, "d_model": 2**20, "n_heads": 1, "d_ff": 2**20}))
    shutil.copy(dirs["lm_char"] / "model.safetensors", tmp_path)
    code, _, err = _run_cli(["info", str(tmp_path)], capsys)
    assert code == 2 and f"more than the limit of {MAX_PARAMETERS:,}" in err and "config.json" in err
    config = GPTConfig(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=1024)
    assert 120e6 < config.approx_parameters() < 130e6  # GPT-2 small is 124M


HOSTILE_HF = {
    "hidden_size": ["32", 1e9, True, 10**8],
    "num_attention_heads": [0, "4"],
    "vocab_size": [-5],
    "hidden_dropout_prob": [2],
    "hidden_act": ["swish", ["gelu"]],
    "max_position_embeddings": [0],
}


def test_hostile_hugging_face_configs(dirs, tmp_path, capsys):
    base = json.loads((dirs["hf_bert"] / "config.json").read_text())
    for field, values in HOSTILE_HF.items():
        for value in values:
            work = tmp_path / "work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(dirs["hf_bert"], work)
            (work / "config.json").write_text(json.dumps({**base, field: value}))
            for argv in (["fill-mask", "--model", str(work), "a [MASK]"], ["embed", "--model", str(work), "a"]):
                code, _, err = _run_cli(argv, capsys)
                assert code == 2 and err.count("\n") == 1 and "config.json" in err, (field, value, argv, err)
    work = tmp_path / "missing_field"
    shutil.copytree(dirs["hf_bert"], work)
    (work / "config.json").write_text(json.dumps({k: v for k, v in base.items() if k != "intermediate_size"}))
    code, _, err = _run_cli(["fill-mask", "--model", str(work), "a [MASK]"], capsys)
    assert code == 2 and "'intermediate_size'" in err and "config.json" in err


def test_weights_of_the_wrong_shape_name_the_file(dirs, tmp_path, capsys):
    for kind, argv in (("hf_bert", ["fill-mask", "a [MASK]"]), ("lm_char", ["info"])):
        work = tmp_path / kind
        shutil.copytree(dirs[kind], work)
        tensors = {"bert.embeddings.word_embeddings.weight": torch.zeros(3, 3)}
        if kind == "hf_bert":
            from safetensors.torch import load_file

            tensors = {**load_file(str(work / "model.safetensors")), **tensors}
        save_file(tensors, str(work / "model.safetensors"))
        code, _, err = _run_cli(_with_model(argv, work), capsys)
        assert code == 2 and err.count("\n") == 1 and "model.safetensors" in err, (kind, err)


def test_wrong_kind_of_tokenizer(dirs, tmp_path, capsys):
    """A translation tokenizer where a char tokenizer belongs, and the other way round."""
    work = tmp_path / "lm"
    shutil.copytree(dirs["lm_char"], work)
    (work / "char_tokenizer.json").write_text(json.dumps({"type": "char", "tokens": ["a", "b"]}))
    code, _, err = _run_cli(["generate", "--model", str(work)], capsys)
    assert code == 2 and "char_tokenizer.json" in err and "must start with" in err
    (work / "char_tokenizer.json").write_text(
        json.dumps({"type": "char", "tokens": ["<unk>", "<pad>", "<|endoftext|>", "ab"]})
    )
    code, _, err = _run_cli(["generate", "--model", str(work)], capsys)
    assert code == 2 and "'ab' is not one character" in err
    work = tmp_path / "tr"
    shutil.copytree(dirs["translation"], work)
    shutil.copy(dirs["lm_bpe"] / "tokenizer.json", work / "src_tokenizer.json")  # LM specials, not translation's
    code, _, err = _run_cli(["translate", "--model", str(work), "x"], capsys)
    assert code == 2 and "src_tokenizer.json" in err and "<pad> at id 0" in err


# ------------------------------------------------------------------------------------ the real boundary


def test_real_subprocesses(dirs, tmp_path):
    """``python -m tformer``: the exit status and stderr a user sees, for a flag, a missing path, a bad file."""
    (tmp_path / "config.json").write_text('{"model_type": "gpt", "d_model": "64"}')
    cases = [
        (["translate", "--model", str(dirs["translation"]), "--beam", "0", "x"], 2, "argument --beam: must be"),
        (["train", "lm", "--data", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o")], 2, "nope.txt' does not"),
        (["info", str(tmp_path)], 2, "config.json"),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    for argv, code, text in cases:
        proc = subprocess.run([sys.executable, "-m", "tformer", *argv], capture_output=True, text=True, env=env)
        assert proc.returncode == code and text in proc.stderr, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("tformer ")
