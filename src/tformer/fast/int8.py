"""``Int8Linear``: a linear layer whose weight is int8 with one scale per output channel, and the kernels that
multiply by it on each machine class (:data:`KERNELS`). :mod:`tformer.fast.quantize` swaps it in.

What it holds. A weight W (out, in) becomes int8 values q and one float32 scale per output channel (row),
``s = max |W[o, :]| / 127`` and ``q = round(W / s)`` in −127…127 (symmetric, no zero point): the dequantized weight
``q · s`` is within ``s / 2`` of W everywhere. The bias stays float. All three are buffers (the state dict holds
``weight_int8``, ``weight_scale``, ``bias``): a quantized model is for inference.

The kernels, each computing ``x (q · s)ᵀ + b``:

* ``dynamic``: PyTorch's dynamic int8 GEMM (``torch.ops.quantized.linear_dynamic``, the kernel under
  ``torch.ao.quantization.quantize_dynamic``), int8 × int8 with the CPU's integer dot products (VNNI), the weight
  packed once per layer for the backend named (``fbgemm`` or ``onednn``). It quantizes x to 8 bits with one scale for the whole
  input; here each row of x is first divided by its largest |value| (and the output row multiplied back), so that
  in effect every row (token) gets its own scale: one token with large activations no longer costs the others their
  precision (MiniLM's embeddings, 256 Multi30k sentences: cosine to float32 at least 0.9895 with one scale for
  the batch, 0.9961 with a scale per row). With ``seven_bits``, x gets 7 bits (``reduce_range``): on CPUs
  without VNNI fbgemm multiplies with ``vpmaddubsw``, whose 16-bit sums can saturate, and PyTorch does the same;
* ``bf16``: x in bfloat16 times the int8 values in bfloat16 (exact), the scales applied after: a bfloat16 GEMM on a
  bfloat16 copy of q (two bytes per weight);
* ``reference``: ``F.linear(x, q · s, b)`` in x's dtype, the exact product of the dequantized weight and the parity
  reference. It runs inside :func:`reference` (and ``tformer.fast.reference()``), on GPUs, when x needs a gradient,
  under ``torch.compile``, in float64, and on a machine class :data:`KERNELS` does not list.

Measured on this project's avx512_bf16 class (AMD EPYC, family 26 = Zen 5, 2 cores shared with other work, torch
2.13), best of 7; the weights of 16 (4096, 1024) products streamed from memory::

    rows   float32 F.linear   dynamic fbgemm   dynamic onednn   int8 × bf16 x            dequantize, bf16 matmul
                                                                (_weight_int8pack_mm)
    1          14.3 ms          1.48 ms          1.64 ms            4.53 ms                    9.2 ms
    16         23.1 ms          2.49 ms          2.64 ms            7.46 ms                    7.6 ms
    512       322   ms         45.7  ms         37.6  ms          205    ms                   79   ms

``_weight_int8pack_mm`` with float32 x took 42 ms at one row and 708 ms at 16; ``torch._int_mm`` with x quantized
per row 7.4 / 4.3 / 54 ms. End to end (``python -m benchmarks.quantize --kernels all --threads 1``, medians of 5
alternating rounds): greedy decoding at batch 1 of a GPT 6 × 384 (vocab 8000) ran 2.32× float32's tokens/s with
fbgemm, 1.50× with oneDNN, 0.86× with the bf16 kernel; a MiniLM-shaped encoder at 32 × 128 tokens 2.65× float32
with fbgemm, 3.39× with oneDNN, 2.80× with bf16 (ONNX Runtime's dynamic int8 of the same encoder: 2.87×), every
dynamic kernel with a scale per row. So on this class decoding runs ``dynamic`` with fbgemm's packing and batched
work with oneDNN's; a GPT that reads a long prompt (a prefill of more than :data:`DECODE_ROWS` rows) and then
decodes holds both packings. On the amx class issue 33 measured fbgemm's dynamic int8 1.73× faster than float32 for batch-1 products,
``_weight_int8pack_mm`` 8–9× slower, and bfloat16 matrix products 6.7× faster than float32 (AMX tiles): decoding
runs ``dynamic`` and batched work ``bf16`` there; the avx2 and avx512 classes run ``dynamic`` with 7-bit x. Those
three rows are taken from the issue's figures, not measured with this code: the docs say so.

A model whose matrices are small gains nothing: the dynamic kernel costs about 11 µs a call whatever its size, and
a 128-wide char GPT decoded at 0.67× float32's speed (its float32 products take 7 µs). int8 pays from a few hundred
features wide, where reading the weights is what a step costs.

The packed copy is made on a layer's first product and kept (left out of a deep copy or a pickle, remade when a
buffer changes: ``load_state_dict``, ``.to()``). It is the memory a quantized model takes at inference beyond its
int8 buffers: one more byte per weight for each packing used, so about half of float32's bytes resident with one
(the file is about a quarter).

Dimension legend: N rows of the product (B × T), n output features computed, in input features.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from tformer.fast.swap import Switch

__all__ = ["Int8Linear", "Kernel", "KERNELS", "DECODE_ROWS", "kernel_for", "quantize_rows", "reference"]


class Kernel(NamedTuple):
    """Which product an :class:`Int8Linear` runs: ``name`` (``dynamic``, ``bf16``, ``reference``), the quantized
    engine that packs the weight (``fbgemm``; ``""`` when none) and whether x gets 7 bits instead of 8."""

    name: str
    backend: str = ""
    seven_bits: bool = False


REFERENCE = Kernel("reference")
# Up to this many rows a product is "decoding" (one row per sequence or beam); more is batched work (an encoder,
# a prefill, an evaluation).
DECODE_ROWS = 16
# machine class (tformer.machine) -> (decoding, batched work); see the module docstring for the measurements.
KERNELS: dict[str, tuple[Kernel, Kernel]] = {
    "avx512_bf16": (Kernel("dynamic", "fbgemm"), Kernel("dynamic", "onednn")),  # measured
    "amx": (Kernel("dynamic", "fbgemm"), Kernel("bf16")),  # from issue 33's figures
    "avx512": (Kernel("dynamic", "fbgemm", True), Kernel("dynamic", "fbgemm", True)),  # from issue 33's figures
    "avx2": (Kernel("dynamic", "fbgemm", True), Kernel("dynamic", "fbgemm", True)),  # from issue 33's figures
}
_SWITCH = Switch()  # off inside reference()
_TINY = torch.finfo(torch.float32).tiny


def reference():
    """Within this block every :class:`Int8Linear` runs the reference product ``F.linear(x, q · s, b)``."""
    return _SWITCH.off()


@functools.cache
def _has_dynamic(backend: str) -> bool:
    """PyTorch has the dynamic int8 kernel and ``backend``'s packing (they are deprecated in torch.ao)."""
    try:
        return backend in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, "linear_dynamic")
    except (AttributeError, RuntimeError):
        return False


def kernel_for(machine_class: str, rows: int, features: Iterable[str] = ()) -> Kernel:
    """The kernel for a product of ``rows`` rows on a machine of ``machine_class`` (:data:`KERNELS`): ``reference``
    where the class is not listed or PyTorch lacks the kernel; 7-bit x for ``dynamic`` on a CPU without VNNI
    (``features``, when given)."""
    choice = KERNELS.get(machine_class)
    if choice is None:
        return REFERENCE
    kernel = choice[0] if rows <= DECODE_ROWS else choice[1]
    if kernel.name == "dynamic":
        if not _has_dynamic(kernel.backend):
            return REFERENCE
        if features and not _has_vnni(tuple(features)):
            return kernel._replace(seven_bits=True)
    return kernel


@functools.cache
def _has_vnni(features: tuple[str, ...]) -> bool:
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(features))


_MACHINE: list = []


def _this_machine() -> tuple[str, tuple[str, ...]]:
    """This machine's class and features (:func:`tformer.machine.describe`), read once."""
    if not _MACHINE:
        from tformer.machine import describe

        m = describe()
        _MACHINE.append((m.machine_class, m.features))
    return _MACHINE[0]


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, s): int8 q (out, in) and float32 s (out,), ``q · s`` ≈ w with one scale per row (output channel)."""
    w = w.detach().float()
    s = (w.abs().amax(dim=1) / 127).clamp_min(_TINY)  # (out,); an all-zero row keeps a positive scale
    q = torch.round(w / s[:, None]).clamp_(-127, 127).to(torch.int8)  # (out, in)
    return q, s


class Int8Linear(nn.Module):
    """``y = x (q · s)ᵀ + b``, the int8 twin of an ``nn.Linear``; see the module docstring.

    ``weight`` is the dequantized matrix ``q · s`` (made on each access), for code that reads a layer's weight (the
    plain attention's :func:`tformer.nn.attention.project_rows`, plots). ``original``: the ``nn.Linear`` this layer
    replaced, when :func:`tformer.fast.quantize.quantize` kept it (not a submodule: not in the state dict)."""

    weight_int8: torch.Tensor  # (out, in) int8
    weight_scale: torch.Tensor  # (out,) float32
    bias: torch.Tensor | None  # (out,)
    original: nn.Module | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)
        self.__dict__["original"] = None

    @classmethod
    def from_linear(cls, linear: nn.Linear, keep: bool = False) -> Int8Linear:
        """The int8 twin of ``linear`` (in the same train/eval mode); ``keep``: remember ``linear`` as ``original``."""
        w = linear.weight.detach()
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, device=w.device)
        with torch.no_grad():
            q, s = quantize_rows(w)
            layer.weight_int8.copy_(q)
            layer.weight_scale.copy_(s)
            if linear.bias is not None:
                layer.bias = linear.bias.detach().float().clone()
        layer.__dict__["original"] = linear if keep else None
        return layer.train(linear.training)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized weight ``q · s`` (out, in), in the scales' dtype."""
        return self.weight_int8.to(self.weight_scale.dtype) * self.weight_scale[:, None]

    def to_linear(self) -> nn.Linear:
        """A new ``nn.Linear`` holding ``q · s`` and the bias (float32, or the scales' float dtype)."""
        w = self.weight.detach()
        linear = nn.Linear(self.in_features, self.out_features, self.bias is not None, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            linear.weight.copy_(w)
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear.train(self.training)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, int8"

    def __getstate__(self) -> dict:
        """A deep copy or a pickle leaves the packed copies out (remade on first use)."""
        state = dict(self.__dict__)
        state.pop("_copies", None)
        return state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Output features ``start:end`` only (W_Q, or W_K and W_V, of a fused projection): (..., end − start)."""
        kernel = self._kernel(x)
        if kernel.name == "reference":
            return self.reference_rows(x, start, end)
        rows = x.reshape(-1, self.in_features).float()  # (N, in)
        if kernel.name == "dynamic":
            packed = self._copy(kernel, start, end)
            if len(rows) == 1:  # one row: the kernel's own scale is already the row's
                y = torch.ops.quantized.linear_dynamic(rows, packed, kernel.seven_bits)  # (1, n)
            else:  # every row scaled to a largest |value| of 1, so that the kernel's one scale is each row's
                r = rows.abs().amax(dim=-1, keepdim=True).clamp_min(_TINY)  # (N, 1)
                y = torch.ops.quantized.linear_dynamic(rows / r, packed, kernel.seven_bits).mul_(r)  # (N, n)
        else:  # bf16: x in bfloat16 times the exact int8 values, the scales after
            q_t, s = self._copy(kernel, start, end)  # (in, n) bfloat16, (n,) float32
            y = torch.matmul(rows.to(torch.bfloat16), q_t).float().mul_(s)  # (N, n)
        b = _rows(self.bias, start, end)
        if b is not None:
            y = y.add_(b.float())
        return y.to(x.dtype).view(*x.shape[:-1], end - start)

    def reference_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """``x (q · s)[start:end]ᵀ + b[start:end]`` in x's dtype: the dequantized weight, ``F.linear``."""
        w = self.weight_int8[start:end].to(x.dtype) * self.weight_scale[start:end, None].to(x.dtype)  # (n, in)
        b = _rows(self.bias, start, end)
        return F.linear(x, w, None if b is None else b.to(x.dtype))

    def _kernel(self, x: torch.Tensor) -> Kernel:
        if (
            not _SWITCH.on
            or not x.is_cpu
            or x.requires_grad
            or x.shape[-1] != self.in_features
            or x.dtype not in (torch.float32, torch.bfloat16, torch.float16)
            or torch.compiler.is_compiling()
        ):
            return REFERENCE
        machine_class, features = _this_machine()
        return kernel_for(machine_class, x.numel() // self.in_features, features)

    def _copy(self, kernel: Kernel, start: int, end: int) -> Any:
        """The copy of rows ``start:end`` that ``kernel`` multiplies by, made once; all are remade when a buffer
        changed (its version, storage or dtype; a buffer made under ``torch.inference_mode`` has no version)."""
        state = tuple(
            (-1 if t.is_inference() else t._version, t.data_ptr(), t.dtype)
            for t in (self.weight_int8, self.weight_scale)
        )
        copies: tuple[tuple, dict[tuple, Any]] | None = self.__dict__.get("_copies")
        if copies is None or copies[0] != state:
            copies = self.__dict__["_copies"] = (state, {})
        key = (kernel.name, kernel.backend, start, end)
        found = copies[1].get(key)
        if found is None:
            with torch.no_grad():
                found = copies[1][key] = self._make_copy(kernel, start, end)
        return found

    def _make_copy(self, kernel: Kernel, start: int, end: int) -> Any:
        q, s = self.weight_int8[start:end], self.weight_scale[start:end].float()  # (n, in), (n,)
        if kernel.name == "bf16":
            return q.t().to(torch.bfloat16).contiguous(), s  # (in, n)
        zero = torch.zeros(end - start, dtype=torch.long)
        with warnings.catch_warnings(), _engine(kernel.backend):  # torch.ao's quantized tensors are deprecated
            warnings.simplefilter("ignore")
            qweight = torch._make_per_channel_quantized_tensor(q.contiguous(), s.double(), zero, 0)
            return torch.ops.quantized.linear_prepack(qweight, None)  # the bias is added after (rows rescaled)


@contextlib.contextmanager
def _engine(backend: str) -> Iterator[None]:
    """PyTorch's quantized engine set to ``backend`` while a weight is packed (a packed weight keeps its own)."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = backend
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def _rows(t: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    return t if t is None or (start == 0 and end == t.shape[0]) else t[start:end]
