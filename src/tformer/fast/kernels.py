"""``kernels(model)``: which implementation each kind of part of a model runs, read off its modules.

Every kernel is chosen when the model is built or by one call (:func:`tformer.fast.speed_up`, which the trainer
and :func:`tformer.load` apply; :func:`tformer.quantize`), and stays readable afterwards: an
attention layer's ``kernel`` function, the class of its products, norms and dropouts. ``tformer info`` prints it.

Dimension legend: none (modules only).
"""

from __future__ import annotations

from torch import nn

from tformer.fast import attention, dropout, int8, int8_embedding, linear, norms
from tformer.nn import norms as plain_norms
from tformer.nn import scaled_dot_product
from tformer.nn.attention import MultiHeadAttention

__all__ = ["kernels", "describe_kernels"]

# (kind, implementation) -> its name; a module of none of these is not counted
_NAMES: dict[tuple[str, object], str] = {
    ("attention", scaled_dot_product.attend): "reference",
    ("attention", attention.attend): "fast",
    ("products", nn.Linear): "reference",
    ("products", linear.Linear): "fast",
    ("products", int8.Int8Linear): "int8",
    ("embeddings", nn.Embedding): "reference",
    ("embeddings", int8_embedding.Int8Embedding): "int8",
    ("norms", plain_norms.RMSNorm): "reference",
    ("norms", norms.RMSNorm): "fast",
    ("dropout", nn.Dropout): "reference",
    ("dropout", dropout.Dropout): "fast",
}


def kernels(model: nn.Module) -> dict[str, list[str]]:
    """Each kind of part ``model`` has (``attention``, ``products``, ``embeddings``, ``norms``, ``dropout``) → the
    implementations its modules run, in the order first met: ``{"attention": ["fast"], "products": ["fast"], ...}``.
    An implementation tformer does not name is given by its qualified name."""
    found: dict[str, list[str]] = {kind: [] for kind in ("attention", "products", "norms", "dropout", "embeddings")}
    for module in model.modules():
        impl: object
        if isinstance(module, MultiHeadAttention):
            kind, impl = "attention", module.kernel
        else:
            kind = next((k for k, cls in _NAMES if isinstance(cls, type) and type(module) is cls), "")
            impl = type(module)
        if not kind:
            continue
        name = _NAMES.get((kind, impl)) or f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', impl)}"
        if isinstance(module, int8.Int8Linear) and module.exact:  # use_reference: the dequantized weight's product
            name = "int8 reference"
        if name not in found[kind]:
            found[kind].append(name)
    return {kind: names for kind, names in found.items() if names}


def describe_kernels(model: nn.Module) -> str:
    """:func:`kernels` in one line: ``attention fast, products fast, dropout fast``."""
    return ", ".join(f"{kind} {' + '.join(names)}" for kind, names in kernels(model).items()) or "none"
