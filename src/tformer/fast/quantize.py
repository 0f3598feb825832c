"""int8 inference as a swap (in the spirit of gpt-fast's ``quantize.py``): :func:`quantize` puts an
:class:`~tformer.fast.int8.Int8Linear` in place of every linear layer of a plain model, :func:`dequantize` puts float
layers back; :mod:`tformer.nn` is not touched, and the model's other modules stay as they are.

    model = tformer.quantize(model, "int8")     # in place; returns the model
    model.save_pretrained("gpt-int8")           # int8 weights + scales, about a quarter of float32's file
    tformer.load("gpt-int8").model              # the int8 model again
    tformer.dequantize(model)                   # the float layers back (exactly, when quantize kept them)

What becomes int8: the linear layers (``nn.Linear`` and the fast :class:`~tformer.fast.linear.Linear`): attention's
projections, the feed-forward matrices, the output heads. Embeddings, norms and positional tables stay float: a
lookup reads one row per token, so int8 would save memory but no time. A GPT's output head tied to the token
embedding gets an int8 copy of its own (the head reads the whole matrix at every step), while the embedding stays
float. Which kernel multiplies, per machine class and kind of work, and what it costs in accuracy:
:mod:`tformer.fast.int8`.

A saved int8 model holds ``NAME.weight_int8``, ``NAME.weight_scale`` and ``NAME.bias`` for each int8 layer, and
its ``config.json`` a ``quantization`` record (:func:`quantization_record`) naming them, which
:func:`apply_record` reads back (:mod:`tformer.models.checkpoint`). What needs float weights (training, a Hugging
Face export, ``from_hf``, fine-tuning from a model) refuses an int8 one in one line (:func:`require_float`).

Dimension legend: none (modules only).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tformer.fast import linear as fast_linear
from tformer.fast.int8 import Int8Linear
from tformer.fast.swap import replace_modules

__all__ = [
    "quantize",
    "dequantize",
    "is_quantized",
    "quantized_modules",
    "quantization_record",
    "apply_record",
    "require_float",
    "PRECISIONS",
    "METHOD",
]

PRECISIONS = ("int8", "fp32", "float32")
METHOD = "int8"  # config.json's quantization.method: int8 weights, one float32 scale per output channel


def _is_linear(module: nn.Module) -> bool:
    return type(module) in (nn.Linear, fast_linear.Linear)


def quantize(model: nn.Module, precision: str = "int8", *, keep_float: bool = True) -> nn.Module:
    """``model`` with its linear layers in ``precision``, in place; returns it.

    ``"int8"``: every linear layer becomes an :class:`~tformer.fast.int8.Int8Linear` (idempotent).
    ``keep_float`` (the default) keeps the float layers it replaced, so that :func:`dequantize` gives back exactly
    those weights; ``keep_float=False`` lets them go, and with them the float memory (:func:`dequantize` then gives
    the int8 values as floats). A head tied to an embedding is always kept: its weight lives on in the embedding.
    ``"fp32"`` (or ``"float32"``): :func:`dequantize`.
    """
    if precision in ("fp32", "float32"):
        return dequantize(model)
    if precision != "int8":
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    tied = _tied_weights(model)

    def swap(m: nn.Module) -> nn.Module | None:
        if not isinstance(m, nn.Linear) or not _is_linear(m):
            return None
        return Int8Linear.from_linear(m, keep_float or id(m.weight) in tied)

    replace_modules(model, swap)
    return model


def dequantize(model: nn.Module) -> nn.Module:
    """``model`` with a float layer in place of every :class:`~tformer.fast.int8.Int8Linear`, in place; returns it.
    A layer :func:`quantize` kept comes back as it was (the same module and weights); any other becomes an
    ``nn.Linear`` holding ``q · s`` (a model read from an int8 directory has no other float weights to give)."""
    replace_modules(model, lambda m: (m.original or m.to_linear()) if isinstance(m, Int8Linear) else None)
    return model


def _tied_weights(model: nn.Module) -> set[int]:
    """ids of the Parameters that several modules of ``model`` hold (a head tied to an embedding)."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                holders[id(p)] = holders.get(id(p), 0) + 1
    return {i for i, n in holders.items() if n > 1}


def quantized_modules(model: nn.Module) -> list[str]:
    """The names of ``model``'s int8 layers, in order."""
    return [name for name, m in model.named_modules() if isinstance(m, Int8Linear)]


def is_quantized(model: Any) -> bool:
    """Whether ``model`` holds int8 layers: tformer's, or PyTorch's own quantized modules (``torch.ao``)."""
    if not isinstance(model, nn.Module):
        return False
    return any(
        isinstance(m, Int8Linear) or type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()
    )


def quantization_record(model: nn.Module) -> dict | None:
    """What ``config.json`` says of an int8 model: the method and its int8 layers (None for a float model)."""
    names = quantized_modules(model)
    if not names:
        return None
    return {"method": METHOD, "scales": "float32, one per output channel", "modules": names}


def apply_record(model: nn.Module, record: Any, where: str) -> nn.Module:
    """Put an empty :class:`~tformer.fast.int8.Int8Linear` where ``record`` (``config.json``'s ``quantization``)
    names one in ``model`` (just built from its config), for the saved int8 weights to fill; returns ``model``.
    A record tformer does not read is a ValueError naming ``where`` (the file) and the field."""
    if not isinstance(record, dict) or record.get("method") != METHOD:
        got = record.get("method") if isinstance(record, dict) else record
        raise ValueError(f"{where}: quantization.method must be {METHOD!r}, got {got!r:.60}")
    names = record.get("modules")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: quantization.modules must be a list of layer names")
    modules = dict(model.named_modules())
    for name in names:
        if not _is_linear(modules.get(name, nn.Identity())):
            raise ValueError(f"{where}: quantization.modules names {name!r:.80}, not a linear layer of this model")
    wanted, tied = {id(modules[n]) for n in names}, _tied_weights(model)
    replace_modules(model, lambda m: _empty_twin(m, id(m.weight) in tied) if id(m) in wanted else None)
    return model


def _empty_twin(linear: nn.Module, keep: bool) -> Int8Linear:
    """An :class:`~tformer.fast.int8.Int8Linear` of ``linear``'s shape, for the saved weights to fill; ``keep``: a
    tied head, whose float weight (the embedding's) is read from the file too."""
    assert isinstance(linear, nn.Linear)
    layer = Int8Linear(linear.in_features, linear.out_features, linear.bias is not None, linear.weight.device)
    layer.__dict__["original"] = linear if keep else None
    return layer.train(linear.training)


def require_float(model: Any, needs: str, what: str | None = None) -> None:
    """A one-line ValueError if ``model`` is int8: ``needs`` says what needs float weights (``"training"``), ``what``
    names the model (a directory, a flag; default: its class)."""
    if is_quantized(model):
        raise ValueError(
            f"{what or type(model).__name__} is an int8 model (tformer.quantize); {needs} needs float weights: use "
            "the float32 model it was made from (tformer.dequantize(model) gives only its int8 values as floats)"
        )
