"""Outputs a user names: where a command may write (:func:`check_output`, :func:`check_output_dir`,
:func:`check_new_dir`) and the write itself (:func:`write_output`, an atomic write keeping the file's mode).

A file that tformer did not write, a symbolic link, a place inside a model or run directory, or one of the command's
own inputs is refused before any work, naming the flag; a parent that cannot be written to is refused first too
(issue 41). The atomic writes themselves are :mod:`tformer.files`'.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from tformer.files import atomic_write, dir_kind

__all__ = [
    "check_output",
    "check_output_dir",
    "check_new_dir",
    "mark_written",
    "record_written",
    "written",
    "write_output",
    "write_figure",
    "save_to",
    "WRITTEN",
]

WRITTEN = ".tformer-output.json"  # what export, merge and average write beside their files (mark_written)


# ----------------------------------------------------------------------------------- outputs a user names


def _model_or_run_around(path: Path) -> tuple[str, Path] | None:
    """The first model or run directory among ``path`` and its parents, with its kind."""
    for directory in (path, *path.parents):
        kind = dir_kind(directory)
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


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # Windows has no statvfs
        return False


def _refuse_unwritable(path: Path, flag: str) -> None:
    """The directory that receives ``path`` must take new entries (a temporary name, then a rename): checked
    before any work, so that a read-only or forbidden place is said at once, naming ``path``."""
    parent = path.parent
    if os.access(parent, os.W_OK | os.X_OK):
        return
    why = "the file system is read-only" if _read_only(parent) else "permission denied"
    raise ValueError(
        f"{flag} {str(path)!r}: cannot write into {str(parent)!r} ({why}); nothing was written: name a place you "
        "can write to"
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
    - a missing directory (a typo makes no new directories), one this process cannot write into (read-only, or no
      permission), a directory, or a special file such as /dev/null;
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
    _refuse_unwritable(path, flag)
    resolved = path.resolve()
    read = [(name, given) for name, given in inputs if given is not None]
    _refuse_inputs(path, flag, resolved, read, inside=False)
    _refuse_model_or_run(path, flag, resolved.parent)
    _refuse_inputs(path, flag, resolved, read, inside=True)
    if path.exists() and not overwrite:
        raise ValueError(
            f"{flag} {str(path)!r} already exists; pass {_switch(flag)} to replace it, or name another file"
        )
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
) -> Path:
    """Check a directory a user named for a command to write whole (``tformer export``'s output), before any work;
    returns it as a Path. The command then writes it with :func:`staged_dir`, which replaces it as a whole.

    Refused, each in one line naming ``flag`` and the path: a symbolic link; a missing parent (a typo makes no new
    directories), a parent this process cannot write into (read-only, or no permission) or a path that is a file; one of ``inputs``, a place inside one or a directory that holds one (the
    whole directory is replaced: the input would go with it); a place inside a model or run directory; a directory
    that is not empty, unless ``overwrite`` and tformer wrote it: its :data:`WRITTEN` record (:func:`mark_written`)
    lists every entry, so a model directory of the user's whose files merely have the same names is never replaced.
    The first four even with ``overwrite``.
    """
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{flag} {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); name a plain directory")
    if not path.parent.is_dir():
        problem = "does not exist; create it first" if not path.parent.exists() else "is not a directory"
        raise ValueError(f"{flag} {str(path)!r}: the directory {str(path.parent)!r} {problem}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a file, expected a directory")
    _refuse_unwritable(path, flag)
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
        if not overwrite:
            raise ValueError(f"{flag} {str(path)!r} is not empty; pass {_switch(flag)} to replace it, or name another")
        written = _written_files(path)
        if written is None:
            raise ValueError(
                f"{_switch(flag)}: {flag} {str(path)!r} holds {_shown(entries)} and is not an output of tformer's "
                "(export, "
                f"merge and average write {WRITTEN} beside their files); nothing was deleted: name another directory"
            )
        others = [name for name in entries if name not in {*written, WRITTEN} or not (path / name).is_file()]
        if others:
            raise ValueError(
                f"{_switch(flag)}: {flag} {str(path)!r} holds {_shown(others)}, which tformer did not write there; "
                "nothing was deleted: name another directory"
            )
    return path


def _switch(flag: str) -> str:
    """How the caller asks to replace: the command line's ``--overwrite`` where ``flag`` is a flag or an argument
    (``--out``, ``OUT``), the Python parameter ``overwrite=True`` where it is a parameter (``out_dir``)."""
    return "--overwrite" if flag.startswith("-") or flag.isupper() else "overwrite=True"


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def mark_written(directory: str | os.PathLike, command: str) -> None:
    """Record in ``directory``, an output written whole (in its staged folder, after its last file), that
    ``tformer COMMAND`` wrote it and which files: all that a later ``--overwrite`` may replace
    (:func:`check_new_dir`)."""
    directory = Path(directory)
    files = sorted(p.name for p in directory.iterdir() if p.is_file())
    record = {"written_by": f"tformer {command}", "files": files}
    (directory / WRITTEN).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def record_written(directory: str | os.PathLike, name: str, command: str) -> None:
    """Add ``name``, a file ``tformer COMMAND`` has just written into ``directory`` beside files that may be the
    user's (a benchmark's report), to its :data:`WRITTEN` record, which is made if missing."""
    directory = Path(directory)
    files = _written_files(directory) or []
    if name not in files:
        record = {"written_by": f"tformer {command}", "files": sorted([*files, name])}
        (directory / WRITTEN).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def written(directory: str | os.PathLike) -> list[str]:
    """The files tformer recorded as its own in ``directory`` (:func:`mark_written`, :func:`record_written`): those
    it may replace there; none where there is no readable record."""
    return _written_files(Path(directory)) or []


def _written_files(directory: Path) -> list[str] | None:
    """The files :func:`mark_written` recorded in ``directory``; None where there is no readable record."""
    record = directory / WRITTEN
    if record.is_symlink() or not record.is_file():
        return None
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None
    return files if isinstance(files, list) and all(isinstance(f, str) for f in files) else None


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


# A picture's format, by the suffix of its path (matplotlib's savefig formats); any other suffix: PNG
FIGURE_FORMATS = {".svg": "svg", ".pdf": "pdf", ".jpg": "jpg", ".jpeg": "jpg"}


def write_figure(fig, path: str | os.PathLike, dpi: int) -> Path:
    """Write a matplotlib Figure to ``path`` (:func:`write_output`: atomically, keeping the file's mode), in the
    format its suffix names (:data:`FIGURE_FORMATS`, else PNG). Unchecked: for a path the caller checked, or a
    picture tformer keeps in its own run (``curves.png``); a path a user names goes through :func:`save_to`."""
    kind = FIGURE_FORMATS.get(Path(path).suffix.lower(), "png")
    return write_output(path, lambda tmp: fig.savefig(tmp, format=kind, dpi=dpi))


def save_to(path: str | os.PathLike, flag: str, inputs: Iterable[tuple[str, str | os.PathLike | None]] = ()) -> Path:
    """The check of a file the Python API writes (a picture, a trace's JSON): an existing plain file is replaced,
    as ``Figure.savefig`` and ``json.dump`` replace it, but a symbolic link, a directory, one of ``inputs`` or a place
    inside a model or run directory is refused as the command line refuses it (:func:`check_output`)."""
    return check_output(path, flag, inputs, overwrite=True)
