"""The run lock touches only a lock that tformer made (issue 44, item 1).

``OUT/.lock`` is a name a user may have used too. A folder is judged before the lock is taken: one that is neither
empty nor a run is refused naming all it holds, hidden files and a ``.lock`` of the user's too, and nothing is
written there. A new lock is created exclusively and never through a link; an existing ``.lock`` is taken over only
if it is a regular file holding tformer's lock JSON (a run killed with its lock still there), and anything else
named ``.lock`` (a link, a file of other content, an empty one) is refused in one line naming it, byte for byte and
mtime untouched, with the file a link points to untouched too.

Each case runs the real CLI (``tformer.cli.main`` in this process) on a tiny language model, or
:class:`tformer.training.lock.RunLock` itself for what a Trainer built in Python takes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from test_run_dir import _lm as run_dir_lm
from test_run_dir import _run
from tformer.cli import main
from tformer.training.lock import RunLock, RunLocked

OLD = 1_000_000_000_000_000_000  # an mtime in 2001, in nanoseconds: any write would change it


def _lm(directory: Path, out: str, *more: str) -> list[str]:
    """test_run_dir's tiny language-model run, two steps."""
    return run_dir_lm(directory, out, "--max-steps", "2", *more)


def _error(result: dict, *names: str) -> str:
    """The failed command's one error line (exit 2, no traceback), which names each of ``names``."""
    assert result["code"] == 2, result
    assert "Traceback" not in result["err"] and "took over" not in result["err"], result["err"]
    lines = [line for line in result["err"].splitlines() if "error:" in line]
    assert len(lines) == 1, result["err"]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def _state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed): its kind, bytes or link target, and mtime."""
    state = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            state[str(path.relative_to(root))] = ("link", os.readlink(path), st.st_mtime_ns)
        elif path.is_file():
            state[str(path.relative_to(root))] = ("file", path.read_bytes(), st.st_mtime_ns)
        else:
            state[str(path.relative_to(root))] = ("dir",)
    return state


def _users_file(path: Path, text: str) -> Path:
    path.write_text(text)
    os.utime(path, ns=(OLD, OLD))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("trained")
    assert main(_lm(directory, str(directory / "run"))) == 0
    return directory / "run"


@pytest.fixture
def run2(trained, tmp_path, monkeypatch) -> Path:
    """A finished lm run of 2 steps in ``tmp_path/run`` (a copy), the working directory ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copytree(trained, tmp_path / "run"))


# ---------------------------------------------------------------------------------- a folder that is not a run


@pytest.mark.parametrize("more", [[], ["--overwrite"], ["--resume"]])
def test_a_users_lock_in_a_folder_that_is_not_a_run_is_untouched_and_named_with_the_hidden_files(
    tmp_path, monkeypatch, capsys, more
):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    _users_file(mine / ".lock", "my own lock: do not touch\n")
    _users_file(mine / ".env", "KEY=1\n")
    _users_file(mine / "notes.txt", "my notes\n")
    before = _state(mine)
    if more == ["--resume"]:
        _error(_run(capsys, _lm(tmp_path, "mine", *more)), "--resume: 'mine/last' holds no training state")
    else:
        line = _error(_run(capsys, _lm(tmp_path, "mine", *more)), "--out 'mine' is not empty and is not a tformer run")
        assert ".lock" in line and ".env" in line and "notes.txt" in line
    assert _state(mine) == before  # bytes and mtimes, and no lock left behind


def test_a_users_lock_alone_in_a_folder_is_refused_naming_it_and_not_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    for text in ("my own lock\n", ""):  # a file of other content, an empty one that no run fills
        _users_file(mine / ".lock", text)
        before = _state(mine)
        line = _error(_run(capsys, _lm(tmp_path, "mine")), "'mine/.lock'", "not a lock that tformer wrote")
        assert ("an empty file" if not text else "not a run lock's JSON") in line
        assert _state(mine) == before


# ---------------------------------------------------------------------------------------- a symbolic link


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_lock_that_is_a_symbolic_link_is_never_followed_and_is_refused(tmp_path, monkeypatch, capsys, target_exists):
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "precious.txt"
    if target_exists:
        _users_file(target, "precious, outside --out\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / ".lock").symlink_to(target)
    before, outside = _state(mine), _state(elsewhere)
    line = _error(_run(capsys, _lm(tmp_path, "mine")), "'mine/.lock'", "a symbolic link to", str(target))
    assert "not a lock that tformer wrote" in line
    assert _state(mine) == before and _state(elsewhere) == outside  # the target neither written nor created
    assert not (mine / "log.jsonl").exists()


@pytest.mark.parametrize("more", [["--overwrite"], ["--resume", "--max-steps", "4"]])
def test_a_users_lock_or_link_in_a_run_is_refused_naming_it_and_the_run_is_kept(run2, capsys, more):
    target = _users_file(run2.parent / "precious.txt", "precious\n")
    for make in (lambda p: _users_file(p, "my own lock\n"), lambda p: p.symlink_to(target)):
        make(run2 / ".lock")
        before, outside = _state(run2), target.read_bytes()
        _error(_run(capsys, _lm(run2.parent, "run", *more)), "'run/.lock'", "not a lock that tformer wrote")
        assert _state(run2) == before and target.read_bytes() == outside
        (run2 / ".lock").unlink()


# ---------------------------------------------------------------------------------------- tformer's own lock


@pytest.mark.parametrize("marked", [True, False])
def test_a_stale_lock_that_tformer_left_is_taken_over_and_removed(run2, capsys, marked):
    """A run killed with its lock in place (no process holds it): the next run takes it over, as before; so is a
    lock written before the mark (the four keys alone)."""
    info = {"pid": 4242, "host": "elsewhere", "started": "2025-01-01 12:00:00", "command": "tformer train lm"}
    (run2 / ".lock").write_text(json.dumps({**info, "tformer_lock": 1} if marked else info) + "\n")
    result = _run(capsys, _lm(run2.parent, "run", "--overwrite"))
    assert result["code"] == 0, result["err"]
    assert (
        "took over 'run/.lock', a lock left by a run that is no longer running: pid 4242 on host elsewhere"
        in (result["err"])
    )
    assert not (run2 / ".lock").exists()


def test_runlock_creates_a_marked_lock_refuses_a_second_and_a_foreign_one_and_deletes_only_its_own(tmp_path):
    out = tmp_path / "run"
    lock = RunLock(out).acquire()
    info = json.loads((out / ".lock").read_text())
    assert info["pid"] == os.getpid() and info["tformer_lock"] == 1 and lock.stale is None
    with pytest.raises(RunLocked, match=rf"is held by this process \(pid {os.getpid()}\)"):  # (not another run)
        RunLock(out).acquire()
    os.replace(_users_file(tmp_path / "mine", "the user's file now\n"), out / ".lock")  # put there by the user
    lock.release()
    assert (out / ".lock").read_text() == "the user's file now\n"  # not the file it locked: not deleted

    target = _users_file(tmp_path / "target", "precious\n")
    for make in (lambda p: p.symlink_to(target), Path.mkdir, Path.touch):  # a Trainer built in Python takes it too
        (out / ".lock").unlink() if (out / ".lock").is_symlink() or (out / ".lock").is_file() else (
            out / ".lock"
        ).rmdir()
        make(out / ".lock")
        before = _state(out)
        with pytest.raises(ValueError, match="not a lock that tformer wrote"):
            RunLock(out).acquire()
        assert _state(out) == before and target.read_text() == "precious\n"


def test_a_run_that_starts_and_ends_between_the_judgement_and_the_lock_is_judged_again(
    run2, tmp_path, monkeypatch, capsys
):
    """The folder is judged empty, then another run fills it before this one locks: the judgement under the lock
    refuses it, and this start leaves it as that run left it (its lock deleted, nothing else touched)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    acquire = RunLock.acquire

    def late(self):
        shutil.copytree(run2, empty, dirs_exist_ok=True)  # the other run, started and ended meanwhile
        return acquire(self)

    monkeypatch.setattr(RunLock, "acquire", late)
    _error(_run(capsys, _lm(tmp_path, "empty")), "--out 'empty' is not empty", "--resume")
    assert {k: v[:2] for k, v in _state(empty).items()} == {k: v[:2] for k, v in _state(run2).items()}


def test_the_lock_is_handed_to_the_trainer_by_the_caller_and_a_failed_setup_gives_it_back_at_once(
    tmp_path, monkeypatch
):
    """No module keeps the lock between start_run and make_trainer (issue 45): start_run returns it, the family's
    setup hands it on, and a setup that fails in between releases it then, not at the next start in this process."""
    from tformer import lm
    from tformer.lm import run as lm_run
    from tformer.training import resume

    data = tmp_path / "words.txt"
    data.write_text("the cat sat on the mat. " * 40)
    out = tmp_path / "run"

    def broken(*_args, **_kwargs):
        raise RuntimeError("tokenizer failed")

    monkeypatch.setattr(lm_run, "data_tokenizer", broken)
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        lm.setup(data, out, preset="tiny", max_steps=1)
    assert not (out / ".lock").exists()  # given back at once
    RunLock(out).acquire().release()  # and free for anyone
    assert not any(isinstance(v, dict) and v and "lock" in k.lower() for k, v in vars(resume).items())
    monkeypatch.undo()
    trainer = lm.setup(data, out, preset="tiny", max_steps=1, overwrite=True)
    assert trainer.lock is not None and (out / ".lock").exists()  # the trainer holds it, until fit() ends
    trainer.fit()
    assert trainer.lock is None and not (out / ".lock").exists()


def test_a_trainer_that_setup_made_gives_its_lock_back_on_close_and_says_it_is_this_process(tmp_path):
    """A notebook runs setup() and, changing its mind, runs the cell again: the folder was locked by "another
    training run" (its own pid) until the kernel restarted. The refusal now says it is this process and how to give
    the lock back; close() and a with block give it back."""
    from tformer import lm

    data = tmp_path / "text.txt"
    data.write_text("the cat sat on the mat.\n" * 40, encoding="utf-8")
    kw = dict(preset="tiny", max_len=16, batch_size=2, max_steps=1, batches_per_epoch=1, progress=False)
    first = lm.setup(data, tmp_path / "run", **kw)
    said = rf"this process \(pid {os.getpid()}\): a trainer made here holds it until its fit\(\) ends or its close\(\)"
    with pytest.raises(RunLocked, match=said):
        lm.setup(data, tmp_path / "run", **kw)
    first.close()
    first.close()  # (twice: nothing more)
    with lm.setup(data, tmp_path / "run", **kw) as trainer:
        assert (tmp_path / "run" / ".lock").exists()
    assert trainer.lock is None and not (tmp_path / "run" / ".lock").exists()
    lm.setup(data, tmp_path / "run", **kw).fit()  # and a run takes the folder as it is
