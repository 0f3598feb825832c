"""argparse ``type=`` validators: every flag is checked where it is parsed, with a message that names what is allowed.

A validator raises :class:`argparse.ArgumentTypeError`, so argparse itself prints one line and exits with
status 2::

    tformer translate: error: argument --beam: must be a positive integer, got '0'

Numbers are :class:`Number` (an ``int`` or a finite ``float`` within bounds), paths are :class:`PathArg`
(an existing file or directory, or a place where one can be written), devices are :func:`device`. Each
validator carries its bounds or kind as attributes, so ``tests/test_inputs.py`` walks the parser and draws
bad values for every flag, a new flag included. A flag that takes a number must use :class:`Number`: that
test refuses a bare ``type=int`` or ``type=float``. A number that sizes work or feeds arithmetic has an upper
bound too (the decoding ones below): ``--beam 250000`` or ``--length-penalty 1e308`` is refused here, not met
as an ``OverflowError`` or gigabytes later.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "Number",
    "PathArg",
    "device",
    "precision_in",
    "positive_int",
    "non_negative_int",
    "positive_float",
    "non_negative_float",
    "probability",
    "fraction",
    "seed",
    "count_or_fraction",
    "temperature",
    "repetition_penalty",
    "top_k",
    "beam_size",
    "length_penalty",
    "max_new_tokens",
    "seconds",
    "int_at_least",
    "int_in",
    "existing_file",
    "nonempty_file",
    "existing_dir",
    "existing_path",
    "output_dir",
    "output_file",
    "data_source",
    "precision",
]


class Number:
    """A number of ``kind`` (``int`` or ``float``, floats finite) in the interval given by ``low`` / ``high``.

    ``low_open`` / ``high_open`` exclude the bound itself (``Number(float, 0, low_open=True)`` is "> 0").
    ``whole_from``: values at or above it must be whole numbers (a fraction below 1, a count from 1 on).
    """

    def __init__(
        self,
        kind: type,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        high_open: bool = False,
        whole_from: float | None = None,
        allowed: str | None = None,
    ) -> None:
        self.kind, self.low, self.high = kind, low, high
        self.low_open, self.high_open, self.whole_from = low_open, high_open, whole_from
        self.allowed = allowed or self._describe()
        self.__name__ = self.allowed  # argparse names a type by its __name__ in a few messages

    def _describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        if self.kind is int and self.low == 1 and self.high is None:
            return "a positive integer"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{noun} in {left}{_plain(self.low)}, {_plain(self.high)}{right}"
        if self.low is not None:
            return f"{noun} {'>' if self.low_open else '>='} {_plain(self.low)}"
        if self.high is not None:
            return f"{noun} {'<' if self.high_open else '<='} {_plain(self.high)}"
        return noun

    def __repr__(self) -> str:
        return f"Number({self.allowed})"

    def ok(self, value: float) -> bool:
        """Whether ``value`` (already of the right kind) is allowed."""
        if self.kind is float and not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return not (self.whole_from is not None and value >= self.whole_from and value != int(value))

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.allowed}, got {text!r}") from None
        if not self.ok(value):
            raise argparse.ArgumentTypeError(f"must be {self.allowed}, got {text}")
        return value


def _plain(x: float) -> str:
    """1000000, not 1e+06; 0.5 as 0.5."""
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:g}"


def int_at_least(low: int, why: str = "") -> Number:
    return Number(int, low, allowed=f"an integer >= {low}{why}")


def int_in(low: int, high: int) -> Number:
    return Number(int, low, high)


positive_int = Number(int, 1)
non_negative_int = Number(int, 0, allowed="an integer >= 0")
positive_float = Number(float, 0, low_open=True, allowed="a finite number > 0")
non_negative_float = Number(float, 0, allowed="a finite number >= 0")
probability = Number(float, 0, 1, low_open=True, allowed="a probability in (0, 1]")
fraction = Number(float, 0, 1, high_open=True, allowed="a fraction in [0, 1)")
seed = Number(int, 0, 2**32 - 1, allowed="an integer in [0, 2**32 - 1]")
count_or_fraction = Number(
    float, 0, whole_from=1, allowed="a fraction in [0, 1) or a whole count >= 1 (e.g. 0.05 or 500)"
)

# decoding: the bounds of tformer.generation (MAX_BEAM, MAX_LENGTH_PENALTY, MAX_NEW_TOKENS), written out here so
# that parsing the command line does not import torch; tests/test_limits_and_values.py keeps them equal
temperature = Number(float, 0, 100, low_open=True, allowed="a number in (0, 100]")
repetition_penalty = Number(float, 0.01, 100, allowed="a number in [0.01, 100] (1 = off)")
top_k = Number(int, 0, 1_000_000, allowed="an integer in [0, 1000000] (0 = off)")
beam_size = Number(int, 1, 64, allowed="an integer in [1, 64]")
length_penalty = Number(float, 0, 10, allowed="a number in [0, 10]")
max_new_tokens = Number(int, 1, 100_000, allowed="an integer in [1, 100000]")
seconds = Number(float, 0, 86_400, low_open=True, allowed="a number of seconds in (0, 86400] (one day)")


# ----------------------------------------------------------------------------------------------- paths


def _first_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class PathArg:
    """A path of ``kind``: ``file`` (an existing file), ``nonempty_file``, ``dir`` (an existing directory),
    ``path`` (either), ``out_dir`` / ``out_file`` (absent or of that kind, and creatable: the nearest
    existing parent is a writable directory). ``keywords`` are accepted as they are (``builtin``)."""

    def __init__(self, kind: str, keywords: tuple[str, ...] = ()) -> None:
        if kind not in ("file", "nonempty_file", "dir", "path", "out_dir", "out_file"):
            raise ValueError(f"unknown path kind {kind!r}")
        self.kind, self.keywords = kind, keywords
        self.__name__ = kind

    def __repr__(self) -> str:
        return f"PathArg({self.kind!r})"

    def __call__(self, text: str) -> str:
        if text in self.keywords:
            return text
        if not text:
            raise argparse.ArgumentTypeError("must be a path, got an empty string")
        problem = self._problem(Path(text))
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return text

    def _problem(self, path: Path) -> str | None:
        if self.kind.startswith("out_"):
            return _not_writable(path, want_dir=self.kind == "out_dir")
        if not path.exists():
            also = f" (or one of {', '.join(map(repr, self.keywords))})" if self.keywords else ""
            return f"does not exist{also}"
        if self.kind == "dir" and not path.is_dir():
            return "is not a directory"
        if self.kind in ("file", "nonempty_file") and not path.is_file():
            return "is not a file"
        if not os.access(path, os.R_OK):
            return "is not readable (permission denied)"
        if self.kind == "nonempty_file" and path.stat().st_size == 0:
            return "is empty"
        return None


def _not_writable(path: Path, want_dir: bool) -> str | None:
    if path.exists():
        if want_dir and not path.is_dir():
            return "exists and is not a directory"
        if not want_dir and path.is_dir():
            return "is a directory, expected a file name"
        if not os.access(path, os.W_OK | (os.X_OK if want_dir else 0)):
            return "is not writable (permission denied)"
        return None
    base = _first_existing(path.parent)
    if not base.is_dir():
        return f"cannot be created: {str(base)!r} is a file, not a directory"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"cannot be created: {str(base)!r} is not writable (permission denied)"
    return None


existing_file = PathArg("file")
nonempty_file = PathArg("nonempty_file")
existing_dir = PathArg("dir")
existing_path = PathArg("path")
output_dir = PathArg("out_dir")
output_file = PathArg("out_file")
data_source = PathArg("path", keywords=("builtin",))


# ---------------------------------------------------------------------------------------------- device

_DEVICE = re.compile(r"^(cpu|cuda|mps)(:\d+)?$")


def device(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and available on this machine."""
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    if text == "cpu":  # no torch import for the default
        return text
    import torch

    kind, _, index = text.partition(":")
    if kind == "cpu":
        return text
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"{text!r} is not available on this machine (no MPS backend)")
        return text
    if not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not available on this machine (torch.cuda.is_available() is False); use --device cpu"
        )
    if index and int(index) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not available: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return text


def precision_in(choices: Sequence[str]) -> Callable[[str], str]:
    """``--precision`` of a command that accepts ``choices`` only (training has no int8): torch's names too
    (``float16`` is ``fp16``); anything else is refused listing what this command accepts."""

    def parse(text: str) -> str:
        from tformer.fast.precision import normalize

        try:
            value = normalize(text)
        except ValueError:
            value = None
        if value not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)} for this command, got {text!r}")
        return value

    return parse


def precision(text: str) -> str:
    """A precision of :mod:`tformer.fast.precision` (torch's names too: ``bfloat16`` is ``bf16``)."""
    from tformer.fast.precision import normalize

    try:
        return normalize(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("precision ")) from None
