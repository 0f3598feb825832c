"""Writing files and directories so that a reader sees the old content or the new one, never half of one, and
touching nothing that this process did not make.

Files: :func:`atomic_write` writes a temporary file next to the target, fsyncs it, renames it onto the target
(``os.replace``, atomic on POSIX and Windows) and fsyncs the directory, so the rename itself survives a crash.

Directories: :func:`staged_dir` gives a fresh directory to write into; when the block ends without an error,
every file in it is fsynced and the whole directory takes the place of ``dest`` (:func:`replace_dir`). A
directory cannot be renamed over a non-empty one, so the swap is three renames, all inside a work directory
``.NAME.tformer-<random>`` that this process creates next to ``dest`` (``mkdtemp``: a name no one else has) and
marks as tformer's with a file, :data:`MARK`, naming ``NAME``::

    .NAME.tformer-<random>/writing  -> .NAME.tformer-<random>/new   (complete and fsynced: only a finished save is
                                                                     ever called new)
    NAME                            -> .NAME.tformer-<random>/old   (the previous state, aside)
    .NAME.tformer-<random>/new      -> NAME                         (the new state in); then the work directory,
                                                                     old state and all, is deleted

We chose this over a symbolic link swapped with one rename because it keeps run directories made of plain
directories: copying one (``cp -r``, an archive, a Windows machine) never leaves a link to a directory that
was not copied. The price is a short window with no ``NAME`` at all, which :func:`current_dir` covers for a
reader (it reads the work directory's ``new``, else its ``old``: each a complete state) and :func:`recover_dir`
repairs for the next writer. A crash at any point leaves ``NAME`` (or what :func:`current_dir` finds instead)
holding the complete old state or the complete new one. A reader that opens files one by one while a save swaps
them can still read one file from before and one from after; the trainer's files that belong together (weights,
config, tokenizer) do not change within a run, so what such a reader can mix is two states of one model.

Nothing beside ``dest`` is ever deleted or renamed onto unless this process made it: a temporary file or work
directory has a name ``mkstemp``/``mkdtemp`` created for this process alone, and a save never clears another's
leftovers. :func:`recover_dir` (a resumed run, which holds the run's lock) adopts or deletes only a work
directory that carries :data:`MARK` for that ``NAME``; a user's ``.NAME.old`` or ``.NAME.new`` is left alone.
Earlier versions staged a save as ``.NAME.tmp-<random>``, ``.NAME.new`` and ``.NAME.old``: such a ``.NAME.new``
or ``.NAME.old`` is still read, and put back as ``NAME``, when ``NAME`` is missing and it holds a saved model
(config.json and weights), and never deleted (see :func:`leftover_of` for what a run's ``--overwrite`` deletes).

A write that fails for a reason of the machine's — a full disk (``ENOSPC``, also when it arrives inside
safetensors' ``SafetensorError`` or a ``RuntimeError``), a quota, a read-only file system, a refused permission —
raises :class:`WriteError`: one line naming the target (never the temporary name), the reason in words, and that
what was there is left as it was.

Outputs a user names (``--out``, ``--json``, ``--export``, ``--out-hyp``): every command checks the path with
:func:`check_output` before it does any work, then writes it with :func:`write_output`. A file is replaced only
with ``--overwrite``; a symbolic link, one of the command's own inputs, and anything inside a model or training
run directory are refused even then (see :func:`check_output` for why).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "atomic_write",
    "fsync_tree",
    "staged_dir",
    "replace_dir",
    "current_dir",
    "recover_dir",
    "leftover_of",
    "earlier_name",
    "WriteError",
    "os_error",
    "machine_reason",
    "machine_errors",
    "MARK",
]

MARK = "tformer-save.json"  # in a save's work directory: {"saving": NAME, "pid", "host"}; a leftover is tformer's by it
_OURS = ".tformer-"  # .NAME.tformer-<random>: a save's work directory; .NAME.tformer-<random>.tmp: a file's

# The refusals that are the machine's situation, not a bug: each errno and the words a message says it in.
_MACHINE = {
    number: words
    for number, words in (
        (errno.ENOSPC, "the disk is full"),
        (getattr(errno, "EDQUOT", None), "the disk quota is used up"),
        (errno.EFBIG, "the file is larger than the file system takes"),
        (errno.EROFS, "the file system is read-only"),
        (errno.EACCES, "permission denied"),
        (errno.EPERM, "the operation is not permitted"),
    )
    if number is not None
}
_OS_ERROR_TEXT = re.compile(r"\(os error (\d+)\)")  # how safetensors (Rust) writes the OS's error into its text


def os_error(err: BaseException) -> OSError | None:
    """The operating system's error behind ``err``: ``err`` itself if it is an OSError; for safetensors'
    ``SafetensorError`` and torch's ``RuntimeError``, which carry it only in their text (``Error while serializing:
    I/O error: No space left on device (os error 28)``), one rebuilt from that text; else None."""
    if isinstance(err, OSError):
        return err
    if not (isinstance(err, RuntimeError) or type(err).__name__ == "SafetensorError"):
        return None
    text = str(err)
    found = _OS_ERROR_TEXT.search(text)
    numbers = [int(found.group(1))] if found else [n for n in _MACHINE if os.strerror(n) in text]
    return OSError(numbers[0], os.strerror(numbers[0])) if numbers else None


def machine_reason(err: OSError) -> str:
    """``the disk is full (No space left on device)``: the error in words, with the system's own."""
    system = err.strerror or str(err) or type(err).__name__
    words = _MACHINE.get(err.errno) if err.errno is not None else None
    return f"{words} ({system})" if words else system


class WriteError(OSError):
    """A write that failed for a reason of the machine's (a full disk, a read-only or forbidden place). ``str()``
    is its one-line message, naming the target (never a temporary name) and what was left as it was; ``errno``,
    ``strerror`` and ``filename`` (the target) are the OSError's."""

    def __init__(self, number: int | None, strerror: str | None, path: str | os.PathLike, message: str) -> None:
        super().__init__(number, strerror, os.fspath(path))
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # pickled between processes (torchrun): rebuilt with the same arguments
        return type(self), (self.errno, self.strerror, self.filename, self.message)


@contextlib.contextmanager
def machine_errors(path: str | os.PathLike) -> Iterator[None]:
    """A write of ``path`` that the machine refuses (:data:`_MACHINE`, also inside a SafetensorError or a
    RuntimeError, or a nested write's :class:`WriteError`) becomes a WriteError naming ``path``."""
    path = Path(path)
    kept = f"{str(path)!r} is left as it was" if path.exists() else "nothing was written"
    try:
        yield
    except Exception as err:
        cause = os_error(err)
        if cause is None or cause.errno not in _MACHINE:
            raise
        message = f"could not write {str(path)!r}: {machine_reason(cause)}; {kept}"
        raise WriteError(cause.errno, cause.strerror, path, message) from err


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
    """Call ``write(tmp_path)``, fsync, then rename the temp file onto ``path`` (same directory, so atomic). The
    temp file, ``.NAME.tformer-<random>.tmp``, is created for this call alone and is the only other file touched.
    A refusal of the machine's (a full disk, a read-only place) is a :class:`WriteError` naming ``path``."""
    path = Path(path)
    with machine_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{_OURS}", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            write(tmp)
            _fsync_file(tmp)
            os.chmod(tmp, _mode_of(path))  # mkstemp's 0o600 is the temporary file's only
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(path.parent)


def _mode_of(path: Path) -> int:
    """The permissions ``path`` gets: those of the file it replaces, else a new file's (0o666 less the umask), as
    ``open`` and Hugging Face's ``save_pretrained`` give them, so a model or an export can be shared as theirs can."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(path.stat().st_mode)
    try:  # Linux says the umask without changing it
        status = Path("/proc/self/status").read_text()
        mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)  # elsewhere it is read by setting it, and set back at once
        os.umask(mask)
    return 0o666 & ~mask


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file under ``root``, then every directory (deepest first), ``root`` included."""
    for dirpath, _, filenames in os.walk(os.fspath(root), topdown=False):
        for name in filenames:
            _fsync_file(os.path.join(dirpath, name))
        _fsync_dir(dirpath)


def _new_work(dest: Path) -> Path:
    """A work directory ``.NAME.tformer-<random>`` next to ``dest``, made for this save alone, marked as tformer's."""
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_OURS}", dir=dest.parent))
    try:
        mark = {"saving": dest.name, "pid": os.getpid(), "host": socket.gethostname()}  # whose: swept once it died
        (work / MARK).write_text(json.dumps(mark) + "\n", encoding="utf-8")
        _fsync_file(work / MARK)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return work


def _swap(work: Path, dest: Path) -> None:
    """``dest`` aside into ``work/old``, ``work/new`` into its place; a failure puts the old state back."""
    new, old = work / "new", work / "old"
    _fsync_dir(work)
    _fsync_dir(dest.parent)  # the work directory and its complete new state are durable
    try:
        if dest.is_dir():
            os.replace(dest, old)
        os.replace(new, dest)
    except BaseException:  # a refused rename, a full disk: the previous state goes back where it was
        if old.is_dir() and not dest.exists():
            os.replace(old, dest)
        raise
    _fsync_dir(dest.parent)


def _discard(work: Path) -> None:
    """Delete a failed save's work directory, unless the previous state is still in it (its way back failed)."""
    if not (work / "old").exists():
        shutil.rmtree(work, ignore_errors=True)


def replace_dir(src: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Put the complete, fsynced directory ``src`` in the place of ``dest`` (see the module docstring)."""
    src, dest = Path(src), Path(dest)
    with machine_errors(dest):
        work = _new_work(dest)
        try:
            os.replace(src, work / "new")
            _swap(work, dest)
        except BaseException:
            _discard(work)
            raise
        shutil.rmtree(work)
        _fsync_dir(dest.parent)


@contextlib.contextmanager
def staged_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """A fresh directory to write into; if the block ends without an error it replaces ``dest`` as a whole
    (fsynced), else it is deleted and ``dest`` is left as it was. A refusal of the machine's, in the block or in
    the swap, is a :class:`WriteError` naming ``dest``."""
    dest = Path(dest)
    with machine_errors(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        for stale in _works(dest):  # what a killed writer of dest left (a SIGKILL runs no clean-up): never used
            if _dead_writer(stale) and not (stale / "old").exists():
                shutil.rmtree(stale, ignore_errors=True)
        work = _new_work(dest)
        try:
            writing = work / "writing"
            writing.mkdir()
            yield writing
            fsync_tree(writing)
            os.replace(writing, work / "new")  # inside this save's own directory: only a finished save is new
            _swap(work, dest)
        except BaseException:
            _discard(work)
            raise
        shutil.rmtree(work)
        _fsync_dir(dest.parent)


# ------------------------------------------------------------------------------------------ crash recovery

_LEFTOVERS = (  # (pattern, what it must be): what tformer's writes leave when a crash cuts them
    (re.compile(r"\.(?P<name>.+)\.tformer-[a-z0-9_]{8}\.tmp"), "file"),  # atomic_write's temp file
    (re.compile(r"\.(?P<name>.+)\.tformer-[a-z0-9_]{8}"), "work"),  # a save's work directory, with MARK
    (re.compile(r"\.(?P<name>.+)\.tmp-[a-z0-9_]{8}"), "earlier"),  # earlier versions: a save being written
)
# Earlier versions' temporary names, which a user's file may bear too (``.log.jsonl.backup01.tmp``): a file
# is never judged tformer's by such a name, a folder only by what it holds (:func:`_earlier_save`)
_EARLIER = (
    re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp"),  # atomic_write's temp file (mkstemp's 8 characters)
    re.compile(r"\.(?P<name>.+)\.tmp-[a-z0-9_]{8}"),  # a save being written (mkdtemp)
    re.compile(r"\.(?P<name>.+)\.(new|old)"),  # a save's previous and next state, swapped by renames
)
# The files a save of a model or a run's state writes (what an earlier version's save folder may hold)
_SAVED = re.compile(
    r"config\.json|model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|labels\.json"
    r"|state\.json|trainer_state\.(safetensors|json|pt)|(src_|tgt_)?(char_)?tokenizer\.json"
)


def _marked(work: Path, name: str) -> bool:
    """Whether ``work`` holds tformer's :data:`MARK` for a save of ``name``."""
    try:
        mark = json.loads((work / MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(mark, dict) and mark.get("saving") == name


def _dead_writer(work: Path) -> bool:
    """Whether the process that made ``work`` (its :data:`MARK`'s pid, on this host) has ended: its save can never
    finish. False where that cannot be told (an earlier version's mark, another host's, a pid alive again)."""
    try:
        mark = json.loads((work / MARK).read_text(encoding="utf-8"))
        pid, host = mark["pid"], mark["host"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _saved_file(path: Path) -> bool:
    """A plain file named as a save's file, or as an earlier version's temporary file of one."""
    if path.is_symlink() or not path.is_file():
        return False
    found = _EARLIER[0].fullmatch(path.name)
    return bool(_SAVED.fullmatch(found["name"] if found else path.name))


def _earlier_save(path: Path) -> bool:
    """Whether the folder ``path``, named ``.NAME.tmp-<random>``, holds what an earlier version's save left: made
    by ``mkdtemp`` (on POSIX its mode is 0o700, which ``mkdir`` gives only under a umask of 077), holding files
    and nothing but files a save writes (config.json, weights, tokenizers, the training state, their temporary
    files). A folder of the user's with that name holds something else, or is empty, and is kept."""
    if os.name == "posix" and stat.S_IMODE(path.stat().st_mode) != 0o700:
        return False
    entries = list(path.iterdir())
    return bool(entries) and all(_saved_file(entry) for entry in entries)


def leftover_of(path: str | os.PathLike) -> str | None:
    """The NAME whose write or save, cut short, left ``path`` behind, if tformer made it: a temporary file
    ``.NAME.tformer-<random>.tmp``, a work directory ``.NAME.tformer-<random>`` holding :data:`MARK` for NAME,
    or an earlier version's save folder ``.NAME.tmp-<random>`` that holds what only a save writes
    (:func:`_earlier_save`); None for anything else: a symbolic link, and the names earlier versions gave their
    temporary files (``.NAME.<random>.tmp``), ``.NAME.new`` and ``.NAME.old``, which a user's file or folder of
    that name cannot be told from (:func:`earlier_name`)."""
    path = Path(path)
    if path.is_symlink():
        return None
    for pattern, kind in _LEFTOVERS:
        found = pattern.fullmatch(path.name)
        if not found:
            continue
        name = found["name"]
        if kind == "file" and path.is_file():
            return name
        if kind == "work" and path.is_dir() and _marked(path, name):
            return name
        if kind == "earlier" and path.is_dir() and _earlier_save(path):
            return name
    return None


def earlier_name(path: str | os.PathLike) -> bool:
    """Whether ``path`` bears a name that earlier versions gave their temporary files and folders (so a refusal
    can say why it was kept)."""
    return any(pattern.fullmatch(Path(path).name) for pattern in _EARLIER)


def _works(dest: Path) -> list[Path]:
    """The marked work directories of saves of ``dest``, the newest first."""
    if not dest.parent.is_dir():
        return []
    prefix = f".{dest.name}{_OURS}"
    found = [
        p
        for p in dest.parent.iterdir()
        if p.name.startswith(prefix) and not p.is_symlink() and p.is_dir() and _marked(p, dest.name)
    ]
    return sorted(found, key=lambda p: (p / MARK).stat().st_mtime, reverse=True)


def _legacy_save(dest: Path, kind: str) -> Path | None:
    """An earlier version's ``.NAME.new`` / ``.NAME.old`` of ``dest``, if it holds a saved model (config.json and
    weights): the only such folder read or put back, and never deleted."""
    path = dest.parent / f".{dest.name}.{kind}"
    return path if not path.is_symlink() and dir_kind(path) == "model directory" else None


def current_dir(dest: str | os.PathLike) -> Path:
    """Where a reader finds the state saved as ``dest``: ``dest``, or, if a save was cut between its renames,
    its work directory's ``new`` (the complete new state) else its ``old`` (the complete old one); for a save of
    an earlier version, ``.NAME.new`` else ``.NAME.old`` if it holds a saved model. Renames nothing."""
    dest = Path(dest)
    if dest.is_dir():
        return dest
    for work in _works(dest):
        for kind in ("new", "old"):
            if (work / kind).is_dir():
                return work / kind
    for kind in ("new", "old"):
        legacy = _legacy_save(dest, kind)
        if legacy is not None:
            return legacy
    return dest


def recover_dir(dest: str | os.PathLike) -> None:
    """Finish or undo a save of ``dest`` cut by a crash, for a writer, before it saves (one that holds the
    directory: a run's lock). ``dest`` missing: the state :func:`current_dir` finds is renamed to ``dest``. Then the
    marked work directories of ``dest`` are deleted, and only those: an earlier version's ``.NAME.new`` or
    ``.NAME.old`` is kept (it cannot be told from a user's folder of that name)."""
    dest = Path(dest)
    if not dest.exists():
        found = current_dir(dest)
        if found != dest:
            os.replace(found, dest)
    if dest.is_dir():  # a whole state is in place: what the cut saves left is no longer needed
        for work in _works(dest):
            shutil.rmtree(work)
    if dest.parent.is_dir():
        _fsync_dir(dest.parent)


# What makes a directory a model or a training run. The names are written here rather than imported from
# tformer.models.checkpoint and tformer.training, because this module is the bottom layer those import.
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")  # next to config.json; the index: a sharded model
_RUN_LOG, _RUN_MODELS = "log.jsonl", ("best", "last")


def dir_kind(directory: Path) -> str | None:
    """``"model directory"`` (config.json next to the weights), ``"training run directory"`` (a log.jsonl, or a
    best/ or last/ holding config.json), else None."""
    if (directory / "config.json").is_file() and any((directory / name).is_file() for name in _WEIGHTS):
        return "model directory"
    if (directory / _RUN_LOG).is_file() or any((directory / name / "config.json").is_file() for name in _RUN_MODELS):
        return "training run directory"
    return None
