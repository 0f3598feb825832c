"""Tensors as JSON for the explorer: rounded values, non-finite numbers as strings, ranges and differences."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["difference", "number", "value_range", "jsonable_tensor"]


def difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """b − a in float64; 0 where both are equal (the same infinity too: a masked score in both)."""
    x, y = a.detach().double(), b.detach().double()
    return torch.where(x == y, torch.zeros_like(x), y - x)


def number(x: torch.Tensor) -> float | str:
    """A float for JSON: a non-finite one as its string ("inf", "nan")."""
    v = float(x)
    return v if np.isfinite(v) else str(v)


def value_range(t: torch.Tensor) -> tuple[float | None, float | None]:
    """(min, max) of the finite values (None when there are none)."""
    x = t.detach().float()
    x = x[torch.isfinite(x)]
    return (None, None) if x.numel() == 0 else (float(x.min()), float(x.max()))


def jsonable_tensor(t: torch.Tensor) -> Any:
    """Nested lists: integers as they are, floats rounded to 6 significant digits, ±inf and nan as strings."""
    if not t.is_floating_point():
        return t.tolist()
    a = t.detach().double().cpu().numpy().copy()  # rounded below: never in the tensor itself (a float64 one)
    finite = np.isfinite(a)
    nonzero = finite & (a != 0)
    x = a[nonzero]
    e = 5 - np.floor(np.log10(np.abs(x)))  # decimals that keep 6 significant digits
    p = 10.0 ** np.abs(e)
    a[nonzero] = np.where(e >= 0, np.round(x * p) / p, np.round(x / p) * p)
    if finite.all():
        return a.tolist()
    obj = a.astype(object)
    obj[~finite] = [str(float(v)) for v in a[~finite]]
    return obj.tolist()
