"""Weights in from other libraries: PyTorch (``from_torch``) and Hugging Face ``transformers`` (``from_hf``).

``transformers`` is imported lazily inside ``from_hf``, so tformer imports without it installed.
"""

from tformer.interop.hf import from_hf
from tformer.interop.torch import from_torch

__all__ = ["from_torch", "from_hf"]
