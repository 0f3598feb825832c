"""``replace_modules``: the one mechanism of every swap in :mod:`tformer.fast` (as gpt-fast's ``quantize.py``), and
``Switch``: the one way each fast path is turned off for a block (``tformer.fast.reference()`` turns them all off).

Dimension legend: none (modules only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torch import nn

__all__ = ["replace_modules", "Switch"]


class Switch:
    """Whether one fast path runs: ``switch.on`` (True by default); inside ``with switch.off():`` the path runs its
    reference instead, and the previous setting comes back on exit (blocks nest)."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = True

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        previous, self.on = self.on, False
        try:
            yield
        finally:
            self.on = previous


def replace_modules(model: nn.Module, replace: Callable[[nn.Module], nn.Module | None]) -> int:
    """Put ``replace(child)`` in place of every submodule of ``model`` for which it returns a module (not None);
    returns how many were replaced. A module that appears in several places is replaced by one and the same new
    module everywhere (shared modules stay shared). ``model`` itself is never replaced."""
    new_of: dict[int, nn.Module] = {}
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent._modules.items()):  # every slot (named_children() skips a repeated child)
            if child is None:
                continue
            new = new_of.get(id(child))
            if new is None:
                new = replace(child)
                if new is None:
                    continue
                new_of[id(child)] = new
            setattr(parent, name, new)
            replaced += 1
    return replaced
