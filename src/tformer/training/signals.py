"""How a training run stops when asked: SIGINT / SIGTERM finish the current step, then ``last/`` is saved and
:class:`TrainingInterrupted` raised (exit status 128 + the signal in the CLI); a second one stops at once. The
:class:`~tformer.training.trainer.Trainer` decides when to save; this module holds the exception and the handlers'
installation."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

__all__ = ["TrainingInterrupted", "stop_signals"]


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
