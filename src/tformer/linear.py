"""``Linear``: ``nn.Linear`` with two more weight layouts for decoding a few rows at a time.

A decoding step multiplies a handful of rows (one per sequence, or per beam) by every weight matrix
of the decoder. For so few rows the layout of the weight decides the speed, so in inference on the CPU
this layer keeps a second copy of its weight, made once and remade whenever the weight changes:

* **one row** (batch-1 greedy or sampled decoding): a transposed (in, out) copy. The BLAS streams a
  (1, in) @ (in, out) product 1.4–1.9× faster than the same product against PyTorch's (out, in) layout
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
GPT-2-small-sized model about 0.5 GB; the transposed copy plus up to three packings, so at most four such
copies), made lazily and only when such a product actually runs. The
result is the same product (the summation order inside the kernels differs, ~1e-7 relative).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Linear", "FEW_ROWS", "PACKED_ROWS", "PACKED_MIN_WEIGHTS", "MAX_PACKINGS"]

# Up to this many rows the transposed copy is used where the packed one is not.
# ``python -m benchmarks.decode_floor``: the copy wins at batch 1 and for a beam of 5, and F.linear's
# matrix-matrix kernel catches up at a few dozen rows.
FEW_ROWS = 8
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


class Linear(nn.Linear):
    """``y = x Wᵀ + b``, exactly ``nn.Linear``; see the module docstring for the decoding layouts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Only output features ``start:end`` (e.g. W_Q out of a fused W_Q/W_K/W_V): ``x W[start:end]ᵀ + b[start:end]``."""
        whole = start == 0 and end == self.out_features
        bias = self.bias if whole or self.bias is None else self.bias[start:end]
        layout = self._layout(x, end - start)
        if layout == "packed":
            rows = x.numel() // self.in_features
            return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight(start, end, rows), bias, "none", [], "")
        if layout == "transposed":
            wt = self.transposed_weight()
            return _project(x, wt if whole else wt[:, start:end], bias)
        return F.linear(x, self.weight if whole else self.weight[start:end], bias)

    def _layout(self, x: torch.Tensor, out_features: int) -> str:
        """"packed", "transposed" or "plain" (``F.linear``) for ``x`` (..., in_features) times ``out_features`` weight rows."""
        if torch.is_grad_enabled() or x.device.type != "cpu" or torch.compiler.is_compiling():
            return "plain"  # training (autograd), GPUs, compiled graphs
        rows = x.numel() // self.in_features
        if (_ONEDNN and PACKED_ROWS[0] <= rows <= PACKED_ROWS[1] and out_features * self.in_features >= PACKED_MIN_WEIGHTS
                and x.dtype == self.weight.dtype == torch.float32):
            return "packed"
        return "transposed" if rows <= FEW_ROWS else "plain"

    def _weight_key(self) -> tuple:
        # the tensor itself, its version counter (bumped by every in-place change, e.g. an optimizer step or
        # load_state_dict) and its storage say whether a copy is still current
        w = self.weight
        return (w._version, w.data_ptr(), w.dtype, w.device)

    def transposed_weight(self) -> torch.Tensor:
        """The weight as a contiguous (in, out) tensor, cached until the weight is replaced or modified."""
        cached = self.__dict__.get("_transposed")
        key = self._weight_key()
        if cached is None or cached[0] is not self.weight or cached[1] != key:
            with torch.no_grad():
                wt = self.weight.detach().t().contiguous()
            self.__dict__["_transposed"] = cached = (self.weight, key, wt)
        return cached[2]

    def packed_weight(self, start: int, end: int, rows: int) -> torch.Tensor:
        """Rows ``start:end`` of the weight packed by oneDNN for products of about ``rows`` rows (rounded up to a
        power of two, so a few packings serve every batch size), cached until the weight changes (at most
        :data:`MAX_PACKINGS` at a time)."""
        hint = 1 << max(rows - 1, 1).bit_length()
        cached = self.__dict__.get("_packed")
        key = self._weight_key()
        if cached is None or cached[0] is not self.weight or cached[1] != key:
            self.__dict__["_packed"] = cached = (self.weight, key, {})
        packings = cached[2]
        if (start, end, hint) not in packings:
            if len(packings) >= MAX_PACKINGS:
                del packings[next(iter(packings))]  # the oldest
            with torch.no_grad():
                w = self.weight.detach()[start:end].contiguous()
                packings[(start, end, hint)] = torch.ops.mkldnn._reorder_linear_weight(w, hint)
        return packings[(start, end, hint)]


def _project(x: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.matmul(x, wt)  # (..., in) @ (in, out)
    if bias is not None:
        y += bias
    return y
