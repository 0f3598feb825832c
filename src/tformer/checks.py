"""Value checks: clear errors instead of shape errors from deep inside PyTorch. Each setting of the library's entry
points and the command line's flags, with its bound (:data:`SETTINGS`: numbers, yes/no settings, names), checked in
the flag's words; a device, token ids, a length. An error is a :class:`BadValue`, a ``ValueError``: the command line
prints it as the flag's one line (:class:`tformer.cli.parser.Parser`). The readers of the files a user hands us (JSON
objects, safetensors weights, tokenizer files, text) are :mod:`tformer.readers`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

__all__ = ["BadValue", "Number", "YesNo", "Choice", "Text", "device", "check_device", "SETTINGS", "check_settings",
           "check_yes_no", "check_yes_no_fields", "check_ids", "check_length", "unless_all_real", "check_positive",
           "check_positive_int", "check_below"]  # fmt: skip


# ------------------------------------------------------------------------------------------------ numbers
# A number a flag or a parameter takes: the command line parses a flag with one of these (tformer.cli.validate), the
# library's entry points check a parameter against the same one, so both say the same words.


class BadValue(ValueError):
    """A value outside what a flag or a parameter allows, said in the flag's words: the command line prints its
    message as the flag's one line (``argument --beam: must be an integer in [1, 64], got 0``)."""


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
        if not self.accepts(value):
            raise BadValue(f"{name} must be {self.allowed}, got {value!r}")
        return value

    def accepts(self, value: Any) -> bool:
        """Whether :meth:`check` takes ``value``."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and (self.kind is not int or isinstance(value, int)) and self.ok(value)


class YesNo:
    """A yes/no setting: ``True`` or ``False``, nothing else. Not ``"no"`` (a non-empty string is true: ``overwrite=
    "no"`` would delete a run), not 1 or 0 (ints), not a NumPy bool (a run's settings are saved as JSON, which takes
    none): ``overwrite must be True or False, got 'no'``. ``or_function`` names what a function given instead does
    (generation's ``compile``: a function that compiles the step); then a callable is taken too."""

    def __init__(self, or_function: str | None = None) -> None:
        self.or_function = or_function
        self.allowed = f"True, False or {or_function}" if or_function else "True or False"

    def __repr__(self) -> str:
        return f"YesNo({self.allowed})"

    def check(self, value: Any, name: str) -> Any:
        if isinstance(value, bool) or (self.or_function is not None and callable(value)):
            return value
        kind, module = type(value).__name__, type(value).__module__
        of_type = "" if isinstance(value, str) else f" of type {kind if module == 'builtins' else f'{module}.{kind}'}"
        raise BadValue(f"{name} must be {self.allowed}, got {value!r:.60}{of_type}")


class Choice:
    """One of a few names (a preset, a tokenizer kind): ``preset must be one of 'tiny', 'small', got 'huge'``."""

    def __init__(self, options: Iterable[str]) -> None:
        self.options = tuple(options)
        self.allowed = "one of " + ", ".join(map(repr, self.options))

    def __repr__(self) -> str:
        return f"Choice({self.allowed})"

    def check(self, value: Any, name: str) -> Any:
        if not isinstance(value, str) or value not in self.options:
            raise BadValue(f"{name} must be {self.allowed}, got {value!r:.60}")
        return value


class Text:
    """A non-empty string (a language code, a name): ``src_lang must be a non-empty string, got 5``; ``path``: or an
    ``os.PathLike`` (a file or folder: ``data must be a path (a str or os.PathLike), got list``)."""

    def __init__(self, path: bool = False) -> None:
        self.path, self.allowed = path, "a path (a str or os.PathLike)" if path else "a non-empty string"

    def __call__(self, text: str) -> str:
        """A flag's ``text`` (argparse's ``type=``); an empty one is :class:`BadValue` in the library's words."""
        if not text.strip():
            raise BadValue(f"must be {self.allowed}, got {text!r}")
        return text

    def check(self, value: Any, name: str) -> Any:
        if not (self.path and isinstance(value, os.PathLike)) and (not isinstance(value, str) or not value.strip()):
            raise BadValue(f"{name} must be {self.allowed}, got {value!r:.60}")
        return value


class Sinks:
    """Where a run's records go besides ``log.jsonl`` (``--log-to csv,tensorboard``; the library's ``log_to="csv"`` or
    ``("csv", "tensorboard")``): each of :data:`options`, at most once each, or none (``"none"``, ``()``)."""

    options = ("csv", "tensorboard")
    allowed = "csv, tensorboard, both comma-separated (csv,tensorboard) or none"

    def __repr__(self) -> str:
        return f"Sinks({self.allowed})"

    def names(self, value: Any, name: str) -> tuple[str, ...]:
        """``value`` (a comma-separated string or a sequence of names) as a tuple of names, in the order given."""
        if isinstance(value, str):
            items = [] if value.strip() == "none" else [w.strip() for w in value.split(",")]
        elif isinstance(value, (tuple, list)) and all(isinstance(w, str) for w in value):
            items = list(value)
        else:
            raise BadValue(f"{name} must be {self.allowed}, got {value!r:.60}")
        if any(w not in self.options for w in items) or len(set(items)) != len(items):
            raise BadValue(f"{name} must be {self.allowed}, got {value!r:.60}")
        return tuple(items)

    def __call__(self, text: str) -> str:
        """The flag's ``text`` (argparse's ``type=``), kept as the user wrote it once checked."""
        try:
            self.names(text, "--log-to")
        except BadValue:
            raise BadValue(f"must be {self.allowed}, got {text!r}") from None
        return text

    def check(self, value: Any, name: str) -> Any:
        self.names(value, name)
        return value


Check = Number | YesNo | Choice | Text | Sinks  # what a setting is checked with: each has .check(value, name)
log_sinks = Sinks()  # --log-to: csv (OUT/log.csv), tensorboard (OUT/tensorboard/), both or none
lora_targets = Text()  # --lora-targets: comma-separated patterns (tformer.nn.lora says which)
text_field = Text()  # --text-field: the field or column of the documents' text (tformer.data.sources)


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
# what a temperature of 0 would be
GREEDY = "0 would be greedy decoding, the most likely token: --greedy, or translate without --sample"
temperature = Number(float, 0, 100, low_open=True, allowed=f"a number in (0, 100] ({GREEDY})")
repetition_penalty = Number(float, 0.01, 100, allowed="a number in [0.01, 100] (1 = off)")
top_k = Number(int, 0, 1_000_000, allowed="an integer in [0, 1000000] (0 = off)")
candidates = Number(int, 1, 1_000_000)  # the most likely tokens shown (fill-mask, trace)
beam_size = Number(int, 1, 64, allowed="an integer in [1, 64]")
length_penalty = Number(float, 0, 10, allowed="a number in [0, 10]")
max_new_tokens = Number(int, 1, 100_000, allowed="an integer in [1, 100000]")
seconds = Number(float, 0, 86_400, low_open=True, allowed="a number of seconds in (0, 86400] (one day)")
vocab_size = Number(int, 6, allowed="an integer >= 6 (the special tokens + 1)")
pad_vocab = Number(int, 1, 4096, allowed="an integer in [1, 4096] (1 = no padding)")  # GPTConfig.vocab_multiple's
ratio = Number(float, 0, 1, allowed="a number in [0, 1]")
ema_decay = Number(float, 0, 1, high_open=True, allowed="a decay in [0, 1), e.g. 0.999 (0 = off)")
yes_no = YesNo()
compile_option = YesNo(or_function="a function that compiles the step")  # tformer.generation.static.compile_step

# Each setting, by the one name the library, a run's settings and the command line give it (--max-len is max_len),
# with its bound: the flags parse with these (tests/test_api_checks.py keeps tformer.cli.flags equal, but where a
# flag is stricter), the families' entry points and TrainConfig check their arguments with them. A yes/no setting
# (a flag without a value: --resume, --no-fast) takes True or False only. Where one family bounds a setting
# otherwise (bert's max_len >= 3), its entry point gives check_settings its own bounds.
SETTINGS: dict[str, Check] = {
    "seed": seed,
    "batch_size": positive_int,
    "batch_tokens": positive_int,
    "vocab_size": vocab_size,
    "pad_vocab": pad_vocab,
    "max_len": positive_int,
    "dropout": fraction,
    "ffn_dropout": fraction,
    "shift_tokens": non_negative_int,
    "d_model": positive_int,  # the model's shape (a config field each), over the preset's
    "n_heads": positive_int,
    "d_ff": positive_int,
    "n_layers": positive_int,
    "n_encoder_layers": positive_int,
    "n_decoder_layers": positive_int,
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
    "patience": positive_int,
    "keep_checkpoints": positive_int,
    "ema": ema_decay,
    "log_to": log_sinks,
    "max_new_tokens": max_new_tokens,
    "beam": beam_size,
    "length_penalty": length_penalty,
    "temperature": temperature,
    "top_k": top_k,
    "top_p": probability,
    "candidates": candidates,
    "min_lr_ratio": ratio,
    "batches_per_epoch": positive_int,
    "eval_blocks": positive_int,
    "label_smoothing": fraction,
    "test": count_or_fraction,
    "bleu_sentences": non_negative_int,
    "mlm_prob": probability,
    "src_lang": Text(),
    "tgt_lang": Text(),
    "resume": yes_no,
    "overwrite": yes_no,
    "joint": yes_no,
    "fast": yes_no,
    "compile": yes_no,  # a decoding function's compile takes a function too (compile_option)
    "fsdp": yes_no,
    "progress": yes_no,
    "bf16": yes_no,
    "lora_r": non_negative_int,  # 0: no LoRA, every parameter trains
    "lora_alpha": positive_float,
    "lora_dropout": fraction,
    "lora_targets": lora_targets,
    "text_field": text_field,
    "tokenizer_sample": positive_int,  # bytes
}
# the settings that name a file or folder: a path (the flags check that it exists; the library where it reads it)
PATHS = dict.fromkeys(("data", "valid_data", "out_dir", "init", "tokenizer_dir", "data_cache"), Text(path=True))


def check_yes_no(**values: Any) -> None:
    """Each of ``values`` (name=value) is True or False: ``check_yes_no(strict=strict)``; else :class:`BadValue`."""
    for name, value in values.items():
        yes_no.check(value, name)


def check_yes_no_fields(config: Any) -> None:
    """Each field of the dataclass ``config`` annotated ``bool`` (``bool | None``: None too) is True or False;
    else :class:`BadValue` naming it: ``LayerConfig.bias must be True or False, got 'no'``."""
    for f in dataclasses.fields(config):
        kinds, value = {k.strip() for k in str(f.type).split("|")}, getattr(config, f.name)
        if "bool" in kinds and not (value is None and "None" in kinds):
            yes_no.check(value, f"{type(config).__name__}.{f.name}")


def check_settings(*options: Mapping[str, Any], bounds: Mapping[str, Check] | None = None) -> None:
    """Every setting of ``options`` (name → value; several mappings: an entry point's parameters and its
    ``**train_options``) that :data:`SETTINGS` or the entry point's own ``bounds`` (first) bound, unless None (the
    default), checked there: ``batch_size must be a positive integer, got 0``, the words ``--batch-size`` has."""
    table = {**PATHS, **SETTINGS, **(bounds or {})}
    for mapping in options:
        for name, value in mapping.items():
            required = isinstance(table.get(name), YesNo) or name == "out_dir"  # None: the default (not for these)
            if name in table and (value is not None or required):
                table[name].check(value, name)


_DEVICE = re.compile(r"^(cpu|cuda|mps)(:\d+)?$")


def device(text: str, instead: str = "--device cpu") -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and available on this machine (``--device``'s ``type=``); else
    :class:`BadValue`, saying what to give ``instead`` where this machine has no CUDA device."""
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
        raise BadValue(f"{text!r} is not available on this machine (torch.cuda.is_available() is False); use {instead}")
    if index and int(index) >= torch.cuda.device_count():
        raise BadValue(f"{text!r} is not available: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def check_device(value: Any, name: str = "device") -> Any:
    """``value`` itself (a string or a ``torch.device``) when it names a device of this machine, as ``--device``
    checks it; else :class:`BadValue` naming the parameter: ``device must be cpu, cuda, cuda:N or mps, got 'gpu'``."""
    if not isinstance(value, (str, torch.device)):
        raise BadValue(f"{name} must be cpu, cuda, cuda:N or mps (a string or a torch.device), got {value!r}")
    try:
        device(str(value), instead=f"{name}='cpu'")
    except BadValue as err:
        raise BadValue(f"{name} {err}") from None  # device must be ..., device 'cuda' is not available ...
    return value


def check_ids(ids: torch.Tensor, name: str, vocab_size: int) -> None:
    """``ids`` must be a non-empty (B, T) integer tensor with values in [0, vocab_size), checked by the device itself
    (``torch._assert_async``: a forward never makes the host wait; a CPU names a bad id at once, a CUDA GPU stops the
    process with a device-side assertion, as ``nn.Embedding`` does there; another device is read once)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype in (torch.bool,) or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}): need at least one sequence of one token")
    said = f"{name} contains token id {{}}, outside the vocabulary [0, {vocab_size})"
    check_below(ids, vocab_size, said.format)


def check_below(values: torch.Tensor, limit: int, said: Callable[[int], str]) -> None:
    """Every one of the integer ``values`` in [0, ``limit``), else a ``ValueError`` of ``said(the bad value)``: checked
    by the device (see :func:`check_ids`); not while compiling (the shapes were checked, the graph stays whole)."""
    if torch.compiler.is_compiling():
        return
    if values.device.type in ("cpu", "cuda"):  # the device checks, the host does not wait for it (issue 48)
        try:  # on a CPU, a bad value raises at once (named below); on a GPU, a device-side assertion stops the process
            torch._assert_async((values >= 0).logical_and_(values < limit).all(), f"a value outside [0, {limit})")
            return
        except RuntimeError:
            pass
    lo, hi = torch.stack(torch.aminmax(values)).tolist()  # one read of the device
    if lo < 0 or hi >= limit:
        raise ValueError(said(hi if hi >= limit else lo))


def unless_all_real(mask: torch.Tensor | None, padded: bool | None = None) -> torch.Tensor | None:
    """``mask``, or None where it hides nothing (a batch without padding): attention then takes its unmasked path,
    the fused kernel's fastest, with the same numbers. ``padded``: whether it hides anything, where the caller knows
    (a batch made on the host knows its rows' lengths): no read of the device. None: one read (a synchronisation on a
    GPU), so the models ask once per forward, not each layer; while compiling the mask is kept (a graph does not read
    values)."""
    if padded is not None:
        return mask if padded else None
    if mask is None or torch.compiler.is_compiling() or not bool(mask.all()):
        return mask
    return None


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


def closest(word: str, names: Iterable[str], n: int = 2) -> list[str]:
    """The names nearest ``word``, nearest first (difflib's ratio of at least 0.6): what a "did you mean" offers."""
    return difflib.get_close_matches(str(word), list(names), n=n)


def did_you_mean(word: str, names: Iterable[str], n: int = 2) -> str:
    """``"did you mean 'max_steps' or 'max_bad_steps'?"`` for a misspelled ``word`` (:func:`closest`), else ``""``."""
    close = closest(word, names, n)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else ""
