"""Batches read ahead of the step: a task's :meth:`fetch` runs in a background thread while the model trains.

A task whose batches are cheap descriptions (a language model's: the starts of its blocks) and whose data is read
when trained on (the blocks, from memory-mapped shards) gives a ``fetch(batch) -> tensor`` method; the
:class:`Feed` then reads the next :data:`AHEAD` batches of the epoch in one worker thread, pins them on a machine
with a GPU, and hands each to the step, which copies it to the device ``non_blocking``. The batches and their order
are the task's (:meth:`train_batches`, seeded per epoch), so a run with the feed trains on exactly what one without
it would, and ``--resume`` stays exact. A task without ``fetch`` is trained on its batches as they are.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

__all__ = ["AHEAD", "Feed"]

AHEAD = 2  # batches read ahead of the one being trained on


class Feed:
    """The epoch's ``batches``, fetched ahead by ``fetch`` in a thread (``pin``: into pinned memory, for CUDA)."""

    def __init__(self, fetch, batches: list, pin: bool = False, ahead: int = AHEAD) -> None:
        self.fetch, self.batches, self.pin, self.ahead = fetch, batches, pin, ahead
        # no fetch (the task's batches are its data): nothing to read ahead, take() gives None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tformer-feed") if fetch else None
        self._pending: dict[int, Future] = {}

    def _load(self, batch) -> torch.Tensor:
        rows = self.fetch(batch)
        return rows.pin_memory() if self.pin else rows

    def take(self, lo: int, hi: int) -> list | None:
        """The fetched batches ``lo`` to ``hi`` of the epoch; the next ``ahead`` are started meanwhile."""
        if self._pool is None:
            return None
        for i in range(lo, min(hi + self.ahead, len(self.batches))):
            if i not in self._pending:
                self._pending[i] = self._pool.submit(self._load, self.batches[i])
        for i in [i for i in self._pending if i < lo]:  # skipped (never the case in order): dropped
            self._pending.pop(i).cancel()
        return [self._pending.pop(i).result() for i in range(lo, min(hi, len(self.batches)))]

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
