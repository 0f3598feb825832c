"""Training progress on stderr: a tqdm bar on a terminal, plain lines everywhere else.

A bar redraws itself with carriage returns; written to a file (``nohup``, CI, a pipe) that is megabytes of
half-lines. When stderr is not a terminal, :class:`Progress` writes instead one plain line every
``PLAIN_EVERY_S`` seconds (and after the first step and the last)::

    step 120/3000 | epoch 1 loss 2.345 lr 4.00e-04 12,345 tok/s ETA 3:12
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm.auto import tqdm

from tformer.training.signals import Pipes

__all__ = ["Progress", "PLAIN_EVERY_S", "seconds_left", "step_text"]

PLAIN_EVERY_S = 5.0
BAR_EVERY_S = 0.5  # a bar's values (loss, learning rate, ...) are asked for at most this often


class Progress:
    """``update(step, text)`` after every optimizer step, with that step's own values; ``close()`` at the end.

    Each line shows the text given with its step: a line printed on time (every ``PLAIN_EVERY_S`` seconds)
    between two log steps never shows the loss, learning rate or tokens/s of an earlier step; nor does the bar, whose
    count moves (every ``BAR_EVERY_S``) with the values of the step it shows. The text may be a
    function, called only when a line or the bar will show it: the Trainer reads the loss from the device for it
    (:mod:`tformer.training.tally`), so a step that is not shown reads nothing."""

    def __init__(
        self, total: int | None, initial: int, enabled: bool, stream: TextIO | None = None, pipes: Pipes | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.pipes = pipes  # a run's (tformer.training.signals.Pipes): a closed pipe stops it, saved, not mid-step
        self.total, self.step, self.text = total, initial, ""
        self.enabled = enabled
        self.plain = enabled and not _is_terminal(self.stream)
        self.bar = None
        if enabled and not self.plain:
            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=self.stream)
        self.printed_at, self.printed_step = -float("inf"), initial
        self.pending: str | Callable[[], str] = ""  # the last step's text, not asked for yet
        self.asked_at = -float("inf")

    def update(self, step: int, text: str | Callable[[], str] = "") -> None:
        """Optimizer step ``step`` is done; ``text`` holds its values (loss, learning rate, tokens/s, ETA), or is a
        function that makes them, called only if they are shown."""
        self.step, self.pending = step, text
        if self.bar is not None:
            if time.monotonic() - self.asked_at >= BAR_EVERY_S:  # the count moves with its own step's values
                self.bar.set_postfix_str(self._text(), refresh=False)
                self.bar.update(step - self.bar.n)  # drawn at tqdm's own pace
        elif self.plain and (time.monotonic() - self.printed_at >= PLAIN_EVERY_S):
            self._line()

    def _text(self) -> str:
        self.text = self.pending() if callable(self.pending) else self.pending
        self.asked_at = time.monotonic()
        return self.text

    def _line(self) -> None:
        total = f"/{self.total}" if self.total else ""
        line = f"step {self.step}{total} | {self._text()}".rstrip(" |")
        if self.pipes is None:
            print(line, file=self.stream, flush=True)
        else:
            self.pipes.write(lambda text: print(text, file=self.stream, flush=True), line, "stderr")
        self.printed_at, self.printed_step = time.monotonic(), self.step

    def close(self) -> None:
        if self.bar is not None:
            with contextlib.suppress(Exception):  # the last step's values (a run stopped by an error: its own)
                self.bar.set_postfix_str(self._text(), refresh=False)
            self.bar.update(self.step - self.bar.n)
            self.bar.close()
        elif self.plain and self.printed_step != self.step:
            self._line()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def seconds_left(
    max_steps: int | None,
    minutes: float | None,
    step: int,
    elapsed: float,
    step0: int,
    elapsed0: float,
    wall: float | None = None,
) -> float | None:
    """Time to the end of a run at ``step`` after ``elapsed`` seconds of training: the rest of its ``minutes``, or the
    steps left to ``max_steps`` at the pace since this session started (at ``step0``, ``elapsed0``), whichever ends
    first. ``wall``, the seconds since the session started: the budget counts training only, so the time left is
    scaled by this session's wall time per training second (its evaluations and saves, on the clock a person reads)."""
    left = []
    if minutes is not None:
        left.append(max(minutes * 60 - elapsed, 0.0))
    if max_steps is not None and step > step0:
        left.append((max_steps - step) * (elapsed - elapsed0) / (step - step0))
    if not left:
        return None
    trained = elapsed - elapsed0
    return min(left) * (max(wall / trained, 1.0) if wall is not None and trained > 0 else 1.0)


def step_text(epoch: int, loss: float, lr: float, rate: float, left: float | None, unit: str = "tok") -> str:
    """``epoch 1 loss 2.345 lr 4.00e-04 12,345 tok/s ETA 3:12``: what a progress line shows of a step; ``unit``: what
    the rate counts, the task's loss denominator (``masked tok`` for BERT, ``examples`` when classifying)."""
    text = f"epoch {epoch} loss {loss:.3f} lr {lr:.2e} {rate:,.0f} {unit}/s"
    if left is not None:
        text += f" ETA {int(left // 60)}:{int(left % 60):02d}"
    return text
