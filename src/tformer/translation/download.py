"""Fetching corpora into a cache directory (when the network allows).

Everything in tformer also takes a local path, so nothing needs this at run time; it saves a
user the manual steps. ``tformer data download NAME [--cache DIR] [--url URL]``.

Each source lists its files; a ``.zip`` is unpacked and the named member kept, a ``.gz`` is
decompressed. Downloads go to a temp file first and are renamed when complete.
"""

from __future__ import annotations

import gzip
import io
import os
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tformer.files import atomic_write

__all__ = ["SOURCES", "default_cache_dir", "download"]


@dataclass(frozen=True)
class RemoteFile:
    url: str
    filename: str  # name in the cache directory
    member: str | None = None  # file inside a .zip archive


MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
SOURCES: dict[str, list[RemoteFile]] = {
    "tatoeba-eng-fra": [RemoteFile("https://www.manythings.org/anki/fra-eng.zip", "tatoeba-eng-fra.tsv", "fra.txt")],
    "multi30k": [
        RemoteFile(f"{MULTI30K}/{split}.{lang}.gz", f"{split}.{lang}")
        for split in ("train", "val")
        for lang in ("en", "fr", "de")
    ],
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("TFORMER_CACHE", Path.home() / ".cache" / "tformer"))


def _fetch(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "tformer"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _unpack(data: bytes, remote: RemoteFile, url: str) -> bytes:
    if url.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [n for n in archive.namelist() if n.split("/")[-1] == remote.member]
            if not names:
                raise ValueError(f"{url}: archive has no member {remote.member!r}")
            return archive.read(names[0])
    if url.endswith(".gz"):
        return gzip.decompress(data)
    return data


def download(
    name: str, cache_dir: str | Path | None = None, base_url: str | None = None, timeout: float = 60.0
) -> Path:
    """Fetch source ``name`` into ``cache_dir/name/``; return that directory (or the single file).

    ``base_url`` replaces the directory part of every URL (a mirror, or a local test server).
    """
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; available: {sorted(SOURCES)}")
    target = Path(cache_dir or default_cache_dir()) / name
    target.mkdir(parents=True, exist_ok=True)
    for remote in SOURCES[name]:
        path = target / remote.filename
        if path.exists():
            continue
        url = remote.url if base_url is None else base_url.rstrip("/") + "/" + remote.url.rsplit("/", 1)[1]
        try:
            data = _unpack(_fetch(url, timeout), remote, url)
        except OSError as err:
            raise ConnectionError(f"could not download {url}: {err}; pass a local path instead") from None
        atomic_write(path, lambda tmp, data=data: Path(tmp).write_bytes(data))
        print(f"downloaded {url} -> {path}")
    files = SOURCES[name]
    return target / files[0].filename if len(files) == 1 else target
