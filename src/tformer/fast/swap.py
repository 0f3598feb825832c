"""``replace_modules``: the one mechanism of every swap in :mod:`tformer.fast` (as gpt-fast's ``quantize.py``), both
ways (:func:`tformer.fast.speed_up` and :func:`tformer.fast.use_reference`).

Dimension legend: none (modules only).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

__all__ = ["replace_modules"]


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
