"""``Linear``: ``nn.Linear`` with more weight layouts for decoding a few rows at a time, and :func:`swap_linear`,
which puts it in place of every ``nn.Linear`` of a plain model.

A decoding step multiplies a handful of rows (one per sequence, or per beam) by every weight matrix
of the decoder. For so few rows the layout of the weight decides the speed, so in inference on the CPU
this layer reads its weight in the layout the product wants (most of them views, see below):

* **one row** (batch-1 greedy or sampled decoding): the product streams the whole weight from memory
  for one row, and the BLAS runs it on one core (its matrix-vector kernel does not split the work). With
  more than one thread, and at least 256 output features, the product is split between the threads, one
  batch entry of a ``torch.bmm``/``baddbmm`` each. A tall matrix (at least as many inputs as outputs per
  thread, e.g. 1536 → 384) is split by outputs: each thread takes its own rows of W as they are stored
  (a view, no copy) and takes their dot products with the row. A wide one (384 → 1536, 384 → 8000) is
  split by inputs: each thread takes its share of the row and the matching rows of a transposed (in, out)
  copy, for every output, and the threads' partial sums are added. 2 threads, weights read from memory,
  µs per product (split by inputs / by outputs / one block of columns per thread): 384 → 1152 98 / 125 /
  117, 384 → 1536 110 / 151 / 124, 1536 → 384 164 / 108 / 201, 384 → 384 57 / 52 / 61. GPT decoding
  (6 × 384, vocab 8000) ran 1.10× faster than with the column blocks, which had taken a step's products
  from 3.7 to 2.6 ms, and Marian-sized greedy decoding 1.07× (medians of 20 and 16 alternating rounds,
  ``benchmarks/decode.py`` models, in one process). One thread, or a smaller matrix: the
  transposed copy, which the BLAS streams 1.4–1.9× faster than PyTorch's (out, in) layout
  (``python -m benchmarks.decode_floor``).
* **2 to 256 rows** (beam search, batched decoding), for matrices of at least 256 × 512: a copy packed
  in oneDNN's blocked layout for about that many rows (``torch.ops.mkldnn._reorder_linear_weight``, the
  packing PyTorch's own compiler uses for frozen CPU inference), multiplied by
  ``torch.ops.mkldnn._linear_pointwise``. ``F.linear`` goes to a GEMM that re-packs the weight on every
  call, which at a few dozen rows costs as much as the product itself: 32 rows × (256 → 8000) took
  0.95 ms packed against 1.5 ms. Smaller matrices, and every matrix without oneDNN (a PyTorch built
  without it), use the transposed copy up to 8 rows.

Everything else (training, more rows, GPUs, other dtypes for the packed copy, ``torch.compile``) is
plain ``F.linear``. The parameters and the state dict are exactly ``nn.Linear``'s; the copies are not
saved. Most cost no memory (issue 40: a model decodes in about its own size). In eval mode the layer stores its
weight in the layout its one-row product reads (:meth:`Linear._decoding_layout`): column-major (the same values,
its transpose contiguous) where the product reads Wᵀ, so the "transposed copy" and the split by inputs are views of
the weight itself; PyTorch's (out, in) where the split by outputs reads W's rows, as views. Training (``train()``,
or any forward with gradients) gets PyTorch's layout back, so its numbers are ``F.linear``'s to the bit. What
still copies: a packing for 2 to 256 rows, made inside a decoding step only (:func:`decoding_step`: the steps of
beams and batches, each the same product again; a prompt's, an encoder's or one forward's product is ``F.linear``'s),
up to three; a padded split where the outputs do not divide evenly
between the threads; and a transposed copy in the few cases the layout chosen did not foresee (a change of thread
count, the rows of a fused matrix). The result is the same product (the summation order inside the kernels differs,
~1e-7 relative). Inside :func:`reference` it is ``F.linear``.

When the copies are dropped. A copy is only right while the weight is what it was copied from, and no single signal
says that a weight changed: a tensor's version counter misses writes that bypass autograd's bookkeeping (PyTorch's
fused AdamW and SGD steps leave it as it was, and so does a write through a NumPy view). So the copies are dropped
on each of these, any one of which is enough:

* a forward with gradients on through the layer (every training step runs one before it updates the weight; a
  compiled one does not: inside a ``torch.compile`` graph the layer is ``F.linear`` and changes nothing, and the
  optimizer's step below drops the copies);
* ``train()`` or ``eval()`` on the layer or a module above it;
* any ``torch.optim`` optimizer's step, whatever its implementation (a global step hook; it also covers a step
  taken without a forward, e.g. weight decay alone);
* a new version or storage of the weight or the bias (``load_state_dict``, an in-place edit, ``.data = ...``).

A write that does none of these (through ``numpy()`` or a raw pointer, on a model left in eval mode) is not seen:
call :func:`forget_copies` after it. :func:`check_copies` compares every live copy's product with ``F.linear`` (the
:class:`~tformer.training.Trainer` runs it before each evaluation, so a stale copy is an error, never a wrong
metric). A weight made under ``torch.inference_mode`` has no version counter, so it gets plain ``F.linear``.
The copies are not part of a deep copy or a pickle (the oneDNN-packed one cannot be copied).

Dimension legend: P threads (parts of a split), C outputs per thread, n outputs of the rows computed, in inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple, overload

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from tformer.fast.swap import Switch, replace_modules

__all__ = [
    "Linear",
    "swap_linear",
    "reference",
    "FEW_ROWS",
    "SPLIT_MIN_COLUMNS",
    "PACKED_ROWS",
    "PACKED_MIN_WEIGHTS",
    "MAX_PACKINGS",
    "forget_copies",
    "check_copies",
    "decoding_step",
]

# Up to this many rows the transposed copy is used where the packed one is not.
# ``python -m benchmarks.decode_floor``: the copy wins at batch 1 and for a beam of 5, and F.linear's
# matrix-matrix kernel catches up at a few dozen rows.
FEW_ROWS = 8
# One row is split between the threads only in shares of at least this many outputs, so that the smallest
# matrices of the benchmark models (256 outputs) still split in two. 2 threads, cold weights, split vs the
# transposed copy, two runs: 256 → 256 58–61 vs 59–63 µs (a tie: smaller matrices are not split),
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
_SWITCH = Switch()  # off inside reference()
# Bumped by every torch.optim step (see the module docstring): part of each copy's key, so a step that leaves the
# weights' version counters as they were still drops the copies.
_OPTIMIZER_STEPS = 0


def _count_step(optimizer, args, kwargs) -> None:
    global _OPTIMIZER_STEPS
    _OPTIMIZER_STEPS += 1


register_optimizer_step_post_hook(_count_step)


def reference():
    """Within this block every :class:`Linear` runs ``F.linear`` (for A/B benchmarks and tests)."""
    return _SWITCH.off()


class _Flag:
    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


_STEP = _Flag()  # inside decoding_step()


@contextlib.contextmanager
def decoding_step() -> Iterator[None]:
    """Within this block the products are a decoding step's (:func:`tformer.generation.loop.decode_one` says so): the
    same products again at every step, so 2 to 256 rows get the oneDNN-packed copy. Outside, those products are
    ``F.linear``'s: a prompt, an encoder, one forward would pay for the packing, and a copy of the weight, once."""
    previous, _STEP.on = _STEP.on, True
    try:
        yield
    finally:
        _STEP.on = previous


class _Split(NamedTuple):
    """A one-row product split between ``parts`` threads, ready for ``torch.bmm``/``baddbmm``."""

    by_inputs: bool  # True: thread p multiplies its share of x by all outputs, the partial sums added after
    blocks: (
        torch.Tensor
    )  # the right operand: (P, in, C) rows of W, transposed (by outputs); (P, in/P, n) of Wᵀ (by inputs)
    bias: torch.Tensor | None  # (P, 1, C) by outputs; (P, 1, n) by inputs: the bias for thread 0, zeros for the others
    padded: bool  # by outputs: the last block was padded with zero rows (n not a multiple of P)


class _Copies:
    """The copies of one weight (and bias) that decoding uses, all made from the same version of them."""

    __slots__ = ("weight", "bias", "key", "transposed", "splits", "packed")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, key: tuple) -> None:
        self.weight, self.bias, self.key = weight, bias, key
        self.transposed: torch.Tensor | None = None  # (in, out): a view of a column-major weight, else a copy
        self.splits: dict[tuple, _Split] = {}  # (start, end, parts) -> the split of rows start:end
        self.packed: dict[tuple, torch.Tensor] = {}  # (start, end, row hint) -> oneDNN-packed rows start:end


class Linear(nn.Linear):
    """``y = x Wᵀ + b``, exactly ``nn.Linear``; see the module docstring for the decoding layouts."""

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
        if torch.compiler.is_compiling():  # a compiled graph: F.linear, and nothing in the module changes
            return F.linear(x, self.weight, self.bias)
        if torch.is_grad_enabled():  # training: nn.Linear itself; the weight is about to change, so no copy survives
            self._training_layout()
            return F.linear(x, self.weight, self.bias)
        return self.forward_rows(x, 0, self.out_features)

    def train(self, mode: bool = True) -> Linear:
        """``nn.Module.train``; the decoding copies are dropped (a change of mode is where training starts or ends),
        and training gets its weight back in PyTorch's own (out, in) layout (decoding may have stored it
        column-major, see :meth:`_decoding_layout`): the same values, one matrix copied at a time."""
        if mode:
            self._training_layout()
        self.__dict__.pop("_decoding_copies", None)
        return super().train(mode)

    def _training_layout(self) -> None:
        """No decoding copy, and the weight in PyTorch's own (out, in) layout, as training and F.linear's numbers
        to the last bit want it (decoding may have stored it column-major: :meth:`_decoding_layout`)."""
        self.__dict__.pop("_decoding_copies", None)
        w = self._parameters["weight"]
        if w is not None and not w.is_contiguous() and w.dim() == 2 and w.t().is_contiguous():
            with torch.inference_mode(False), torch.no_grad():
                w.data = w.contiguous()

    def __getstate__(self) -> dict:
        """A deep copy or a pickle leaves the decoding copies out (remade on first use; a packed one cannot be copied)."""
        state = dict(self.__dict__)
        state.pop("_decoding_copies", None)
        return state

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Only output features ``start:end`` (e.g. W_Q out of a fused W_Q/W_K/W_V): ``x W[start:end]ᵀ + b[start:end]``
        (the fast version of :func:`tformer.nn.attention.project_rows`)."""
        if torch.compiler.is_compiling():  # a compiled graph: F.linear, and nothing in the module changes
            return self._plain(x, start, end)
        if torch.is_grad_enabled():  # training (autograd): as in forward, no copy survives it
            self._training_layout()
            return self._plain(x, start, end)
        if not x.is_cpu or x.shape[-1] != self.in_features or not _SWITCH.on:
            return self._plain(x, start, end)  # GPUs; a wrong width: F.linear's error
        copies = self._copies()
        if copies is None:  # a weight made in inference mode: it keeps no version counter, a copy could go stale
            return self._plain(x, start, end)
        rows = x.numel() // self.in_features
        if rows == 1:  # a decoding step at batch 1: the Python here runs once per weight matrix per token
            parts = min(torch.get_num_threads(), (end - start) // SPLIT_MIN_COLUMNS)
            if parts > 1 and x.dim() <= 3:  # split between the threads (see _split), one batch entry of bmm each
                split = copies.splits.get((start, end, parts)) or self._split(copies, start, end, parts)
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
            return _project(x, self._transposed(copies, start, end), _rows(copies.bias, start, end))
        if (
            _ONEDNN
            and PACKED_ROWS[0] <= rows <= PACKED_ROWS[1]
            and (end - start) * self.in_features >= PACKED_MIN_WEIGHTS
            and x.dtype == copies.weight.dtype == torch.float32
        ):
            packed = self._packed(copies, start, end, rows)
            if packed is None:  # the first product of this many rows (a prompt, say): no packed copy made for it
                return self._plain(x, start, end)
            return torch.ops.mkldnn._linear_pointwise(x, packed, _rows(copies.bias, start, end), "none", [], "")
        if rows <= FEW_ROWS:
            return _project(x, self._transposed(copies, start, end), _rows(copies.bias, start, end))
        return self._plain(x, start, end)

    def _plain(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        return F.linear(x, _rows(self.weight, start, end), _rows(self.bias, start, end))

    def _copies(self) -> _Copies | None:
        """This layer's decoding copies, emptied whenever the weight or the bias was replaced or modified: a tensor's
        version counter (bumped by every in-place change, e.g. an optimizer step or load_state_dict) and its storage
        (``.data = ...`` swaps it) say whether a copy made from it is still current. None for a weight made in
        inference mode, which has no version counter."""
        params = self._parameters  # not self.weight: nn.Module.__getattr__ costs a microsecond a call
        w, b = params["weight"], params["bias"]
        assert w is not None  # nn.Linear always has a weight
        if w.is_inference():
            return None
        key = _key(w, b)
        copies = self.__dict__.get("_decoding_copies")
        if copies is None or copies.weight is not w or copies.bias is not b or copies.key != key:
            if self._decoding_layout(w):  # the storage changed: the key with it
                key = _key(w, b)
            self.__dict__["_decoding_copies"] = copies = _Copies(w, b, key)
        return copies

    def _decoding_layout(self, w: torch.Tensor) -> bool:
        """Store ``w`` column-major (its transpose contiguous, the same values) where the one-row product reads Wᵀ:
        then the transposed copy is a view of the weight and costs no memory. Kept (out, in) where that product reads
        W's rows (split by outputs between the threads: views of W). Returns whether the storage changed.
        :meth:`train` puts it back for training."""
        if self.training or not (w.device.type == "cpu" and w.dim() == 2 and w.is_contiguous() and min(w.shape) > 1):
            return False  # a layer in training mode keeps PyTorch's layout (a no_grad forward between steps, say)
        n, d = w.shape
        parts = min(torch.get_num_threads(), n // SPLIT_MIN_COLUMNS)
        if parts > 1 and not (d * parts < n and d % parts == 0):  # split by outputs: W's own rows
            return False
        with torch.inference_mode(False), torch.no_grad():  # a normal tensor, even when decoding in inference mode
            w.data = w.t().contiguous().t()  # (out, in), column-major
        return True

    def transposed_weight(self) -> torch.Tensor:
        """The weight as a contiguous (in, out) tensor, cached until the weight is replaced or modified."""
        copies = self._copies()
        if copies is None:
            return self.weight.detach().t().contiguous()
        return self._transposed(copies, 0, self.out_features)

    def _transposed(self, copies: _Copies, start: int, end: int) -> torch.Tensor:
        if copies.transposed is None:
            with torch.no_grad():  # a column-major weight's transpose is a view; otherwise a copy
                copies.transposed = copies.weight.detach().t().contiguous()  # (in, out)
        wt = copies.transposed
        return wt if start == 0 and end == self.out_features else wt[:, start:end]

    def _split(self, copies: _Copies, start: int, end: int, parts: int) -> _Split:
        """Make (and cache, :data:`MAX_PACKINGS` at most) the split of rows ``start:end`` between ``parts`` threads:
        views of the weight and bias (by outputs, padded copies where n is not a multiple of ``parts``) or of the
        transposed copy (by inputs)."""
        n, d = end - start, self.in_features
        with torch.no_grad():
            b = None if copies.bias is None else _rows(copies.bias.detach(), start, end)
            if d * parts < n and d % parts == 0:  # wide: by inputs
                blocks = self._transposed(copies, start, end).view(parts, d // parts, n)  # (P, in/P, n)
                bias = None if b is None else torch.cat([b[None, None], b.new_zeros(parts - 1, 1, n)])  # (P, 1, n)
                split = _Split(True, blocks, bias, False)
            else:  # tall: by outputs
                columns = -(-n // parts)
                pad = parts * columns - n
                w = _rows(copies.weight.detach(), start, end)  # (n, in)
                if pad:
                    w, b = F.pad(w, (0, 0, 0, pad)), None if b is None else F.pad(b, (0, pad))  # (P * C, in)
                if w.t().is_contiguous() and not w.is_contiguous():  # column-major: views of Wᵀ's columns
                    blocks = w.t().reshape(d, parts, columns).permute(1, 0, 2)  # (in, P, C) -> (P, in, C)
                else:
                    blocks = w.reshape(parts, columns, d).transpose(1, 2)  # (P, in, C): views of W's rows
                split = _Split(False, blocks, None if b is None else b.view(parts, 1, columns), pad > 0)
        if len(copies.splits) >= MAX_PACKINGS:
            del copies.splits[next(iter(copies.splits))]  # the oldest
        copies.splits[(start, end, parts)] = split
        return split

    def _packed(self, copies: _Copies, start: int, end: int, rows: int) -> torch.Tensor | None:
        """The weight rows ``start:end`` packed for about ``rows`` rows, inside a decoding step (:func:`decoding_step`:
        the steps of beams and batches, each the same product again); None elsewhere: a prompt's, an encoder's or
        one forward's product is made once, and would not pay for a copy of the weight."""
        if not _STEP.on:
            return None
        hint = 1 << max(rows - 1, 1).bit_length()
        key = (start, end, hint)
        found = copies.packed.get(key)
        if found is None:
            if len(copies.packed) >= MAX_PACKINGS:
                del copies.packed[next(iter(copies.packed))]  # the oldest
            with torch.no_grad():
                w = copies.weight.detach()[start:end].contiguous()
                copies.packed[(start, end, hint)] = found = torch.ops.mkldnn._reorder_linear_weight(w, hint)
        return found


def _key(w: torch.Tensor, b: torch.Tensor | None) -> tuple:
    """What a decoding copy of ``w`` and ``b`` is valid for (see :meth:`Linear._copies`)."""
    bias = None if b is None else (b._version, b.data_ptr())
    return (_OPTIMIZER_STEPS, w._version, w.data_ptr(), w.dtype, w.device, bias)


def forget_copies(model: nn.Module) -> None:
    """Drop the decoding copies of every :class:`Linear` in ``model`` (after a write to a weight that no version
    counter, optimizer step or change of mode records; they are remade on first use)."""
    for module in model.modules():
        if isinstance(module, Linear):
            module.__dict__.pop("_decoding_copies", None)


def check_copies(model: nn.Module, atol: float = 1e-4) -> None:
    """Raise ``RuntimeError`` (naming the layer) if a live decoding copy of a :class:`Linear` in ``model`` no longer
    gives ``F.linear`` of its current weight: one product through each layout it holds, for a fixed random row.
    The :class:`~tformer.training.Trainer` calls it before each evaluation; it costs a few products a layer."""
    for name, module in model.named_modules():
        copies = module.__dict__.get("_decoding_copies") if isinstance(module, Linear) else None
        if copies is not None:
            with torch.no_grad():
                _check(name or "the model", module, copies, atol)


def _check(name: str, module: Linear, copies: _Copies, atol: float) -> None:
    w, b = copies.weight, copies.bias
    x = torch.randn(1, module.in_features, generator=torch.Generator().manual_seed(0)).to(w.dtype)  # (1, in)
    found = []  # (layout, start, end, x W[start:end]ᵀ + b[start:end] through that layout)
    if copies.transposed is not None:
        found.append(("transposed", 0, w.shape[0], _project(x, copies.transposed, b)))
    for (start, end, parts), split in copies.splits.items():
        row = x.reshape(parts, 1, -1) if split.by_inputs else x.expand(parts, 1, -1)  # (P, 1, in/P) or (P, 1, in)
        y = torch.bmm(row, split.blocks) if split.bias is None else torch.baddbmm(split.bias, row, split.blocks)
        y = y.sum(0) if split.by_inputs else y.reshape(1, -1)[:, : end - start]  # (1, n)
        found.append(("split", start, end, y))
    for (start, end, _), packed in copies.packed.items():
        y = torch.ops.mkldnn._linear_pointwise(x, packed, _rows(b, start, end), "none", [], "")
        found.append(("packed", start, end, y))
    for layout, start, end, y in found:
        expected = F.linear(x, _rows(w, start, end), _rows(b, start, end))  # (1, n)
        error = (y - expected).abs().max().item()
        if not error <= atol * max(1.0, expected.abs().max().item()):
            raise RuntimeError(
                f"tformer.fast: the {layout} decoding copy of {name} (outputs {start}:{end}) is stale: max error "
                f"{error:.3g} against F.linear of its weight, which changed without dropping it. This is a bug in "
                "tformer; please report it"
            )


def swap_linear(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (exactly that class) by a :class:`Linear` holding the same Parameters,
    in place; the state dict, the numbers and training are unchanged. Idempotent; returns ``model``."""
    replace_modules(model, lambda m: Linear.from_linear(m) if type(m) is nn.Linear else None)
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
