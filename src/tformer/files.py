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

Outputs a user names (``--out``, ``--json``, ``--export``, ``--out-hyp``): every command checks the path with
:func:`check_output` before it does any work, then writes it with :func:`write_output`. A file is replaced only
with ``--overwrite``; a symbolic link, one of the command's own inputs, and anything inside a model or training
run directory are refused even then (see :func:`check_output` for why).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "atomic_write",
    "fsync_tree",
    "staged_dir",
    "replace_dir",
    "current_dir",
    "recover_dir",
    "check_output",
    "check_output_dir",
    "check_new_dir",
    "write_output",
]


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


# ----------------------------------------------------------------------------------- outputs a user names

# What makes a directory a model or a training run. The names are written here rather than imported from
# tformer.models.checkpoint and tformer.training, because this module is the bottom layer those import.
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")  # next to config.json; the index: a sharded model
_RUN_LOG, _RUN_MODELS = "log.jsonl", ("best", "last")


def _dir_kind(directory: Path) -> str | None:
    """``"model directory"`` (config.json next to the weights), ``"training run directory"`` (a log.jsonl, or a
    best/ or last/ holding config.json), else None."""
    if (directory / "config.json").is_file() and any((directory / name).is_file() for name in _WEIGHTS):
        return "model directory"
    if (directory / _RUN_LOG).is_file() or any((directory / name / "config.json").is_file() for name in _RUN_MODELS):
        return "training run directory"
    return None


def _model_or_run_around(path: Path) -> tuple[str, Path] | None:
    """The first model or run directory among ``path`` and its parents, with its kind."""
    for directory in (path, *path.parents):
        kind = _dir_kind(directory)
        if kind:
            return kind, directory
    return None


def _refuse_model_or_run(path: Path, flag: str, resolved: Path) -> None:
    found = _model_or_run_around(resolved)
    if found:
        kind, directory = found
        raise ValueError(
            f"{flag} {str(path)!r} is inside the {kind} {str(directory)!r}, which only saving a model or training "
            "writes into: name a path outside it"
        )


def _refuse_inputs(path: Path, flag: str, resolved: Path, inputs: list, inside: bool) -> None:
    """The same file as an input (by resolved path, or by inode: a hard link); with ``inside``, a place inside an
    input directory."""
    for name, given in inputs:
        source = Path(given).resolve()
        same = source == resolved or (source.exists() and resolved.exists() and os.path.samefile(source, resolved))
        if same:
            raise ValueError(
                f"{flag} {str(path)!r} is the {name} {str(given)!r} that this command reads: writing it would "
                "destroy the input; name another file"
            )
        if inside and source.is_dir() and source in resolved.parents:
            raise ValueError(
                f"{flag} {str(path)!r} is inside the {name} directory {str(given)!r} that this command reads: "
                "name a path outside it"
            )


def check_output(
    path: str | os.PathLike,
    flag: str,
    inputs: Iterable[tuple[str, str | os.PathLike | None]] = (),
    overwrite: bool = False,
) -> Path:
    """Check the file a user named with ``flag`` before a command does any work; returns it as a Path.

    ``inputs`` are ``(flag, path)`` pairs of what the command reads (a path may be None). Each refusal is a
    ValueError whose one line names ``flag`` and the path:

    - a symbolic link, even with ``overwrite``: renaming a new file onto it would silently turn the link into a
      file, and writing through it would change a file the user did not name; which of the two is meant cannot
      be told, so the user names the plain file instead;
    - a missing directory (a typo makes no new directories), a directory, or a special file such as /dev/null;
    - one of ``inputs`` (the same resolved path, or the same file under another name: a hard link), or a place
      inside an input directory, even with ``overwrite``: the command would destroy what it reads;
    - a place inside a model directory (config.json next to model.safetensors) or a training run directory
      (log.jsonl, best/, last/), at any depth, even with ``overwrite``: saving and training own those files, and
      a run's ``--overwrite`` deletes them;
    - an existing file, unless ``overwrite``.
    """
    path = Path(path)
    if path.is_symlink():
        raise ValueError(
            f"{flag} {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); tformer replaces neither a link "
            "nor the file it points to: name a plain file"
        )
    parent = path.parent
    if not parent.is_dir():
        problem = "does not exist; create it first" if not parent.exists() else "is not a directory"
        raise ValueError(f"{flag} {str(path)!r}: the directory {str(parent)!r} {problem}")
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a directory, expected a file name")
    if path.exists() and not path.is_file():
        raise ValueError(f"{flag} {str(path)!r} is not a regular file (a device, a pipe, a socket)")
    resolved = path.resolve()
    read = [(name, given) for name, given in inputs if given is not None]
    _refuse_inputs(path, flag, resolved, read, inside=False)
    _refuse_model_or_run(path, flag, resolved.parent)
    _refuse_inputs(path, flag, resolved, read, inside=True)
    if path.exists() and not overwrite:
        raise ValueError(f"{flag} {str(path)!r} already exists; pass --overwrite to replace it, or name another file")
    return path


def check_output_dir(path: str | os.PathLike, flag: str) -> Path:
    """Check a directory a user named for a command's own files (a download cache): it may exist, and may be a
    link to a directory, but not be a file, nor lie in a model or run directory (see :func:`check_output`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is not a directory")
    _refuse_model_or_run(path, flag, path.resolve())
    return path


def check_new_dir(
    path: str | os.PathLike,
    flag: str,
    inputs: Iterable[tuple[str, str | os.PathLike | None]] = (),
    overwrite: bool = False,
    replaceable: Iterable[str] = (),
) -> Path:
    """Check a directory a user named for a command to write whole (``tformer export``'s output), before any work;
    returns it as a Path. The command then writes it with :func:`staged_dir`, which replaces it as a whole.

    Refused, each in one line naming ``flag`` and the path: a symbolic link; a missing parent (a typo makes no new
    directories) or a path that is a file; one of ``inputs``, a place inside one or a directory that holds one (the
    whole directory is replaced: the input would go with it); a place inside a model or run directory; a directory
    that is not empty, unless ``overwrite`` and every entry is one of the ``replaceable`` file names (what an
    earlier run of the command wrote). The first four even with ``overwrite``.
    """
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{flag} {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); name a plain directory")
    if not path.parent.is_dir():
        problem = "does not exist; create it first" if not path.parent.exists() else "is not a directory"
        raise ValueError(f"{flag} {str(path)!r}: the directory {str(path.parent)!r} {problem}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a file, expected a directory")
    resolved = path.resolve()
    for name, given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if source == resolved or resolved in source.parents or source in resolved.parents:
            raise ValueError(
                f"{flag} {str(path)!r} is, holds or lies inside the {name} {str(given)!r} that this command reads: "
                "name a directory apart from it"
            )
    _refuse_model_or_run(path, flag, resolved.parent)
    entries = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    if entries:
        others = [name for name in entries if name not in set(replaceable) or not (path / name).is_file()]
        if not overwrite:
            raise ValueError(f"{flag} {str(path)!r} is not empty; pass --overwrite to replace it, or name another")
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            raise ValueError(
                f"--overwrite: {flag} {str(path)!r} holds {shown}, which this command does not write; nothing was "
                "deleted: name another directory"
            )
    return path


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it; put back at once
    os.umask(mask)
    return mask


def write_output(path: str | os.PathLike, write) -> Path:
    """:func:`atomic_write` for a file a user named; returns the path. The new file keeps the permission bits of
    the file it replaces, else gets those an ordinary ``open()`` gives (0o666 less the umask), not the temp
    file's private 0o600: a picture or a page is there to be read."""
    path = Path(path)
    mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_umask()

    def write_with_mode(tmp: str) -> None:
        write(tmp)
        os.chmod(tmp, mode)

    atomic_write(path, write_with_mode)
    return path
