"""Text that comes in is UTF-8 or refused with where it is; the CLI's error boundary (issue 32, classes 6 and 12).

* every way text comes in (command-line arguments, stdin, the files of ``evaluate`` / ``evaluate-lm`` /
  ``plot curves``, the training data of the four families) refuses a byte that is not UTF-8 with one line
  ``WHERE:LINE: not valid UTF-8 (byte 0x.. at column N)`` (``argument N`` for the command line): no traceback,
  no codec error that names no file;
* a TSV row with more columns than the reader allows is refused with its file and line;
* the boundary: expected failures of any type are one line; a bug keeps its traceback and asks for a report.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main

TEXT = "the cat sat on the mat. the dog ate the bone. a bird sang.\n"
LATIN1 = "café au lait\n".encode("latin-1")  # byte 0xe9 at column 4 ("caf" + é)


def _tiny(cls, config_cls, **fields):
    torch.manual_seed(0)
    return cls(config_cls(d_model=8, n_heads=2, d_ff=16, max_len=32, dropout=0.0, n_layers=1, **fields)).eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny translation model, a character LM and a BERT with its WordPiece."""
    from tformer.tokenizers import CharTokenizer, train_tokenizer
    from tformer.translation import Translator

    root = tmp_path_factory.mktemp("models")
    out = {name: root / name for name in ("translation", "lm", "bert")}
    tok = train_tokenizer("bpe", [TEXT] * 5, vocab_size=40, min_frequency=1)
    torch.manual_seed(0)
    seq2seq = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=tok.vocab_size,
            tgt_vocab_size=tok.vocab_size,
            d_model=8,
            n_heads=2,
            d_ff=16,
            max_len=32,
            dropout=0.0,
            n_encoder_layers=1,
            n_decoder_layers=1,
        )
    ).eval()
    Translator(seq2seq, tok, tok).save(out["translation"])
    char = CharTokenizer.train([TEXT])
    _tiny(GPT, GPTConfig, vocab_size=char.vocab_size).save_pretrained(out["lm"])
    char.save(out["lm"])
    wp = train_tokenizer("wordpiece", [TEXT] * 5, vocab_size=60, min_frequency=1)
    _tiny(Bert, BertConfig, vocab_size=wp.vocab_size).save_pretrained(out["bert"])
    wp.save(out["bert"])
    return out


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


# ------------------------------------------------------------------------------------- class 6: arguments


# Python hands a command-line byte that is not UTF-8 over as a lone surrogate (surrogateescape): "caf\udce9"
ARGV_CASES = {
    "translate": (["translate", "--model", "{translation}", "I am good.", "caf\udce9"], 5),
    "generate --prompt": (["generate", "--model", "{lm}", "--prompt", "caf\udce9", "--max-new-tokens", "2"], 5),
    "generate --stop": (["generate", "--model", "{lm}", "--stop", "caf\udce9", "--max-new-tokens", "2"], 5),
    "fill-mask": (["fill-mask", "--model", "{bert}", "caf\udce9 [MASK]"], 4),
    "embed": (["embed", "--model", "{bert}", "a cat", "caf\udce9"], 5),
    "trace": (["trace", "--model", "{lm}", "caf\udce9"], 4),
    "demo": (["demo", "--out", "{tmp}/demo", "caf\udce9"], 4),
}


@pytest.mark.parametrize("case", list(ARGV_CASES))
def test_an_argument_that_is_not_utf8_is_one_line(case, models, tmp_path, capsys):
    words, n = ARGV_CASES[case]
    argv = [w.format(tmp=tmp_path, **models) for w in words]
    code, err = _cli(argv, capsys)
    command = argv[0]
    assert code == 2
    named = f" (the value of {words[n - 2]})" if words[n - 2].startswith("--") else ""  # a flag's value: its flag
    assert _one_line(err) == f"tformer {command}: error: argument {n}{named}: not valid UTF-8 (byte 0xe9 at column 4)"
    assert not (tmp_path / "demo").exists()  # refused before anything was written


def test_a_lone_surrogate_argument_is_named_as_such(models, capsys):
    code, err = _cli(["translate", "--model", str(models["translation"]), "a\ud800b"], capsys)
    assert code == 2
    assert _one_line(err).endswith("argument 4: not valid UTF-8 (lone surrogate U+D800 at column 2)")


def test_real_command_line_bytes_that_are_not_utf8(models):
    """The bytes themselves on a real command line (no in-process surrogates): one line, status 2."""
    argv = [sys.executable.encode(), b"-m", b"tformer", b"translate", b"--model"]
    argv += [str(models["translation"]).encode(), b"caf\xe9"]
    r = subprocess.run(argv, capture_output=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode() == "tformer translate: error: argument 4: not valid UTF-8 (byte 0xe9 at column 4)\n"


# ----------------------------------------------------------------------------------------- class 6: stdin


@pytest.mark.parametrize("command", ["translate", "embed"])
def test_stdin_that_is_not_utf8_names_its_line(command, models, monkeypatch, capsys):
    model = models["translation"] if command == "translate" else models["bert"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"I am good.\n" + LATIN1)))
    code, err = _cli([command, "--model", str(model)], capsys)
    assert code == 2
    assert _one_line(err) == f"tformer {command}: error: <stdin>:2: not valid UTF-8 (byte 0xe9 at column 4)"


def test_a_closed_stdin_is_one_line(models, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", None)  # started with stdin closed (python -m tformer translate <&-)
    code, err = _cli(["translate", "--model", str(models["translation"])], capsys)
    assert code == 2
    assert _one_line(err) == "tformer translate: error: no input: stdin is closed; pass the text as arguments"


def test_utf8_stdin_still_translates(models, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("the cat\n\nthé dog\n".encode())))
    assert main(["translate", "--model", str(models["translation"]), "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.split("\n")[1] == ""  # the empty line gives an empty line (issue 41)


# ----------------------------------------------------------------------------------------- class 6: files


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_evaluate_names_the_file_and_line(models, tmp_path, capsys):
    src = _write(tmp_path / "src.txt", b"the cat\n" + LATIN1)
    ref = _write(tmp_path / "ref.txt", b"le chat\nle chien\n")
    code, err = _cli(["evaluate", "--model", str(models["translation"]), "--src", src, "--ref", ref], capsys)
    assert code == 2
    assert _one_line(err) == f"tformer evaluate: error: {src}:2: not valid UTF-8 (byte 0xe9 at column 4)"
    bad_ref = _write(tmp_path / "ref2.txt", b"le chat\n\xc3(\n")  # a cut-off two-byte character
    _write(tmp_path / "src.txt", b"the cat\nthe dog\n")
    code, err = _cli(["evaluate", "--model", str(models["translation"]), "--src", src, "--ref", bad_ref], capsys)
    assert _one_line(err).endswith(f"{bad_ref}:2: not valid UTF-8 (byte 0xc3 at column 1)")


def test_a_blank_reference_is_no_reference_not_an_empty_one_that_lifts_bleu_to_100(models, tmp_path, capsys):
    """sacreBLEU scores an empty string as a reference of length 0: the closest to a short hypothesis, the brevity
    penalty gone. A blank second reference (a sentence with fewer) changes nothing; a file of blank lines only is
    refused naming it."""
    from tformer.translation.translator import corpus_bleu

    hyps = ["the cat sat on the", "a dog runs in the"]
    refs = ["the cat sat on the mat today and then it left the room", "a dog runs in the park now and it is happy"]
    alone = corpus_bleu(hyps, [refs])
    assert alone[0] < 30 and corpus_bleu(hyps, [refs, ["", " "]])[:2] == alone[:2]  # sacreBLEU alone: 100.0
    assert corpus_bleu(hyps, [[refs[0], ""]])[0] > 0  # no other reference: the sentence's is the empty text
    src = _write(tmp_path / "src.txt", b"the cat\nthe dog\n")
    ref = _write(tmp_path / "ref.txt", b"\n \n")
    code, err = _cli(["evaluate", "--model", str(models["translation"]), "--src", src, "--ref", ref], capsys)
    assert code == 2 and _one_line(err).endswith(f"--ref {ref} holds only blank lines: nothing to score")


def test_evaluate_lm_names_the_file(models, tmp_path, capsys):
    data = _write(tmp_path / "other.txt", TEXT.encode() * 3 + "é ".encode() + b"\xff\n")
    code, err = _cli(["evaluate-lm", "--model", str(models["lm"]), "--data", data], capsys)
    assert code == 2
    assert _one_line(err).endswith(f"{data}:4: not valid UTF-8 (byte 0xff at column 3)")  # é is one column


def _train(family: str, data: str, out: Path) -> list[str]:
    argv = ["train", family, "--data", data, "--out", str(out), "--max-steps", "1", "--no-progress"]
    return argv + (["--preset", "tiny"] if family in ("translation", "bert") else [])


TRAINING_DATA = {  # family -> (file name, bytes, line of the bad byte)
    "translation": ("pairs.tsv", b"Hi.\tSalut.\n" + b"caf\xe9\tcaf\xc3\xa9\n", 2),
    "lm": ("text.txt", TEXT.encode() + LATIN1, 2),
    "lm-folder": ("texts/b.txt", TEXT.encode() * 2 + LATIN1, 3),
    "bert": ("text.txt", TEXT.encode() + b"\n" + LATIN1, 3),
    "classify": ("labels.tsv", b"a cat\ten\n" + b"caf\xe9\tfr\n", 2),
}


@pytest.mark.parametrize("case", list(TRAINING_DATA))
def test_training_data_names_the_file_and_line(case, models, tmp_path, capsys):
    name, data, line = TRAINING_DATA[case]
    path = _write(tmp_path / name, data)
    family = case.split("-")[0]
    given = str(Path(path).parent) if case == "lm-folder" else path
    argv = _train(family, given, tmp_path / "out")
    if family == "classify":
        argv += ["--init", str(models["bert"])]
    code, err = _cli(argv, capsys)
    assert code == 2
    column = 4
    assert _one_line(err).endswith(f"{path}:{line}: not valid UTF-8 (byte 0xe9 at column {column})"), err


def test_aligned_files_name_the_file_and_line(tmp_path, capsys):
    _write(tmp_path / "m30k" / "train.en", b"a dog\n" * 3 + LATIN1)
    _write(tmp_path / "m30k" / "train.fr", b"un chien\n" * 4)
    code, err = _cli(_train("translation", str(tmp_path / "m30k"), tmp_path / "out"), capsys)
    assert code == 2
    assert _one_line(err).endswith(f"{tmp_path / 'm30k' / 'train.en'}:4: not valid UTF-8 (byte 0xe9 at column 4)")


def test_jsonl_with_an_escaped_lone_surrogate(tmp_path, capsys):
    """Valid UTF-8 bytes, but a JSON escape that makes no character: refused with file, line and field."""
    data = _write(tmp_path / "docs.jsonl", b'{"text": "fine"}\n{"text": "bad \\udc80 text"}\n')
    code, err = _cli(_train("lm", data, tmp_path / "out"), capsys)
    assert code == 2
    assert _one_line(err).endswith(f"{data}:2: field 'text': not valid UTF-8 (byte 0x80 at column 5)")
    _write(tmp_path / "docs.jsonl", b'{"text": "fine"}\n{"text": "cut\n')
    code, err = _cli(_train("lm", data, tmp_path / "out"), capsys)
    assert _one_line(err).endswith(f"{data}:2: not a JSON object (Unterminated string starting at)")


def test_plot_curves_names_the_log_and_line(tmp_path, capsys):
    log = tmp_path / "run" / "log.jsonl"
    _write(log, b'{"step": 1, "train_loss": 2.0}\n{"step": 2, "note": "caf\xe9"}\n')
    code, err = _cli(["plot", "curves", str(tmp_path / "run"), "--out", str(tmp_path / "c.png")], capsys)
    assert code == 2
    assert _one_line(err) == f"tformer plot curves: error: {log}:2: not valid UTF-8 (byte 0xe9 at column 25)"
    log.write_text('{"step": 1, "train_loss": 2.0}\n{"step": 2, "train_loss": "nan?"}\n', encoding="utf-8")
    code, err = _cli(["plot", "curves", str(log), "--out", str(tmp_path / "c.png")], capsys)
    assert _one_line(err).endswith(f"{log}:2: 'train_loss' must be a number, got 'nan?'")
    assert not (tmp_path / "c.png").exists()


# ------------------------------------------------------------------------------------ class 12: TSV columns


@pytest.mark.parametrize("extra", [2, 3])
def test_a_tsv_row_with_too_many_columns_is_refused(extra, tmp_path, capsys):
    row = "\t".join(["I am good.", "Je vais bien.", "CC-BY 2.0 (France)", "more", "and more"][: 2 + extra])
    data = _write(tmp_path / "pairs.tsv", ("Hi.\tSalut.\n" * 20 + row + "\n").encode())
    code, err = _cli(_train("translation", data, tmp_path / "out"), capsys)
    assert code == 2
    assert _one_line(err) == (
        f"tformer train translation: error: {data}:21: expected 2 or 3 tab-separated columns "
        f"(source, target, optional attribution), got {2 + extra}"
    )
    assert not (tmp_path / "out" / "log.jsonl").exists()  # refused before training


def test_three_columns_are_still_read(tmp_path):
    from tformer.text import read_tsv

    path = _write(tmp_path / "pairs.tsv", "Hi.\tSalut.\tCC-BY 2.0\r\nI am good.\tJe vais\u202fbien.\n\n".encode())
    assert read_tsv(path) == [("Hi.", "Salut."), ("I am good.", "Je vais bien.")]


# ------------------------------------------------------------------------------------- the error boundary


def _boom(exc: BaseException):
    def run(args):
        raise exc

    return run


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"), 1, "package 'matplotlib'"),
        (json.JSONDecodeError("Expecting value", "x", 0), 2, "Expecting value"),
        (UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid"), 2, "can't decode byte 0xe9"),
        (ValueError(), 2, "ValueError"),
    ],
)
def test_expected_failures_of_other_types_are_one_line(exc, code, text, monkeypatch, capsys):
    monkeypatch.setattr("tformer.cli._run", _boom(exc))
    assert main(["info", "."]) == code
    err = capsys.readouterr().err
    assert _one_line(err).startswith("tformer info: error: ") and text in err, err


def test_labels_file_of_the_wrong_shape_is_one_line(models, tmp_path, capsys):
    """labels.json without "labels" (a KeyError deep inside before) or naming the wrong number of labels."""
    from tformer.tokenizers import load_tokenizer

    directory = tmp_path / "clf"
    wp = load_tokenizer(models["bert"])
    _tiny(Bert, BertConfig, vocab_size=wp.vocab_size, num_labels=2).save_pretrained(directory)
    wp.save(directory)
    labels = directory / "labels.json"
    labels.write_text('{"labels": ["en", "fr"]}', encoding="utf-8")
    assert main(["classify", "--model", str(directory), "a cat"]) == 0
    capsys.readouterr()
    for content, expected in [
        ('{"names": ["en", "fr"]}', "must hold {'labels': [...]}, a non-empty list of strings"),
        ('{"labels": ["en", "fr", "de"]}', "names 3 labels, but the model's config.json has num_labels=2"),
        ("[1, 2", "is not valid JSON"),
    ]:
        labels.write_text(content, encoding="utf-8")
        code, err = _cli(["classify", "--model", str(directory), "a cat"], capsys)
        assert code == 2 and str(labels) in _one_line(err) and expected in err, err


def test_a_corrupted_tokenizer_for_trace_is_one_line(models, tmp_path, capsys):
    import shutil

    directory = tmp_path / "lm"
    shutil.copytree(models["bert"], directory)
    (directory / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nope"}}', encoding="utf-8")
    code, err = _cli(["trace", "--model", str(directory), "the cat"], capsys)
    assert code == 2
    assert "tokenizer.json" in _one_line(err) and "not a tokenizer saved by the tokenizers library" in err


REPORT = "this is a bug in tformer (ZeroDivisionError), not a mistake in your input: please report it"


def test_a_bug_keeps_its_traceback_and_asks_for_a_report(monkeypatch):
    monkeypatch.setattr("tformer.cli._run", _boom(ZeroDivisionError("division by zero")))
    with pytest.raises(ZeroDivisionError) as info:
        main(["info", "."])
    if sys.version_info >= (3, 11):  # 3.10 prints the line above the traceback instead
        assert any(REPORT in note for note in info.value.__notes__)


def test_a_bug_in_a_real_process(models):
    """The real entry point: the traceback, then the report line; exit status 1."""
    code = (
        "import sys, tformer.cli.info as info\n"
        "info.run = lambda args: 1 / 0\n"
        "from tformer.cli import main\n"
        f"sys.exit(main(['info', {str(models['lm'])!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "ZeroDivisionError: division by zero" in r.stderr
    if sys.version_info >= (3, 11):
        assert r.stderr.rstrip("\n").splitlines()[-1].startswith(f"tformer info: {REPORT}"), r.stderr


# ------------------------------------------------------------------------------- class 14: the demo's promise


def _pairs_tsv(directory: Path) -> str:
    subjects = [("I", "Je"), ("You", "Tu"), ("He", "Il"), ("She", "Elle"), ("We", "Nous")]
    verbs = [("eat", "mange"), ("sing", "chante"), ("sleep", "dort"), ("run", "court"), ("read", "lit")]
    pairs = [(f"{s} {v}.", f"{t} {w}.") for s, t in subjects for v, w in verbs]
    return _write(directory / "pairs.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs).encode())


def _log_steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]


def test_demo_cut_by_its_time_cap_says_it_stopped_short(tmp_path, monkeypatch, capsys):
    """A slow or busy machine: the time cap ends training long before the step target; the demo says so and
    what to run, before its translations (here the cap is 6 ms, so any machine is 'slow')."""
    monkeypatch.chdir(tmp_path)
    data = _pairs_tsv(tmp_path)
    argv = ["demo", "--data", data, "--out", "demo", "--minutes", "0.0001", "--vocab-size", "60", "--no-progress"]
    assert main([*argv, "I eat."]) == 0
    out = capsys.readouterr().out
    steps = max(_log_steps(tmp_path / "demo"))
    assert steps < 800
    expected = (
        f"stopped short: --minutes 0.0001 ran out after {steps} of the 800 steps the demo needs (this machine is "
        "slower or busier than expected), so the translations below may be wrong. To train all 800 steps, run: "
        f"tformer demo --overwrite --out demo --data {data}\n"
    )
    assert expected in out and out.index(expected) < out.index("I eat.")


def test_demo_trains_to_its_step_target(tmp_path, monkeypatch, capsys):
    """Without a time cap the demo trains its --max-steps, however long they take; nothing stopped short."""
    monkeypatch.chdir(tmp_path)
    argv = ["demo", "--data", _pairs_tsv(tmp_path), "--out", "demo", "--max-steps", "3", "--vocab-size", "60"]
    assert main([*argv, "--no-progress", "I eat."]) == 0
    out = capsys.readouterr().out
    assert "for 3 steps on" in out and "stopped short" not in out
    assert max(_log_steps(tmp_path / "demo")) == 3


def test_demo_says_when_the_promised_translation_did_not_come(tmp_path, monkeypatch, capsys):
    """The built-in corpus promises "I am good." -> "Je vais bien."; two steps cannot keep it, and the demo says
    so with the command that trains longer (never a silent wrong translation)."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--out", "demo", "--max-steps", "2", "--no-progress", "I am good."]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("note: 'I am good.'"))  # (a warmup note comes first)
    assert line.startswith("note: 'I am good.' came out as ") and line.endswith(
        ", not 'Je vais bien.', after 2 steps; train longer: tformer demo --overwrite --out demo"  # 800 steps
    )


# ---------------------------------------------------------------------------- class 15: set-up's torch source

SETUP = Path(__file__).resolve().parents[1] / "scripts" / "setup.sh"
FAKE_PYTHON = """#!/usr/bin/env bash
# pip is faked: each call is logged; --report prints the plan the test chose; --index-url exits as the test chose
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "$*" >> "$FAKE_LOG"
  case " $* " in
    *" --report - "*) cat "$FAKE_REPORT" ;;
    *" --index-url "*) exit "$FAKE_INDEX_STATUS" ;;
  esac
  exit 0
fi
exec {python} "$@"
"""


@pytest.mark.parametrize(
    "url, gpu, index_ok, says, installs",
    [
        (
            "file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-none.whl",
            False,
            True,
            "from a wheel found on this machine",
            [""],
        ),
        (
            "https://files.pythonhosted.org/torch-2.13.0-cp311-linux.whl",
            False,
            True,
            "the CPU build (about 200 MB)",
            ["--index-url https://download.pytorch.org/whl/cpu --retries 2 "],
        ),  # fmt: skip
        (
            "https://files.pythonhosted.org/torch-2.13.0-cp311-linux.whl",
            False,
            False,
            "falling back to PyPI",
            ["--index-url https://download.pytorch.org/whl/cpu --retries 2 ", ""],
        ),  # fmt: skip
        ("https://files.pythonhosted.org/torch-2.13.0-cp311-linux.whl", True, True, "an NVIDIA GPU is here", [""]),
        (None, False, True, "", []),  # the pin is met already: nothing installed, nothing said
    ],
)
def test_setup_takes_the_cpu_build_where_no_local_wheel_is(url, gpu, index_ok, says, installs, tmp_path):
    """scripts/setup.sh's choice, with pip faked: a local wheel as it is; on Linux without a GPU, PyTorch's CPU
    index (then PyPI if it cannot be reached, said plainly); PyPI with a GPU. Each download is announced."""
    if sys.platform != "linux":
        pytest.skip("the choice is Linux's")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexit {0 if gpu else 1}\n")
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    for tool in ("python", "nvidia-smi"):
        (bin_dir / tool).chmod(0o755)
    install = [{"metadata": {"name": "torch"}, "download_info": {"url": url}}] if url else []
    (tmp_path / "report.json").write_text(json.dumps({"install": install}))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(tmp_path / "pip.log"),
        "FAKE_REPORT": str(tmp_path / "report.json"),
        "FAKE_INDEX_STATUS": "0" if index_ok else "1",
        "TFORMER_SETUP_DRY_RUN": "1",
    }
    r = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {SETUP}; echo done"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.endswith("done\n"), r.stdout + r.stderr
    assert says in r.stdout
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert calls[0] == "-m pip install --dry-run --quiet --report - torch==2.13.0"  # pip's own plan first
    assert calls[1:] == [f"-m pip install -q --no-compile --dry-run {extra}torch==2.13.0" for extra in installs]
