"""The KV cache's size, known before it is allocated (issue 40, item 3).

Decoding keeps each layer's keys and values of every position seen (:mod:`tformer.nn.cache`): for R rows (a batch,
or its beams), T positions, L layers of Hkv key/value heads of Dh values each, in the activations' dtype,

    bytes = 2 (K and V) · L · R · T · Hkv · Dh · bytes per value

with T at most the model's context (the window slides past it), and at most 2·W + 1 for a layer that attends through
a sliding window of W positions (its store keeps about that many, :class:`~tformer.nn.cache.LayerKV`: an upper
bound there, the exact size elsewhere). A static cache (``compile=True``) keeps T slots in every layer, a window's
too, T being its capacity: the positions rounded up to a multiple of 64, at most the context. An encoder–decoder
adds its cross-attention's keys and values: 2 · L · R · S · H · Dh for sources of S tokens. :func:`kv_cache_bytes`
computes it; :func:`check_kv_cache` refuses, in one line, a cache larger than the memory the device has available
(on the CPU, the kernel's ``MemAvailable``; on a GPU, ``torch.cuda.mem_get_info``), before anything is allocated.

Dimension legend: R rows, T positions, L layers, Hkv key/value heads, Dh head dim, S source length.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

__all__ = ["kv_cache_bytes", "available_bytes", "check_kv_cache", "describe_bytes"]


def _value_bytes(model: nn.Module) -> int:
    """Bytes of one cached value: the dtype of the model's float weights (an int8 model's activations are float32)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.element_size()
    return torch.get_default_dtype().itemsize


def kv_cache_bytes(model: nn.Module, rows: int, positions: int, source_len: int = 0, static: bool = False) -> int:
    """The bytes of the KV cache of ``model`` (a GPT or an encoder–decoder, by its ``config``) for ``rows`` rows of up to
    ``positions`` positions (capped at the context), plus the cross-attention's for sources of ``source_len`` tokens.

    ``static``: a static cache (:mod:`tformer.generation.static_cache`, what ``compile=True`` decodes on), whose every layer
    keeps ``positions`` slots, a sliding-window layer too (its mask forgets, its buffer does not); ``positions`` is then
    the capacity it is made with (:func:`tformer.generation.static.lm_capacity`, rounded up to its slots)."""
    c: Any = model.config
    heads = getattr(c, "n_kv_heads", None) or c.n_heads
    head_dim = getattr(c, "head_dim", None) or c.d_model // c.n_heads
    layers = getattr(c, "n_layers", None) or c.n_decoder_layers
    positions = min(positions, getattr(c, "max_len", positions))
    window = getattr(c, "sliding_window", None)
    is_local = getattr(c, "is_local", None)
    per_layer = [
        min(positions, 2 * window + 1) if window and not static and (is_local is None or is_local(i)) else positions
        for i in range(layers)
    ]
    per_value = 2 * rows * heads * head_dim * _value_bytes(model)  # K and V of one position of every row
    cross = layers * 2 * rows * c.n_heads * head_dim * _value_bytes(model) * source_len
    return per_value * sum(per_layer) + cross


def available_bytes(device: str | torch.device = "cpu") -> int | None:
    """The memory ``device`` has free now: the kernel's ``MemAvailable`` (Linux), the free physical pages
    (elsewhere), ``torch.cuda.mem_get_info`` on a GPU; None where it cannot be told."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]) if torch.cuda.is_available() else None
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def describe_bytes(n: int) -> str:
    """``n`` bytes as people read them: ``512 KB``, ``12.3 MB``, ``4.20 GB``."""
    if n < 2**20:
        return f"{n / 2**10:.0f} KB"
    if n < 2**30:
        return f"{n / 2**20:.1f} MB"
    return f"{n / 2**30:.2f} GB"


def check_kv_cache(
    model: nn.Module, rows: int, positions: int, what: str, source_len: int = 0, static: bool = False
) -> int:
    """The KV cache's bytes (:func:`kv_cache_bytes`); a ``ValueError`` in one line when that is more than the memory
    the model's device has available, saying what would need it (``what``: the settings, in the caller's words) and
    what to lower. A model that does not say its sizes (a stand-in of a test, say) is not checked: 0."""
    try:
        need = kv_cache_bytes(model, rows, positions, source_len, static)
        device = next(model.parameters()).device
    except (AttributeError, TypeError, StopIteration):
        return 0
    free = available_bytes(device)
    if free is not None and need > free:
        raise ValueError(
            f"the KV cache for {what} needs {describe_bytes(need)}, more than the {describe_bytes(free)} {device} "
            "has available: lower the new tokens or the number of rows (batch, beams, samples)"
        )
    return need
