"""``Linear``: ``nn.Linear`` whose products inside a decoding step read the weight in the layout they want, and
:func:`swap_linear`, which puts it in place of every ``nn.Linear`` of a plain model.

A decoding step multiplies a handful of rows (one per sequence, or per beam) by every weight matrix
of the decoder. For so few rows the layout of the weight decides the speed, so inside a decoding step on the CPU
this layer reads its weight in the layout the product wants:

* **one row** (batch-1 greedy or sampled decoding): the product streams the whole weight from memory
  for one row, and the BLAS runs it on one core (its matrix-vector kernel does not split the work). With
  more than one thread, and at least 256 output features, the product is split between the threads, one
  batch entry of a ``torch.bmm``/``baddbmm`` each. A tall matrix (at least as many inputs as outputs per
  thread, e.g. 1536 → 384) is split by outputs: each thread takes its own rows of W as they are stored
  (a view, no copy) and takes their dot products with the row. A wide one (384 → 1536, 384 → 8000) is
  split by inputs: each thread takes its share of the row and the matching rows of Wᵀ (in, out), for every
  output, and the threads' partial sums are added. 2 threads, weights read from memory,
  µs per product (split by inputs / by outputs / one block of columns per thread): 384 → 1152 98 / 125 /
  117, 384 → 1536 110 / 151 / 124, 1536 → 384 164 / 108 / 201, 384 → 384 57 / 52 / 61. GPT decoding
  (6 × 384, vocab 8000) ran 1.10× faster than with the column blocks, which had taken a step's products
  from 3.7 to 2.6 ms, and Marian-sized greedy decoding 1.07× (medians of 20 and 16 alternating rounds,
  ``benchmarks/decode.py`` models, in one process). One thread, or a smaller matrix: Wᵀ as a contiguous
  (in, out) matrix, which the BLAS streams 1.4–1.9× faster than PyTorch's (out, in) layout
  (``python -m benchmarks.decode_floor``).
* **2 to 256 rows** (beam search, batched decoding), for matrices of at least 256 × 512: a copy packed
  in oneDNN's blocked layout for about that many rows (``torch.ops.mkldnn._reorder_linear_weight``, the
  packing PyTorch's own compiler uses for frozen CPU inference), multiplied by
  ``torch.ops.mkldnn._linear_pointwise``. ``F.linear`` goes to a GEMM that re-packs the weight on every
  call, which at a few dozen rows costs as much as the product itself: 32 rows × (256 → 8000) took
  0.95 ms packed against 1.5 ms. Smaller matrices, and every matrix without oneDNN (a PyTorch built
  without it), use Wᵀ up to 8 rows.

**Whose these layouts are.** Not the layer's: the layer holds its ``weight`` and ``bias`` Parameters and nothing
else, and its forward changes nothing. The layouts a decoding call reads are made on first use and kept in a
:class:`DecodingWeights`, which the decoder of that call owns (:mod:`tformer.generation.loop`) and which goes
with it, unless the caller keeps one over several calls (``decoding=``: ``Translator.translate`` for all its
batches, a server for its life; only while the weights do not change); a step runs inside :func:`decoding_step`
with it (a scoped context, per thread, as ``torch.no_grad``).
A weight cannot change in the middle of a decoding call, so no copy can go stale, and there is nothing to drop
when an optimizer steps. Outside a decoding step (training, a prompt's or an encoder's product, one forward,
GPUs, ``torch.compile``) the layer is ``F.linear`` itself.

**What costs memory.** Wᵀ is free when the weight is stored column-major (its transpose contiguous, the same
values): :func:`inference_layout` stores every weight whose one-row product reads Wᵀ that way, once, when the model
is made for inference (``tformer.fast.speed_up(model, inference=True)``, which :func:`tformer.load` applies), so a
model decodes in about its own size (issue 40). A weight in PyTorch's own (out, in) layout (a model the
:class:`~tformer.training.Trainer` trains, which keeps it so that training's numbers are ``F.linear``'s to the
bit) gets a transposed copy for the length of the decoding call. Also copies: a packing for 2 to 256 rows (made
inside a decoding step only: the steps of beams and batches, each the same product again), up to three per
weight; a padded split where the outputs do not divide evenly between the threads. The result is the same product
(the summation order inside the kernels differs, ~1e-7 relative).

Dimension legend: P threads (parts of a split), C outputs per thread, n outputs of the rows computed, in inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import NamedTuple, overload

import torch
import torch.nn.functional as F
from torch import nn

from tformer.fast.swap import replace_modules

__all__ = [
    "Linear",
    "DecodingWeights",
    "decoding_step",
    "swap_linear",
    "inference_layout",
    "training_layout",
    "to_plain_linear",
    "FEW_ROWS",
    "SPLIT_MIN_COLUMNS",
    "PACKED_ROWS",
    "PACKED_MIN_WEIGHTS",
    "MAX_PACKINGS",
]

# Up to this many rows Wᵀ is used where the packed copy is not.
# ``python -m benchmarks.decode_floor``: Wᵀ wins at batch 1 and for a beam of 5, and F.linear's
# matrix-matrix kernel catches up at a few dozen rows.
FEW_ROWS = 8
# One row is split between the threads only in shares of at least this many outputs, so that the smallest
# matrices of the benchmark models (256 outputs) still split in two. 2 threads, cold weights, split vs Wᵀ
# whole, two runs: 256 → 256 58–61 vs 59–63 µs (a tie: smaller matrices are not split),
# 256 → 8000 382–466 vs 476–559 µs, 384 → 8000 620–637 vs 706–739 µs, 1536 → 384 152–183 vs 305–319 µs.
SPLIT_MIN_COLUMNS = 128
# Rows for which the oneDNN-packed copy is used. Measured on 2 AVX2 cores: faster than both other
# layouts from 2 rows (beam 5: 0.23 vs 0.61 ms for 256 → 8000) to 64; from 96 to 256 rows one-off timings
# are mixed (±15% by matrix), and beam 5 at batch 32 (160 rows) decoded 1.00–1.09× faster than with a 64-row
# bound in four in-process A/Bs.
PACKED_ROWS = (2, 256)
# Packings kept per weight (one per row bucket 2, 4, ..., 256 and slice), the oldest dropped first: a
# bound on the memory they take, while a few batch sizes in turn do not re-pack every time.
MAX_PACKINGS = 3
# A oneDNN call costs ~20 µs more than a BLAS one; below this many weights (256 × 512) that is not won back.
PACKED_MIN_WEIGHTS = 1 << 17


def _has_onednn() -> bool:
    try:
        return (
            torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        )
    except (AttributeError, RuntimeError):
        return False


_ONEDNN = _has_onednn()


class _Split(NamedTuple):
    """A one-row product split between ``parts`` threads, ready for ``torch.bmm``/``baddbmm``."""

    by_inputs: bool  # True: thread p multiplies its share of x by all outputs, the partial sums added after
    blocks: (
        torch.Tensor
    )  # the right operand: (P, in, C) rows of W, transposed (by outputs); (P, in/P, n) of Wᵀ (by inputs)
    bias: torch.Tensor | None  # (P, 1, C) by outputs; (P, 1, n) by inputs: the bias for thread 0, zeros for the others
    padded: bool  # by outputs: the last block was padded with zero rows (n not a multiple of P)


class _Layouts:
    """The layouts of one layer's weight (and bias) that a decoding call has read."""

    __slots__ = ("weight", "bias", "transposed", "splits", "packed")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias  # detached: the layouts are for products without gradients
        self.transposed: torch.Tensor | None = None  # (in, out): a view of a column-major weight, else a copy
        self.splits: dict[tuple, _Split] = {}  # (start, end, parts) -> the split of rows start:end
        self.packed: dict[tuple, torch.Tensor] = {}  # (start, end, row hint) -> oneDNN-packed rows start:end


class DecodingWeights:
    """The weight layouts one decoding call reads (see the module docstring), made on first use and kept while this
    object lives: a decoder makes one and drops it with the call. It is for one model whose weights do not change
    while it lives (a decoding call, or a server that only decodes)."""

    def __init__(self) -> None:
        self._layouts: dict[Linear, _Layouts] = {}

    def product(self, layer: Linear, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """``x W[start:end]ᵀ + b[start:end]`` of ``layer`` in the layout its rows want (x on the CPU, ``in`` wide)."""
        found = self._layouts.get(layer)
        if found is None:
            w, b = layer._parameters["weight"], layer._parameters["bias"]  # not layer.weight: __getattr__ costs a µs
            assert w is not None  # nn.Linear always has a weight
            found = self._layouts[layer] = _Layouts(w.detach(), None if b is None else b.detach())
        rows = x.numel() // layer.in_features
        if rows == 1:  # a decoding step at batch 1: the Python here runs once per weight matrix per token
            parts = min(torch.get_num_threads(), (end - start) // SPLIT_MIN_COLUMNS)
            if parts > 1 and x.dim() <= 3:  # split between the threads (see _split), one batch entry of bmm each
                split = found.splits.get((start, end, parts)) or _split(found, start, end, parts)
                row = (
                    x.reshape(parts, 1, -1) if split.by_inputs else x.expand(parts, 1, -1)
                )  # (P, 1, in/P) or (P, 1, in)
                y = torch.bmm(row, split.blocks) if split.bias is None else torch.baddbmm(split.bias, row, split.blocks)
                if split.by_inputs:  # the threads' partial sums of every output, added: (P, 1, n) -> (1, 1, n)
                    y = y.sum(0, keepdim=True)
                    return y if x.dim() == 3 else y.view(*x.shape[:-1], end - start)  # (1, 1, n) is already x's shape
                if split.padded:
                    y = y.view(-1)[: end - start]  # the last block's zero padding dropped
                return y.view(*x.shape[:-1], end - start)  # (..., n), the leading dims of x
            return _project(x, _transposed(found, start, end), _rows(found.bias, start, end))
        if (
            _ONEDNN
            and PACKED_ROWS[0] <= rows <= PACKED_ROWS[1]
            and (end - start) * layer.in_features >= PACKED_MIN_WEIGHTS
            and x.dtype == found.weight.dtype == torch.float32
        ):
            packed = _packed(found, start, end, rows)
            return torch.ops.mkldnn._linear_pointwise(x, packed, _rows(found.bias, start, end), "none", [], "")
        if rows <= FEW_ROWS:
            return _project(x, _transposed(found, start, end), _rows(found.bias, start, end))
        return F.linear(x, _rows(found.weight, start, end), _rows(found.bias, start, end))


_STEP: ContextVar[DecodingWeights | None] = ContextVar("tformer_decoding_step", default=None)


@contextlib.contextmanager
def decoding_step(weights: DecodingWeights) -> Iterator[None]:
    """Within this block the products are a decoding step's (:func:`tformer.generation.loop.decode_one` says so) and
    read their layouts from ``weights``: the same products again at every step, so 2 to 256 rows get the
    oneDNN-packed copy. Outside, every product is ``F.linear``'s: a prompt, an encoder, one forward would pay for a
    copy of the weight once. Scoped to the block and to the thread (a ``ContextVar``), as ``torch.no_grad`` is."""
    token = _STEP.set(weights)
    try:
        yield
    finally:
        _STEP.reset(token)


class Linear(nn.Linear):
    """``y = x Wᵀ + b``, exactly ``nn.Linear``; inside a decoding step, in the layouts of the step's
    :class:`DecodingWeights` (see the module docstring)."""

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fast"  # (nn.Linear's repr otherwise: print(model) says which runs)

    @classmethod
    def from_linear(cls, plain: nn.Linear) -> Linear:
        """A :class:`Linear` holding the very ``weight`` and ``bias`` Parameters of ``plain`` (tied weights stay
        tied, an optimizer that holds them still updates them), in the same train/eval mode."""
        fast = cls.__new__(cls)
        nn.Module.__init__(fast)  # no new weight: nn.Linear.__init__ would allocate and initialize one
        fast.in_features, fast.out_features = plain.in_features, plain.out_features
        fast.register_parameter("weight", plain._parameters["weight"])  # the Parameter objects themselves
        fast.register_parameter("bias", plain._parameters["bias"])
        return fast.train(plain.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Only output features ``start:end`` (e.g. W_Q out of a fused W_Q/W_K/W_V): ``x W[start:end]ᵀ + b[start:end]``
        (the fast version of :func:`tformer.nn.attention.project_rows`)."""
        if not torch.compiler.is_compiling() and not torch.is_grad_enabled():  # a compiled graph, or training: F.linear
            weights = _STEP.get()
            if weights is not None and x.is_cpu and x.shape[-1] == self.in_features:
                return weights.product(self, x, start, end)
        return F.linear(x, _rows(self.weight, start, end), _rows(self.bias, start, end))


def _transposed(found: _Layouts, start: int, end: int) -> torch.Tensor:
    if found.transposed is None:  # a column-major weight's transpose is a view; otherwise a copy
        found.transposed = found.weight.t().contiguous()  # (in, out)
    wt = found.transposed
    return wt if start == 0 and end == found.weight.shape[0] else wt[:, start:end]


def _split(found: _Layouts, start: int, end: int, parts: int) -> _Split:
    """Make (and keep, :data:`MAX_PACKINGS` at most) the split of rows ``start:end`` between ``parts`` threads:
    views of the weight and bias (by outputs, padded copies where n is not a multiple of ``parts``) or of Wᵀ (by
    inputs)."""
    n, d = end - start, found.weight.shape[1]
    b = None if found.bias is None else _rows(found.bias, start, end)
    if d * parts < n and d % parts == 0:  # wide: by inputs
        blocks = _transposed(found, start, end).view(parts, d // parts, n)  # (P, in/P, n)
        bias = None if b is None else torch.cat([b[None, None], b.new_zeros(parts - 1, 1, n)])  # (P, 1, n)
        split = _Split(True, blocks, bias, False)
    else:  # tall: by outputs
        columns = -(-n // parts)
        pad = parts * columns - n
        w = _rows(found.weight, start, end)  # (n, in)
        if pad:
            w, b = F.pad(w, (0, 0, 0, pad)), None if b is None else F.pad(b, (0, pad))  # (P * C, in)
        if w.t().is_contiguous() and not w.is_contiguous():  # column-major: views of Wᵀ's columns
            blocks = w.t().reshape(d, parts, columns).permute(1, 0, 2)  # (in, P, C) -> (P, in, C)
        else:
            blocks = w.reshape(parts, columns, d).transpose(1, 2)  # (P, in, C): views of W's rows
        split = _Split(False, blocks, None if b is None else b.view(parts, 1, columns), pad > 0)
    if len(found.splits) >= MAX_PACKINGS:
        del found.splits[next(iter(found.splits))]  # the oldest
    found.splits[(start, end, parts)] = split
    return split


def _packed(found: _Layouts, start: int, end: int, rows: int) -> torch.Tensor:
    """The weight rows ``start:end`` packed for about ``rows`` rows (one packing per power of two of rows)."""
    hint = 1 << max(rows - 1, 1).bit_length()
    key = (start, end, hint)
    packed = found.packed.get(key)
    if packed is None:
        if len(found.packed) >= MAX_PACKINGS:
            del found.packed[next(iter(found.packed))]  # the oldest
        w = found.weight[start:end].contiguous()
        found.packed[key] = packed = torch.ops.mkldnn._reorder_linear_weight(w, hint)
    return packed


def reads_transposed(layer: nn.Linear, threads: int) -> bool:
    """Whether ``layer``'s one-row product reads Wᵀ with ``threads`` threads (whole, or split by inputs), rather
    than W's own rows (split by outputs)."""
    n, d = layer.out_features, layer.in_features
    parts = min(threads, n // SPLIT_MIN_COLUMNS)
    return parts <= 1 or (d * parts < n and d % parts == 0)


def inference_layout(model: nn.Module, values: bool = True) -> None:
    """Store the weight of every :class:`Linear` of ``model`` on the CPU whose one-row product reads Wᵀ (at today's
    thread count) column-major: the same values, its transpose contiguous, so that decoding reads Wᵀ without a copy.
    Made once, when the model is made for inference (:func:`tformer.fast.speed_up` with ``inference=True``).
    ``values=False``: the weights are about to be read in (:func:`tformer.load`), so new storage is allocated in that
    layout and nothing is copied (the values it held are not kept)."""
    threads = torch.get_num_threads()
    for module in model.modules():
        if not isinstance(module, Linear):
            continue
        w = module._parameters.get("weight")
        if w is None or w.device.type != "cpu" or w.dim() != 2 or min(w.shape) < 2 or not w.is_contiguous():
            continue
        if reads_transposed(module, threads):
            with torch.inference_mode(False), torch.no_grad():  # a normal tensor, even under inference mode
                empty = torch.empty_strided(w.shape, (1, w.shape[0]), dtype=w.dtype, device=w.device)  # column-major
                w.data = empty.copy_(w) if values else empty


def training_layout(model: nn.Module) -> None:
    """Store every weight of ``model``'s :class:`Linear` layers in PyTorch's own (out, in) layout, as training's
    numbers to the last bit want it (undoes :func:`inference_layout`; a weight already so is left as it is)."""
    for module in model.modules():
        w = module._parameters.get("weight") if isinstance(module, Linear) else None
        if w is not None and w.dim() == 2 and not w.is_contiguous() and w.t().is_contiguous():
            with torch.inference_mode(False), torch.no_grad():
                w.data = w.contiguous()


def swap_linear(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (exactly that class) by a :class:`Linear` holding the same Parameters,
    in place; the state dict, the numbers and training are unchanged. Idempotent; returns ``model``."""
    replace_modules(model, lambda m: Linear.from_linear(m) if type(m) is nn.Linear else None)
    return model


def to_plain_linear(model: nn.Module) -> nn.Module:
    """Replace every :class:`Linear` of ``model`` by an ``nn.Linear`` holding the same Parameters, in place (the
    reference kernel: :func:`tformer.fast.use_reference`). Idempotent; returns ``model``."""

    def plain(m: nn.Module) -> nn.Module | None:
        if type(m) is not Linear:
            return None
        layer = nn.Linear.__new__(nn.Linear)
        nn.Module.__init__(layer)  # no new weight
        layer.in_features, layer.out_features = m.in_features, m.out_features
        layer.register_parameter("weight", m._parameters["weight"])
        layer.register_parameter("bias", m._parameters["bias"])
        return layer.train(m.training)

    replace_modules(model, plain)
    return model


@overload
def _rows(t: torch.Tensor, start: int, end: int) -> torch.Tensor: ...
@overload
def _rows(t: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None: ...
def _rows(t: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    """Rows ``start:end`` of a weight or bias: the tensor itself when that is all of it (no slicing op); None stays None."""
    return t if t is None or (start == 0 and end == t.shape[0]) else t[start:end]


def _project(x: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.matmul(x, wt)  # (..., in) @ (in, out)
    if bias is not None:
        y += bias
    return y
