"""``Linear``: ``nn.Linear`` with a second weight layout for decoding a few rows at a time.

A decoding step at batch 1 multiplies ONE vector by every weight matrix of the decoder: the step's
time is the time it takes to stream those weights from memory. PyTorch stores a linear layer's weight
as (out, in); on this CPU the BLAS streams a (1, in) @ (in, out) product about 1.4–1.9× faster than
the same product against the (out, in) layout (``python -m benchmarks.decode_floor``). So, in
inference and for at most :data:`FEW_ROWS` rows, this layer multiplies by a transposed copy of its
weight, made once and remade whenever the weight changes. Everything else (training, batches, GPUs)
is plain ``F.linear``.

The parameters and the state dict are exactly ``nn.Linear``'s; the copy is not saved. It costs memory:
one more float copy of every weight that inference touches (for a GPT-2-small-sized model about 0.5 GB),
made lazily, only on the CPU, only when a few-row product is actually run. The result is
the same product (the summation order inside the BLAS may differ, ~1e-7 relative).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Linear", "FEW_ROWS"]

# Up to this many rows (B·T of the input), inference uses the (in, out) copy. Measured with
# ``python -m benchmarks.decode_floor``: the copy wins at batch 1 and for a beam of 5, and F.linear's
# matrix-matrix kernel catches up at a few dozen rows.
FEW_ROWS = 8


class Linear(nn.Linear):
    """``y = x Wᵀ + b``, exactly ``nn.Linear``; see the module docstring for the decoding layout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._use_transposed(x):
            return _project(x, self.transposed_weight(), self.bias)
        return F.linear(x, self.weight, self.bias)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Only output features ``start:end`` (e.g. W_Q out of a fused W_Q/W_K/W_V): ``x W[start:end]ᵀ + b[start:end]``."""
        bias = None if self.bias is None else self.bias[start:end]
        if self._use_transposed(x):
            return _project(x, self.transposed_weight()[:, start:end], bias)
        return F.linear(x, self.weight[start:end], bias)

    def _use_transposed(self, x: torch.Tensor) -> bool:
        return (
            not torch.is_grad_enabled()  # inference (no_grad / inference_mode)
            and x.device.type == "cpu"  # measured on CPU BLAS only
            and x.numel() <= FEW_ROWS * self.in_features
            and not torch.compiler.is_compiling()
        )

    def transposed_weight(self) -> torch.Tensor:
        """The weight as a contiguous (in, out) tensor, cached until the weight is replaced or modified."""
        w = self.weight
        cached = self.__dict__.get("_transposed")
        key = (w._version, w.data_ptr(), w.dtype, w.device)
        if cached is None or cached[0] is not w or cached[1] != key:
            with torch.no_grad():
                wt = w.detach().t().contiguous()
            # the source tensor itself, its version counter (bumped by every in-place change, e.g. an optimizer
            # step or load_state_dict) and its storage say whether the copy is still current
            self.__dict__["_transposed"] = cached = (w, key, wt)
        return cached[2]


def _project(x: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.matmul(x, wt)  # (..., in) @ (in, out)
    if bias is not None:
        y += bias
    return y
