"""The KV cache: keys and values kept between decoding steps.

Incremental decoding feeds one new position at a time. Self-attention then needs the keys and
values of every earlier position; recomputing them costs the whole prefix every step, so each
decoder layer keeps them here. Cross-attention keys/values depend only on the encoder output, so
they are computed once per source and reused every step.

Buffers are preallocated (``max_len`` positions) and grow by doubling if a sequence runs longer. A prompt (several
positions in the first call) gets a buffer of its own length, grown to ``max_len`` at the next call: the prompt's
forward pass has the largest temporaries, and a full-size cache under them would raise the peak memory for nothing.
For beam search, :meth:`KVCache.reorder` follows the surviving beams.

A layer that attends through a sliding window of W positions (Mistral, Gemma 3's local layers) never looks
further back than W − 1 positions, so its store keeps only those: when the buffer is full, the last W − 1 positions
move to its front and the older ones are gone (``offset`` counts them). The buffer holds at most 2·W positions
(plus one step's new ones; a longer prompt's own length), whatever the length of the text; the move happens once
every W steps or so.

**One protocol for every kind of cache** (Hugging Face's ``past_key_value.update``): a model calls
``cache.begin(ids, attention_mask, positions, max_len)`` once per forward, which returns the new tokens' positions
and the self-attention padding mask; each self-attention layer calls ``cache.layers[i].update(k, v, mask, causal)``,
which stores the new keys/values and returns what to attend to and with which mask. This growing cache and the
static one of compiled decoding (:mod:`tformer.generation.static_cache`) both speak it, so the model and its
attention never ask which one they were given. Cross-attention keys/values go in ``cross_k``/``cross_v``. A
token-shifted sub-layer (:mod:`tformer.nn.shift`) calls ``cache.layers[i].carry(key, x, n)`` for the positions it read
before these.

Dimension legend: B batch (× beams), H heads, T positions, Dh head dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from tformer.checks import check_below, check_length, unless_all_real

__all__ = ["LayerCache", "Cache", "LayerKV", "KVCache", "open_positions"]


class LayerCache(Protocol):
    """What one decoder layer's attention asks of its cache (the protocol of the module docstring)."""

    cross_k: torch.Tensor | None  # (B, Hkv, S, Dh) cross-attention keys, kept from the first step
    cross_v: torch.Tensor | None

    def update(
        self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        """Store the new keys/values (B, Hkv, T, Dh); return the keys, values, mask and ``causal`` to attend with."""
        ...

    def carry(self, key: int, x: torch.Tensor, n: int) -> torch.Tensor:
        """Token shift (:mod:`tformer.nn.shift`): sub-layer ``key``'s new input ``x`` (B, T, D) after the ``n``
        positions it read before (zeros before the first), (B, n + T, D); keeps the last ``n`` for the next forward."""
        ...


class Cache(Protocol):
    """What a model asks of its cache: one :class:`LayerCache` per decoder layer, and :meth:`begin`."""

    @property
    def layers(self) -> Sequence[LayerCache]: ...

    def begin(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        max_len: int | None = None,
        name: str = "ids",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Open a forward of ``ids`` (B, T): the new tokens' positions, and the padding mask (B, 1, 1, Tk) or None;
        positions past ``max_len`` are refused, naming ``name``."""
        ...

    def __len__(self) -> int: ...


def open_positions(
    start: int,
    ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    max_len: int | None = None,
    name: str = "ids",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The positions of ``ids`` (B, T) after ``start`` earlier ones: ``positions`` (T,) or (B, T) if given, else
    ``start … start + T − 1`` (T,); and ``attention_mask`` (B, start + T), True = a real token, as the padding mask of
    self-attention (B, 1, 1, start + T), or None. ``max_len``: the context the positions must stay within (an error
    names the input ``name``)."""
    b, t = ids.shape
    if max_len is not None:
        check_length(start + t, max_len, name)
    if positions is not None:
        check_positions(positions, b, t, max_len)
    where = positions if positions is not None else torch.arange(start, start + t, device=ids.device)  # (T,)
    if attention_mask is None:
        return where, None
    if attention_mask.shape != (b, start + t):
        raise ValueError(
            f"attention_mask must have shape (B, cached + T) = {(b, start + t)}, got {tuple(attention_mask.shape)}"
        )
    return where, unless_all_real(attention_mask.bool()[:, None, None, :])  # (B, 1, 1, Tk), None: nothing padded


def check_positions(positions: object, b: int, t: int, max_len: int | None) -> None:
    """``positions`` given for ``ids`` (B, T): integers, (T,) or (B, T), each in [0, ``max_len``) (a learned table's
    rows, RoPE's angles); else one line naming it, not an index error. The values are checked by the device, as
    :func:`tformer.checks.check_ids` checks ids."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a tensor of integer positions, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise TypeError(f"positions must hold integer positions, got dtype {positions.dtype}")
    if tuple(positions.shape) not in ((t,), (b, t)):
        raise ValueError(
            f"positions must have shape (T,) = ({t},) or (B, T) = ({b}, {t}), got {tuple(positions.shape)}"
        )
    if max_len is not None:  # (a negative one would read the learned table from its end)
        check_below(
            positions, max_len, lambda bad: f"positions holds {bad}, outside [0, {max_len}) (the model's max_len)"
        )


class LayerKV:
    """Keys/values of one decoder layer: a growing self-attention store and a fixed cross-attention pair."""

    def __init__(self, max_len: int = 0, window: int | None = None) -> None:
        self.window = window  # keep only what a sliding window of this many positions still needs
        self.max_len = max_len if window is None else min(max_len, 2 * window)
        self.k: torch.Tensor | None = None  # (B, H, capacity, Dh)
        self.v: torch.Tensor | None = None  # (B, H, capacity, Dh)
        self.length = 0  # positions seen so far (the position of the next token)
        self.offset = 0  # positions dropped from the front (sliding window): the store holds offset … length − 1
        self.cross_k: torch.Tensor | None = None  # (B, H, S, Dh)
        self.cross_v: torch.Tensor | None = None  # (B, H, S, Dh)
        self._spare: tuple[torch.Tensor, torch.Tensor] | None = None  # reorder's target buffers, reused
        self.shifted: dict[int, torch.Tensor] = {}  # token shift: sub-layer → the last n positions it read (B, n, D)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        """The cache protocol: store the new positions; attend to every position kept, ``mask`` cut to them (a sliding
        window's store forgets the oldest), ``causal`` as given."""
        k, v = self.append(k, v)
        return k, v, self.kept(mask), causal

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new positions' keys/values; return keys/values of all positions kept (from ``offset``)."""
        self._forget(k.shape[2])
        start = self.length - self.offset
        end = start + k.shape[2]
        keys, values = self.k, self.v
        if keys is None or values is None:
            capacity = end if end > 1 else max(self.max_len, end)  # a prompt: its own length for now
            keys = k.new_empty(k.shape[0], k.shape[1], capacity, k.shape[3])  # (B, H, capacity, Dh)
            values = v.new_empty(v.shape[0], v.shape[1], capacity, v.shape[3])
        elif keys.shape[0] != k.shape[0]:  # (beam search's reorder changes the rows it holds, with the batch's)
            raise ValueError(
                f"this KV cache holds {keys.shape[0]} batch row(s), got {k.shape[0]}: a cache serves the batch that "
                "filled it (model.new_cache() for another)"
            )
        elif end > keys.shape[2]:  # to max_len in one step, past it by doubling
            target = self.max_len if self.max_len > keys.shape[2] else 2 * keys.shape[2]
            grow = max(end, target) - keys.shape[2]
            keys = torch.cat(
                [keys, keys.new_empty(*keys.shape[:2], grow, keys.shape[3])], dim=2
            )  # (B, H, capacity', Dh)
            values = torch.cat([values, values.new_empty(*values.shape[:2], grow, values.shape[3])], dim=2)
        self.k, self.v = keys, values
        keys.narrow(2, start, end - start).copy_(k)  # narrow: a view, cheaper than indexing with slices
        values.narrow(2, start, end - start).copy_(v)
        self.length += k.shape[2]
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)  # (B, H, T, Dh) each

    def carry(self, key: int, x: torch.Tensor, n: int) -> torch.Tensor:
        """The cache protocol's token shift: ``x`` (B, T, D) after the last ``n`` positions sub-layer ``key`` read."""
        before = self.shifted.get(key)
        if before is None:
            before = x.new_zeros(x.shape[0], n, x.shape[2])  # (B, n, D): nothing before the first position
        history = torch.cat([before, x], dim=1)  # (B, n + T, D)
        self.shifted[key] = history[:, -n:]
        return history

    def kept(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """``mask`` (..., Tk) over every position seen, cut to the positions the store still keeps (from ``offset``):
        after :meth:`append`, a sliding window's store has forgotten the oldest ones."""
        if mask is None or not self.offset or mask.shape[-1] <= self.length - self.offset:
            return mask
        return mask[..., self.offset :]  # (..., Tk − offset)

    def _forget(self, new: int) -> None:
        """Sliding window: before ``new`` positions arrive in a full buffer, keep only the last W − 1 positions."""
        stored = self.length - self.offset
        if self.window is None or self.k is None or self.v is None or stored + new <= self.k.shape[2]:
            return
        keep = min(self.window - 1, stored)
        if keep > 0:  # (clone: the source and the target ranges may overlap)
            self.k[:, :, :keep] = self.k[:, :, stored - keep : stored].clone()
            self.v[:, :, :keep] = self.v[:, :, stored - keep : stored].clone()
        self.offset += stored - keep

    def reorder(self, index: torch.Tensor, cross: bool | torch.Tensor = True) -> None:
        """Keep batch rows ``index`` (beam search: follow the surviving beams).

        Only the filled positions are copied. ``cross=False`` leaves the cross-attention keys/values
        alone: right when every row is replaced by a row of the same source (beam search), since
        those rows hold the same encoder output. ``cross`` as a tensor keeps those cross-attention rows
        instead (beam search, whose cross-attention keys/values are per source, dropping done sources).
        """
        if self.k is not None and self.v is not None:
            spare_k, spare_v = self._spare if self._spare is not None else (None, None)
            new_k, new_v = (
                _gather_rows(self.k, index, self.length - self.offset, spare_k),
                _gather_rows(self.v, index, self.length - self.offset, spare_v),
            )
            self._spare = (self.k, self.v)  # the old buffers receive the next reorder
            self.k, self.v = new_k, new_v
        self.shifted = {key: rows.index_select(0, index) for key, rows in self.shifted.items()}
        cross_index = cross if isinstance(cross, torch.Tensor) else (index if cross else None)
        if cross_index is not None and self.cross_k is not None and self.cross_v is not None:
            self.cross_k, self.cross_v = (
                self.cross_k.index_select(0, cross_index),
                self.cross_v.index_select(0, cross_index),
            )


def _gather_rows(
    buffer: torch.Tensor, index: torch.Tensor, length: int, spare: torch.Tensor | None = None
) -> torch.Tensor:
    """Rows ``index`` of ``buffer`` (B, H, capacity, Dh) into ``spare`` (if it has the right shape) or a new buffer of the
    same capacity; copies the first ``length`` positions only."""
    shape = (len(index), *buffer.shape[1:])
    filled = buffer[:, :, :length]
    if filled.requires_grad and torch.is_grad_enabled():  # out= and reused buffers cannot take part in autograd
        out = buffer.new_empty(shape)
        out[:, :, :length] = filled.index_select(0, index)
        return out
    # decoding: gather straight into place, one copy, into the buffer the reorder before last left (a new
    # buffer would be fresh memory, whose first touch costs page faults: 4 MB a layer per step at beam 5 × 32)
    fits = spare is not None and spare.shape == shape and spare.dtype == buffer.dtype and spare.device == buffer.device
    out = spare if spare is not None and fits else buffer.new_empty(shape)
    torch.index_select(filled, 0, index, out=out[:, :, :length])
    return out


class KVCache:
    """One :class:`LayerKV` per decoder layer; pass it to ``decode``/``forward`` of a model.

    >>> cache = model.new_cache()            # doctest: +SKIP
    >>> logits = model.decode(tgt[:, :1], memory, cache=cache)   # doctest: +SKIP
    >>> logits = model.decode(tgt[:, 1:2], memory, cache=cache)  # doctest: +SKIP
    """

    def __init__(self, n_layers: int, max_len: int = 0, windows: list[int | None] | None = None) -> None:
        """``windows``: each layer's sliding window (None = keep every position), for a store that forgets."""
        windows = windows or [None] * n_layers
        if len(windows) != n_layers:
            raise ValueError(f"KVCache got {len(windows)} windows for {n_layers} layers")
        self.layers = [LayerKV(max_len, window) for window in windows]

    @property
    def length(self) -> int:
        """Number of positions already stored (the position of the next token)."""
        return self.layers[0].length

    def begin(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        max_len: int | None = None,
        name: str = "ids",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The cache protocol: :func:`open_positions` after the positions stored (``attention_mask`` covers them
        too: (B, cached + T))."""
        return open_positions(self.length, ids, attention_mask, positions, max_len, name)

    def reorder(self, index: torch.Tensor, cross: bool | torch.Tensor = True) -> None:
        """Keep batch rows ``index`` in every layer; see :meth:`LayerKV.reorder`."""
        for layer in self.layers:
            layer.reorder(index, cross)

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        rows = self.layers[0].k.shape[0] if self.layers and self.layers[0].k is not None else 0
        return f"KVCache({len(self.layers)} layers, {self.length} positions stored, {rows} batch rows)"
