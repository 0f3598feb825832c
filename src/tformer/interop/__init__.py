"""Weights in from PyTorch's own Transformer modules (``from_torch``: ``nn.MultiheadAttention``, the encoder and
decoder layers and stacks, ``nn.Transformer``). Hugging Face interop, both directions, is :mod:`tformer.hf`."""

from tformer.interop.torch import from_torch

__all__ = ["from_torch"]
