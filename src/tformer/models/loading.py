"""Loading weights into a model without a second copy of them (issue 40: a model loads in about its own size).

Loading the plain way costs two copies of the weights and more: the model is built with random weights (every
parameter written, so every page of it resident), the file is read into a dict of tensors beside it, and those are
copied in. Here:

* :func:`no_init` builds a model without initialising its parameters: PyTorch's ``torch.nn.init`` functions leave
  the tensors as allocated, so a large parameter's memory is not touched, and the operating system gives it pages
  only when its weights are written in. Buffers computed in ``__init__`` (the sinusoidal table, RoPE's
  frequencies) are computed as always;
* :func:`read_into` reads each tensor of a safetensors file straight into the parameter it fills (``readinto`` on
  the file, no memory map and no tensor in between: the file's bytes pass through the page cache, which is not the
  process's memory), after checking the header's names, shapes and dtypes against the model, so that a file that
  does not fit is refused before anything is read;
* :func:`fill` copies a dict of tensors (a Hugging Face state, renamed and converted) into the model one tensor at a
  time, dropping each from the dict as it goes, so that the two copies never coexist whole.

The format (https://github.com/huggingface/safetensors): 8 bytes, the header's length n (little-endian); n bytes of
JSON, ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}`` (offsets from the end of the header); the data.

Dimension legend: none (whole tensors).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path

import torch
from torch import nn

__all__ = ["no_init", "read_header", "read_into", "read_tensors", "check_finite", "fill", "DTYPES"]

# safetensors' dtype names -> torch's
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)


def _as_allocated(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


@contextlib.contextmanager
def no_init() -> Iterator[None]:
    """Within this block ``torch.nn.init``'s functions leave their tensor as it is: a model built here has parameters
    of the right shapes, uninitialised, to be filled from a file. (Not thread-safe: it patches ``torch.nn.init``.)"""
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS if hasattr(nn.init, name)}
    for name in saved:
        setattr(nn.init, name, _as_allocated)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def read_header(path: Path) -> tuple[dict[str, dict], int]:
    """The tensors a safetensors file declares (``{name: {"dtype", "shape", "data_offsets"}}``, metadata left out) and
    where its data starts. Raises ValueError naming the file if the header cannot be read."""
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        size = path.stat().st_size
        if n < 2 or 8 + n > size:
            raise ValueError(f"weights file {str(path)!r} is not a readable safetensors file (truncated or corrupted?)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{str(path)!r} is not a readable safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{str(path)!r} is not a readable safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    for name, entry in header.items():
        begin, end = entry.get("data_offsets", (0, -1)) if isinstance(entry, dict) else (0, -1)
        dtype = DTYPES.get(str(entry.get("dtype"))) if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if dtype is None or not isinstance(shape, list) or not 0 <= begin <= end or 8 + n + end > size:
            raise ValueError(f"{str(path)!r}: the header's entry for {name!r} is not a tensor this file holds")
        if end - begin != _numel(shape) * dtype.itemsize:
            raise ValueError(f"{str(path)!r}: tensor {name!r} has {end - begin} bytes, not what its shape says")
    return header, 8 + n


def _numel(shape: list) -> int:
    out = 1
    for size in shape:
        out *= int(size)
    return out


def read_into(path: Path, targets: dict[str, torch.Tensor], check: Callable[[str, torch.Tensor], None]) -> None:
    """Read every tensor of ``targets`` (a name of the file -> the CPU tensor to fill, of its shape) from the
    safetensors file ``path`` into that tensor, in the file's order; ``check(name, tensor)`` sees each one read (and
    may raise). A tensor of another dtype in the file is read into a scratch tensor and converted by ``copy_``."""
    header, start = read_header(path)
    order = sorted(targets, key=lambda name: header[name]["data_offsets"][0])
    with open(path, "rb", buffering=0) as f:
        for name in order:
            entry, target = header[name], targets[name].detach()
            dtype = DTYPES[entry["dtype"]]
            f.seek(start + entry["data_offsets"][0])
            if dtype == target.dtype and _column_major(target) and sys.byteorder == "little":
                _read_rows(f, target, path, name)  # a few rows at a time: no whole copy of the matrix
                check(name, target)
                continue
            direct = dtype == target.dtype and target.is_contiguous() and sys.byteorder == "little"
            into = target if direct else torch.empty(entry["shape"], dtype=dtype)
            _read_exactly(f, into, path, name)
            if not direct:
                if sys.byteorder != "little":
                    into = _from_little_endian(into)
                target.copy_(into.view(target.shape))
            check(name, target)


def read_tensors(path: Path, names: set[str] | None = None) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path`` (those of ``names``, or all), each read into a tensor of its own
    (no memory map: the file's pages do not stay in the process's memory), each checked finite. Unreadable: a
    ValueError naming the file; missing: FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} is missing")
    header, _ = read_header(path)
    wanted = [name for name in header if names is None or name in names]
    tensors = {name: torch.empty(header[name]["shape"], dtype=DTYPES[header[name]["dtype"]]) for name in wanted}
    read_into(path, tensors, lambda name, tensor: check_finite(name, tensor, path))
    return tensors


def check_finite(name: str, tensor: torch.Tensor, path: Path) -> None:
    """``tformer.readers.check_finite_weights`` of one tensor, first by its minimum and maximum (NaN and inf show
    there): one pass and no mask the size of the tensor (which would stay in the process's memory after loading)."""
    if tensor.is_floating_point() and tensor.numel():
        low, high = torch.aminmax(tensor.t() if _column_major(tensor) else tensor.reshape(-1))  # views: no copy
        if not bool(torch.isfinite(low) & torch.isfinite(high)):
            from tformer.readers import check_finite_weights

            check_finite_weights({name: tensor}, path)  # the message, with its counts


_ROWS_BYTES = 1 << 20  # a column-major matrix is read this many bytes of rows at a time


def _column_major(t: torch.Tensor) -> bool:
    """A matrix stored column-major (its transpose contiguous; decoding's layout, :mod:`tformer.fast.linear`)."""
    return t.dim() == 2 and not t.is_contiguous() and t.t().is_contiguous()


def _read_rows(f, target: torch.Tensor, path: Path, name: str) -> None:
    """The file's row-major bytes of a column-major ``target`` (R, C), read into it a block of rows at a time."""
    rows, columns = target.shape
    step = max(1, _ROWS_BYTES // max(1, columns * target.element_size()))
    block = torch.empty(min(step, rows), columns, dtype=target.dtype)
    for first in range(0, rows, step):
        part = block[: min(step, rows - first)]
        _read_exactly(f, part, path, name)
        target[first : first + len(part)].copy_(part)


def _read_exactly(f, tensor: torch.Tensor, path: Path, name: str) -> None:
    if tensor.numel() == 0:
        return
    view = memoryview(tensor.view(-1).view(torch.uint8).numpy().data)  # the tensor's own bytes
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise ValueError(f"{str(path)!r} ends inside tensor {name!r} (truncated?)")
        done += got


def _from_little_endian(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor read on a big-endian machine, its bytes swapped into the machine's order."""
    width = tensor.element_size()
    if width == 1:
        return tensor
    raw = tensor.view(-1).view(torch.uint8).view(-1, width).flip(-1).contiguous()
    return raw.view(-1).view(tensor.dtype).view(tensor.shape)


def fill(model: nn.Module, state: MutableMapping[str, torch.Tensor], owned: bool = False) -> None:
    """Put ``state`` (names of ``model.state_dict()``, shapes checked by the caller) into ``model``, each tensor
    dropped from ``state`` as it goes in. ``owned`` (the tensors are the caller's alone, read from a file): the
    tensor itself where it already has the model's dtype and layout (no copy: the model's own, uninitialised tensor
    goes, as ``load_state_dict(assign=True)`` does), else a converted copy; not ``owned`` (another model's weights,
    say): always a copy, so that the two never share memory. Tied weights stay tied; Parameters keep their ``requires_grad``; a name ``state`` lacks is left as it is
    (the caller says which may be missing)."""
    modules = dict(model.named_modules())
    placed: dict[int, torch.Tensor] = {}  # id(the model's tensor) -> what replaced it (ties follow)
    with torch.no_grad():
        for name, old in model.state_dict(keep_vars=True).items():
            prefix, _, leaf = name.rpartition(".")
            owner = modules[prefix]
            new = placed.get(id(old))
            if new is None:
                if name not in state:
                    continue
                src = state.pop(name)
                if not owned:
                    old.detach().copy_(src)  # into the model's own tensor: nothing shared with the source
                    placed[id(old)] = old
                    continue
                if src.dtype != old.dtype or src.device != old.device or not src.is_contiguous():
                    src = src.to(device=old.device, dtype=old.dtype, memory_format=torch.contiguous_format)
                new = nn.Parameter(src, requires_grad=old.requires_grad) if isinstance(old, nn.Parameter) else src
                placed[id(old)] = new
            if leaf in owner._parameters:
                owner._parameters[leaf] = new  # type: ignore[assignment]
            else:
                owner._buffers[leaf] = new
