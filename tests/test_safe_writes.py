"""A file a user names for output never costs them another file (issue 32, destructive writes).

Every command that writes a path named on its command line (``explore --export``, ``evaluate --out-hyp``,
``trace --json``, ``plot ... --out``, ``data langid --out``) goes through :func:`tformer.outputs.check_output`
before it does any work. Through the real CLI, for each of them:

* an existing file is refused (one line naming the flag and the path) and left byte for byte as it was; with
  ``--overwrite`` it is replaced, keeping its permission bits;
* a symbolic link is never replaced, nor the file it points to, even with ``--overwrite``;
* a missing directory is an error, and is not created;
* the command's own inputs (``--ref``, ``--src``, ``--tatoeba``, a run's ``log.jsonl``) and anything inside a
  model or training run directory are refused, even with ``--overwrite``;
* a write that fails halfway leaves the old file; a full disk says so in one line naming the file (issue 41).

``data download --cache`` is a directory the command fills with its own file names: it may exist, but not lie in
a model or run directory, and ``--force`` does not replace a cached file that is a symbolic link.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from tformer import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import build_parser, main
from tformer.cli.validate import PathArg

OLD = b"precious: not written by tformer\n"
PAIRS = ["the cat sat\tle chat assis", "a dog ran\tun chien courut", "i am good\tje vais bien", "we eat\tnous mangeons"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """The files the commands read: a tiny translation model with its test set, a Tatoeba-style TSV, a training
    run directory (log.jsonl and best/, the layout the trainer writes) and a plain GPT model directory."""
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator

    root = tmp_path_factory.mktemp("inputs")
    torch.manual_seed(0)
    tok = train_tokenizer("bpe", [line.replace("\t", " ") for line in PAIRS] * 5, vocab_size=60, min_frequency=1)
    config = Seq2SeqConfig(
        src_vocab_size=tok.vocab_size,
        tgt_vocab_size=tok.vocab_size,
        d_model=8,
        n_heads=2,
        d_ff=16,
        n_encoder_layers=1,
        n_decoder_layers=1,
        max_len=32,
        dropout=0.0,
    )
    Translator(Seq2SeqTransformer(config).eval(), tok, tok).save(root / "translator")
    (root / "src.txt").write_text("the cat sat\na dog ran\n", encoding="utf-8")
    (root / "ref.txt").write_text("le chat assis\nun chien courut\n", encoding="utf-8")
    (root / "tatoeba.tsv").write_text("\n".join(PAIRS) + "\n", encoding="utf-8")

    gpt = GPT(GPTConfig(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16, dropout=0.0)).eval()
    gpt.save_pretrained(root / "gpt")
    run = root / "run"
    gpt.save_pretrained(run / "best")
    log = [dict(step=s, train_loss=3.0 / s, lr=1e-3) for s in (1, 2, 3)] + [dict(step=3, val_loss=1.2)]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log), encoding="utf-8")
    return {p.name: p for p in root.iterdir()}


# Each command that writes a file the user names: its flag, and the arguments that write ``out``.
COMMANDS = {
    "explore --export": lambda d, out: ["explore", "--export", out],
    "evaluate --out-hyp": lambda d, out: [
        "evaluate",
        *("--model", str(d["translator"]), "--src", str(d["src.txt"]), "--ref", str(d["ref.txt"])),
        *("--max-new-tokens", "4", "--out-hyp", out),
    ],
    "trace --json": lambda d, out: ["trace", "--toy", "--max-new-tokens", "1", "--stage", "top_k", "--json", out],
    "plot attention --out": lambda d, out: ["plot", "attention", "--toy", "--out", out],
    "plot positional --out": lambda d, out: ["plot", "positional", "--max-len", "4", "--d-model", "4", "--out", out],
    "plot mask --out": lambda d, out: ["plot", "mask", "--tokens", "a b <pad>", "--out", out],
    "plot curves --out": lambda d, out: ["plot", "curves", str(d["run"]), "--out", out],
    "data langid --out": lambda d, out: [
        "data",
        "langid",
        "--tatoeba",
        str(d["tatoeba.tsv"]),
        "--n",
        "4",
        "--out",
        out,
    ],
}


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def _refused(argv: list[str], capsys, *expected: str) -> str:
    """Exit status 2 and one line ``tformer CMD: error: ...`` holding each of ``expected``."""
    code, err = _run(argv, capsys)
    assert code == 2, (argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tformer ") and ": error: " in lines[0], err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def _flag(command: str) -> str:
    return command.split()[-1]


def _names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))  # a left-over temporary file would show here


def test_every_output_flag_is_covered_and_has_overwrite():
    """Walk the parser: each flag that names a file to write is in COMMANDS, and its command has --overwrite
    (so a new output flag fails here until it is checked too)."""
    found = set()

    def walk(parser, words):
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):  # subcommands
                for name, sub in action.choices.items():
                    walk(sub, (*words, name))
            elif isinstance(action.type, PathArg) and action.type.kind == "out_file":
                found.add(" ".join((*words, action.option_strings[0])))
                assert "--overwrite" in parser._option_string_actions, words

    walk(build_parser(), ())
    assert found == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_existing_file_is_refused_and_left_as_it_was(command, inputs, tmp_path, capsys):
    out = tmp_path / "mine.txt"
    out.write_bytes(OLD)
    line = _refused(COMMANDS[command](inputs, str(out)), capsys, _flag(command), repr(str(out)), "--overwrite")
    assert "already exists" in line
    assert out.read_bytes() == OLD and _names(tmp_path) == ["mine.txt"]


@pytest.mark.parametrize("command", COMMANDS)
def test_overwrite_replaces_an_ordinary_file_and_keeps_its_mode(command, inputs, tmp_path, capsys):
    out = tmp_path / "mine.txt"
    out.write_bytes(OLD)
    out.chmod(0o640)
    code, err = _run(COMMANDS[command](inputs, str(out)) + ["--overwrite"], capsys)
    assert code == 0, err
    assert out.read_bytes() != OLD and out.stat().st_size > 0
    assert out.stat().st_mode & 0o777 == 0o640
    assert _names(tmp_path) == ["mine.txt"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_new_file_gets_ordinary_permissions(command, inputs, tmp_path, capsys):
    out = tmp_path / "new.out"
    umask = os.umask(0o022)
    try:
        code, err = _run(COMMANDS[command](inputs, str(out)), capsys)
    finally:
        os.umask(umask)
    assert code == 0, err
    assert out.stat().st_mode & 0o777 == 0o644  # what open() gives under umask 022, not a temp file's 0600


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlink_is_never_replaced(command, inputs, tmp_path, capsys):
    target = tmp_path / "target.txt"
    target.write_bytes(OLD)
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    _refused(COMMANDS[command](inputs, str(link)) + ["--overwrite"], capsys, _flag(command), "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_bytes() == OLD
    assert _names(tmp_path) == ["link.txt", "target.txt"]


@pytest.mark.parametrize("command", ["trace --json", "plot mask --out"])
def test_a_dangling_symlink_is_not_replaced_either(command, inputs, tmp_path, capsys):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "nowhere")
    _refused(COMMANDS[command](inputs, str(link)), capsys, "symbolic link")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_directory_is_an_error_and_is_not_created(command, inputs, tmp_path, capsys):
    out = tmp_path / "typo" / "out.txt"
    _refused(COMMANDS[command](inputs, str(out)), capsys, _flag(command), "does not exist")
    assert _names(tmp_path) == []


def _hard_link(source: Path, tmp_path: Path) -> Path:
    link = tmp_path / "hard.txt"
    os.link(source, link)
    return link


@pytest.mark.parametrize(
    "command, target",
    [
        ("evaluate --out-hyp", lambda d, tmp: d["ref.txt"]),
        ("evaluate --out-hyp", lambda d, tmp: d["src.txt"]),
        ("evaluate --out-hyp", lambda d, tmp: d["src.txt"].parent / "gpt" / ".." / "ref.txt"),  # spelled otherwise
        ("evaluate --out-hyp", lambda d, tmp: _hard_link(d["ref.txt"], tmp)),  # the same file under another name
        ("data langid --out", lambda d, tmp: d["tatoeba.tsv"]),
    ],
)
def test_a_commands_own_input_is_refused_even_with_overwrite(command, target, inputs, tmp_path, capsys):
    path = target(inputs, tmp_path)
    before = {p: p.read_bytes() for p in inputs["src.txt"].parent.rglob("*") if p.is_file()}
    _refused(COMMANDS[command](inputs, str(path)) + ["--overwrite"], capsys, _flag(command), "this command reads")
    assert {p: p.read_bytes() for p in before} == before


def test_plot_curves_refuses_the_log_it_was_given(inputs, capsys):
    log = inputs["run"] / "log.jsonl"
    before = log.read_bytes()
    argv = ["plot", "curves", str(log), "--out", str(log), "--overwrite"]
    _refused(argv, capsys, "--out", "is the RUN_DIR", "destroy the input")
    assert log.read_bytes() == before


@pytest.mark.parametrize(
    "command, place, kind",
    [
        ("trace --json", lambda d: d["run"] / "best" / "config.json", "model directory"),
        ("plot curves --out", lambda d: d["run"] / "log.jsonl", "training run directory"),  # the log it reads
        ("plot positional --out", lambda d: d["run"] / "log.jsonl", "training run directory"),
        ("plot mask --out", lambda d: d["run"] / "curves.png", "training run directory"),
        ("explore --export", lambda d: d["gpt"] / "page.html", "model directory"),
        ("explore --export", lambda d: d["gpt"] / "config.json", "model directory"),
        ("evaluate --out-hyp", lambda d: d["translator"] / "hyp.txt", "model directory"),
        ("data langid --out", lambda d: d["run"] / "best" / "model.safetensors", "model directory"),
    ],
)
def test_nothing_is_written_inside_a_model_or_run_directory(command, place, kind, inputs, capsys):
    path = place(inputs)
    root = inputs["src.txt"].parent
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    _refused(COMMANDS[command](inputs, str(path)) + ["--overwrite"], capsys, _flag(command), kind)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing changed, nothing new


def test_a_subdirectory_of_a_run_is_inside_it(inputs, tmp_path, capsys):
    notes = inputs["run"] / "notes"
    notes.mkdir(exist_ok=True)
    _refused(["plot", "mask", "--out", str(notes / "mask.png")], capsys, "training run directory")
    assert list(notes.iterdir()) == []


def test_a_failed_write_leaves_the_old_file(inputs, tmp_path, capsys, monkeypatch):
    """With --overwrite, a drawing that fails halfway (a full disk) leaves the old file whole, and no temp file."""
    from matplotlib.figure import Figure

    def savefig(self, fname, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)
    out = tmp_path / "pe.png"
    out.write_bytes(OLD)
    code, err = _run(
        ["plot", "positional", "--max-len", "4", "--d-model", "4", "--out", str(out), "--overwrite"], capsys
    )
    assert code == 1 and "No space left on device" in err
    assert out.read_bytes() == OLD and _names(tmp_path) == ["pe.png"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_says_so_names_the_file_and_leaves_the_old_one(command, inputs, tmp_path, capsys, monkeypatch):
    """The disk fills while the new file is written (its fsync reports ENOSPC, as delayed allocation does): one
    line, status 1, saying that the disk is full and naming the file, never its temporary name; the old file is
    left whole, with no temp file beside it (issue 41, item 4)."""
    import tformer.files as files

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "_fsync_file", full)
    out = tmp_path / "mine.txt"
    out.write_bytes(OLD)
    code, err = _run([*COMMANDS[command](inputs, str(out)), "--overwrite"], capsys)
    lines = [line for line in err.strip().splitlines() if "without its end token" not in line]  # an untrained model's
    assert code == 1 and len(lines) == 1 and ": error: " in lines[0], err
    assert f"could not write {str(out)!r}: the disk is full (No space left on device)" in lines[0], lines[0]
    assert "left as it was" in lines[0] and ".mine.txt." not in lines[0]
    assert out.read_bytes() == OLD and _names(tmp_path) == ["mine.txt"]


# ------------------------------------------------------------------------------------ data download --cache

DOWNLOAD = ["data", "download", "tatoeba-eng-fra", "--url", "http://127.0.0.1:9/", "--timeout", "2"]


def test_a_cache_inside_a_run_directory_is_refused(inputs, capsys):
    cache = inputs["run"] / "cache"
    _refused([*DOWNLOAD, "--cache", str(cache)], capsys, "--cache", "training run directory")
    assert not cache.exists()


def test_force_does_not_replace_a_cached_symlink(tmp_path, capsys):
    target = tmp_path / "my-copy.tsv"
    target.write_bytes(OLD)
    (tmp_path / "cache" / "tatoeba-eng-fra").mkdir(parents=True)
    link = tmp_path / "cache" / "tatoeba-eng-fra" / "tatoeba-eng-fra.tsv"
    link.symlink_to(target)
    _refused([*DOWNLOAD, "--cache", str(tmp_path / "cache"), "--force"], capsys, "--force", "symbolic link")
    assert link.is_symlink() and target.read_bytes() == OLD


def test_written_files_get_a_new_files_permissions_so_a_model_can_be_shared(tmp_path):
    """What tformer writes is readable as open() and save_pretrained make it (0o644 under a umask of 022): a run, an
    export, the training state; mkstemp's 0o600 was the temporary file's only. A file replaced keeps its own mode."""
    import stat

    from tformer.files import atomic_write
    from tformer.hf.export import export

    mask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.txt", lambda tmp: Path(tmp).write_text("x"))
        assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644
        (tmp_path / "mine.txt").write_text("x")
        (tmp_path / "mine.txt").chmod(0o600)
        atomic_write(tmp_path / "mine.txt", lambda tmp: Path(tmp).write_text("y"))
        assert stat.S_IMODE((tmp_path / "mine.txt").stat().st_mode) == 0o600  # the user's choice, kept
        model = GPT(GPTConfig.preset("tiny", vocab_size=16, max_len=8))
        export(model, tmp_path / "hf")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "hf").iterdir()}
        assert modes and set(modes.values()) == {0o644}, modes
    finally:
        os.umask(mask)
