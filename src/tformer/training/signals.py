"""How a training run stops when asked: SIGINT / SIGTERM finish the current step, then ``last/`` is saved and
:class:`TrainingInterrupted` raised (exit status 128 + the signal in the CLI); a second one stops at once. A pipe
that closes under the run (:class:`Pipes`) stops it the same way, as SIGPIPE (141). The
:class:`~tformer.training.trainer.Trainer` decides when to save; this module holds the exception, the handlers'
installation and the run's guarded output."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

__all__ = ["Pipes", "TrainingInterrupted", "stop_signals"]


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped training (``last/`` saved, unless a second signal came); ``exit_code`` = 128 + signal."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextlib.contextmanager
def stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """Within this block SIGINT and SIGTERM call ``handler(signum, frame)``; the previous handlers come back after.
    Outside the main thread (where Python lets no one set handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)


class Pipes:
    """Where a run's lines go (its report on stdout, progress and warnings on stderr), written so that a pipe closed
    under the run does not stop it mid-step with a BrokenPipeError and nothing saved (its reader gone: ``| head`` had
    its lines, a ``tee`` was killed with the terminal). That stream's lines are dropped from then on and
    ``on_closed()`` is called once per stream: the trainer then stops after the step, ``last/`` saved, as SIGPIPE."""

    def __init__(self, on_closed: Callable[[], None]) -> None:
        self.on_closed = on_closed
        self.closed: set[str] = set()  # the streams whose reader is gone: "stdout", "stderr"

    def write(self, write: Callable[[str], None], text: str, stream: str) -> None:
        """``write(text)``, unless ``stream`` (its name) has closed."""
        if stream in self.closed:
            return
        try:
            write(text)
        except BrokenPipeError:
            self.closed.add(stream)
            self.on_closed()
