"""``shared_view``: the swaps applied to a view of a model, so that the model the caller holds stays as it is.

:func:`tformer.fast.speed_up` changes the model it is given (its ``nn.Linear`` become :class:`~tformer.fast.linear.Linear`,
its attention modules get the fast kernel). That suits the :class:`~tformer.training.Trainer`, which owns its model; a
decoding function that did it would hand the caller back a different model than the one it passed in. Decoding
goes through :func:`tformer.fast.fast_view` (this function with the swaps) instead: a copy of the module *tree* that holds the very same Parameters, buffers
and hooks, with the swaps applied to the copy.

What is copied and what is shared:

* every module with children, and every attention module, is copied: a new object whose ``__dict__`` is the
  original's, with its own ``_modules`` dict (the swaps replace children there and choose the kernel of attention
  modules, so these must be the view's own);
* every other module (``nn.Linear`` before its swap, norms, embeddings, hook points) is shared as it is: the swaps
  put new modules in the view's ``_modules`` and never change these;
* ``_parameters``, ``_buffers`` and the hook dicts of a copied module are the original's own dict objects, and a
  module the swaps put in place of another runs that one's forward hooks (the same dicts): a ``load_state_dict``,
  a ``.to(device)``, a new buffer or a forward hook registered on the model later are seen by the view at once
  (:func:`tformer.nn.hooks.capture` on the model records what decoding computes).

What the view does change in the model: the *layout* of a weight the fast Linear reads transposed (stored
column-major while the model decodes: the same values, no second copy; :mod:`tformer.fast.linear`). Its values, its
Parameter and the state dict are the model's own; a plain forward of the model sums in another order then (float
rounding), and ``model.train()`` or any forward with gradients puts PyTorch's layout back.

The view is made once per model and kept (a weak reference to the model: it goes when the model goes), so repeated
calls cost a walk over the modules, and the decoding copies of the fast layers (the transposed and packed weights)
are made once. The walk compares the model with what the view was made from: the same modules in the same
places, the same Parameters, the same train/eval mode, the same attributes of the copied modules; anything else
(a replaced layer, ``model.train()``, a method patched onto the model) makes a new view.

Dimension legend: none (modules only).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from tformer.nn.attention import MultiHeadAttention

__all__ = ["shared_view"]


class _View(NamedTuple):
    signature: tuple[int, ...]  # what the view was made from (see _signature)
    held: list  # the objects whose ids the signature holds, kept alive so that no id is reused
    view: nn.Module


_VIEWS: weakref.WeakKeyDictionary[nn.Module, _View] = weakref.WeakKeyDictionary()


def shared_view(model: nn.Module, apply: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """``apply`` (:func:`tformer.fast.speed_up`) run on a view of ``model`` (see the module docstring), kept for the
    next call while the model stays as it was; ``model`` itself is not changed."""
    signature, held = _signature(model)
    found = _VIEWS.get(model)
    if found is not None and found.signature == signature:
        return found.view
    view = apply(_copy_tree(model, {}))
    _share_hooks(model, view)
    _VIEWS[model] = _View(signature, held, view)
    return view


def _signature(model: nn.Module) -> tuple[tuple[int, ...], list]:
    """What a view of ``model`` is made from, as ids: every module, its mode, its children, its Parameters, and the
    attributes of the modules the view copies (a method patched onto the model, a changed setting)."""
    signature: list[int] = []
    held: list = []
    for module in model.modules():
        children, params = module._modules.values(), module._parameters.values()
        attributes = module.__dict__.values() if _copied(module) else ()
        signature += (id(module), int(module.training), len(children), *map(id, children), len(params))
        signature += (*map(id, params), len(attributes), *map(id, attributes))
        if module is not model:  # the model itself is the key: holding it would keep it alive for ever
            held.append(module)
        held += (*params, *attributes)
    return tuple(signature), held


def _copied(module: nn.Module) -> bool:
    """Whether the view has a copy of ``module`` (it has children, or the swaps choose its kernel), not ``module``."""
    return bool(module._modules) or isinstance(module, MultiHeadAttention)


_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def _share_hooks(model: nn.Module, view: nn.Module) -> None:
    """A module the swaps put in the view in place of one of ``model``'s (a fast ``Linear`` for an ``nn.Linear``)
    runs that module's forward hooks: it is given the very same hook dicts."""
    swapped = dict(view.named_modules())
    for name, module in model.named_modules():
        new = swapped.get(name)
        if new is not None and new is not module:
            for hooks in _HOOK_DICTS:
                if hooks in module.__dict__:
                    new.__dict__[hooks] = module.__dict__[hooks]


def _copy_tree(module: nn.Module, done: dict[int, nn.Module]) -> nn.Module:
    """A copy of ``module`` and of every module below it that has children or is an attention module; the other
    modules, the Parameters, buffers and hooks are the original's. A module found twice is copied once."""
    if id(module) in done:
        return done[id(module)]
    if not _copied(module):
        done[id(module)] = module
        return module
    copy = object.__new__(type(module))
    copy.__dict__.update(module.__dict__)  # the same _parameters, _buffers and hook dicts (dict objects)
    done[id(module)] = copy
    children = {name: None if c is None else _copy_tree(c, done) for name, c in module._modules.items()}
    copy.__dict__["_modules"] = children
    for name, child in children.items():  # a child also kept in __dict__ (tformer.nn.hooks.keep_at_hand)
        if name in copy.__dict__:
            copy.__dict__[name] = child
    return copy
