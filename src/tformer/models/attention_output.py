"""``model(..., return_attention=True)``: the forward's output and every attention module's weights.

One decorator, used by the ``forward`` of the three families. With ``return_attention=True`` the
forward runs with every attention's ``hook_weights`` captured (:mod:`tformer.nn.hooks`), which sends each
attention call down the readable reference path, and returns ``(output, weights)``: ``weights`` a dict
from module name (e.g. ``"decoder.layers.0.cross_attn"``) to (B, H, Tq, Tk). Without it the forward runs
as written, on the fused path.

Dimension legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tformer.nn import hooks

__all__ = ["returns_attention"]

WEIGHTS = ".hook_weights"


def returns_attention(forward: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``forward`` a keyword-only ``return_attention=False`` argument (see the module docstring)."""

    @functools.wraps(forward)
    def wrapper(self, *args: Any, return_attention: bool = False, **kwargs: Any) -> Any:
        if not return_attention:
            return forward(self, *args, **kwargs)
        with hooks.capture(self, lambda name: name.endswith(WEIGHTS), detach=False) as weights:
            output = forward(self, *args, **kwargs)
        return output, {name[: -len(WEIGHTS)]: w for name, w in weights.items()}

    signature = inspect.signature(forward)  # shown by help(): the forward's own arguments + return_attention
    extra = inspect.Parameter("return_attention", inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool")
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])  # type: ignore[attr-defined]
    return wrapper
