"""tformer touches only what it made, and a full disk or a read-only place is the user's situation (issue 41,
items 1 and 4).

Item 1: a save swaps a directory in (``tformer export``'s OUT, a run's ``best/`` and ``last/``) inside a work
directory made for that save alone (``.NAME.tformer-<random>``, marked with :data:`tformer.files.MARK`); a file is
written through a temporary file of its own. A user's folders beside the target, even named as earlier versions
named theirs (``.OUT.old``, ``.OUT.new``, ``.last.tmp-<random>``), are neither read, renamed nor deleted: not by
export, not by a run's saves, not by ``--resume``'s recovery, not by ``--overwrite``.

Item 4: a save, an export, a log line or a file that the disk cannot take (``ENOSPC``, also inside safetensors'
``SafetensorError``) ends in one line with exit status 1, saying that the disk is full and which path, and that
what was saved before is left as it was (it is: byte for byte). A read-only place is refused by ``export`` before
the model is read, naming OUT (never its temporary folder).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import SafetensorError

import tformer.files as files
from tformer import GPT, GPTConfig
from tformer.cli import main

WORDS = "the king is dead long live the queen and all her men ride to war at dawn".split()
FULL = "Error while serializing: I/O error: No space left on device (os error 28)"  # safetensors' own words


def _text(directory: Path) -> Path:
    rng = random.Random(0)
    path = directory / "words.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(300)), encoding="utf-8")
    return path


def _lm(directory: Path, out: str, *more: str) -> list[str]:
    return [
        "train", "lm", "--data", str(_text(directory)), "--out", out, "--preset", "tiny", "--max-len", "16",
        "--batch-size", "4", "--batches-per-epoch", "5", "--eval-blocks", "8", "--log-every", "1",
        "--schedule", "inverse_sqrt", "--warmup-steps", "3", "--dropout", "0.1", "--no-progress", *more,
    ]  # fmt: skip


def _run(capsys, argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    return {"code": code, "out": captured.out, "err": captured.err}


def _error(result: dict, code: int, *names: str) -> str:
    """The failed command's one error line (no traceback), which names each of ``names``."""
    assert result["code"] == code, result
    assert "Traceback" not in result["err"] and "bug" not in result["err"], result["err"]
    lines = [line for line in result["err"].splitlines() if "error:" in line]
    assert len(lines) == 1, result["err"]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _folders_of_the_user(parent: Path, name: str) -> dict[str, bytes]:
    """Folders beside ``parent/name`` named as tformer's staging was named before issue 41, each holding a file."""
    for kind in ("old", "new", "tmp-abcdefgh"):
        (parent / f".{name}.{kind}").mkdir()
        (parent / f".{name}.{kind}" / "notes.txt").write_text(f"mine, not tformer's ({kind})\n")
    return _snapshot(parent)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("model") / "gpt"
    config = GPTConfig(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16, dropout=0.0)
    GPT(config).eval().save_pretrained(directory)
    return directory


# ------------------------------------------------------------------------------------------------ item 1


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_leaves_the_users_folders_beside_out_as_they_were(model, tmp_path, capsys, overwrite):
    out = tmp_path / "e"
    if overwrite:  # OUT holds an earlier export, which --overwrite replaces
        assert _run(capsys, ["export", str(model), "--to", "hf", str(out)])["code"] == 0
    mine = {k: v for k, v in _folders_of_the_user(tmp_path, "e").items() if not k.startswith("e/")}
    result = _run(capsys, ["export", str(model), "--to", "hf", str(out), *(["--overwrite"] if overwrite else [])])
    assert result["code"] == 0, result["err"]
    assert {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith("e/")} == mine
    assert sorted(p.name for p in tmp_path.iterdir()) == [".e.new", ".e.old", ".e.tmp-abcdefgh", "e"]
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize("command", ["export", "merge", "average"])
def test_overwrite_replaces_only_a_directory_the_command_wrote_not_a_model_of_the_users(tmp_path, capsys, command):
    """export, merge and average --overwrite replace a directory only where their ``.tformer-output.json`` lists
    all it holds: a model of the user's (a Hugging Face directory, a copy of a run's best/, a lone config.json),
    whose files bear the very names these commands write, is refused and kept byte for byte."""
    run = tmp_path / "run"
    train = _lm(tmp_path, str(run), "--max-steps", "2", "--eval-every", "1", "--keep-checkpoints", "2")
    if command == "merge":  # a LoRA run on the run above
        assert _run(capsys, _lm(tmp_path, str(tmp_path / "base"), "--max-steps", "1"))["code"] == 0
        train = [w for w in train if w not in ("--preset", "tiny", "--dropout", "0.1")]
        train += ["--init", str(tmp_path / "base"), "--lora-r", "2"]
    assert _run(capsys, train)["code"] == 0
    argv = {
        "export": ["export", str(run), "--to", "hf"],
        "merge": ["merge", str(run)],
        "average": ["average", str(run), "--last", "2"],
    }[command]
    theirs = tmp_path / "theirs"
    assert _run(capsys, [*argv, str(theirs)])["code"] == 0  # the command's own output: replaced with --overwrite
    assert json.loads((theirs / ".tformer-output.json").read_text())["written_by"] == f"tformer {command}"
    assert _run(capsys, [*argv, str(theirs), "--overwrite"])["code"] == 0
    users = {"copy": tmp_path / "copy", "hf": tmp_path / "hf", "config": tmp_path / "config"}
    shutil.copytree(run / "best", users["copy"])  # a model of the user's, named as tformer names its files
    assert _run(capsys, ["export", str(run), "--to", "hf", str(users["hf"])])["code"] == 0
    (users["hf"] / ".tformer-output.json").unlink()  # as a Hugging Face download would be
    users["config"].mkdir()
    (users["config"] / "config.json").write_text("mine")
    for name, path in users.items():
        before = _snapshot(path)
        line = _error(_run(capsys, [*argv, str(path), "--overwrite"]), 2, str(path), "nothing was deleted")
        assert "is not an output of tformer's" in line, (name, line)
        assert _snapshot(path) == before, name
    (theirs / "notes.txt").write_text("mine")  # a file of the user's in the command's output: refused too
    _error(_run(capsys, [*argv, str(theirs), "--overwrite"]), 2, "notes.txt", "nothing was deleted")
    assert (theirs / "notes.txt").read_text() == "mine"


def test_a_runs_saves_and_resume_leave_the_users_folders_beside_last_and_best(tmp_path, capsys, monkeypatch):
    """A backup the user made as ``.last.old`` (a copy of last/, a saved model), and other folders named as
    earlier versions named their staging, survive the run's saves and ``--resume``'s recovery byte for byte."""
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, _lm(tmp_path, "run", "--max-steps", "2", "--eval-every", "2"))["code"] == 0
    run = tmp_path / "run"
    shutil.copytree(run / "last", run / ".last.old")  # the user's backup: a saved model
    for name in (".last.new", ".best.old", ".best.new", ".best.tmp-abcdefgh"):
        (run / name).mkdir()
        (run / name / "notes.txt").write_text("mine\n")
    mine = {k: v for k, v in _snapshot(run).items() if k.startswith(".")}
    result = _run(capsys, _lm(tmp_path, "run", "--max-steps", "6", "--eval-every", "2", "--resume"))
    assert result["code"] == 0, result["err"]
    assert {k: v for k, v in _snapshot(run).items() if k.startswith(".")} == mine
    assert json.loads((run / "last" / "state.json").read_text())["step"] == 6


def test_overwrite_deletes_only_leftovers_that_tformer_named_and_marked(tmp_path, capsys, monkeypatch):
    """``--overwrite`` deletes a run's files and the leftovers of its cut saves (a marked work directory, a
    temporary file), and refuses, deleting nothing, a run that also holds ``.best.backup``, ``.log.jsonl.bak``
    or a ``.last.tformer-<random>`` folder without tformer's mark."""
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, _lm(tmp_path, "run", "--max-steps", "2"))["code"] == 0
    run = tmp_path / "run"
    (run / ".last.tformer-abcdefgh").mkdir()
    (run / ".last.tformer-abcdefgh" / files.MARK).write_text(json.dumps({"saving": "last"}))  # a cut save: tformer's
    (run / ".curves.png.tformer-abcdefgh.tmp").write_bytes(b"half a picture")  # a cut write: tformer's
    for name, make in (
        (".best.backup", Path.mkdir),
        (".log.jsonl.bak", Path.touch),
        (".last.tformer-mine", Path.mkdir),
    ):
        make(run / name)
        before = _snapshot(run), sorted(p.name for p in run.iterdir())
        result = _run(capsys, _lm(tmp_path, "run", "--max-steps", "2", "--overwrite"))
        _error(result, 2, "--overwrite", name, "nothing was deleted")
        assert (_snapshot(run), sorted(p.name for p in run.iterdir())) == before
        shutil.rmtree(run / name) if (run / name).is_dir() else (run / name).unlink()
    assert _run(capsys, _lm(tmp_path, "run", "--max-steps", "2", "--overwrite"))["code"] == 0
    assert sorted(p.name for p in run.iterdir()) == ["best", "config.yaml", "curves.png", "last", "log.jsonl"]


def _files(directory: Path, text: str) -> Path:
    directory.mkdir()
    (directory / "a.txt").write_text(text)
    return directory


def test_recovery_adopts_only_a_save_tformer_marked_or_an_earlier_versions_saved_model(tmp_path, model):
    """With ``last`` missing, a user's ``.last.new`` / ``.last.old`` and an unmarked ``.last.tformer-<random>``
    are neither read nor adopted nor deleted; a marked save's work directory is. A ``.best.new`` holding a saved
    model, as a crash of an earlier version left it, is still read and put back (and an old run still loads)."""
    dest = tmp_path / "last"
    mine = [_files(tmp_path / name, "mine") for name in (".last.new", ".last.old", ".last.tformer-abcdefgh")]
    assert files.current_dir(dest) == dest
    files.recover_dir(dest)
    assert not dest.exists() and all((p / "a.txt").read_text() == "mine" for p in mine)

    work = _files(tmp_path / ".last.tformer-ijklmnop", "")
    (work / files.MARK).write_text(json.dumps({"saving": "last"}))
    _files(work / "new", "saved")
    assert files.current_dir(dest) == work / "new"
    files.recover_dir(dest)
    assert (dest / "a.txt").read_text() == "saved" and not work.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["last", *(p.name for p in mine)])

    run = tmp_path / "old-run"  # an earlier version, cut between its renames: best/ aside, the new one not in
    shutil.copytree(model, run / ".best.new")
    (run / "log.jsonl").write_text('{"step": 1}\n')
    GPT.from_pretrained(run)  # reads .best.new
    files.recover_dir(run / "best")
    assert sorted(p.name for p in run.iterdir()) == ["best", "log.jsonl"]
    GPT.from_pretrained(run)


# ------------------------------------------------------------------------------------------------ item 4


@pytest.mark.parametrize("name", ["last", "best"])
def test_a_full_disk_during_a_save_says_so_names_the_directory_and_keeps_the_previous_one(
    name, tmp_path, capsys, monkeypatch
):
    """The second save of ``last/`` (its trainer state) or of ``best/`` (its weights) meets a full disk, reported
    as safetensors reports it: one line, status 1, and the previous directory is as it was."""
    import tformer.models.checkpoint as checkpoint
    import tformer.training.state as state

    monkeypatch.chdir(tmp_path)
    module = state if name == "last" else checkpoint
    real, calls, before = module.save_file, [0], {}

    def save_file(tensors, path, metadata=None):
        if name == "last" or f"/.{name}." in str(path):
            calls[0] += 1
            if calls[0] == 2:
                before.update(_snapshot(tmp_path / "run" / name))
                Path(path).write_bytes(b"x" * 100)  # half written, then the disk is full
                raise SafetensorError(FULL)
        return real(tensors, path, metadata=metadata)

    monkeypatch.setattr(module, "save_file", save_file)
    result = _run(capsys, _lm(tmp_path, "run", "--max-steps", "6", "--eval-every", "2"))
    line = _error(result, 1, f"could not save {Path('run', name)}", "the disk is full", "No space left on device")
    assert f"the previous {name}/ is left as it was" in line
    assert before and _snapshot(tmp_path / "run" / name) == before  # byte for byte
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no half-written save
    GPT.from_pretrained(tmp_path / "run" / name)


def test_a_full_disk_while_appending_to_the_log_names_the_log(tmp_path, capsys, monkeypatch):
    import tformer.training.runlog as runlog  # the run's log.jsonl is appended there

    monkeypatch.chdir(tmp_path)
    lines = [0]

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_open(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        if str(path).endswith("log.jsonl") and "a" in mode:
            lines[0] += 1
            if lines[0] > 3:  # the fourth record: after the save at step 2
                return Full(f)
        return f

    monkeypatch.setattr(runlog, "open", full_open, raising=False)
    result = _run(capsys, _lm(tmp_path, "run", "--max-steps", "6", "--eval-every", "2"))
    _error(result, 1, str(Path("run", "log.jsonl")), "the disk is full", "No space left on device", "left as it was")
    assert json.loads((tmp_path / "run" / "last" / "state.json").read_text())["step"] == 2


def test_export_on_a_full_disk_says_so_names_out_and_keeps_the_earlier_export(model, tmp_path, capsys, monkeypatch):
    export = importlib.import_module("tformer.hf.export")  # the module: tformer.hf.export is also a function

    out = tmp_path / "e"
    assert _run(capsys, ["export", str(model), "--to", "hf", str(out)])["code"] == 0
    before = _snapshot(tmp_path)

    def save_file(tensors, path, metadata=None):
        Path(path).write_bytes(b"x" * 100)
        raise SafetensorError(FULL)

    monkeypatch.setattr(export, "save_file", save_file)
    result = _run(capsys, ["export", str(model), "--to", "hf", str(out), "--overwrite"])
    line = _error(result, 1, repr(str(out)), "the disk is full", "No space left on device", "left as it was")
    assert ".e." not in line  # OUT, not its temporary folder
    assert _snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["e"]


def test_a_refused_write_names_out_not_its_temporary_folder(model, tmp_path, capsys, monkeypatch):
    """A place that ``os.access`` lets pass but the file system refuses (an ACL, NFS's root squash): the error
    names OUT, with the reason in words."""

    def refused(prefix="", dir=None, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.path.join(dir, prefix + "abcdefgh"))

    monkeypatch.setattr(files.tempfile, "mkdtemp", refused)
    out = tmp_path / "e"
    line = _error(_run(capsys, ["export", str(model), "--to", "hf", str(out)]), 1, repr(str(out)), "permission denied")
    assert ".e." not in line and "nothing was written" in line
    assert list(tmp_path.iterdir()) == []


LOAD_FAILS = """
import sys
import tformer.loader
def load(*args, **kwargs):
    print("the model was read", file=sys.stderr)
    sys.exit(99)
tformer.loader.load = load
from tformer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _read_only(directory: Path) -> list[str]:
    """The command prefix that runs a command with ``directory`` read-only: ``chmod`` for a user; for root, whom
    modes do not stop, a read-only tmpfs mounted there in a private mount namespace (``unshare``)."""
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return []
    prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
              'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"', str(directory)]  # fmt: skip
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        probe = None
    if probe is None or probe.returncode != 0:
        pytest.skip(
            "running as root, where chmod does not stop a write, on a machine that allows no private read-only "
            "mount (unshare): test_a_refused_write_names_out_not_its_temporary_folder covers the message"
        )
    return prefix


def test_export_into_a_read_only_place_is_refused_before_the_model_is_read(model, tmp_path):
    ro = tmp_path / "ro"
    prefix = _read_only(ro)
    out = ro / "e"
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", LOAD_FAILS, "export", str(model), "--to", "hf", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        ro.chmod(0o755)
    line = _error({"code": done.returncode, "err": done.stderr}, 2, repr(str(out)), "cannot write into")
    assert "read-only" in line or "permission denied" in line
    assert ".e." not in line and "was read" not in done.stderr
    assert not out.exists()


def test_save_pretrained_on_a_full_disk_names_the_file_and_keeps_the_old_one(model, tmp_path, monkeypatch):
    import tformer.models.checkpoint as checkpoint

    directory = Path(shutil.copytree(model, tmp_path / "gpt"))
    before = _snapshot(tmp_path)

    def save_file(tensors, path, metadata=None):
        Path(path).write_bytes(b"x" * 100)
        raise SafetensorError(FULL)

    monkeypatch.setattr(checkpoint, "save_file", save_file)
    with pytest.raises(files.WriteError) as failed:
        GPT.from_pretrained(directory).save_pretrained(directory)
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(directory / "model.safetensors")
    assert str(failed.value) == (
        f"could not write {str(directory / 'model.safetensors')!r}: the disk is full (No space left on device); "
        f"{str(directory / 'model.safetensors')!r} is left as it was"
    )
    assert _snapshot(tmp_path) == before


def test_a_full_disk_reported_inside_another_libraries_error_is_an_expected_failure():
    """The CLI's boundary knows a full disk that safetensors or torch reports only in its own error's text: one
    line, status 1, not "a bug in tformer"; any other such error stays a bug."""
    from tformer.cli import _expected

    assert _expected(SafetensorError(FULL)) == (f"the disk is full (No space left on device): {FULL}", 1)
    assert _expected(RuntimeError("unexpected pos 576 vs 534")) is None
