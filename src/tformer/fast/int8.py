"""``Int8Linear``: a linear layer whose weight is int8 with one scale per output channel, and the kernels that
multiply by it on each machine class (:data:`KERNELS`). :mod:`tformer.fast.quantize` swaps it in.

What it holds. A weight W (out, in) becomes int8 values q and one float32 scale per output channel (row),
``s = max |W[o, :]| / 127`` and ``q = round(W / s)`` in −127…127 (symmetric, no zero point): the dequantized weight
``q · s`` is within ``s / 2`` of W everywhere. The bias stays float. All three are buffers (the state dict holds
``weight_int8``, ``weight_scale``, ``bias``): a quantized model is for inference.

The kernels, each computing ``x (q · s)ᵀ + b``:

* ``dynamic``: PyTorch's dynamic int8 GEMM (``torch.ops.quantized.linear_dynamic``, under ``torch.ao``'s
  ``quantize_dynamic``), the weight packed once per layer for the backend named (``fbgemm`` or ``onednn``). It
  quantizes x to 8 bits with one scale for the whole input; here each row of x is first divided by its largest |value|
  (and the output row multiplied back), so that in effect every row (token) gets its own scale: one token with large
  activations no longer costs the others their precision (MiniLM's embeddings, 256 Multi30k sentences: cosine to
  float32 at least 0.9895 with one scale for the batch, 0.9961 with a scale per row). With ``seven_bits``, x gets 7
  bits (``reduce_range``), twice the rounding step. The u8 × s8 products are summed in 32 bits with VNNI; without it
  (classes avx2, avx512) fbgemm and oneDNN add pairs of them in 16 bits first (``vpmaddubsw``, saturating): 255 × 127
  × 2 overflows, 127 × 127 × 2 does not. 8-bit x is wrong there (issue 44: outputs up to 1.6 off by 0.43), so such a
  CPU gets 7 bits, as does one whose 8-bit product :func:`_saturates` finds overflowing (VNNI hidden,
  ``FBGEMM_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``);
* ``bf16``: x in bfloat16 times the int8 values in bfloat16 (exact), the scales applied after: a bfloat16 GEMM on a
  bfloat16 copy of q (two bytes per weight);
* ``reference``: ``F.linear(x, q · s, b)`` in x's dtype, the exact product of the dequantized weight and the parity
  reference. It runs on a layer whose ``exact`` is set (:func:`tformer.fast.use_reference`), on GPUs, when x needs a gradient,
  under ``torch.compile``, in float64, and on a machine class :data:`KERNELS` does not list.

Measured on this project's avx512_bf16 class (AMD EPYC, family 26 = Zen 5, 2 cores shared with other work, torch
2.13), best of 7; the weights of 16 (4096, 1024) products streamed from memory::

    rows   float32 F.linear   dynamic fbgemm   dynamic onednn   int8 × bf16 x            dequantize, bf16 matmul
                                                                (_weight_int8pack_mm)
    1          14.3 ms          1.48 ms          1.64 ms            4.53 ms                    9.2 ms
    16         23.1 ms          2.49 ms          2.64 ms            7.46 ms                    7.6 ms
    512       322   ms         45.7  ms         37.6  ms          205    ms                   79   ms

``_weight_int8pack_mm``, float32 x: 42 / 708 ms at 1 / 16 rows; ``torch._int_mm``: 7.4 / 4.3 / 54 ms. End to end
(``benchmarks.quantize --kernels all``): a 6 × 384 GPT decoded at batch 1 2.32× float32 with fbgemm, 1.50× with oneDNN,
0.86× with bf16; a MiniLM-shaped encoder (32 × 128 tokens) ran 2.65× / 3.39× / 2.80×. So decoding runs ``dynamic`` with
fbgemm's packing and, by default, batched work oneDNN's. On the amx class issue 33 measured fbgemm's dynamic int8 1.73×
float32 at batch 1, ``_weight_int8pack_mm`` 8–9× slower, bfloat16 products 6.7× faster (AMX tiles): decoding runs
``dynamic`` there, batched work ``bf16``; the avx2 and avx512 classes run ``dynamic``, 7-bit x (also from that issue).

The packed copy is made on a layer's first product and kept (left out of a deep copy or a pickle, remade when a
buffer changes: ``load_state_dict``, ``.to()``). A layer holds its int8 values in one of two ways:

* by default, the ``weight_int8`` buffer and, beside it, one packed copy per kernel used (a GPT that reads a long
  prompt and then decodes packs for fbgemm and for oneDNN): two or three bytes per weight resident;
* ``packed_only`` (``quantize(keep_float=False)``, the CLI's ``--precision int8``, an int8 directory loaded): one
  packing, fbgemm's on every class listed, for products of any number of rows, and the ``weight_int8`` buffer let
  go once it is made: one byte per weight. (PyTorch's oneDNN packing keeps a copy of the int8 tensor beside its own
  layout, 2.0 bytes per weight, so batched work runs fbgemm here too: about 20% slower than oneDNN at 512 rows.)
  The int8 values come back from the packing exactly (``linear_unpack``) whenever something reads them:
  ``weight_int8``, ``weight``, the state dict (a saved file is byte for byte the one written before the first
  product), the reference product, ``.to()`` to another device, a deep copy or a pickle, ``load_state_dict``. A
  fused projection's rows ``start:end`` (cross-attention's W_Q apart from W_K, W_V) are packed in pieces split
  there. A head tied to an int8 embedding (:mod:`tformer.fast.int8_embedding`) keeps that buffer (the embedding
  looks up in it) and packs its own copy.

Dimension legend: N rows of the product (B × T), n output features computed, in input features.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Int8Linear", "Kernel", "KERNELS", "DECODE_ROWS", "kernel_for", "quantize_rows"]


class Kernel(NamedTuple):
    """Which product an :class:`Int8Linear` runs: ``name`` (``dynamic``, ``bf16``, ``reference``), the quantized
    engine that packs the weight (``fbgemm``; ``""`` when none) and whether x gets 7 bits instead of 8."""

    name: str
    backend: str = ""
    seven_bits: bool = False


REFERENCE = Kernel("reference")
DECODE_ROWS = 16  # up to this many rows a product is "decoding" (a row per sequence or beam); more is batched work
# machine class (tformer.machine) -> (decoding, batched work); see the module docstring for the measurements.
KERNELS: dict[str, tuple[Kernel, Kernel]] = {
    "avx512_bf16": (Kernel("dynamic", "fbgemm"), Kernel("dynamic", "onednn")),  # measured
    "amx": (Kernel("dynamic", "fbgemm"), Kernel("bf16")),  # from issue 33's figures
    "avx512": (Kernel("dynamic", "fbgemm", True), Kernel("dynamic", "fbgemm", True)),  # from issue 33's figures
    "avx2": (Kernel("dynamic", "fbgemm", True), Kernel("dynamic", "fbgemm", True)),  # from issue 33's figures
}
_TINY = torch.finfo(torch.float32).tiny


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
        if features and not {"avx512_vnni", "avx_vnni", "amx_int8"} & set(features):
            return kernel._replace(seven_bits=True)
    return kernel


@functools.cache
def _saturates(backend: str) -> bool:
    """``backend``'s 8-bit dynamic product overflows its 16-bit sums on this CPU (the module docstring), tried once:
    x of ones (255 once quantized) times 64 weights of 127 (scale 1/127) is 64, or about 32 where pairs saturate."""
    packed = _pack(backend, torch.full((1, 64), 127, dtype=torch.int8), torch.full((1,), 1 / 127))
    with torch.no_grad():
        return abs(torch.ops.quantized.linear_dynamic(torch.ones(1, 64), packed, False).item() - 64) > 0.5


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
    replaced, when :func:`tformer.fast.quantize.quantize` kept it (not a submodule: not in the state dict).
    ``packed_only``: hold the int8 values only in one packed copy once the first product has made it (the module
    docstring); ``weight_int8`` then reads them back from it. ``shares_values``: the ``weight_int8`` buffer is an
    int8 embedding's table (a tied head), kept whatever the mode. ``exact``: run the reference product
    ``F.linear(x, q · s, b)`` (the dequantized weight) whatever the machine (:func:`tformer.fast.use_reference`)."""

    weight_scale: torch.Tensor  # (out,) float32
    bias: torch.Tensor | None  # (out,)
    original: nn.Module | None
    packed_only: bool
    shares_values: bool
    exact: bool

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, packed_only: bool = False
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        # (not register_buffer: the weight_int8 property stands in the way of its check)
        self._buffers["weight_int8"] = torch.zeros(out_features, in_features, dtype=torch.int8, device=device)
        self.register_buffer("weight_scale", torch.ones(out_features, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)
        self.__dict__.update(original=None, packed_only=packed_only, shares_values=False, exact=False, stale=False)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        keep: bool = False,
        packed_only: bool = False,
        values: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> Int8Linear:
        """The int8 twin of ``linear`` (in the same train/eval mode); ``keep``: remember ``linear`` as ``original``.
        ``values``: the (q, s) to hold instead of quantizing the weight again, shared, not copied (a head tied to an
        int8 embedding holds the embedding's table)."""
        w = linear.weight.detach()
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, w.device, packed_only)
        with torch.no_grad():
            if values is None:
                q, s = quantize_rows(w)
                layer.weight_int8.copy_(q)
                layer.weight_scale.copy_(s)
            else:
                layer.share_values(*values)
            if linear.bias is not None:
                layer.bias = linear.bias.detach().float().clone()
        layer.__dict__["original"] = linear if keep else None
        return layer.train(linear.training)

    def share_values(self, q: torch.Tensor, s: torch.Tensor) -> None:
        """Hold ``q`` (out, in) and ``s`` (out,) themselves as ``weight_int8`` and ``weight_scale``: an int8
        embedding's table, which a head tied to it reads (saved once, held once)."""
        self._buffers["weight_int8"], self._buffers["weight_scale"] = q, s
        self.__dict__.pop("_copies", None)
        self.__dict__["shares_values"] = True

    @property
    def weight_int8(self) -> torch.Tensor:
        """The int8 values q (out, in): the buffer, or a copy read back from the packing of a packed-only layer."""
        held = self._buffers.get("weight_int8")
        return held if held is not None else self._unpacked()

    @weight_int8.setter
    def weight_int8(self, value: torch.Tensor) -> None:
        self.__dict__.pop("_copies", None)
        self._buffers["weight_int8"] = value

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
        mode = ", packed only" if self.packed_only else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, int8{mode}"

    def __getstate__(self) -> dict:
        """A deep copy or a pickle leaves the packed copies out (remade on first use) and holds the int8 values in
        their buffer (read back from the packing of a packed-only layer)."""
        state = dict(self.__dict__)
        state.pop("_copies", None)
        if self._buffers.get("weight_int8") is None:
            state["_buffers"] = {**self._buffers, "weight_int8": self._unpacked()}  # in its place, first
        return state

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        """The state dict holds ``weight_int8`` as before the packing (read back from it), then the other buffers."""
        if self._buffers.get("weight_int8") is None:
            destination[prefix + "weight_int8"] = self._unpacked()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Loading fills the ``weight_int8`` buffer (back for the purpose); the next product packs it again. The
        float layer kept is no longer what these values are (``stale``: :func:`~tformer.fast.quantize.dequantize`
        gives q · s, unless that layer's weight is one the model holds, which the load filled: a tied head's)."""
        self._restore()
        self.__dict__["stale"] = True
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _apply(self, fn, recurse: bool = True):
        """``.to()``, ``.half()``, ...: a packed-only layer's int8 values go back into their buffer first when
        ``fn`` would change an int8 tensor (another device); a cast of the float buffers leaves the packing be."""
        probe = torch.empty(0, dtype=torch.int8)
        if self._buffers.get("weight_int8") is None and fn(probe) is not probe:
            self._restore()
        if self.original is not None:  # the float layer kept goes along (dequantize gives it in the new dtype)
            self.original._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def _restore(self) -> None:
        """The int8 values back in the ``weight_int8`` buffer, the packed copies dropped."""
        if self._buffers.get("weight_int8") is None and "_copies" in self.__dict__:
            self._buffers["weight_int8"] = self._unpacked()
        self.__dict__.pop("_copies", None)

    def _unpacked(self) -> torch.Tensor:
        """q (out, in), read back from a packed-only layer's pieces (``linear_unpack``: the values it was given)."""
        pieces = self.__dict__["_copies"][1]["pieces"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.cat([torch.ops.quantized.linear_unpack(p)[0].int_repr() for _, _, p in pieces])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Output features ``start:end`` only (W_Q, or W_K and W_V, of a fused projection): (..., end − start)."""
        ready = self._one_row(x, start, end)
        if ready is not None:  # decoding's product: one float32 row, a packed-only layer (see _one_row)
            packed, b, seven_bits = ready
            y = torch.ops.quantized.linear_dynamic(x, packed, seven_bits)  # (..., n): the kernel keeps x's leading dims
            return y if b is None else y.add_(b)
        kernel = self._kernel(x)
        if kernel.name == "reference":
            return self.reference_rows(x, start, end)
        rows = x.reshape(-1, self.in_features).float()  # (N, in)
        if kernel.name == "dynamic":
            if len(rows) == 1:  # one row: the kernel's own scale is already the row's
                y = self._dynamic(rows, kernel, start, end)  # (1, n)
            else:  # every row scaled to a largest |value| of 1, so that the kernel's one scale is each row's
                r = rows.abs().amax(dim=-1, keepdim=True).clamp_min(_TINY)  # (N, 1)
                y = self._dynamic(rows / r, kernel, start, end).mul_(r)  # (N, n)
        else:  # bf16: x in bfloat16 times the exact int8 values, the scales after
            q_t, s = self._copy(kernel, start, end)  # (in, n) bfloat16, (n,) float32
            y = torch.matmul(rows.to(torch.bfloat16), q_t).float().mul_(s)  # (N, n)
        b = _rows(self.bias, start, end)
        if b is not None:
            y = y.add_(b.float())
        return y.to(x.dtype).view(*x.shape[:-1], end - start)

    def _one_row(self, x: torch.Tensor, start: int, end: int) -> tuple | None:
        """(packed, bias, seven_bits) for one float32 row ``x`` times rows ``start:end`` of a packed-only layer held in
        one piece (decoding's product, a hundred times a token), worked out once and kept with the packed copies
        with the scale and bias buffers it came from (a new buffer, or scales changed in place, make it again);
        None for any other product: the general path."""
        if (
            x.dtype is not torch.float32
            or x.numel() != self.in_features
            or not self.packed_only
            or self._buffers.get("weight_int8") is not None  # not packed yet, or a tied head's shared table
            or x.requires_grad
            or self.exact
            or not x.is_cpu
            or torch.compiler.is_compiling()
        ):
            return None
        copies, scale = self.__dict__.get("_copies"), self.weight_scale
        version = -1 if scale.is_inference() else scale._version
        found = None if copies is None else copies[1].get(("one row", start, end))
        if found is not None and found[0] is scale and found[1] == version and found[2] is self._buffers["bias"]:
            return found[3]
        kernel = self._kernel(x)
        if kernel.name != "dynamic":
            return None
        pieces = self._pieces(kernel, start, end)  # (re)makes the packing when the buffers changed
        if len(pieces) != 1:
            return None
        b = _rows(self.bias, start, end)
        ready = (pieces[0][2], None if b is None else b.float(), kernel.seven_bits)
        self.__dict__["_copies"][1][("one row", start, end)] = (scale, version, self._buffers["bias"], ready)
        return ready

    def _dynamic(self, rows: torch.Tensor, kernel: Kernel, start: int, end: int) -> torch.Tensor:
        """``rows (q · s)[start:end]ᵀ`` by the dynamic kernel: (N, in) → (N, n)."""
        if not self.packed_only:
            return torch.ops.quantized.linear_dynamic(rows, self._copy(kernel, start, end), kernel.seven_bits)
        products = [
            torch.ops.quantized.linear_dynamic(rows, packed, kernel.seven_bits)
            for _, _, packed in self._pieces(kernel, start, end)
        ]
        return products[0] if len(products) == 1 else torch.cat(products, dim=-1)

    def reference_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """``x (q · s)[start:end]ᵀ + b[start:end]`` in x's dtype: the dequantized weight, ``F.linear``."""
        w = self.weight_int8[start:end].to(x.dtype) * self.weight_scale[start:end, None].to(x.dtype)  # (n, in)
        b = _rows(self.bias, start, end)
        return F.linear(x, w, None if b is None else b.to(x.dtype))

    def _kernel(self, x: torch.Tensor) -> Kernel:
        if (
            self.exact
            or not x.is_cpu
            or x.requires_grad
            or x.shape[-1] != self.in_features
            or x.dtype not in (torch.float32, torch.bfloat16, torch.float16)
            or torch.compiler.is_compiling()
        ):
            return REFERENCE
        machine_class, features = _this_machine()
        kernel = kernel_for(machine_class, 1 if self.packed_only else x.numel() // self.in_features, features)
        if kernel.name == "dynamic" and not kernel.seven_bits and _saturates(kernel.backend):
            kernel = kernel._replace(seven_bits=True)  # VNNI listed, but the kernel runs without it
        return kernel if kernel.name == "dynamic" or not self.packed_only else REFERENCE

    def _state(self) -> tuple:
        """What the packed copies were made from: each buffer's version, storage and dtype (a buffer made under
        ``torch.inference_mode`` has no version); ``None`` for a packed-only layer's let-go ``weight_int8``."""
        return tuple(
            None if t is None else (-1 if t.is_inference() else t._version, t.data_ptr(), t.dtype)
            for t in (self._buffers.get("weight_int8"), self.weight_scale)
        )

    def _copies_now(self) -> dict[Any, Any]:
        """The packed copies, all remade when a buffer changed (see :meth:`_state`)."""
        state = self._state()
        copies: tuple[tuple, dict[Any, Any]] | None = self.__dict__.get("_copies")
        if copies is None or copies[0] != state:
            self._restore()  # a packed-only layer's values back first: its scales changed, not its int8 values
            copies = self.__dict__["_copies"] = (self._state(), {})
        return copies[1]

    def _copy(self, kernel: Kernel, start: int, end: int) -> Any:
        """The copy of rows ``start:end`` that ``kernel`` multiplies by, made once."""
        copies = self._copies_now()
        key = (kernel.name, kernel.backend, start, end)
        found = copies.get(key)
        if found is None:
            with torch.no_grad():
                found = copies[key] = self._make_copy(kernel, self.weight_int8, start, end)
        return found

    def _pieces(self, kernel: Kernel, start: int, end: int) -> list[tuple[int, int, Any]]:
        """A packed-only layer's packing of rows ``start:end``: the pieces (start, end, packed) that cover them. The
        pieces split the rows at every start and end asked for so far (made again, from the values read back, when
        a new one falls inside a piece); the ``weight_int8`` buffer is let go once they exist."""
        copies = self._copies_now()
        pieces: list[tuple[int, int, Any]] | None = copies.get("pieces")
        cuts = {0, self.out_features} if pieces is None else {a for a, _, _ in pieces} | {self.out_features}
        if pieces is None or not {start, end} <= cuts:
            with torch.no_grad():
                q = self.weight_int8  # the buffer, or the values read back from the pieces
                bounds = sorted(cuts | {start, end})
                pieces = [(a, b, self._make_copy(kernel, q, a, b)) for a, b in zip(bounds, bounds[1:])]
            copies["pieces"] = pieces
            if not self.shares_values:
                self._buffers["weight_int8"] = None  # held once, in the packing
                self.__dict__["_copies"] = (self._state(), copies)
        return [p for p in pieces if start <= p[0] and p[1] <= end]

    def _make_copy(self, kernel: Kernel, q: torch.Tensor, start: int, end: int) -> Any:
        q, s = q[start:end], self.weight_scale[start:end].float()  # (n, in), (n,)
        if kernel.name == "bf16":
            return q.t().to(torch.bfloat16).contiguous(), s  # (in, n)
        return _pack(kernel.backend, q, s)


def _pack(backend: str, q: torch.Tensor, s: torch.Tensor) -> Any:
    """``backend``'s packing of int8 ``q`` (n, in) with scales ``s`` (n,), no bias (added after: rows rescaled),
    PyTorch's quantized engine set to ``backend`` meanwhile (a packed weight keeps its own)."""
    zero, previous = torch.zeros(len(q), dtype=torch.long), torch.backends.quantized.engine
    torch.backends.quantized.engine = backend
    try:
        with warnings.catch_warnings():  # torch.ao's quantized tensors are deprecated
            warnings.simplefilter("ignore")
            qweight = torch._make_per_channel_quantized_tensor(q.contiguous(), s.double(), zero, 0)
            return torch.ops.quantized.linear_prepack(qweight, None)
    finally:
        torch.backends.quantized.engine = previous


def _rows(t: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    return t if t is None or (start == 0 and end == t.shape[0]) else t[start:end]
