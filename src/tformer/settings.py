"""One name per setting: the names tformer 0.2 retired and the one function that maps them to today's.

A setting has the same name in a model config, a family's training entry point, a run's saved settings and the
command line (``max_len`` is ``--max-len`` everywhere; the CLI's flags are built from these names,
:mod:`tformer.cli.flags`). Earlier releases spelt a few of them differently, per family; code and runs that
still use an old name keep working: :func:`renamed` maps it, with a ``FutureWarning`` that names the new one.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["RENAMED", "renamed", "takes_old_names"]

F = TypeVar("F", bound=Callable[..., Any])

# old name -> today's name, for the families' entry points and the settings a run saved (tformer <= 0.2.0)
RENAMED: dict[str, str] = {
    "block_size": "max_len",  # lm: the context length is the model's max_len, as in the two other families
    "val_fraction": "valid",  # lm: the held-out part, as translation, bert and classify call it
    "max_tokens": "batch_tokens",  # translation: a batch's size in tokens (batch_size counts sequences)
}


def renamed(options: Mapping[str, Any], where: str, warn: bool = True) -> dict[str, Any]:
    """``options`` with every retired name replaced by today's (:data:`RENAMED`).

    ``where`` names the caller in the warning (``"tformer.lm.setup"``); ``warn=False`` maps silently (a saved
    run's settings, read back). Giving both names of one setting is refused: which one was meant is unknowable.
    """
    out = dict(options)
    for old, new in RENAMED.items():
        if old not in out:
            continue
        if new in out:
            raise ValueError(f"{where}: {old} and {new} are the same setting ({old} is its old name); give {new} only")
        if warn:
            warnings.warn(f"{where}: {old} is now called {new}", FutureWarning, stacklevel=4)
        out[new] = out.pop(old)
    return out


def takes_old_names(fn: F) -> F:
    """``fn`` called with a retired keyword (``block_size=``) gets today's (``max_len=``), with a warning; both at
    once are refused. The signature seen by ``inspect`` (and the CLI) stays ``fn``'s."""
    where = f"{fn.__module__.replace('.run', '')}.{fn.__name__}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **renamed(kwargs, where))

    return wrapper  # type: ignore[return-value]
