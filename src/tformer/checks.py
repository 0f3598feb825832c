"""Input checks: clear errors instead of shape errors from deep inside PyTorch, and readers of the files a
user hands us (JSON objects, safetensors weights) that name the file when it is missing, empty, truncated,
binary or of the wrong kind."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "BadValue",
    "Number",
    "device",
    "check_device",
    "SETTINGS",
    "check_settings",
    "check_ids",
    "check_length",
    "check_positive",
    "check_positive_int",
    "read_json_object",
    "load_safetensors",
    "safetensors_shapes",
    "check_layers",
    "check_finite_weights",
    "load_tokenizer_file",
    "read_text_file",
    "MAX_JSON_BYTES",
]

BOM = "\ufeff"  # UTF-8's byte-order mark (tformer.text drops it too)
# Larger JSON files are refused unread: our config.json and tokenizer files are kilobytes to a few MB
# (a 250k-token BPE vocabulary with its merges is ~20 MB).
MAX_JSON_BYTES = 256 * 2**20


# ------------------------------------------------------------------------------------------------ numbers
# A number a flag or a parameter takes: the command line parses a flag with one of these (tformer.cli.validate), the
# library's entry points check a parameter against the same one, so both say the same words.


class BadValue(argparse.ArgumentTypeError, ValueError):
    """A value outside what a flag or a parameter allows: a ``ValueError`` to the library's callers, and what
    argparse prints as one line for a flag (it reads an ``ArgumentTypeError``'s message as it is)."""


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
        """The number a flag's ``text`` gives (argparse's ``type=``); else :class:`BadValue`, which argparse prints
        as ``argument --beam: must be an integer in [1, 64], got 0``."""
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise BadValue(f"must be {self.allowed}, got {text!r}") from None
        if not self.ok(value):
            raise BadValue(f"must be {self.allowed}, got {text}")
        return value

    def check(self, value: Any, name: str) -> Any:
        """``value`` itself when it is a number of this kind within the bounds (a bool is no number, nor is 3.0 an
        integer); else :class:`BadValue` in a flag's words with the parameter's name: ``beam must be an integer in
        [1, 64], got 0``."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (self.kind is int and not isinstance(value, int)) or not self.ok(value):
            raise BadValue(f"{name} must be {self.allowed}, got {value!r}")
        return value


def _plain(x: float) -> str:
    """1000000, not 1e+06; 0.5 as 0.5."""
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:g}"


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

# decoding: the bounds of tformer.generation (MAX_BEAM, MAX_LENGTH_PENALTY, MAX_NEW_TOKENS);
# tests/test_limits_and_values.py keeps them equal
temperature = Number(float, 0, 100, low_open=True, allowed="a number in (0, 100]")
repetition_penalty = Number(float, 0.01, 100, allowed="a number in [0.01, 100] (1 = off)")
top_k = Number(int, 0, 1_000_000, allowed="an integer in [0, 1000000] (0 = off)")
candidates = Number(int, 1, 1_000_000)  # the most likely tokens shown (fill-mask, trace)
beam_size = Number(int, 1, 64, allowed="an integer in [1, 64]")
length_penalty = Number(float, 0, 10, allowed="a number in [0, 10]")
max_new_tokens = Number(int, 1, 100_000, allowed="an integer in [1, 100000]")
seconds = Number(float, 0, 86_400, low_open=True, allowed="a number of seconds in (0, 86400] (one day)")
vocab_size = Number(int, 6, allowed="an integer >= 6 (the special tokens + 1)")

# Each numeric setting, by the one name the library, a run's settings and the command line give it (--max-len is
# max_len), with its bound: the flags parse with these (tests/test_api_checks.py keeps tformer.cli.flags equal, but
# where a flag is stricter), the families' entry points and TrainConfig check their arguments with them.
SETTINGS: dict[str, Number] = {
    "seed": seed,
    "batch_size": positive_int,
    "batch_tokens": positive_int,
    "vocab_size": vocab_size,
    "max_len": positive_int,
    "dropout": fraction,
    "valid": count_or_fraction,
    "lr": positive_float,
    "warmup_steps": non_negative_int,
    "weight_decay": non_negative_float,
    "clip": non_negative_float,
    "accum_steps": positive_int,
    "epochs": positive_int,
    "max_steps": non_negative_int,  # the library trains 0 steps to carry a model over (the flag wants >= 1)
    "minutes": positive_float,
    "eval_every": positive_int,
    "log_every": positive_int,
    "max_bad_steps": positive_int,
    "max_new_tokens": max_new_tokens,
    "beam": beam_size,
    "length_penalty": length_penalty,
    "temperature": temperature,
    "top_k": top_k,
    "top_p": probability,
    "candidates": candidates,
}


def check_settings(*options: Mapping[str, Any]) -> None:
    """Every setting of ``options`` (name → value; several mappings: an entry point's parameters and its
    ``**train_options``) that :data:`SETTINGS` bounds, unless None (the default), checked there: ``batch_size must be
    a positive integer, got 0``, the words ``--batch-size`` has."""
    for mapping in options:
        for name, value in mapping.items():
            if value is not None and name in SETTINGS:
                SETTINGS[name].check(value, name)


_DEVICE = re.compile(r"^(cpu|cuda|mps)(:\d+)?$")


def device(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and available on this machine (``--device``'s ``type=``); else
    :class:`BadValue`."""
    if not _DEVICE.match(text):
        raise BadValue(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    kind, _, index = text.partition(":")
    if kind == "cpu":
        return text
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise BadValue(f"{text!r} is not available on this machine (no MPS backend)")
        return text
    if not torch.cuda.is_available():
        raise BadValue(
            f"{text!r} is not available on this machine (torch.cuda.is_available() is False); use --device cpu"
        )
    if index and int(index) >= torch.cuda.device_count():
        raise BadValue(f"{text!r} is not available: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def check_device(value: Any, name: str = "device") -> Any:
    """``value`` itself (a string or a ``torch.device``) when it names a device of this machine, as ``--device``
    checks it; else :class:`BadValue` naming the parameter: ``device must be cpu, cuda, cuda:N or mps, got 'gpu'``."""
    if not isinstance(value, (str, torch.device)):
        raise BadValue(f"{name} must be cpu, cuda, cuda:N or mps (a string or a torch.device), got {value!r}")
    try:
        device(str(value))
    except BadValue as err:
        raise BadValue(f"{name} {err}") from None  # device must be ..., device 'cuda' is not available ...
    return value


def check_ids(ids: torch.Tensor, name: str, vocab_size: int) -> None:
    """``ids`` must be a non-empty (B, T) integer tensor with values in [0, vocab_size)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype in (torch.bool,) or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}): need at least one sequence of one token")
    if torch.compiler.is_compiling():  # value checks would break the compiled graph; shapes were checked
        return
    lo, hi = (int(x) for x in torch.aminmax(ids))
    if lo < 0 or hi >= vocab_size:
        bad = hi if hi >= vocab_size else lo
        raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size})")


def check_length(length: int, max_len: int, name: str) -> None:
    if length > max_len:
        raise ValueError(
            f"{name} reaches position {length}, longer than max_len={max_len} (the positional table); "
            "use a config with a larger max_len or shorter inputs"
        )


def check_positive_int(value, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_positive(config, *names: str) -> None:
    """Each named field of a config must be a positive integer."""
    for name in names:
        check_positive_int(getattr(config, name), f"{type(config).__name__}.{name}")


def read_json_object(path: str | os.PathLike, what: str = "file") -> dict[str, Any]:
    """The JSON object (a dict) in ``path``; any other content is a ``ValueError`` that names the file.

    Missing: ``FileNotFoundError``. Empty, binary, truncated, not UTF-8, not JSON, a JSON list or number,
    over :data:`MAX_JSON_BYTES`: ``ValueError``. ``what`` says what the file should be ("model config").
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} is missing")
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"{what} {str(path)!r} is empty")
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{what} {str(path)!r} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} allowed")
    try:
        data = json.loads(path.read_bytes().decode("utf-8").removeprefix(BOM))  # a Windows editor's mark: no JSON
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (a binary or corrupted file?)") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON (truncated or corrupted?): {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {str(path)!r} must hold a JSON object, got a JSON {type(data).__name__}")
    return data


def load_safetensors(path: str | os.PathLike, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a missing file is ``FileNotFoundError``, an unreadable one (empty,
    truncated, not safetensors, a pickle renamed) a ``ValueError`` that names the file. Nothing is unpickled."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} is missing")
    try:
        tensors = load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"weights file {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {err}"
        ) from None
    check_finite_weights(tensors, path)
    return tensors


def safetensors_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the safetensors file ``path``, from its header alone (a few kilobytes: no tensor is
    read), so that a config can be held against its weights before a model of its size is built. Missing:
    ``FileNotFoundError``; unreadable: the ``ValueError`` of :func:`load_safetensors`."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} is missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"weights file {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {err}"
        ) from None


def check_layers(found: Iterable[str], prefix: str, says: str, count: int, config: str, weights: str) -> None:
    """The layers whose weights are ``found`` (tensor names) under ``prefix`` (``"model.layers.{i}"``, matched at a
    name's start or after a dot) are 0 .. count - 1, no more, no fewer; else a ``ValueError``: ``CONFIG says SAYS, but
    WEIGHTS holds 2 layers ('model.layers.0' to 'model.layers.1')``. Checked before a model of ``count`` layers is
    built: a config.json saying 100,000 beside a file of two would otherwise build them all first."""
    head, tail = prefix.split("{i}")
    pattern = re.compile(rf"(?:^|\.){re.escape(head)}(\d+){re.escape(tail)}\.")
    layers: dict[int, str] = {}  # index -> the layer's name as the file writes it ('model.layers.3')
    for name in found:
        match = pattern.search(name)
        if match:
            layers.setdefault(int(match.group(1)), name[: match.end(1) + len(tail)])
    if sorted(layers) == list(range(count)):
        return
    if not layers:
        holds = f"no layer ({prefix.replace('{i}', 'N')!r})"
    elif sorted(layers) == list(range(len(layers))):
        holds = f"{len(layers)} layer{'s' if len(layers) > 1 else ''} ({layers[0]!r} to {layers[len(layers) - 1]!r})"
    else:
        gap = next(i for i in range(max(layers) + 1) if i not in layers)
        holds = f"layers up to {layers[max(layers)]!r} but not layer {gap}"
    raise ValueError(f"{config} says {says}, but {weights} holds {holds}")


def check_finite_weights(tensors: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Every floating-point tensor of the weights file ``path`` holds finite values; else a ``ValueError``
    ``'FILE': tensor 'NAME' has NaN/inf values``.

    One NaN or inf weight makes every output NaN: an empty translation, garbage text or a failed draw later, far
    from the file. One pass over the values, a block at a time (a mask of 16M values at most, not of the tensor)."""
    block = 1 << 24
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            continue
        flat = tensor.reshape(-1)
        if all(bool(torch.isfinite(flat[i : i + block]).all()) for i in range(0, flat.numel(), block)):
            continue
        nan, inf = int(torch.isnan(flat).sum()), int(torch.isinf(flat).sum())
        raise ValueError(
            f"{str(path)!r}: tensor {name!r} has NaN/inf values ({nan:,} NaN and {inf:,} inf of {flat.numel():,}): "
            "the weights are broken (a training run that diverged, or a damaged file)"
        )


def load_tokenizer_file(path: str | os.PathLike, what: str = "tokenizer file"):
    """A ``tokenizers.Tokenizer`` from its JSON file; anything unreadable is a ``ValueError`` naming the file."""
    from tokenizers import Tokenizer

    read_json_object(path, what)  # missing, empty, binary, truncated, too large, not an object
    try:  # the text, not the file: the library refuses a byte-order mark that read_json_object takes
        return Tokenizer.from_str(Path(path).read_bytes().decode("utf-8").removeprefix(BOM))
    except Exception as err:  # the Rust library raises a bare Exception for any content it cannot read
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{what} {str(path)!r} is not a tokenizer saved by the tokenizers library: {reason}") from None


def read_text_file(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of ``path``; missing: ``FileNotFoundError``; empty or binary: ``ValueError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} is missing")
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{what} {str(path)!r} is empty")
    try:
        text = data.decode("utf-8").removeprefix(BOM)  # a Windows editor's byte-order mark is no character
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (a binary or corrupted file?)") from None
    if "\x00" in text:
        raise ValueError(f"{what} {str(path)!r} holds NUL bytes: a binary file, not text")
    return text
