"""Weights in from other libraries: PyTorch (``from_torch``)."""

from .torch import from_torch

__all__ = ["from_torch"]
