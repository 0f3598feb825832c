"""One training run per directory: ``OUT/.lock``, held from the start of a run to the end of its training.

Two trainings started with the same ``--out`` would interleave their log lines and overwrite each other's
``best/`` and ``last/``; a ``--resume`` or an ``--overwrite`` while a run trains would read or delete what it is
writing. So a run takes the lock of its directory before it writes anything there, and every other start into
that directory is refused with the running one's pid, host, start time and command.

The lock is an exclusive ``fcntl.flock`` on the file ``OUT/.lock``, which also holds who took it (one JSON
object, marked ``"tformer_lock": 1``). The kernel drops the lock when its process ends, however it ends (a crash,
``kill -9``, a power cut with the machine), so whether a run still holds it is never a guess: a lock file that no
process holds is *stale*, left by a run that ended without cleaning up, and the next run takes it over and says
whose it was. We chose this over a pid check (``os.kill(pid, 0)``), which cannot see a process on another machine
of a shared file system and takes a reused pid for the old run; and taking a stale lock over needs no action from
the user, who has nothing to decide once its holder is known to be gone. Locks are per open file, so a second
start in the same process is refused too, while its first run trains.

``.lock`` is a name a user may have used too, so tformer touches only a lock it made: a new lock is created
exclusively and never through a link (``O_CREAT | O_EXCL | O_NOFOLLOW``); an existing ``.lock`` is taken over
only if it is a regular file holding a lock's JSON as tformer writes it (:func:`is_tformer_lock`; one written
before the mark, too); anything else there (a symbolic link, a folder, a file of other content, an empty file
that no run fills) is refused, naming it (:func:`foreign_lock`), and neither written, followed nor deleted. The
lock file is deleted at the end only if it is still the file this run locked. A run takes the lock only in a
directory already judged empty or a run's (``check_out_dir`` in :mod:`tformer.training.rundir`).

Under torchrun only rank 0 takes the lock (:func:`tformer.training.resume.start_run`). On a system without
``fcntl`` (Windows) or a file system that refuses locks, runs are not locked, with a warning for the latter.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import json
import os
import shlex
import socket
import stat
import sys
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no locking
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "RunLock",
    "RunLocked",
    "describe_holder",
    "foreign_lock",
    "in_use",
    "is_tformer_lock",
    "running",
]

LOCK_NAME = ".lock"
_MARK = "tformer_lock"  # in what tformer writes into the lock, beside who holds it
_KEYS = {"pid", "host", "started", "command"}  # who holds it: all that a lock held before the mark
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has none, and no locks either
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # flock's "another process holds it"
_TRIES, _WAIT_S = 20, 0.05  # a run that creates its lock fills it within microseconds: 1 s covers any machine


class RunLocked(ValueError):
    """Another training run holds the lock of the directory (the message names it)."""


class _Unlockable(Exception):
    """The file system refuses locks (``reason``: its words)."""

    def __init__(self, err: OSError) -> None:
        super().__init__(err)
        self.reason = err.strerror or str(err)


def _command() -> str:
    """The command line of this process, as the user typed it (``tformer ...`` for ``python -m tformer``)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("__main__.py", "tformer"):
        argv[0] = "tformer"
    return shlex.join(argv)


def is_tformer_lock(text: str) -> bool:
    """Whether ``text`` is a lock file's content as tformer writes it: a JSON object with the keys pid (a whole
    number), host, started and command, and the mark ``"tformer_lock": 1`` (earlier locks hold the four keys alone)."""
    try:
        info = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(info, dict)
        and set(info) - {_MARK} == _KEYS
        and info.get(_MARK, 1) == 1
        and isinstance(info["pid"], int)
    )


def describe_holder(text: str) -> str:
    """``pid 123 on host h, started 2025-01-01 12:00:00, running `tformer train ...``` from a lock file's text."""
    if not is_tformer_lock(text):
        return "a process that has not written who it is yet"
    info = json.loads(text)
    where = f" on host {info['host']}" if info.get("host") not in (None, socket.gethostname()) else ""
    if not where and info.get("pid") == os.getpid():  # (a notebook that ran setup() twice)
        return (
            f"this process (pid {info['pid']}): a trainer made here holds it until its fit() ends or its close() "
            "is called (trainer.close(), or `with setup(...) as trainer:`)"
        )
    return f"pid {info.get('pid')}{where}, started {info.get('started')}, running `{info.get('command')}`"


def foreign_lock(out_dir: str | os.PathLike) -> str | None:
    """What ``OUT/.lock`` is, in words, if it is not a lock tformer wrote (``a symbolic link to '/x'``, ``a
    folder``, ``an empty file``, ``a file that is not a run lock's JSON``); None if there is none or it is
    tformer's. Reads the file only (never through a link); changes nothing."""
    path = Path(out_dir) / LOCK_NAME
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link to {os.readlink(path)!r}"
    if not stat.S_ISREG(st.st_mode):
        return "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        return f"a file tformer cannot read ({err.strerror})"
    try:
        return None if is_tformer_lock(_read(fd)) else _unknown_content(fd)
    finally:
        os.close(fd)


def _unknown_content(fd: int) -> str:
    return "an empty file" if os.fstat(fd).st_size == 0 else "a file that is not a run lock's JSON"


def foreign_message(out_dir: str | os.PathLike, what: str) -> str:
    """The one line that refuses a run in ``out_dir`` because its ``.lock`` is ``what`` (:func:`foreign_lock`)."""
    out = Path(out_dir)
    return (
        f"--out {str(out)!r} holds {str(out / LOCK_NAME)!r}, {what}, not a lock that tformer wrote: a run keeps its "
        f"lock under that name, and tformer neither writes through, replaces nor deletes a {LOCK_NAME} of yours; "
        f"move it out of {str(out)!r}, or give another --out"
    )


def _read(fd: int) -> str:
    return os.pread(fd, 1 << 16, 0).decode("utf-8", "replace")


def in_use(out_dir: str | os.PathLike, holder: str) -> str:
    """The refusal of a directory where another run trains (``holder``: :func:`describe_holder`'s words)."""
    lock = Path(out_dir) / LOCK_NAME
    if holder.startswith("this process"):  # not another run to wait for
        return f"--out {str(out_dir)!r} is held by {holder} (its lock: {str(lock)!r})"
    return (
        f"--out {str(out_dir)!r} is in use by another training run: {holder} (its lock: {str(lock)!r}); wait for it "
        "to end or stop it, or give another --out"
    )


def running(out_dir: str | os.PathLike) -> str | None:
    """Who holds the lock of ``out_dir`` now (a run that is training, in words), else None; reading only: nothing
    is taken, so a check made before a run starts can name the run in the way first."""
    if fcntl is None:
        return None
    try:
        fd = os.open(Path(out_dir) / LOCK_NAME, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            return describe_holder(_read(fd)) if err.errno in _BUSY else None
        return None  # free (the shared lock goes with the close)
    finally:
        os.close(fd)


class RunLock:
    """The lock of one run directory; :meth:`acquire` takes it (or raises :class:`RunLocked`, or a ValueError
    for a ``.lock`` tformer did not write), :meth:`release` deletes the file and drops it. Both may be called
    again; a process's locks are released when it exits."""

    _held: set[RunLock] = set()  # released at exit, so that an ordinary exit leaves no stale lock behind

    def __init__(self, out_dir: str | os.PathLike) -> None:
        self.out = Path(out_dir)
        self.path = self.out / LOCK_NAME
        self.fd: int | None = None
        self.stale: str | None = None  # who held the stale lock this one took over (None: it was free)
        self.created = False  # the directory did not exist: removed at release if nothing else was written

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self) -> RunLock:
        """Take the lock (creating the directory if needed); a held one raises :class:`RunLocked` naming its run."""
        if self.fd is not None or fcntl is None:
            return self
        self.created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            fd = self._new_or_stale()
        except _Unlockable as err:
            text = f"warning: could not lock {str(self.path)!r} ({err.reason}): a second run is not kept out"
            print(text, file=sys.stderr)
            return self
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().isoformat(sep=" ", timespec="seconds"),
            "command": _command(),
            _MARK: 1,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        self.fd = fd
        RunLock._held.add(self)
        return self

    def _new_or_stale(self) -> int:
        """A locked fd of a new lock file, or of a stale one tformer wrote; waits a moment while another start
        creates its lock (the file is empty between its creation and its lock)."""
        for _ in range(_TRIES):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
            except FileExistsError:
                found = self._stale()
            else:
                found = self._lock_new(fd)
            if found is not None:
                return found
            time.sleep(_WAIT_S)
        what = foreign_lock(self.out)
        if what is not None:  # an empty file that no run filled
            raise ValueError(foreign_message(self.out, what))
        raise RunLocked(
            f"--out {str(self.out)!r}: could not take the lock {str(self.path)!r}, other runs keep replacing it"
        )

    def _lock_new(self, fd: int) -> int | None:
        """Lock the file this call created; None (the file deleted) if another start keeps looking at it."""
        for _ in range(_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as err:
                if err.errno not in _BUSY:
                    self._drop(fd)
                    raise _Unlockable(err) from None
            time.sleep(_WAIT_S / 10)  # another start reads the empty file and lets go
        self._drop(fd)
        return None

    def _stale(self) -> int | None:
        """Lock the existing ``.lock`` if it is a stale lock tformer wrote; None if it went away or is being
        created; a held one raises :class:`RunLocked`, anything else a ValueError naming it."""
        writable = True
        try:
            fd = os.open(self.path, os.O_RDWR | _NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None  # its run released it: create it again
        except PermissionError:  # another user's lock, or a read-only file: enough to see whether it is held
            fd, writable = os.open(self.path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK), False
        except OSError:  # a symbolic link (ELOOP), a folder (EISDIR)
            raise ValueError(foreign_message(self.out, foreign_lock(self.out) or "not a regular file")) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(foreign_message(self.out, foreign_lock(self.out) or "not a regular file"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _read(fd)
            os.close(fd)
            if err.errno in _BUSY:
                raise RunLocked(in_use(self.out, describe_holder(holder))) from None
            raise _Unlockable(err) from None
        text, same = _read(fd), _same_file(fd, self.path)
        if same and is_tformer_lock(text) and writable:
            self.stale = describe_holder(text)
            return fd
        os.close(fd)  # nothing written: the kernel lock goes with the close
        if not same or not text:
            return None  # replaced meanwhile, or another start is creating its lock: look again
        if not is_tformer_lock(text):
            raise ValueError(foreign_message(self.out, "a file that is not a run lock's JSON"))
        raise ValueError(
            f"--out {str(self.out)!r}: {str(self.path)!r} is a lock left by a run that is no longer running "
            f"({describe_holder(text)}), which this user may not replace (permission denied): delete it, or "
            "give another --out"
        )

    def _drop(self, fd: int) -> None:
        """Delete the lock file this call created (if it is still that file) and close it."""
        with contextlib.suppress(OSError):
            if _same_file(fd, self.path):
                self.path.unlink()
        os.close(fd)

    def release(self) -> None:
        """Delete the lock file and drop the lock (the file first: no one may lock a file about to vanish)."""
        if self.fd is None:
            return
        self._drop(self.fd)  # the directory gone or read-only now: the kernel lock still goes with the close
        self.fd = None
        RunLock._held.discard(self)
        if self.created:
            with contextlib.suppress(OSError):  # not empty: the run wrote something, which stays
                self.out.rmdir()


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` (itself, never what a link there points to) is the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


@atexit.register
def _release_all() -> None:
    for lock in list(RunLock._held):
        lock.release()
