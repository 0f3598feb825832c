"""Token shards: a stream of ids written once into flat binary files, read back as a memory map.

A shard is the ids themselves, little-endian ``uint16`` when the vocabulary has at most 65,536 ids, else ``uint32``
(nanoGPT's ``train.bin``, cut into files of at most :data:`SHARD_TOKENS` ids). :class:`ShardWriter` appends arrays of
ids and hashes each shard as it writes it; :class:`TokenStream` is the stream over the shards (or over a tensor, for a
small text in memory), sliced without copying and read a block at a time:

    stream = TokenStream.open(directory, shards, dtype)      # maps the files: nothing is read yet
    train, valid = stream.split(len(stream) - 1_000_000)     # views
    rows = train.rows(torch.tensor([5, 900]), 257, fill=-100)   # (2, 257) int64, copied from the map

Dimension legend: B rows, T the length of a row, N the ids of a stream.
"""

from __future__ import annotations

import bisect
import hashlib
import mmap
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

__all__ = ["SHARD_TOKENS", "token_dtype", "ShardWriter", "TokenStream"]

SHARD_TOKENS = 1 << 28  # ids per shard file: 512 MB of uint16
_DTYPES: dict[str, np.dtype] = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}


def token_dtype(vocab_size: int) -> str:
    """``uint16`` when every id fits in 16 bits, else ``uint32``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


class ShardWriter:
    """Appends ids to ``shard-00000.bin``, ``shard-00001.bin``, ... in ``directory``, each at most ``shard_tokens``
    ids; :meth:`close` returns each shard's file name, id count, size and SHA-256 (a manifest's entries)."""

    def __init__(self, directory: str | Path, dtype: str, shard_tokens: int = SHARD_TOKENS) -> None:
        self.directory, self.dtype, self.shard_tokens = Path(directory), _DTYPES[dtype], shard_tokens
        self.shards: list[dict] = []
        self.count = 0  # ids written in all
        self._file: BinaryIO | None = None
        self._hash = hashlib.sha256()
        self._in_shard = 0

    def write(self, ids) -> None:
        """Append ``ids`` (any sequence of ints in the vocabulary)."""
        array = np.asarray(ids, dtype=self.dtype)
        while len(array):
            if self._file is None:
                self._open()
            room = self.shard_tokens - self._in_shard
            part, array = array[:room], array[room:]
            data = part.tobytes()
            assert self._file is not None
            self._file.write(data)
            self._hash.update(data)
            self._in_shard += len(part)
            self.count += len(part)
            if self._in_shard == self.shard_tokens:
                self._finish()

    def _open(self) -> None:
        name = f"shard-{len(self.shards):05d}.bin"
        self.shards.append({"file": name})
        self._file = open(self.directory / name, "wb")
        self._hash, self._in_shard = hashlib.sha256(), 0

    def _finish(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        self.shards[-1].update(
            tokens=self._in_shard, bytes=self._in_shard * self.dtype.itemsize, sha256=self._hash.hexdigest()
        )

    def close(self) -> list[dict]:
        if self._file is not None:
            self._finish()
        return self.shards

    def __del__(self) -> None:  # an error mid-write: the file is closed (the staged directory is discarded)
        if self._file is not None:
            self._file.close()


def map_random(path: Path, dtype) -> np.ndarray:
    """The file ``path`` as a read-only array mapped from it, read at random places: the kernel is told so
    (``MADV_RANDOM``, where the system has it), so that a read of a few ids brings in their page, not the ~128 KB of
    read-ahead around it (pages that would count in the process's resident memory)."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=dtype)


class TokenStream:
    """A stream of ids (N,) over memory-mapped shards or an array; :meth:`rows` reads blocks of it."""

    def __init__(self, parts: list[np.ndarray], start: int = 0, stop: int | None = None) -> None:
        self._parts = parts
        self._ends = list(np.cumsum([len(p) for p in parts])) if parts else []
        total = int(self._ends[-1]) if parts else 0
        self.start, self.stop = start, total if stop is None else stop

    @classmethod
    def open(cls, directory: str | Path, shards: list[dict], dtype: str) -> TokenStream:
        """The shards of ``directory`` (the manifest's list), mapped read-only (:func:`map_random`)."""
        kind = _DTYPES[dtype]
        return cls(
            [map_random(Path(directory) / s["file"], kind) if s["tokens"] else np.zeros(0, kind) for s in shards]
        )

    @classmethod
    def of(cls, ids) -> TokenStream:
        """A stream over ids in memory (a tensor or a list)."""
        array = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids, dtype=np.int64)
        return cls([array])

    def __len__(self) -> int:
        return self.stop - self.start

    def split(self, at: int) -> tuple[TokenStream, TokenStream]:
        """``(self[:at], self[at:])``, views."""
        at = max(0, min(at, len(self)))
        return self._view(0, at), self._view(at, len(self))

    def _view(self, a: int, b: int) -> TokenStream:
        view = TokenStream.__new__(TokenStream)
        view._parts, view._ends = self._parts, self._ends
        view.start, view.stop = self.start + a, self.start + b
        return view

    def read(self, a: int, b: int) -> np.ndarray:
        """Ids ``a`` to ``b`` of the stream (clipped to it), as a new int64 array."""
        a, b = self.start + max(a, 0), self.start + min(b, len(self))
        out = np.empty(max(b - a, 0), dtype=np.int64)
        i, filled = bisect.bisect_right(self._ends, a), 0
        while a + filled < b:  # across a shard boundary: the next shard's first ids
            first = int(self._ends[i - 1]) if i else 0
            part = self._parts[i]
            lo = a + filled - first
            n = min(len(part) - lo, b - a - filled)
            out[filled : filled + n] = part[lo : lo + n]
            filled, i = filled + n, i + 1
        return out

    def rows(self, starts: torch.Tensor, length: int, fill: int) -> torch.Tensor:
        """Rows ``self[s : s + length]`` for each start s, ``fill`` past the end of the stream → (B, length) int64."""
        out = np.full((len(starts), length), fill, dtype=np.int64)
        for r, s in enumerate(starts.tolist()):
            got = self.read(s, s + length)
            out[r, : len(got)] = got
        return torch.from_numpy(out)

    def tensor(self) -> torch.Tensor:
        """The whole stream in memory (N,) int64 (a small one: scoring a file, the tests)."""
        return torch.from_numpy(self.read(0, len(self)))
