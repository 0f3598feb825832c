"""Hook points: a name for every intermediate tensor of the blocks, to read it or to replace it.

A :class:`HookPoint` is an identity module placed at one step of a block's ``forward``
(``q = self.hook_q(q)``). Its dotted name in the model is its name: ``decoder.layers.0.cross_attn.hook_weights``,
``encoder.layers.1.ff.hook_activation``, ``embed.hook_position``, ``hook_logits``; ``docs/architecture.md`` lists
every one. Two context managers use them, and everything that looks inside a model is built on these two
(:func:`tformer.inspection.trace`, ``return_attention=True``, the explorer):

    >>> with hooks.capture(model, ["decoder.layers.0.self_attn.hook_weights"]) as cache:   # doctest: +SKIP
    ...     logits = model(ids)
    >>> cache["decoder.layers.0.self_attn.hook_weights"].shape                              # doctest: +SKIP
    torch.Size([1, 4, 7, 7])
    >>> with hooks.add(model, "decoder.layers.0.hook_final_norm", lambda x, name: x * 0):   # doctest: +SKIP
    ...     logits = model(ids)                                                           # patched

With nothing attached a hook point returns its input at once (it skips even ``nn.Module``'s call machinery),
and :class:`~tformer.nn.attention.MultiHeadAttention` takes the fused kernel. A hook on a step inside the
attention (its mask, scores or weights) makes that layer take the reference path, written out step by step,
so the numbers a hook reads are the ones the layer uses, and a tensor it returns is the one used next.

A hook point is an ``nn.Module``: ``print(model)`` shows it and ``register_forward_hook`` works on it. (Global
module hooks, ``torch.nn.modules.module.register_module_forward_hook``, do not see it.)

Dimension legend: none here (each block's legend gives the shapes of its hook points).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from tformer.checks import did_you_mean

__all__ = ["HookPoint", "capture", "add", "names", "points", "keep_at_hand", "watched"]

Selection = str | Iterable[str] | Callable[[str], bool] | None


class HookPoint(nn.Module):
    """The identity, at one named intermediate of a block: forward hooks attached to it read (or replace) that tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._forward_hooks or self._forward_pre_hooks:  # someone watches: nn.Module's call runs their hooks
            return super().__call__(x)
        return x  # nothing attached: no call machinery at all

    @property
    def active(self) -> bool:
        """Whether a hook is attached."""
        return bool(self._forward_hooks or self._forward_pre_hooks)


def keep_at_hand(module: nn.Module) -> None:
    """Let Python find ``module``'s hook points without ``nn.Module.__getattr__``.

    A block reads its hook points on every forward, and ``nn.Module`` keeps submodules in ``_modules``, reached
    through ``__getattr__`` after the ordinary lookup fails: that costs more than the identity itself. Each hook
    point stays registered (it keeps its name, its place in ``print(model)`` and in the state dict's walk) and is
    also put in the instance's ``__dict__``, where the ordinary lookup finds it. ``nn.Module.__setattr__`` removes
    that entry if the attribute is ever assigned again. Call it at the end of ``__init__``."""
    for name, child in module._modules.items():
        if isinstance(child, HookPoint):
            module.__dict__[name] = child


def watched(hook_points: Iterable[HookPoint]) -> bool:
    """Whether any of ``hook_points`` has a hook attached (a loop, not a generator: it runs on every forward)."""
    for point in hook_points:
        if point._forward_hooks or point._forward_pre_hooks:
            return True
    return False


def points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of ``model`` by its dotted name, in the order the modules were built."""
    return {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}


def names(model: nn.Module) -> list[str]:
    """The dotted names of ``model``'s hook points."""
    return list(points(model))


def _select(model: nn.Module, which: Selection) -> dict[str, HookPoint]:
    """The hook points named by ``which``: None = all; a name or a list of names (each must exist); a predicate."""
    found = points(model)
    if which is None:
        return found
    if callable(which):
        return {name: p for name, p in found.items() if which(name)}
    wanted = [which] if isinstance(which, str) else list(which)
    for name in wanted:
        if name not in found:
            hint = did_you_mean(name, found, n=1) or f"it has {len(found)} (tformer.nn.hooks.names(model))"
            raise ValueError(f"no hook point named {name!r} in this {type(model).__name__}; {hint}")
    return {name: found[name] for name in wanted}


@contextlib.contextmanager
def capture(model: nn.Module, which: Selection = None, detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
    """Within the block, record the tensors at the hook points ``which`` (None = all; a name, a list of names, or a
    predicate on the name) into the dict it yields: name → tensor, in the order they were first computed; a hook
    point that runs twice keeps its last tensor. ``detach=False`` keeps them in the autograd graph."""
    cache: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(_module: nn.Module, _inputs, output: torch.Tensor) -> None:
            cache[name] = output.detach() if detach else output

        return hook

    handles = [p.register_forward_hook(keep(name)) for name, p in _select(model, which).items()]
    try:
        yield cache
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def add(
    model: nn.Module, which: Selection, fn: Callable[[torch.Tensor, str], torch.Tensor | None]
) -> Iterator[list[str]]:
    """Within the block, call ``fn(tensor, name)`` at the hook points ``which`` (as in :func:`capture`); a tensor it
    returns replaces the one the model computed (patching), None leaves it. Yields the names it attached to."""
    chosen = _select(model, which)

    def call(name: str):
        def hook(_module: nn.Module, _inputs, output: torch.Tensor) -> torch.Tensor | None:
            return fn(output, name)

        return hook

    handles = [p.register_forward_hook(call(name)) for name, p in chosen.items()]
    try:
        yield list(chosen)
    finally:
        for handle in handles:
            handle.remove()
