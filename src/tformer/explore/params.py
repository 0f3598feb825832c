"""The fields of one API request, read and checked: a wrong one is a ValueError naming it (HTTP 400).

    >>> p = Params({"text": "hi", "beam_size": 4}, "decode")
    >>> p.text("text"), p.integer("beam_size", 4, lo=1, hi=16)
    ('hi', 4)
    >>> p.done()                                   # no field left unread: nothing unknown was sent

Every refusal is one line: the API, the field, what it must be and what came (in JSON's words: a string, a
list, ``true``; a long value is cut short, so that a 64 KB body never comes back in an error). A boolean is not
a number, a string must be valid Unicode (JSON can carry a lone surrogate, ``"\\ud800"``, which no tokenizer
takes), and a number must be finite.

Dimension legend: none (JSON values).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Params", "MAX_CHARS", "shown"]

MAX_CHARS = 20_000  # a text field, before tokenizing


def shown(value: Any) -> str:
    """A JSON value as an error message shows it: short, on one line, named by its JSON type when it is big."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        digits = str(value)
        return digits if len(digits) <= 20 else f"{digits[:8]}… (an integer of {len(digits.lstrip('-'))} digits)"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40])[:-1] + f"…' ({len(value)} characters)"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"an object with {len(value)} field{'' if len(value) == 1 else 's'}"
    return type(value).__name__


def _check_unicode(api: str, key: str, value: str) -> None:
    """Refuse a lone surrogate (JSON's ``"\\ud800"``): the tokenizers cannot take it, nor can UTF-8 write it back;
    and a NUL (``"\\u0000"``), which no text holds (every text tformer reads refuses it, :mod:`tformer.text`)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(value[err.start])
        raise ValueError(
            f"{api}: {key} is not valid Unicode (lone surrogate U+{code:04X} at character {err.start + 1})"
        ) from None
    if "\x00" in value:
        raise ValueError(f"{api}: {key} holds a NUL character (at character {value.index(chr(0)) + 1}), not text")


class Params:
    """A request body (a JSON object) for API ``name``; each reader marks its field as used."""

    def __init__(self, body: dict[str, Any], name: str) -> None:
        self.body, self.name = body, name
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return self.body.get(key) is not None

    def _get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        value = self.body.get(key)
        if value is None:
            if default is _REQUIRED:
                raise ValueError(f"{self.name}: {key} is required")
            return default
        return value

    def _wrong(self, key: str, expected: str, value: Any) -> ValueError:
        return ValueError(f"{self.name}: {key} must be {expected}, got {shown(value)}")

    def text(self, key: str, default: Any = None, empty: bool = False) -> str:
        value = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        if len(value) > MAX_CHARS:
            raise ValueError(f"{self.name}: {key} has {len(value)} characters, at most {MAX_CHARS}")
        _check_unicode(self.name, key, value)
        if not value.strip() and not empty:
            raise ValueError(f"{self.name}: {key} is empty")
        return value

    def string(self, key: str) -> str:
        value = self._get(key, _REQUIRED)
        if not isinstance(value, str) or len(value) > 100:
            raise self._wrong(key, "a string of at most 100 characters", value)
        _check_unicode(self.name, key, value)
        return value

    def integer(self, key: str, default: Any = None, lo: int = 0, hi: int = 1 << 31) -> int:
        given = self._get(key, _REQUIRED if default is None else default)
        value = int(given) if isinstance(given, float) and given.is_integer() else given  # JavaScript's 2.0 is 2
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, f"an integer in [{lo}, {hi}]", value)
        if not lo <= value <= hi:
            raise ValueError(f"{self.name}: {key} must be in [{lo}, {hi}], got {shown(given)}")
        return value

    def number(
        self, key: str, default: Any = None, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False
    ) -> float:
        """A finite number in [lo, hi] (``lo_open``: in (lo, hi])."""
        value = self._get(key, _REQUIRED if default is None else default)
        bounds = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, f"a number in {bounds}", value)
        if isinstance(value, float) and not math.isfinite(value):
            raise self._wrong(key, f"a finite number in {bounds}", value)
        if not (lo < value if lo_open else lo <= value) or not value <= hi:  # (an int of any size compares exactly)
            raise ValueError(f"{self.name}: {key} must be in {bounds}, got {shown(value)}")
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = None) -> str:
        value = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(value, str) or value not in choices:
            raise self._wrong(key, f"one of {', '.join(choices)}", value)
        return value

    def done(self) -> None:
        """Refuse a field that no reader asked for (a typo must not pass silently)."""
        unknown = sorted(k for k, v in self.body.items() if k not in self.used and v is not None)
        if unknown:
            raise ValueError(f"{self.name}: unknown field {shown(unknown[0])}")


_REQUIRED = object()
