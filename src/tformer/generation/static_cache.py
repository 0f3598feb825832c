"""The static KV cache: keys and values in buffers of a fixed size, written in place at a position kept on the device.

:class:`~tformer.nn.cache.KVCache` grows as decoding goes: each step attends to one more key, and the Python int that
counts the positions changes every step. A graph compiled for one step (``torch.compile``; on a GPU a CUDA graph,
which replays the same kernels on the same memory) would see new shapes and new constants each time. Here every
decoding step has the same shapes (gpt-fast's ``KVCache``, Hugging Face's ``StaticCache``):

* each layer's keys and values live in buffers of ``capacity`` positions, (B, Hkv, C, Dh), allocated at the first
  write and never replaced: the new positions go in with ``index_copy_`` at their *slots*;
* ``index``, a (1,) tensor on the device, is the slot of the next position; :meth:`StaticKVCache.begin` (the model
  calls it once per forward) reads it, builds the masks of this forward and moves it on, all as tensor operations;
* attention reads the whole buffer, (B, Hkv, C, Dh), with a mask that hides what a query may not see: the slots
  after its own (not written yet, or the future), the slots that hold left padding (``real``, (B, C)), and for a
  sliding-window layer the slots more than W − 1 behind it. A key hidden by the mask adds exp(−∞) = 0 to the softmax,
  so the output is the dynamic cache's to float rounding.

A sliding-window layer keeps every slot (the mask does the forgetting): the buffer never holds more than the model's
context, ``capacity`` ≤ ``max_len``. Cross-attention keys/values are computed at the first step and kept, as in
:class:`~tformer.nn.cache.LayerKV`. Both kinds of cache speak the one protocol of :mod:`tformer.nn.cache` (``begin``
once per forward, ``update`` once per layer): the model and its attention never ask which kind they were given. Beam search reorders rows in place (:meth:`StaticKVCache.reorder`): the buffers
keep their addresses, which a CUDA graph needs.

A cache is made once per shape class and reused: :class:`StaticCaches` keeps the caches of one model by (rows,
capacity), and a decoding call given one takes its cache from there, reset, the same buffers at the same addresses
(Hugging Face reuses its ``StaticCache`` across ``generate`` calls the same way). The compiled step's guards see the same
tensors, so it is neither compiled nor, on a GPU, recorded as a CUDA graph again; a new cache each call would be both
(``mark_static_address`` guards the buffers' identity).

Dimension legend: B batch (× beams), Hkv key/value heads, T new positions, C capacity (slots), Dh head dim, W window.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from tformer.checks import check_length

__all__ = ["StaticLayerKV", "StaticKVCache", "StaticCaches"]


def _static(t: torch.Tensor) -> torch.Tensor:
    """Tell ``torch.compile`` that ``t`` keeps its address from call to call (a CUDA graph then reads it in place instead
    of copying it in; a new cache is a new address: the graph is recorded again, not compiled again)."""
    if t.is_cuda:
        torch._dynamo.mark_static_address(t)
    return t


class StaticLayerKV:
    """Keys/values of one decoder layer in buffers of fixed size; cross-attention keys/values once per source."""

    def __init__(self, owner: StaticKVCache, window: int | None = None) -> None:
        self.owner = owner  # the StaticKVCache: its slots and masks of the current forward
        self.window = window  # a sliding window of this many positions (None: every earlier position)
        self.k: torch.Tensor | None = None  # (B, Hkv, C, Dh)
        self.v: torch.Tensor | None = None  # (B, Hkv, C, Dh)
        self.cross_k: torch.Tensor | None = None  # (B, Hkv, S, Dh)
        self.cross_v: torch.Tensor | None = None  # (B, Hkv, S, Dh)
        self.shifted: dict[int, torch.Tensor] = {}  # token shift: sub-layer → the last n positions it read (B, n, D)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        """The cache protocol (:class:`tformer.nn.cache.LayerCache`): write the new positions, attend to the whole
        buffers (B, Hkv, C, Dh) under this layer's mask (B, 1, T, C), which holds the look-ahead, the padding and the
        window: it replaces ``mask`` and ``causal``."""
        k, v = self.append(k, v)
        return k, v, self.mask, False

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions' keys/values (B, Hkv, T, Dh) at this forward's slots; return the whole buffers."""
        if self.k is None or self.v is None:  # the first write (the prefill): the buffers, once
            shape = (k.shape[0], k.shape[1], self.owner.capacity, k.shape[3])  # (B, Hkv, C, Dh)
            self.k, self.v = _static(k.new_zeros(shape)), _static(v.new_zeros(shape))
        slots = self.owner.slots  # (T,)
        self.k.index_copy_(2, slots, k)
        self.v.index_copy_(2, slots, v)
        return self.k, self.v  # (B, Hkv, C, Dh) each

    def carry(self, key: int, x: torch.Tensor, n: int) -> torch.Tensor:
        """The cache protocol's token shift (:mod:`tformer.nn.shift`): ``x`` (B, T, D) after the last ``n`` positions
        sub-layer ``key`` read, (B, n + T, D); those ``n`` are kept in a buffer made once (zeros: the start)."""
        before = self.shifted.get(key)
        if before is None:
            before = self.shifted[key] = _static(x.new_zeros(x.shape[0], n, x.shape[2]))  # (B, n, D)
        history = torch.cat([before, x], dim=1)  # (B, n + T, D): a new tensor, so the buffer can take its end
        before.copy_(history[:, -n:])
        return history

    @property
    def mask(self) -> torch.Tensor:
        """(B, 1, T, C): which slots each new position may attend to in this layer (see the module docstring)."""
        return self.owner.masks[self.window]


class StaticKVCache:
    """One :class:`StaticLayerKV` per decoder layer, ``capacity`` slots each; pass it to a model's forward/decode.

    >>> cache = StaticKVCache.for_model(model, 64)                  # doctest: +SKIP
    >>> logits = model(prompt, cache=cache)                           # slots 0 … T − 1 (the prefill)
    >>> logits = model(next_ids, positions=positions, cache=cache)   # slot T, then T + 1, …: the same shapes

    A left-padded prompt gives its ``attention_mask`` (B, T) at the prefill: those slots stay hidden for good.
    """

    def __init__(self, n_layers: int, capacity: int, windows: list[int | None] | None = None) -> None:
        """``windows``: each layer's sliding window (None = every earlier position)."""
        windows = windows or [None] * n_layers
        if len(windows) != n_layers:
            raise ValueError(f"StaticKVCache got {len(windows)} windows for {n_layers} layers")
        if capacity < 1:
            raise ValueError(f"StaticKVCache needs a capacity of at least 1 slot, got {capacity}")
        self.capacity = capacity
        self.layers = [StaticLayerKV(self, window) for window in windows]
        self.windows = tuple(dict.fromkeys(windows))  # the layers' windows, each once
        self.index: torch.Tensor | None = None  # (1,) the slot of the next position, on the device
        self.real: torch.Tensor | None = None  # (B, C) False where a slot holds left padding
        self.slots = torch.zeros(0, dtype=torch.long)  # (T,) the slots of the current forward's positions
        self.masks: dict[int | None, torch.Tensor] = {}  # window → (B, 1, T, C), for the current forward

    @classmethod
    def for_model(cls, model: Any, capacity: int | None = None) -> StaticKVCache:
        """A static cache of ``capacity`` slots (default and at most the model's context, ``config.max_len``) for
        ``model``'s decoder layers, each with its sliding window (``model.cache_windows()``)."""
        limit = model.config.max_len
        capacity = capacity or limit
        check_length(capacity, limit, "a static cache")
        windows = model.cache_windows()
        return cls(len(windows), capacity, windows)

    def begin(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        max_len: int | None = None,
        name: str = "ids",
    ) -> tuple[torch.Tensor, None]:
        """The cache protocol (:class:`tformer.nn.cache.Cache`): open a forward of ``ids`` (B, T), its slots (from
        ``index``) and masks; ``index`` moves past them, on the device. Returns ``(positions, None)``: ``positions``
        as given, else the slots (T,), which are the positions where nothing is padded; no padding mask, since each
        layer's mask holds it. ``attention_mask`` (B, T), True = a real token, marks left padding (the prefill's);
        None: every new token is real. ``max_len`` and ``name``: unused (the capacity bounds the slots; the decoders check
        it on the host)."""
        slots = self._open(ids, attention_mask)  # (T,)
        return (slots if positions is None else positions), None

    def _open(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The slots (T,) of this forward's positions, and its masks."""
        b, t = ids.shape
        if self.index is None or self.real is None:  # the first forward: the position and the padding, on the device
            self.index = _static(torch.zeros(1, dtype=torch.long, device=ids.device))
            self.real = _static(torch.ones(b, self.capacity, dtype=torch.bool, device=ids.device))
        self.slots = self.index + torch.arange(t, device=ids.device)  # (T,)
        if attention_mask is not None:
            self.real.index_copy_(1, self.slots, attention_mask.bool())
        keys = torch.arange(self.capacity, device=ids.device)  # (C,) the slots
        seen = keys <= self.slots[:, None]  # (T, C) written, and not after the query
        self.masks = {}
        for window in self.windows:
            allowed = seen if window is None else seen & (keys > self.slots[:, None] - window)  # (T, C)
            self.masks[window] = self.real[:, None, None, :] & allowed[None, None]  # (B, 1, T, C)
        self.index.add_(t)
        return self.slots

    def reset(self) -> None:
        """Start again from slot 0, with no padding (the keys/values left in the buffers are hidden by the masks), and
        no cross-attention keys/values (the next prefill's source computes its own)."""
        if self.index is not None and self.real is not None:
            self.index.zero_()
            self.real.fill_(True)
        for layer in self.layers:
            layer.cross_k = layer.cross_v = None
            for before in layer.shifted.values():
                before.zero_()  # token shift: nothing before the next prefill

    def reorder(self, index: torch.Tensor, length: int | None = None) -> None:
        """Row i takes the keys/values of row ``index[i]`` (B,), in place: the buffers keep their addresses (beam
        search follows its beams). ``length``: only the first that many slots are copied (the rest are not written
        yet). The cross-attention keys/values stay: the rows of one source hold the same ones."""
        for layer in self.layers:
            for buffer in (layer.k, layer.v):
                if buffer is not None:
                    filled = buffer if length is None else buffer.narrow(2, 0, length)  # (B, Hkv, L, Dh)
                    filled.copy_(filled.index_select(0, index))
            for before in layer.shifted.values():
                before.copy_(before.index_select(0, index))
        if self.real is not None:
            self.real.copy_(self.real.index_select(0, index))

    def __len__(self) -> int:
        return len(self.layers)


class StaticCaches:
    """The static caches of one model, made once per shape class, (rows, capacity), and reused by every decoding call
    given this object: :meth:`get` returns the cache of that class reset, with its buffers (see the module docstring).
    It keeps the ``limit`` most recently used classes (each holds its keys/values: rows × capacity × layers).

    >>> caches = StaticCaches()                                                  # doctest: +SKIP
    >>> for prompts in requests:                                                 # doctest: +SKIP
    ...     generate_lm(model, prompts, 32, compile=True, caches=caches)   # compiled once, recorded once
    """

    def __init__(self, limit: int = 4) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"StaticCaches needs a limit of at least 1 cache, got {limit!r}")
        self.limit = limit
        self.model: Any = None  # the model they are for (set by the first get)
        self._caches: OrderedDict[tuple[int, int], StaticKVCache] = OrderedDict()
        self.made = 0  # caches made (a reuse makes none)

    def get(self, model: Any, rows: int, capacity: int) -> StaticKVCache:
        """A cache of ``capacity`` slots for ``rows`` rows of ``model``: the one made before for them, reset, or a new one."""
        if self.model is not model:  # another model: other layers, other shapes
            self.model, self._caches = model, OrderedDict()
        cache = self._caches.pop((rows, capacity), None)
        if cache is None:
            cache = StaticKVCache.for_model(model, capacity)
            self.made += 1
        else:
            cache.reset()
        self._caches[(rows, capacity)] = cache
        while len(self._caches) > self.limit:
            self._caches.popitem(last=False)
        return cache
