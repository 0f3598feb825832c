"""Writing files and directories so that a reader sees the old content or the new one, never half of one.

Files: :func:`atomic_write` writes a temporary file next to the target, fsyncs it, renames it onto the target
(``os.replace``, atomic on POSIX and Windows) and fsyncs the directory, so the rename itself survives a crash.

Directories: :func:`staged_dir` gives a fresh temporary directory next to ``dest``; when the block ends without
an error, every file in it is fsynced and the whole directory takes the place of ``dest``
(:func:`replace_dir`). A directory cannot be renamed over a non-empty one, so the swap is three renames::

    .NAME.tmp-<random>  -> .NAME.new   (complete and fsynced: only a finished save is ever called .new)
    NAME                -> .NAME.old   (the previous state, aside)
    .NAME.new           -> NAME        (the new state in), then .NAME.old is deleted

We chose this over a symbolic link swapped with one rename because it keeps run directories made of plain
directories: copying one (``cp -r``, an archive, a Windows machine) never leaves a link to a directory that
was not copied. The price is a short window with no ``NAME`` at all, which :func:`current_dir` covers for a
reader (it reads ``.NAME.new``, else ``.NAME.old``: each a complete state) and :func:`recover_dir` repairs for
the next writer. A crash at any point leaves ``NAME`` (or what :func:`current_dir` finds instead) holding the
complete old state or the complete new one. A reader that opens files one by one while a save swaps them can
still read one file from before and one from after; the trainer's files that belong together (weights,
config, tokenizer) do not change within a run, so what such a reader can mix is two states of one model.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_write", "fsync_tree", "staged_dir", "replace_dir", "current_dir", "recover_dir"]


def _fsync_file(path: str | os.PathLike) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: str | os.PathLike) -> None:
    """Make a directory's entries (renames, new files) durable; POSIX only (Windows cannot open a directory)."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write) -> None:
    """Call ``write(tmp_path)``, fsync, then rename the temp file onto ``path`` (same directory, so atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file under ``root``, then every directory (deepest first), ``root`` included."""
    for dirpath, _, filenames in os.walk(os.fspath(root), topdown=False):
        for name in filenames:
            _fsync_file(os.path.join(dirpath, name))
        _fsync_dir(dirpath)


def _sibling(dest: Path, kind: str) -> Path:
    return dest.parent / f".{dest.name}.{kind}"


def current_dir(dest: str | os.PathLike) -> Path:
    """Where a reader finds the state saved as ``dest``: ``dest``, or, if a save was cut between its renames,
    ``.NAME.new`` (the complete new state) else ``.NAME.old`` (the complete old one). Renames nothing."""
    dest = Path(dest)
    if dest.is_dir():
        return dest
    for kind in ("new", "old"):
        if _sibling(dest, kind).is_dir():
            return _sibling(dest, kind)
    return dest


def recover_dir(dest: str | os.PathLike) -> None:
    """Finish or undo a save of ``dest`` cut by a crash, and delete its leftovers (for a writer, before it saves)."""
    dest = Path(dest)
    new, old = _sibling(dest, "new"), _sibling(dest, "old")
    if not dest.is_dir():
        if new.is_dir():
            os.replace(new, dest)
        elif old.is_dir():
            os.replace(old, dest)
    for leftover in [new, old, *dest.parent.glob(f".{dest.name}.tmp-*")]:
        if leftover.is_dir():
            shutil.rmtree(leftover)
    if dest.parent.is_dir():
        _fsync_dir(dest.parent)


def replace_dir(src: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Put the complete, fsynced directory ``src`` in the place of ``dest`` (see the module docstring)."""
    src, dest = Path(src), Path(dest)
    new, old = _sibling(dest, "new"), _sibling(dest, "old")
    for leftover in (new, old):
        if leftover.is_dir():
            shutil.rmtree(leftover)
    os.replace(src, new)
    try:
        _fsync_dir(dest.parent)
        if dest.is_dir():
            os.replace(dest, old)
        os.replace(new, dest)
    except BaseException:  # a refused rename, a full disk: the previous state goes back where it was
        if old.is_dir() and not dest.exists():
            os.replace(old, dest)
        shutil.rmtree(new, ignore_errors=True)
        raise
    _fsync_dir(dest.parent)
    if old.is_dir():
        shutil.rmtree(old)


@contextlib.contextmanager
def staged_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """A fresh directory next to ``dest`` to write into; if the block ends without an error it replaces ``dest``
    as a whole (fsynced), else it is deleted and ``dest`` is left as it was."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
