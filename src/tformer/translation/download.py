"""Fetching corpora into a cache directory, verified (when the network allows).

Everything in tformer also takes a local path, so nothing needs this at run time; it saves a
user the manual steps. ``tformer data download NAME [--cache DIR] [--url URL | --from PATH] [--sha256 HEX]``.
``--from`` (``local=``) takes a copy already on disk (the file, what its URL serves, or a directory holding
either) instead of the network, checked the same way: the lessons use this project's ``../shared/data`` so,
where it exists, and download elsewhere.

What a download promises:

* the bytes stream to a temporary file in the cache directory (never into memory) under a size cap and an
  overall deadline (``timeout``: seconds for the whole download, however slowly the server trickles);
* a ``.gz`` is decompressed and a ``.zip`` member extracted while streaming, the unpacked bytes capped too,
  so a gzip or zip bomb stops at the cap; a zip with a member named by an absolute path or holding ``..``
  is refused before anything is extracted, and what is kept is written under the cache's own file name;
* the unpacked file is checked (its size and sha256 where they are known, else its format) before it is
  renamed into place. Any failure leaves the cache as it was (no partial file, an earlier file untouched)
  and says which URL or file in one line: :class:`ConnectionError` for the network, :class:`ValueError`
  for the bytes.

Where the digests come from: Multi30k's six files are pinned to one commit of ``multi30k/dataset``, and
each carries the size and sha256 of the *decompressed* file. These were computed from local copies
decompressed from that commit (``../shared/data/multi30k``), not checked against the live server (this
project's machines have no network); Tiny Shakespeare's one file is pinned the same way, to the char-rnn commit
that ``../shared/data/README.md`` names. manythings.org's ``fra-eng.zip`` is rebuilt as Tatoeba grows, so it
cannot be pinned: it gets a size cap and a format check (UTF-8 ``English<TAB>French`` lines) only, and
``sha256=`` (``--sha256``) pins the file a user expects.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import hashlib
import http.client
import math
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, BinaryIO, cast

from tformer.files import machine_errors

__all__ = ["SOURCES", "RemoteFile", "default_cache_dir", "download", "DEFAULT_MAX_MB"]

DEFAULT_MAX_MB = 256  # cap on a file of unknown size: the download, and what it unpacks to
CHUNK = 1 << 16


@dataclass(frozen=True)
class RemoteFile:
    url: str
    filename: str  # name in the cache directory
    member: str | None = None  # file inside a .zip archive (matched by its base name)
    sha256: str | None = None  # of the unpacked file, where it can be pinned
    size: int | None = None  # bytes of the unpacked file, where known (also its cap)
    tsv: bool = False  # format check: the first line has a tab


# Pinned to the commit that ../shared/data/README.md names; sizes and digests of the decompressed files,
# taken from those local copies (not from the live server).
MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
MULTI30K_FILES = {
    "train.en": (1801238, "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"),
    "train.fr": (2111303, "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d"),
    "train.de": (2110398, "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"),
    "val.en": (63297, "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"),
    "val.fr": (73924, "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc"),
    "val.de": (75981, "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"),
}
# Tiny Shakespeare: karpathy/char-rnn's input.txt at that commit, byte for byte (../shared/data/README.md).
CHAR_RNN = "https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SOURCES: dict[str, list[RemoteFile]] = {
    # a moving target: capped and format-checked only (pin it with --sha256)
    "tatoeba-eng-fra": [
        RemoteFile("https://www.manythings.org/anki/fra-eng.zip", "tatoeba-eng-fra.tsv", "fra.txt", tsv=True)
    ],
    "multi30k": [
        RemoteFile(f"{MULTI30K}/{name}.gz", name, sha256=digest, size=size)
        for name, (size, digest) in MULTI30K_FILES.items()
    ],
    "tinyshakespeare": [
        RemoteFile(
            f"{CHAR_RNN}/data/tinyshakespeare/input.txt", "tinyshakespeare.txt", sha256=SHAKESPEARE_SHA256, size=1115394
        )
    ],
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("TFORMER_CACHE", Path.home() / ".cache" / "tformer"))


# ------------------------------------------------------------------------------------------------ fetch


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.end = seconds, time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def error(self, url: str) -> ConnectionError:
        return ConnectionError(
            f"could not download {url}: not complete within the {self.seconds:g} s deadline (--timeout); nothing kept"
        )


OFFLINE = "without the network, give a copy on disk: tformer data download NAME --from PATH (or a local path)"


def _fetch(url: str, dest: BinaryIO, cap: int, deadline: _Deadline) -> int:
    """Stream ``url`` into ``dest``, at most ``cap`` bytes; return the byte count."""
    request = urllib.request.Request(url, headers={"User-Agent": "tformer", "Accept-Encoding": "identity"})
    try:
        response = urllib.request.urlopen(request, timeout=max(min(deadline.left(), 30.0), 0.01))
    except urllib.error.HTTPError as err:
        raise ConnectionError(f"could not download {url}: HTTP {err.code} {err.reason}; {OFFLINE}") from None
    except urllib.error.URLError as err:
        raise ConnectionError(f"could not download {url}: {err.reason}; {OFFLINE}") from None
    except (OSError, http.client.HTTPException) as err:
        raise ConnectionError(f"could not download {url}: {err}; {OFFLINE}") from None
    with response:
        length = response.headers.get("Content-Length", "")
        announced = int(length) if length.isdigit() else None
        if announced is not None and announced > cap:
            raise ValueError(f"{url}: the server announces {announced:,} bytes, more than the cap of {cap:,}")
        received = 0
        while True:
            if deadline.left() <= 0:
                raise deadline.error(url)
            try:
                chunk = response.read1(CHUNK)  # at most one read of the socket: a trickle still meets the deadline
            except (OSError, http.client.HTTPException) as err:
                raise ConnectionError(f"could not download {url}: {err or type(err).__name__}") from None
            if not chunk:
                break
            received += len(chunk)
            if received > cap:
                raise ValueError(f"{url}: more than the cap of {cap:,} bytes; stopped")
            dest.write(chunk)
    if announced is not None and received != announced:
        raise ConnectionError(
            f"could not download {url}: the server announced {announced:,} bytes and sent {received:,}"
        )
    return received


def _within(deadline: _Deadline, url: str, work: Callable[[], int]) -> int:
    """``work()`` in a worker thread, given up at the deadline even when it is blocked in a read."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err

    worker = threading.Thread(target=run, name="tformer-download", daemon=True)
    worker.start()
    worker.join(max(deadline.left(), 0))
    if worker.is_alive():  # it stops at its next read (the deadline is past) and its file is removed here
        raise deadline.error(url)
    if "error" in box:
        raise box["error"]
    return box["value"]


# ----------------------------------------------------------------------------------------------- unpack


def _safe_member_names(archive: zipfile.ZipFile, url: str) -> None:
    for name in archive.namelist():
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
            raise ValueError(f"{url}: refused: the zip archive has a member outside its folder ({name!r})")


def _open_member(stack: contextlib.ExitStack, path: Path, member: str, url: str, cap: int) -> IO[bytes]:
    try:
        archive = stack.enter_context(zipfile.ZipFile(path))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise ValueError(f"{url}: not a valid zip archive ({err})") from None
    _safe_member_names(archive, url)
    found = [i for i in archive.infolist() if not i.is_dir() and i.filename.rsplit("/", 1)[-1] == member]
    if len(found) != 1:
        raise ValueError(f"{url}: the zip archive has {len(found)} members named {member!r}; expected one")
    info = found[0]
    if info.file_size > cap:
        raise ValueError(
            f"{url}: member {info.filename!r} declares {info.file_size:,} bytes, more than the cap of {cap:,}"
        )
    try:
        return stack.enter_context(archive.open(info))
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, ValueError) as err:  # encrypted...
        raise ValueError(f"{url}: cannot read member {info.filename!r} of the zip archive ({err})") from None


@dataclass
class _Unpacked:
    size: int
    sha256: str


def _unpack(archive: Path, out: BinaryIO, remote: RemoteFile, url: str, cap: int) -> _Unpacked:
    """Copy the file inside ``archive`` (a .zip member, a .gz's content, or the file itself) into ``out``,
    at most ``cap`` bytes, checking that it is UTF-8 text (and tab-separated, for a TSV) on the way."""
    kind = "zip" if url.endswith(".zip") else "gzip" if url.endswith(".gz") else "plain"
    digest, utf8, size, first = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")(), 0, b""
    with contextlib.ExitStack() as stack:
        source: IO[bytes]
        if kind == "zip":
            source = _open_member(stack, archive, remote.member or remote.filename, url, cap)
        else:
            opened = gzip.open(archive) if kind == "gzip" else open(archive, "rb")
            source = stack.enter_context(cast(IO[bytes], opened))
        while True:
            try:
                chunk = source.read(CHUNK)  # gzip and zip decompress at most this much per call
            except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as err:
                raise ValueError(f"{url}: not a valid {kind} archive ({err or type(err).__name__})") from None
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                raise ValueError(f"{url}: unpacks to more than {cap:,} bytes (the cap); stopped")
            try:
                utf8.decode(chunk)
            except UnicodeDecodeError as err:
                where = size - len(chunk) + err.start
                raise ValueError(f"{url}: {remote.filename} is not UTF-8 text (byte {where})") from None
            if len(first) < CHUNK:
                first += chunk[:CHUNK]
            digest.update(chunk)
            out.write(chunk)
    try:
        utf8.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ValueError(f"{url}: {remote.filename} is not UTF-8 text (it ends inside a character)") from None
    if remote.tsv and b"\t" not in first.split(b"\n", 1)[0]:
        raise ValueError(f"{url}: {remote.filename} is not tab-separated English<TAB>French lines")
    return _Unpacked(size, digest.hexdigest())


# ------------------------------------------------------------------------------------------------ verify


def _mismatch(remote: RemoteFile, got: _Unpacked) -> str | None:
    """What differs from the pinned size and digest (None: nothing, or nothing pinned)."""
    if (remote.size is not None and got.size != remote.size) or (remote.sha256 and got.sha256 != remote.sha256):
        want = f"sha256 {remote.sha256}" if remote.sha256 else "sha256 (not pinned)"
        want += f", {remote.size:,} bytes" if remote.size is not None else ""
        return f"its sha256 is {got.sha256} ({got.size:,} bytes); expected {want}"
    return None


def _hash_file(path: Path) -> _Unpacked:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return _Unpacked(size, digest.hexdigest())


def _temp(remote: RemoteFile, path: Path, suffix: str) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{remote.filename}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    return Path(name)


def _fetch_one(url: str, remote: RemoteFile, path: Path, deadline: _Deadline, max_bytes: int) -> _Unpacked:
    """Download, unpack and verify one file into ``path``; on any failure the temp files go, ``path`` stays."""
    cap_out = remote.size if remote.size is not None else max_bytes
    # deflate never grows its input by more than a few bytes per 16 KiB block
    cap_in = cap_out + cap_out // 1000 + 4096 if remote.size is not None else max_bytes
    archive = _temp(remote, path, ".download")
    try:
        with open(archive, "wb") as f:
            _within(deadline, url, lambda: _fetch(url, f, cap_in, deadline))
        return _install(archive, url, remote, path, cap_out)
    finally:
        archive.unlink(missing_ok=True)


def _install(source: Path, label: str, remote: RemoteFile, path: Path, cap: int) -> _Unpacked:
    """Unpack ``source`` (named ``label`` in messages: its URL or path) into a temporary file beside ``path``, check
    it and rename it into place; on any failure the temporary file goes and ``path`` stays as it was."""
    unpacked = _temp(remote, path, ".part")
    try:
        with open(unpacked, "wb") as out:
            got = _unpack(source, out, remote, label, cap)
            out.flush()
            os.fsync(out.fileno())
        problem = _mismatch(remote, got)
        if problem:
            raise ValueError(f"{label}: refused: {problem}")
        os.chmod(unpacked, 0o644)  # mkstemp made it private; a cached corpus is an ordinary file
        os.replace(unpacked, path)
        return got
    finally:
        unpacked.unlink(missing_ok=True)


def _local_copy(local: Path, remote: RemoteFile, several: bool) -> Path:
    """The file of ``local`` that stands for ``remote``: ``local`` itself (a one-file source), or in the directory
    ``local`` the file under its cache name or its URL's name (``train.en`` or ``train.en.gz``)."""
    if not local.is_dir():
        if several or not local.is_file():
            wanted = "a directory holding its files" if several else "a file or a directory holding it"
            raise ValueError(f"--from {str(local)!r} is not {wanted}")
        return _readable(local)
    names = dict.fromkeys([remote.filename, remote.url.rsplit("/", 1)[1]])
    found = [local / n for n in names if (local / n).is_file()]
    if not found:
        raise ValueError(f"--from {str(local)!r} has no {' or '.join(names)}")
    return _readable(found[0])


def _readable(path: Path) -> Path:
    try:
        open(path, "rb").close()
    except OSError as err:
        raise ValueError(f"--from: {str(path)!r} cannot be read ({err.strerror or err})") from None
    return path


def _check_options(
    name: str, base_url: str | None, timeout: float, sha256: str | None, max_mb: float, local: object
) -> None:
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; available: {sorted(SOURCES)}")
    if local is not None and not isinstance(local, (str, os.PathLike)):
        raise TypeError(f"local (--from) must be a path, got {local!r}")
    if base_url is not None and local is not None:
        raise ValueError(f"--url and --from: give one (got {base_url!r} and {str(local)!r})")
    if base_url is not None and not re.match(r"^https?://[^/]", base_url):
        raise ValueError(f"--url must be an http:// or https:// address, got {base_url!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"--timeout must be a number of seconds > 0, got {timeout}")
    if not (math.isfinite(max_mb) and max_mb > 0):
        raise ValueError(f"--max-mb must be a number > 0, got {max_mb}")
    if sha256 is not None:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
            raise ValueError(f"--sha256 must be 64 hexadecimal digits, got {sha256!r}")
        if len(SOURCES[name]) != 1:
            raise ValueError(f"--sha256 pins one file; {name} has {len(SOURCES[name])} (their digests are built in)")


def download(
    name: str,
    cache_dir: str | Path | None = None,
    base_url: str | None = None,
    timeout: float = 300.0,
    *,
    sha256: str | None = None,
    force: bool = False,
    max_mb: float = DEFAULT_MAX_MB,
    local: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Fetch source ``name`` into ``cache_dir/name/``; return that directory (or the single file).

    ``base_url`` replaces the directory part of every URL (a mirror, or a local test server). ``timeout``:
    seconds for the whole download. ``sha256``: the digest the (single) unpacked file must have. ``force``:
    download again files already in the cache (an old file is replaced only by a verified new one).
    ``max_mb``: the cap on a file whose size is not pinned, downloaded and unpacked. ``local``: a copy on disk to
    take instead of the network (``--from``): the file, or a directory holding the files (:func:`_local_copy`),
    unpacked and checked as a download is.
    """
    _check_options(name, base_url, timeout, sha256, max_mb, local)
    remotes = SOURCES[name] if sha256 is None else [replace(SOURCES[name][0], sha256=sha256.lower())]
    target = Path(cache_dir or default_cache_dir()) / name
    try:
        target.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"--cache {str(target.parent)!r} is not a directory") from None
    deadline = _Deadline(timeout)
    for remote in remotes:
        path = target / remote.filename
        if path.exists() and not force:
            pinned = remote.sha256 is not None or remote.size is not None
            problem = _mismatch(remote, _hash_file(path)) if pinned else None
            if problem:
                raise ValueError(f"{path} (already in the cache): {problem}; --force downloads it again")
            continue
        url = remote.url if base_url is None else base_url.rstrip("/") + "/" + remote.url.rsplit("/", 1)[1]
        cap = int(max_mb * (1 << 20))
        with machine_errors(path):  # a full disk or a read-only cache: one line naming the file, not a temp one
            if local is None:
                got = _fetch_one(url, remote, path, deadline, cap)
            else:
                url = str(_local_copy(Path(local), remote, len(remotes) > 1))
                got = _install(Path(url), url, remote, path, remote.size if remote.size is not None else cap)
        checked = "verified" if remote.sha256 else "not pinned: pass --sha256 to pin it"
        log(
            f"{'copied' if local else 'downloaded'} {url} -> {path} ({got.size:,} bytes, sha256 {got.sha256}, {checked})"
        )
    return target / remotes[0].filename if len(remotes) == 1 else target
