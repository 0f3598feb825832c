"""``Linear``: ``nn.Linear`` with more weight layouts for decoding a few rows at a time.

A decoding step multiplies a handful of rows (one per sequence, or per beam) by every weight matrix
of the decoder. For so few rows the layout of the weight decides the speed, so in inference on the CPU
this layer keeps a second copy of its weight, made once and remade whenever the weight changes:

* **one row** (batch-1 greedy or sampled decoding): the product streams the whole weight from memory
  for one row, and the BLAS runs it on one core (its matrix-vector kernel does not split the work). With
  more than one thread, and at least 256 output features, the weight is kept transposed and cut into one
  block of columns per thread, (threads, in, out/threads): ``torch.baddbmm`` runs the blocks on all the
  threads at once and writes the output row in order, with no copy. 2 threads, GPT decoding (6 × 384,
  vocab 8000): the products of a step 3.7 → 2.6 ms. One thread, or a smaller matrix: a transposed
  (in, out) copy, which the BLAS streams 1.4–1.9× faster than PyTorch's (out, in) layout
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
saved. They cost memory: each is one more float copy of a weight that inference touches (for a
GPT-2-small-sized model about 0.5 GB; the transposed copy, the per-thread blocks and up to three
packings, so at most five such copies), made lazily and only when such a product actually runs. The
result is the same product (the summation order inside the kernels differs, ~1e-7 relative).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Linear", "FEW_ROWS", "SPLIT_MIN_COLUMNS", "PACKED_ROWS", "PACKED_MIN_WEIGHTS", "MAX_PACKINGS"]

# Up to this many rows the transposed copy is used where the packed one is not.
# ``python -m benchmarks.decode_floor``: the copy wins at batch 1 and for a beam of 5, and F.linear's
# matrix-matrix kernel catches up at a few dozen rows.
FEW_ROWS = 8
# One row is split between the threads in blocks of at least this many output features, so that the
# smallest matrices of the benchmark models (256 outputs) still split in two. 2 threads, cold weights, split
# vs transposed copy: 256 → 256 27 vs 33 µs, 256 → 8000 286 vs 387 µs, 384 → 8000 479 vs 707 µs; of the
# benchmark models' matrices only 384 → 1536 read slower (186 vs 170 µs), and a GPT step's products
# together took 2.6 ms against 3.7.
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
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


_ONEDNN = _has_onednn()


class _Copies:
    """The copies of one weight (and bias) that decoding uses, all made from the same version of them."""

    __slots__ = ("weight", "bias", "key", "transposed", "blocks", "packed")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, key: tuple) -> None:
        self.weight, self.bias, self.key = weight, bias, key
        self.transposed: torch.Tensor | None = None  # (in, out)
        self.blocks: dict[tuple, tuple] = {}  # (start, end, parts) -> blocks, bias blocks, padded?
        self.packed: dict[tuple, torch.Tensor] = {}  # (start, end, row hint) -> oneDNN-packed rows start:end


class Linear(nn.Linear):
    """``y = x Wᵀ + b``, exactly ``nn.Linear``; see the module docstring for the decoding layouts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Only output features ``start:end`` (e.g. W_Q out of a fused W_Q/W_K/W_V): ``x W[start:end]ᵀ + b[start:end]``."""
        if torch.is_grad_enabled() or not x.is_cpu or torch.compiler.is_compiling() or x.shape[-1] != self.in_features:
            return self._plain(x, start, end)  # training (autograd), GPUs, compiled graphs; a wrong width: F.linear's error
        rows = x.numel() // self.in_features
        if rows == 1:
            parts = min(torch.get_num_threads(), (end - start) // SPLIT_MIN_COLUMNS)
            if parts > 1 and x.dim() <= 3:
                return self._blocks_product(x, start, end, parts)
            return self._transposed_product(x, start, end)
        if (_ONEDNN and PACKED_ROWS[0] <= rows <= PACKED_ROWS[1] and (end - start) * self.in_features >= PACKED_MIN_WEIGHTS
                and x.dtype == self.weight.dtype == torch.float32):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight(start, end, rows), self._bias(start, end),
                                                      "none", [], "")
        if rows <= FEW_ROWS:
            return self._transposed_product(x, start, end)
        return self._plain(x, start, end)

    def _bias(self, start: int, end: int) -> torch.Tensor | None:
        b = self.bias
        return b if b is None or (start == 0 and end == self.out_features) else b[start:end]

    def _plain(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        w = self.weight if start == 0 and end == self.out_features else self.weight[start:end]
        return F.linear(x, w, self._bias(start, end))

    def _transposed_product(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        wt = self.transposed_weight()
        return _project(x, wt if start == 0 and end == self.out_features else wt[:, start:end], self._bias(start, end))

    def _blocks_product(self, x: torch.Tensor, start: int, end: int, parts: int) -> torch.Tensor:
        """One row times ``W[start:end]ᵀ`` (+ bias), each of ``parts`` threads multiplying it by its own block of columns."""
        blocks, bias, padded = self.split_weight(start, end, parts)  # (P, in, C), (P, 1, C)
        row = x.expand(parts, 1, self.in_features)  # (P, 1, in), no copy
        y = torch.bmm(row, blocks) if bias is None else torch.baddbmm(bias, row, blocks)  # (P, 1, C): the row, in order
        n = end - start
        if padded:
            y = y.view(-1)[:n]  # the last block's zero padding dropped
        return y.view(*x.shape[:-1], n)  # (..., n), the leading dims of x

    def _copies(self) -> _Copies:
        """This layer's decoding copies, emptied whenever the weight or the bias was replaced or modified: a tensor's
        version counter (bumped by every in-place change, e.g. an optimizer step or load_state_dict) and its storage
        (``.data = ...`` swaps it) say whether a copy made from it is still current."""
        w, b = self.weight, self.bias
        key = (w._version, w.data_ptr(), w.dtype, w.device, None if b is None else (b._version, b.data_ptr()))
        copies = self.__dict__.get("_decoding_copies")
        if copies is None or copies.weight is not w or copies.bias is not b or copies.key != key:
            self.__dict__["_decoding_copies"] = copies = _Copies(w, b, key)
        return copies

    def transposed_weight(self) -> torch.Tensor:
        """The weight as a contiguous (in, out) tensor, cached until the weight is replaced or modified."""
        copies = self._copies()
        if copies.transposed is None:
            with torch.no_grad():
                copies.transposed = self.weight.detach().t().contiguous()
        return copies.transposed

    def split_weight(self, start: int, end: int, parts: int) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
        """Rows ``start:end`` of the weight, transposed and cut into ``parts`` blocks of C = ceil(n / parts) columns,
        (parts, in, C), the last padded with zeros; the bias cut the same way, (parts, 1, C); and whether there is
        padding. Cached until the weight or the bias changes (at most :data:`MAX_PACKINGS` at a time)."""
        cache = self._copies().blocks
        found = cache.get((start, end, parts))
        if found is None:
            if len(cache) >= MAX_PACKINGS:
                del cache[next(iter(cache))]  # the oldest
            n = end - start
            columns = -(-n // parts)
            pad = parts * columns - n
            with torch.no_grad():
                w = F.pad(self.weight.detach()[start:end], (0, 0, 0, pad))  # (parts * C, in)
                blocks = w.view(parts, columns, self.in_features).transpose(1, 2).contiguous()  # (parts, in, C)
                b = self.bias
                bias = None if b is None else F.pad(b.detach()[start:end], (0, pad)).view(parts, 1, columns)
            cache[(start, end, parts)] = found = (blocks, bias, pad > 0)
        return found

    def packed_weight(self, start: int, end: int, rows: int) -> torch.Tensor:
        """Rows ``start:end`` of the weight packed by oneDNN for products of about ``rows`` rows (rounded up to a
        power of two, so a few packings serve every batch size), cached until the weight changes (at most
        :data:`MAX_PACKINGS` at a time)."""
        hint = 1 << max(rows - 1, 1).bit_length()
        cache = self._copies().packed
        if (start, end, hint) not in cache:
            if len(cache) >= MAX_PACKINGS:
                del cache[next(iter(cache))]  # the oldest
            with torch.no_grad():
                w = self.weight.detach()[start:end].contiguous()
                cache[(start, end, hint)] = torch.ops.mkldnn._reorder_linear_weight(w, hint)
        return cache[(start, end, hint)]


def _project(x: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.matmul(x, wt)  # (..., in) @ (in, out)
    if bias is not None:
        y += bias
    return y
