"""Text in is the text the user meant (issue 41, item 5).

* every text reader (the training data of the three families and of classification, as a file, a folder, JSONL, a
  TSV or aligned files; ``evaluate``'s ``--src`` / ``--ref``; ``evaluate-lm``'s ``--data``; stdin of ``translate``
  and ``embed``; ``plot curves``' log; a WordPiece ``vocab.txt``, a config.json, a tokenizer.json) drops a UTF-8
  byte-order mark instead of reading U+FEFF as text, and refuses a NUL (UTF-16 text without a byte-order mark reads
  as UTF-8 with a NUL after each character) and UTF-16 with its mark, naming the file and line;
* ``translate`` gives one line out for each line in, an empty line for an empty one, and refuses input with no text
  as ``embed`` does; ``Translator.translate`` keeps each sentence's place, an empty one giving "";
* a JSONL ``\\u0000`` and the explorer's ``"\\u0000"`` are refused like a lone surrogate.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

import test_text_and_boundary as boundary
from test_text_and_boundary import TEXT, _cli, _one_line, _train, _write
from tformer.cli import main

BOM = codecs.BOM_UTF8
models = boundary.models  # the fixture: a tiny translator, character LM and BERT


def _lm_folder(tmp_path: Path, data: bytes) -> str:
    _write(tmp_path / "texts" / "a.txt", data)
    return str(tmp_path / "texts")


def _aligned(tmp_path: Path, data: bytes) -> str:
    _write(tmp_path / "m30k" / "train.en", data)
    _write(tmp_path / "m30k" / "train.fr", b"un chat\nun chien\n")
    return str(tmp_path / "m30k")


# what each reader reads: (file or folder to write the text into, the library reader, the first text it gives)
def _readers():
    from tformer.bert.classification import read_labelled_tsv
    from tformer.bert.pretraining import read_sentence_documents
    from tformer.lm import read_documents
    from tformer.training.curves import read_log
    from tformer.translation.pairs import load_corpus

    return {
        "lm text": ("text.txt", "a cat\na dog\n", lambda p: read_documents(p)[0]),
        "lm folder": ("texts/a.txt", "a cat\na dog\n", lambda p: read_documents(Path(p).parent)[0]),
        "lm jsonl": ("docs.jsonl", '{"text": "a cat"}\n', lambda p: read_documents(p)[0]),
        "translation tsv": ("pairs.tsv", "a cat\tun chat\n", lambda p: load_corpus(p)[0][0]),
        "translation aligned": ("m30k/train.en", "a cat\n", lambda p: load_corpus(Path(p).parent)[0][0]),
        "bert text": ("text.txt", "a cat sat.\n", lambda p: read_sentence_documents(p)[0][0]),
        "bert tsv": ("pairs.tsv", "a cat sat.\tx\n", lambda p: read_sentence_documents(p)[0][0]),
        "classify tsv": ("labels.tsv", "a cat\ten\n", lambda p: read_labelled_tsv(p)[0][0]),
        "plot curves log": ("log.jsonl", '{"step": 1}\n', lambda p: json.dumps(read_log(p)[0])),
    }


READERS = list(_readers())


def _place(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    _write(path, data)
    if name == "m30k/train.en":
        _write(tmp_path / "m30k" / "train.fr", b"un chat\n")
    return path


@pytest.mark.parametrize("reader", READERS)
def test_a_utf8_byte_order_mark_is_not_read_as_text(reader, tmp_path):
    name, text, read = _readers()[reader]
    first = read(_place(tmp_path, name, BOM + text.encode()))
    assert "\ufeff" not in first and first == read(_place(tmp_path / "plain", name, text.encode())), repr(first)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16"])
def test_utf16_is_refused_naming_the_file_and_line(reader, encoding, tmp_path):
    name, text, read = _readers()[reader]
    path = _place(tmp_path, name, text.encode(encoding))
    with pytest.raises(ValueError) as err:
        read(path)
    said = "holds a NUL character at column 2" if encoding == "utf-16-le" else "UTF-16 text"
    assert str(err.value).startswith(f"{path}:1: ") and said in str(err.value), err.value


@pytest.mark.parametrize("reader", READERS)
def test_a_gzip_file_is_named_as_one_not_as_a_bad_byte(reader, tmp_path):
    import gzip

    name, text, read = _readers()[reader]
    path = _place(tmp_path, name, gzip.compress(text.encode()))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:1: gzip-compressed, not text: unpack it first"):
        read(path)


def test_a_nul_in_the_middle_is_named_by_line_and_column(tmp_path):
    from tformer.lm import read_documents

    path = _place(tmp_path, "text.txt", b"a cat\nthe d\x00og\n")
    with pytest.raises(ValueError, match=rf"^{path}:2: holds a NUL character at column 6 \(UTF-16"):
        read_documents(path)


# the commands: (argv before the data, how the data is given) for each file a command reads
COMMANDS = {
    "train lm": lambda tmp, data, dirs: _train("lm", _write(tmp / "text.txt", data), tmp / "out"),
    "train lm folder": lambda tmp, data, dirs: _train("lm", _lm_folder(tmp, data), tmp / "out"),
    "train translation": lambda tmp, data, dirs: _train("translation", _write(tmp / "p.tsv", data), tmp / "out"),
    "train translation aligned": lambda tmp, data, dirs: _train("translation", _aligned(tmp, data), tmp / "out"),
    "train bert": lambda tmp, data, dirs: _train("bert", _write(tmp / "text.txt", data), tmp / "out"),
    "evaluate --src": lambda tmp, data, dirs: [
        "evaluate",
        "--model",
        str(dirs["translation"]),
        "--src",
        _write(tmp / "src.txt", data),
        "--ref",
        _write(tmp / "ref.txt", b"le chat\nle chien\n"),
    ],
    "evaluate --ref": lambda tmp, data, dirs: [
        "evaluate",
        "--model",
        str(dirs["translation"]),
        "--src",
        _write(tmp / "src.txt", b"the cat\nthe dog\n"),
        "--ref",
        _write(tmp / "ref.txt", data),
    ],
    "evaluate-lm": lambda tmp, data, dirs: [
        "evaluate-lm",
        "--model",
        str(dirs["lm"]),
        "--data",
        _write(tmp / "held.txt", data),
    ],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_refuses_utf16_in_one_line(command, models, tmp_path, capsys):
    text = TEXT * 3 if "lm" in command or "bert" in command else "the cat\tle chat\nthe dog\tle chien\n"
    if command.startswith(("evaluate ", "train translation aligned")):
        text = "the cat\nthe dog\n"
    code, err = _cli(COMMANDS[command](tmp_path, text.encode("utf-16-le"), models), capsys)
    assert code == 2
    assert ":1: holds a NUL character at column 2 (UTF-16 text" in _one_line(err), err


def test_training_on_a_file_with_a_byte_order_mark_learns_no_u_feff(tmp_path, capsys):
    """The issue's case end to end: the tokenizer trained on the file holds no U+FEFF."""
    data = _write(tmp_path / "text.txt", BOM + (TEXT * 20).encode())
    assert main(_train("lm", data, tmp_path / "out")) == 0
    vocabulary = json.loads((tmp_path / "out" / "best" / "char_tokenizer.json").read_text(encoding="utf-8"))
    assert "\ufeff" not in json.dumps(vocabulary, ensure_ascii=False)


def test_a_jsonl_nul_escape_is_refused_with_file_line_and_field(tmp_path):
    from tformer.lm import read_documents

    path = _place(tmp_path, "docs.jsonl", b'{"text": "fine"}\n{"text": "a \\u0000 b"}\n')
    with pytest.raises(ValueError, match=rf"^{path}:2: field 'text': holds a NUL character at column 3"):
        read_documents(path)


@pytest.mark.parametrize("kind", ["vocab.txt", "config.json", "tokenizer.json"])
def test_the_files_beside_a_model_may_start_with_a_byte_order_mark(kind, models):
    from tformer.readers import load_tokenizer_file, read_json_object
    from tformer.tokenizers.wordpiece import bert_tokenizer

    directory = models["bert"]
    if kind == "vocab.txt":
        work = directory.parent / "vocab_only"
        work.mkdir(exist_ok=True)
        vocab = bert_tokenizer(directory).get_vocab()
        lines = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
        (work / "vocab.txt").write_bytes(BOM + "\n".join(lines).encode() + b"\n")
        assert bert_tokenizer(work).get_vocab() == vocab
    elif kind == "config.json":
        path = directory.parent / "bom_config.json"
        path.write_bytes(BOM + (directory / "config.json").read_bytes())
        assert read_json_object(path) == read_json_object(directory / "config.json")
    else:
        source = next(directory.glob("*tokenizer.json"))
        path = directory.parent / "bom_tokenizer.json"
        path.write_bytes(BOM + source.read_bytes())
        assert load_tokenizer_file(path).get_vocab() == load_tokenizer_file(source).get_vocab()


# ------------------------------------------------------------------------------------------------- stdin


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_translate_gives_one_line_out_for_each_line_in(models, monkeypatch, capsys):
    _stdin(monkeypatch, "the cat\n\n   \nthé dog\n".encode())
    assert main(["translate", "--model", str(models["translation"]), "--max-new-tokens", "3"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 5 and lines[4] == "" and lines[1] == lines[2] == "", lines  # 4 lines, each ended


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\t\n\n"])
def test_stdin_without_text_is_refused_by_translate_as_by_embed(data, models, monkeypatch, capsys):
    said = {}
    for command, model in (("embed", models["bert"]), ("translate", models["translation"])):
        _stdin(monkeypatch, data)
        code, err = _cli([command, "--model", str(model)], capsys)
        assert code == 2 and capsys.readouterr().out == "", (command, err)
        said[command] = _one_line(err).removeprefix(f"tformer {command}: error: ")
    assert said["translate"].startswith(said["embed"]), said  # "no sentences: stdin held only empty lines"


@pytest.mark.parametrize("command", ["translate", "embed"])
def test_stdin_in_utf16_is_refused_and_a_byte_order_mark_dropped(command, models, monkeypatch, capsys):
    model = models["translation"] if command == "translate" else models["bert"]
    _stdin(monkeypatch, "the cat\n".encode("utf-16-le"))
    code, err = _cli([command, "--model", str(model)], capsys)
    assert code == 2
    assert _one_line(err).endswith(
        "<stdin>:1: holds a NUL character at column 2 (UTF-16 text without a "
        "byte-order mark, or a binary file?): tformer reads UTF-8 text"
    ), err
    _stdin(monkeypatch, BOM + b"the cat\nthe dog\n")
    assert main([command, "--model", str(model), *(["--max-new-tokens", "2"] if command == "translate" else [])]) == 0
    out = capsys.readouterr().out
    assert "\ufeff" not in out and len(out.splitlines()) >= 2, out


def test_the_translator_keeps_each_sentence_in_its_place(models):
    from tformer.translation import Translator

    translator = Translator.load(models["translation"])
    sentences = ["the cat", "", "the dog", " \t", "a bird"]
    out = translator.translate(sentences, max_new_tokens=3, batch_size=2)
    alone = [translator.translate([s], max_new_tokens=3)[0] for s in ("the cat", "the dog", "a bird")]
    assert out[1] == out[3] == "" and [out[0], out[2], out[4]] == alone, out


def test_the_explorer_refuses_a_nul_as_it_refuses_a_lone_surrogate():
    from tformer.explore.params import Params

    with pytest.raises(ValueError, match=r"trace: text holds a NUL character \(at character 3\)"):
        Params({"text": "ab\x00c"}, "trace").text("text")


def test_stdin_lines_are_handed_out_as_they_come(monkeypatch):
    """A line waiting alone is handed out at once (a filter between programs, a person typing), lines waiting
    together up to the batch's size; the lines of a later piece keep their numbers in errors."""
    from tformer.text import stdin_line_batches

    read, write = os.pipe()
    with os.fdopen(read, "rb", buffering=0) as raw:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(raw)))
        batches = stdin_line_batches(2)
        os.write(write, BOM + b"the cat\r\n")
        assert next(batches) == ["the cat"]  # nothing more waits: not held until the end of the input
        os.write(write, b"a\nb\nc\n")
        assert next(batches) == ["a", "b"] and next(batches) == ["c"]
        os.write(write, b"d\n")
        assert next(batches) == ["d"]
        os.write(write, b"\xe9t\xe9\n")
        os.close(write)
        with pytest.raises(ValueError, match=r"^<stdin>:6: not valid UTF-8 \(byte 0xe9 at column 1\)$"):
            next(batches)


def test_translate_answers_each_line_before_the_input_ends(models, tmp_path):
    """``tformer translate`` between two programs: a line written is translated while stdin stays open."""
    args = [
        sys.executable,
        "-m",
        "tformer",
        "translate",
        "--model",
        str(models["translation"]),
        "--max-new-tokens",
        "3",
    ]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("\nthe cat\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no translation while stdin was open"
        first, second = proc.stdout.readline(), proc.stdout.readline()  # the blank line's, then the cat's
        assert first == "\n" and second.endswith("\n")
        rest, err = proc.communicate("the dog\n", timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert len(rest.split("\n")) == 2, rest  # one line out for the dog


def test_a_cut_sentence_is_named_by_its_line_in_the_whole_input(models, monkeypatch, capsys):
    read, write = os.pipe()
    os.write(write, b"the cat\n" * 16 + b"the cat sat on the mat. " * 40 + b"\n")  # read as 16 lines, then 1
    os.close(write)
    with os.fdopen(read, "rb", buffering=0) as raw:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(raw)))
        args = ["translate", "--model", str(models["translation"]), "--max-new-tokens", "2", "--batch-size", "1"]
        assert main(args) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 17
    said = err.splitlines()
    assert [line for line in said if "source sentence" in line] == [
        "tformer translate: warning: source sentence 17 is longer than the model reads (320 tokens): translating its "
        "first 32 tokens (max_len=32)"
    ]
    cut = ": cut there (--max-new-tokens 2)"  # a random model ends no translation within 2 tokens
    expected = [
        f"tformer translate: warning: translation {i} reached 2 tokens without its end token{cut}" for i in range(1, 18)
    ]
    assert [line for line in said if "source sentence" not in line] == expected
