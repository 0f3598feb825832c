"""The fields of one API request, read and checked: a wrong one is a ValueError naming it (HTTP 400).

    >>> p = Params({"text": "hi", "beam_size": 4}, "decode")
    >>> p.text("text"), p.integer("beam_size", 4, lo=1, hi=16)
    ('hi', 4)
    >>> p.done()                                   # no field left unread: nothing unknown was sent

Dimension legend: none (JSON values).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Params", "MAX_CHARS"]

MAX_CHARS = 20_000  # a text field, before tokenizing


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

    def text(self, key: str, default: Any = None, empty: bool = False) -> str:
        value = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(value, str):
            raise ValueError(f"{self.name}: {key} must be a string, got {type(value).__name__}")
        if len(value) > MAX_CHARS:
            raise ValueError(f"{self.name}: {key} has {len(value)} characters, at most {MAX_CHARS}")
        if not value.strip() and not empty:
            raise ValueError(f"{self.name}: {key} is empty")
        return value

    def string(self, key: str) -> str:
        value = self._get(key, _REQUIRED)
        if not isinstance(value, str) or len(value) > 100:
            raise ValueError(f"{self.name}: {key} must be a short string")
        return value

    def integer(self, key: str, default: Any = None, lo: int = 0, hi: int = 1 << 31) -> int:
        value = self._get(key, _REQUIRED if default is None else default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{self.name}: {key} must be an integer, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{self.name}: {key} must be in [{lo}, {hi}], got {value}")
        return value

    def number(self, key: str, default: Any = None, lo: float = -math.inf, hi: float = math.inf) -> float:
        value = self._get(key, _REQUIRED if default is None else default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.name}: {key} must be a number, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{self.name}: {key} must be in [{lo:g}, {hi:g}], got {value:g}")
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = None) -> str:
        value = self._get(key, _REQUIRED if default is None else default)
        if value not in choices:
            raise ValueError(f"{self.name}: {key} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def done(self) -> None:
        """Refuse a field that no reader asked for (a typo must not pass silently)."""
        unknown = sorted(k for k, v in self.body.items() if k not in self.used and v is not None)
        if unknown:
            raise ValueError(f"{self.name}: unknown field {unknown[0]!r}")


_REQUIRED = object()
