"""Readers of the files a user hands us: JSON objects, safetensors weights (and their headers, their layer names,
their values), tokenizer files and UTF-8 text, each named in the error when it is missing, empty, truncated, binary
or of the wrong kind. :mod:`tformer.checks` gives them under its own name too (where the library imports them)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "BOM",
    "MAX_JSON_BYTES",
    "read_json_object",
    "load_safetensors",
    "safetensors_shapes",
    "check_layers",
    "check_finite_weights",
    "load_tokenizer_file",
    "read_text_file",
]

BOM = "\ufeff"  # UTF-8's byte-order mark (tformer.text drops it too)
# Larger JSON files are refused unread: our config.json and tokenizer files are kilobytes to a few MB
# (a 250k-token BPE vocabulary with its merges is ~20 MB).
MAX_JSON_BYTES = 256 * 2**20


def read_json_object(path: str | os.PathLike, what: str = "file") -> dict[str, Any]:
    """The JSON object (a dict) in ``path``; any other content is a ``ValueError`` that names the file.

    Missing: ``FileNotFoundError``. Empty, binary, truncated, not UTF-8, not JSON, a JSON list or number,
    over :data:`MAX_JSON_BYTES`: ``ValueError``. ``what`` says what the file should be ("model config").
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} is missing")
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"{what} {str(path)!r} is empty")
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{what} {str(path)!r} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} allowed")
    try:
        data = json.loads(path.read_bytes().decode("utf-8").removeprefix(BOM))  # a Windows editor's mark: no JSON
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (a binary or corrupted file?)") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON (truncated or corrupted?): {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {str(path)!r} must hold a JSON object, got a JSON {type(data).__name__}")
    return data


def load_safetensors(path: str | os.PathLike, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a missing file is ``FileNotFoundError``, an unreadable one (empty,
    truncated, not safetensors, a pickle renamed) a ``ValueError`` that names the file. Nothing is unpickled."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} is missing")
    try:
        tensors = load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"weights file {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {err}"
        ) from None
    check_finite_weights(tensors, path)
    return tensors


def safetensors_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the safetensors file ``path``, from its header alone (a few kilobytes: no tensor is
    read), so that a config can be held against its weights before a model of its size is built. Missing:
    ``FileNotFoundError``; unreadable: the ``ValueError`` of :func:`load_safetensors`."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} is missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"weights file {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {err}"
        ) from None


def check_layers(found: Iterable[str], prefix: str, says: str, count: int, config: str, weights: str) -> None:
    """The layers whose weights are ``found`` (tensor names) under ``prefix`` (``"model.layers.{i}"``, matched at a
    name's start or after a dot) are 0 .. count - 1, no more, no fewer; else a ``ValueError``: ``CONFIG says SAYS, but
    WEIGHTS holds 2 layers ('model.layers.0' to 'model.layers.1')``. Checked before a model of ``count`` layers is
    built: a config.json saying 100,000 beside a file of two would otherwise build them all first."""
    head, tail = prefix.split("{i}")
    pattern = re.compile(rf"(?:^|\.){re.escape(head)}(\d+){re.escape(tail)}\.")
    layers: dict[int, str] = {}  # index -> the layer's name as the file writes it ('model.layers.3')
    for name in found:
        match = pattern.search(name)
        if match:
            layers.setdefault(int(match.group(1)), name[: match.end(1) + len(tail)])
    if sorted(layers) == list(range(count)):
        return
    if not layers:
        holds = f"no layer ({prefix.replace('{i}', 'N')!r})"
    elif sorted(layers) == list(range(len(layers))):
        holds = f"{len(layers)} layer{'s' if len(layers) > 1 else ''} ({layers[0]!r} to {layers[len(layers) - 1]!r})"
    else:
        gap = next(i for i in range(max(layers) + 1) if i not in layers)
        holds = f"layers up to {layers[max(layers)]!r} but not layer {gap}"
    raise ValueError(f"{config} says {says}, but {weights} holds {holds}")


def check_finite_weights(tensors: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Every floating-point tensor of the weights file ``path`` holds finite values; else a ``ValueError``
    ``'FILE': tensor 'NAME' has NaN/inf values``.

    One NaN or inf weight makes every output NaN: an empty translation, garbage text or a failed draw later, far
    from the file. One pass over the values, a block at a time (a mask of 16M values at most, not of the tensor)."""
    block = 1 << 24
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            continue
        flat = tensor.reshape(-1)
        if all(bool(torch.isfinite(flat[i : i + block]).all()) for i in range(0, flat.numel(), block)):
            continue
        nan, inf = int(torch.isnan(flat).sum()), int(torch.isinf(flat).sum())
        raise ValueError(
            f"{str(path)!r}: tensor {name!r} has NaN/inf values ({nan:,} NaN and {inf:,} inf of {flat.numel():,}): "
            "the weights are broken (a training run that diverged, or a damaged file)"
        )


def load_tokenizer_file(path: str | os.PathLike, what: str = "tokenizer file"):
    """A ``tokenizers.Tokenizer`` from its JSON file; anything unreadable is a ``ValueError`` naming the file."""
    from tokenizers import Tokenizer

    read_json_object(path, what)  # missing, empty, binary, truncated, too large, not an object
    try:  # the text, not the file: the library refuses a byte-order mark that read_json_object takes
        return Tokenizer.from_str(Path(path).read_bytes().decode("utf-8").removeprefix(BOM))
    except Exception as err:  # the Rust library raises a bare Exception for any content it cannot read
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{what} {str(path)!r} is not a tokenizer saved by the tokenizers library: {reason}") from None


def read_text_file(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of ``path``; missing: ``FileNotFoundError``; empty or binary: ``ValueError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} is missing")
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{what} {str(path)!r} is empty")
    try:
        text = data.decode("utf-8").removeprefix(BOM)  # a Windows editor's byte-order mark is no character
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (a binary or corrupted file?)") from None
    if "\x00" in text:
        raise ValueError(f"{what} {str(path)!r} holds NUL bytes: a binary file, not text")
    return text
