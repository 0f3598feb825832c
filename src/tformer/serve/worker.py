"""One model, one worker thread: the requests' generations run one at a time, in the order they came (FIFO).

    worker = Worker(max_queue=64)            # the thread starts here
    job = Job(lambda emit: work(emit), loop)  # work(emit) calls emit(text) for each token, returns the outcome
    worker.submit(job)                        # queue.Full when max_queue requests are already waiting
    kind, value = await job.events.get()      # ("text", str) ... then ("end", outcome) | ("error", exc) | ("cancelled", None)
    worker.stop()                             # the server stops: ("stopped", None) to every job, each cancelled

Why one thread and a queue, not batching: a tformer model and its tokenizer are used by one thread at a time, so
nothing is shared between requests and every request gets exactly the tokens it would get alone (a seed gives
the same text whatever else is running); the cost is that a request waits for the ones before it. Streaming
crosses threads through a bridge: the worker hands each piece of text to the request's ``asyncio.Queue`` with
``loop.call_soon_threadsafe``, the only thread-safe way into an event loop; the request's coroutine awaits it.

A request whose client has gone (:meth:`Job.cancel`, called by the server when it sees the disconnect) is skipped
if it is still waiting, and stops at its next token if it is running (``emit`` raises :class:`Cancelled` inside
the generation), so the queue moves on.

This module knows threads and asyncio; it knows nothing about models, HTTP or OpenAI's format.

Dimension legend: none.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["Cancelled", "Job", "Worker"]


class Cancelled(Exception):
    """Raised inside a job's work by ``emit`` once the job is cancelled: the generation stops there."""


class Job:
    """One request's work and the bridge its results cross to the event loop of the request."""

    def __init__(self, work: Callable[[Callable[[str], None]], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.work, self.loop = work, loop
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()  # read by the request's coroutine only
        self.cancelled = threading.Event()
        self.seconds: float | None = None  # how long the work ran, once it has

    def cancel(self) -> None:
        """The client has gone: skip the work, or stop it at its next token."""
        self.cancelled.set()

    def send(self, kind: str, value: Any = None) -> None:
        """Put ``(kind, value)`` on :attr:`events` from any thread."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:
            if not self.loop.is_closed():
                raise
            # the loop has closed (the server stopped): nobody is left to read it

    def emit(self, text: str) -> None:
        """The work's callback for each new token's text ("" while a piece is held back)."""
        if self.cancelled.is_set():
            raise Cancelled
        self.send("text", text)

    def run(self) -> None:
        """Do the work (in the worker thread) and send how it ended."""
        if self.cancelled.is_set():
            self.send("cancelled")
            return
        start = time.perf_counter()
        try:
            outcome = self.work(self.emit)
            self.seconds = time.perf_counter() - start  # the generation's own time, not the wait in the queue
        except Cancelled:
            self.send("cancelled")
        except Exception as err:  # the request's coroutine answers it (a 400 for a ValueError, else a 500)
            self.send("error", err)
        else:
            self.send("end", outcome)


class Worker:
    """The thread that runs :class:`Job` s one at a time from a FIFO queue of at most ``max_queue`` waiting."""

    def __init__(self, max_queue: int = 64) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be at least 1, got {max_queue}")
        self.max_queue = max_queue
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.current: Job | None = None  # the job running
        self._closed = False
        self.thread = threading.Thread(target=self._loop, name="tformer-serve-worker", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job``; ``queue.Full`` when ``max_queue`` jobs are already waiting. Jobs whose clients have gone
        leave the queue first (each answered "cancelled" now): they hold no place a live request could have."""
        if self._closed:
            raise queue.Full
        with self.jobs.mutex:
            gone = [waiting for waiting in self.jobs.queue if waiting is not None and waiting.cancelled.is_set()]
            for waiting in gone:
                self.jobs.queue.remove(waiting)
        for waiting in gone:
            waiting.send("cancelled")
        self.jobs.put_nowait(job)

    @property
    def waiting(self) -> int:
        return self.jobs.qsize()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            self.current = job
            try:
                job.run()
            except Exception:  # its answer could not be sent: the thread goes on with the next job
                traceback.print_exc(file=sys.stderr)
            finally:
                self.current = None

    def stop(self) -> None:
        """The server is stopping: every job, running or waiting, gets ``("stopped", None)`` now and is cancelled
        (the running one stops at its next token); no job is taken any more."""
        self._closed = True
        with self.jobs.mutex:
            jobs = [self.current, *self.jobs.queue]
        for job in jobs:
            if job is not None and not job.cancelled.is_set():
                job.cancel()
                job.send("stopped")

    def close(self, timeout: float | None = 10.0) -> None:
        """Cancel the jobs still waiting, let the running one stop at its next token, and end the thread."""
        self._closed = True
        running = self.current
        if running is not None:
            running.cancel()
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.send("cancelled")
        self.jobs.put(None)
        self.thread.join(timeout)
