"""argparse ``type=`` validators: every flag is checked where it is parsed, with a message that names what is allowed.

A validator raises :class:`argparse.ArgumentTypeError`, or a :class:`~tformer.checks.BadValue` in the flag's
words (:class:`~tformer.cli.parser.Parser` prints it as it is), so argparse itself prints one line and exits with
status 2::

    tformer translate: error: argument --beam: must be a positive integer, got '0'

Numbers are :class:`~tformer.checks.Number` (an ``int`` or a finite ``float`` within bounds; the bounds live in
:mod:`tformer.checks`, where the library's entry points check their arguments against the same ones, in the same
words: ``beam must be an integer in [1, 64], got 0``), paths are :class:`PathArg`
(an existing file or directory, or a place where one can be written), devices are :func:`device`. Each
validator carries its bounds or kind as attributes, so ``tests/test_inputs.py`` walks the parser and draws
bad values for every flag, a new flag included. A flag that takes a number must use :class:`Number`: that
test refuses a bare ``type=int`` or ``type=float``. A number that sizes work or feeds arithmetic has an upper
bound too (the decoding ones below): ``--beam 250000`` or ``--length-penalty 1e308`` is refused here, not met
as an ``OverflowError`` or gigabytes later.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from tformer.checks import (  # the numbers' bounds and words, shared with the library's own checks
    Number,
    beam_size,
    candidates,
    count_or_fraction,
    device,
    ema_decay,
    fraction,
    length_penalty,
    log_sinks,
    lora_targets,
    max_new_tokens,
    non_negative_float,
    non_negative_int,
    pad_vocab,
    positive_float,
    positive_int,
    probability,
    ratio,
    repetition_penalty,
    seconds,
    seed,
    temperature,
    text_field,
    top_k,
)

__all__ = [
    "Number",
    "PathArg",
    "device",
    "precision_in",
    "positive_int",
    "non_negative_int",
    "positive_float",
    "non_negative_float",
    "pad_vocab",
    "probability",
    "ratio",
    "fraction",
    "ema_decay",
    "log_sinks",
    "seed",
    "count_or_fraction",
    "temperature",
    "repetition_penalty",
    "top_k",
    "candidates",
    "beam_size",
    "length_penalty",
    "lora_targets",
    "text_field",
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
    "corpus_path",
    "precision",
]


def int_at_least(low: int, why: str = "") -> Number:
    return Number(int, low, allowed=f"an integer >= {low}{why}")


def int_in(low: int, high: int) -> Number:
    return Number(int, low, high)


# ----------------------------------------------------------------------------------------------- paths


def _first_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class PathArg:
    """A path of ``kind``: ``file`` (an existing file), ``nonempty_file``, ``dir`` (an existing directory),
    ``path`` (either), ``out_dir`` / ``out_file`` (absent or of that kind, and creatable: the nearest
    existing parent is a writable directory), ``cache_dir`` (a readable directory, or an ``out_dir``). ``keywords``
    are accepted as they are (``builtin``).
    ``corpora``: a name ``tformer data download`` knows (``multi30k``), where no file or folder has it, is that
    corpus in the download cache, as Hugging Face's ``load_dataset("name")`` finds a dataset by name."""

    def __init__(self, kind: str, keywords: tuple[str, ...] = (), corpora: bool = False) -> None:
        if kind not in ("file", "nonempty_file", "dir", "path", "out_dir", "out_file", "cache_dir"):
            raise ValueError(f"unknown path kind {kind!r}")
        self.kind, self.keywords, self.corpora = kind, keywords, corpora
        self.__name__ = kind

    def __repr__(self) -> str:
        return f"PathArg({self.kind!r})"

    def __call__(self, text: str) -> str:
        if text in self.keywords:
            return text
        if not text:
            raise argparse.ArgumentTypeError("must be a path, got an empty string")
        if self.corpora and not os.path.lexists(text):
            text = downloaded_corpus(text)
        problem = self._problem(Path(text))
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return text

    def _problem(self, path: Path) -> str | None:
        if self.kind == "cache_dir" and path.is_dir():  # read from as it is: written to only if it lacks something
            return None if os.access(path, os.R_OK | os.X_OK) else "is not readable (permission denied)"
        if self.kind.startswith("out_") or self.kind == "cache_dir":
            return _not_writable(path, want_dir=self.kind != "out_file")
        if not path.exists():
            also = f" (or one of {', '.join(map(repr, self.keywords))})" if self.keywords else ""
            return f"does not exist{also}{_fetch_hint(path) if self.corpora else ''}"
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


def _fetch_hint(path: Path) -> str:
    """How to get a missing path that names a corpus ``tformer data download`` fetches (``../shared/data/multi30k``,
    ``tinyshakespeare.txt``): the command, its name then standing for it."""
    from tformer.translation.download import SOURCES

    name = next((n for n, remotes in SOURCES.items() if path.name in (n, remotes[0].filename)), None)
    return f"; `tformer data download {name}` fetches it, then --data {name} finds it" if name else ""


def downloaded_corpus(name: str) -> str:
    """``name`` itself, or, where it names a corpus ``tformer data download`` fetches, that corpus in the download
    cache (``$TFORMER_CACHE`` or ``~/.cache/tformer``): an error saying how to fetch it when it is not there."""
    from tformer.translation.download import SOURCES, default_cache_dir

    if name not in SOURCES:
        return name
    remotes, folder = SOURCES[name], default_cache_dir() / name
    if all((folder / remote.filename).is_file() for remote in remotes):
        return str(folder / remotes[0].filename if len(remotes) == 1 else folder)
    raise argparse.ArgumentTypeError(
        f"{name!r} is neither a file nor a folder here, and the corpus of that name is not in the download cache "
        f"({str(folder)!r}): fetch it with `tformer data download {name}`, or give its path"
    )


existing_file = PathArg("file")
nonempty_file = PathArg("nonempty_file")
existing_dir = PathArg("dir")
existing_path = PathArg("path")
output_dir = PathArg("out_dir")
output_file = PathArg("out_file")
cache_dir = PathArg("cache_dir")  # an existing folder (read-only too), or one that can be made
data_source = PathArg("path", keywords=("builtin",), corpora=True)
corpus_path = PathArg("path", corpora=True)  # a text's --data: a file, a folder, or a downloaded corpus by name


# ---------------------------------------------------------------------------------------------- device


def precision_in(choices: Sequence[str]) -> Callable[[str], str]:
    """``--precision`` of a command that accepts ``choices`` only (training has no int8): torch's names too
    (``float16`` is ``fp16``); anything else is refused listing what this command accepts."""

    def parse(text: str) -> str:
        from tformer.fast.precision import normalize

        try:
            value = normalize(text)
        except ValueError:
            value = ""
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
