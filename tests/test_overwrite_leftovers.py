"""``--overwrite`` deletes only what a run wrote, for the leftovers of every version (issue 44, item 2).

Earlier versions named their temporary files ``.NAME.<random>.tmp`` and their save folders ``.NAME.tmp-<random>``,
names a user's file may bear too (``.log.jsonl.backup01.tmp``, ``.best.tmp-20250101/``). Such a file is never
judged tformer's by its name; such a folder only by what it holds (made by ``mkdtemp``, holding a save's files and
nothing else). What tformer cannot tell from the user's is kept, and the refusal names it; the leftovers tformer
marks (today's ``.NAME.tformer-<random>``) and an earlier version's save folder are still cleared. A 0.1 run's
files at the top of OUT are a run's only beside its model (config and weights), never a lone ``config.json``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

import tformer.files as files
from test_run_dir import _lm as run_dir_lm
from test_run_dir import _run
from tformer.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "v0.1"
RUN = ["best", "config.yaml", "curves.png", "last", "log.jsonl"]  # what the run below leaves


def _lm(directory: Path, out: str, *more: str) -> list[str]:
    """test_run_dir's tiny language-model run, two steps."""
    return run_dir_lm(directory, out, "--max-steps", "2", *more)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


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


def _notes_folder(run: Path, name: str) -> None:
    (run / name).mkdir()
    (run / name / "notes.txt").write_text("mine\n")


def _best_copy(run: Path, name: str) -> None:
    shutil.copytree(run / "best", run / name)  # the user's copy of best/
    (run / name).chmod(0o755)  # as their mkdir or cp makes it (under a umask of 022), not as mkdtemp does


def _log_copy(run: Path, name: str) -> None:
    shutil.copy(run / "log.jsonl", run / name)  # the log's own lines: content cannot tell it from a cut write


USERS = {
    ".best.tmp-20250101": (_notes_folder, True),
    ".last.tmp-backup01": (_best_copy, True),
    ".log.jsonl.backup01.tmp": (_log_copy, True),
    ".curves.png.abcdefgh.tmp": (lambda run, name: (run / name).write_bytes(b"my picture"), True),
    "config.json": (lambda run, name: (run / name).write_text('{"mine": true}'), False),  # a 0.1 name, no 0.1 model
}


@pytest.mark.parametrize("name", list(USERS))
def test_overwrite_keeps_the_users_files_named_as_earlier_versions_named_theirs_and_names_them(run2, capsys, name):
    make, earlier = USERS[name]
    make(run2, name)
    before = _snapshot(run2)
    result = _run(capsys, _lm(run2.parent, "run", "--overwrite"))
    assert result["code"] == 2 and "Traceback" not in result["err"], result
    line = [line for line in result["err"].splitlines() if "error:" in line][-1]
    assert f"holds a run and also {name}" in line and "nothing was deleted" in line
    assert ("named as earlier versions named their temporary files" in line) == earlier
    assert _snapshot(run2) == before


def test_overwrite_still_clears_the_leftovers_tformer_made_in_every_version(run2, capsys):
    work = run2 / ".last.tformer-abcdefgh"  # today's cut save: marked
    work.mkdir()
    (work / files.MARK).write_text(json.dumps({"saving": "last"}))
    shutil.copytree(run2 / "last", work / "new")
    (run2 / ".log.jsonl.tformer-abcdefgh.tmp").write_text('{"step": 1')  # today's cut write
    earlier = Path(tempfile.mkdtemp(prefix=".best.tmp-", dir=run2))  # an earlier version's cut save, as it made it
    for part in ("config.json", "model.safetensors"):
        shutil.copy(run2 / "best" / part, earlier / part)
    (earlier / ".char_tokenizer.json.k3j4h5g6.tmp").write_text('{"half": ')  # its own cut write inside
    result = _run(capsys, _lm(run2.parent, "run", "--overwrite"))
    assert result["code"] == 0, result["err"]
    assert sorted(p.name for p in run2.iterdir()) == RUN


def test_overwrite_clears_a_01_run_with_its_model_at_the_top(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = Path(shutil.copytree(FIXTURES / "lm", tmp_path / "run"))
    result = _run(capsys, _lm(tmp_path, "run", "--overwrite"))
    assert result["code"] == 0, result["err"]
    assert sorted(p.name for p in run.iterdir()) == RUN


def test_leftover_of_judges_earlier_names_by_what_they_hold(tmp_path):
    saved = Path(tempfile.mkdtemp(prefix=".best.tmp-", dir=tmp_path))
    (saved / "config.json").write_text("{}")
    (saved / "model.safetensors").write_bytes(b"")
    assert files.leftover_of(saved) == "best"
    (saved / "notes.txt").write_text("mine")  # something no save writes
    assert files.leftover_of(saved) is None
    (saved / "notes.txt").unlink()
    saved.chmod(0o755)  # made by mkdir, not mkdtemp
    assert files.leftover_of(saved) is None
    assert files.leftover_of(Path(tempfile.mkdtemp(prefix=".last.tmp-", dir=tmp_path))) is None  # empty: kept
    for name in (".log.jsonl.backup01.tmp", ".best.new", ".best.old"):
        (tmp_path / name).write_text("x")
        assert files.leftover_of(tmp_path / name) is None and files.earlier_name(tmp_path / name)
    (tmp_path / ".log.jsonl.tformer-abcdefgh.tmp").write_text("x")
    assert files.leftover_of(tmp_path / ".log.jsonl.tformer-abcdefgh.tmp") == "log.jsonl"
    assert not files.earlier_name(tmp_path / "notes.txt")


def _inside(folder: str, name: str):
    def make(run: Path) -> str:
        (run / folder).mkdir(parents=True, exist_ok=True)
        if folder.startswith("checkpoints/"):
            for part in ("config.json", "model.safetensors", "char_tokenizer.json"):
                shutil.copy(run / "best" / part, run / folder / part)
        (run / folder / name).write_text("mine\n")
        return f"{folder}/{name}"

    return make


INSIDE = {  # a user's file inside a folder the run writes, which deleting or replacing that folder would lose
    "best": _inside("best", "NOTES.md"),
    "last": _inside("last/exp", "results.txt"),
    "checkpoints": _inside("checkpoints/step-0000002", "mine.txt"),
    "data": _inside("data", "mine.tsv"),
}


@pytest.mark.parametrize("where", list(INSIDE))
def test_a_users_file_inside_the_runs_folders_is_named_and_kept_by_overwrite_and_resume(run2, capsys, where):
    """best/, last/ and checkpoints/step-N/ are deleted by --overwrite and replaced whole by a save: a file of the
    user's in one is named, and nothing is deleted or replaced (it was deleted in silence)."""
    named = INSIDE[where](run2)
    shown = named if where != "last" else "last/exp"
    before = _snapshot(run2)
    result = _run(capsys, _lm(run2.parent, "run", "--overwrite"))
    assert result["code"] == 2 and f"holds a run and also {shown}, which no tformer run writes" in result["err"]
    assert "nothing was deleted" in result["err"] and _snapshot(run2) == before
    if where != "data":  # a resumed run's next save replaces best/ or last/ whole
        result = _run(capsys, run_dir_lm(run2.parent, "run", "--max-steps", "3", "--resume"))
        assert result["code"] == 2 and f"--resume: 'run' holds {shown}, which no tformer run writes" in result["err"]
        assert _snapshot(run2) == before


def test_a_folder_with_a_best_folder_of_the_users_is_not_a_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "photos" / "best").mkdir(parents=True)
    (tmp_path / "photos" / "best" / "holiday.jpg").write_bytes(b"jpg")
    result = _run(capsys, _lm(tmp_path, "photos", "--overwrite"))
    assert result["code"] == 2 and "is not a tformer run" in result["err"] and "best/holiday.jpg" in result["err"]
    assert (tmp_path / "photos" / "best" / "holiday.jpg").read_bytes() == b"jpg"
