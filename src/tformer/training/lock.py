"""One training run per directory: ``OUT/.lock``, held from the start of a run to the end of its training.

Two trainings started with the same ``--out`` would interleave their log lines and overwrite each other's
``best/`` and ``last/``; a ``--resume`` or an ``--overwrite`` while a run trains would read or delete what it is
writing. So a run takes the lock of its directory before it reads or writes anything there, and every other
start into that directory is refused with the running one's pid, host, start time and command.

The lock is an exclusive ``fcntl.flock`` on the file ``OUT/.lock``, which also holds who took it (one JSON
object). The kernel drops the lock when its process ends, however it ends (a crash, ``kill -9``, a power cut
with the machine), so whether a run still holds it is never a guess: a lock file that no process holds is
*stale*, left by a run that ended without cleaning up, and the next run takes it over and says whose it was. We
chose this over a pid check (``os.kill(pid, 0)``), which cannot see a process on another machine of a shared
file system and takes a reused pid for the old run; and taking a stale lock over needs no action from the user,
who has nothing to decide once its holder is known to be gone. Locks are per open file, so a second start in the
same process is refused too, while its first run trains.

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
import sys
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no locking
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "RunLock", "RunLocked", "describe_holder"]

LOCK_NAME = ".lock"


class RunLocked(ValueError):
    """Another training run holds the lock of the directory (the message names it)."""


def _command() -> str:
    """The command line of this process, as the user typed it (``tformer ...`` for ``python -m tformer``)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("__main__.py", "tformer"):
        argv[0] = "tformer"
    return shlex.join(argv)


def describe_holder(text: str) -> str:
    """``pid 123 on host h, started 2025-01-01 12:00:00, running `tformer train ...``` from a lock file's text."""
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        info = None
    if not isinstance(info, dict) or not info:
        return "a process that has not written who it is yet"
    where = f" on host {info['host']}" if info.get("host") not in (None, socket.gethostname()) else ""
    return f"pid {info.get('pid')}{where}, started {info.get('started')}, running `{info.get('command')}`"


class RunLock:
    """The lock of one run directory; :meth:`acquire` takes it (or raises :class:`RunLocked`), :meth:`release`
    deletes the file and drops it. Both may be called again; a process's locks are released when it exits."""

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
        for _ in range(10):  # another run may delete the file between our open and our lock: open it again
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.read(fd, 1 << 16).decode("utf-8", "replace")
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunLocked(
                        f"--out {str(self.out)!r} is in use by another training run: {describe_holder(holder)} "
                        f"(its lock: {str(self.path)!r}); wait for it to end or stop it, or give another --out"
                    ) from None
                text = f"warning: could not lock {str(self.path)!r} ({err.strerror}): a second run is not kept out"
                print(text, file=sys.stderr)
                return self
            if _same_file(fd, self.path):
                break
            os.close(fd)  # we locked a file its holder had just deleted
        else:
            raise RunLocked(f"--out {str(self.path)!r}: could not take the lock, other runs keep replacing it")
        old = os.read(fd, 1 << 16).decode("utf-8", "replace")
        self.stale = describe_holder(old) if old.strip() else None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().isoformat(sep=" ", timespec="seconds"),
            "command": _command(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        self.fd = fd
        RunLock._held.add(self)
        return self

    def release(self) -> None:
        """Delete the lock file and drop the lock (the file first: no one may lock a file about to vanish)."""
        if self.fd is None:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink()
        except OSError:
            pass  # the directory went away or is read-only now: the kernel lock still goes with the close
        os.close(self.fd)
        self.fd = None
        RunLock._held.discard(self)
        if self.created:
            with contextlib.suppress(OSError):  # not empty: the run wrote something, which stays
                self.out.rmdir()


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@atexit.register
def _release_all() -> None:
    for lock in list(RunLock._held):
        lock.release()
