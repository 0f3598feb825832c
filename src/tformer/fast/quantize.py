"""int8 inference as a swap (in the spirit of gpt-fast's ``quantize.py``): :func:`quantize` puts an
:class:`~tformer.fast.int8.Int8Linear` in place of every linear layer of a plain model, :func:`dequantize` puts float
layers back; :mod:`tformer.nn` is not touched, and the model's other modules stay as they are.

    model = tformer.quantize(model, "int8")     # in place; returns the model
    model.save_pretrained("gpt-int8")           # int8 weights + scales, about a quarter of float32's file
    tformer.load("gpt-int8").model              # the int8 model again
    tformer.dequantize(model)                   # the float layers back (exactly, when quantize kept them)

What becomes int8: the linear layers (``nn.Linear`` and the fast :class:`~tformer.fast.linear.Linear`): attention's
projections, the feed-forward matrices, the output heads; and the token embeddings, every ``nn.Embedding`` of at
least :data:`~tformer.fast.int8_embedding.MIN_ROWS` rows, with one scale per row
(:class:`~tformer.fast.int8_embedding.Int8Embedding`): a lookup reads one row per token, so int8 saves no time
there, but the table is a fifth to a half of a model's weights. Norms, position tables and small tables (a
character vocabulary, BERT's segments) stay float. An output head tied to an int8 embedding holds the embedding's
int8 table and scales (one table in memory and in the file) and packs its own copy for its products; a head tied to
a float embedding gets an int8 copy of its own. Which kernel multiplies, per machine class and kind of work, what
it costs in accuracy, and what a packed-only layer holds: :mod:`tformer.fast.int8`.

A saved int8 model holds ``NAME.weight_int8``, ``NAME.weight_scale`` (and ``NAME.bias``) for each int8 layer and
table (a tied head's are the table's, stored once), and its ``config.json`` a ``quantization`` record
(:func:`quantization_record`) naming them (``modules``: the linear layers, as tformer has always written it;
``embeddings``: the tables, when there are any), which :func:`apply_record` reads back
(:mod:`tformer.models.checkpoint`). What needs float weights (training, a Hugging
Face export, ``from_hf``, fine-tuning from a model) refuses an int8 one in one line (:func:`require_float`).

Dimension legend: none (modules only).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from tformer.checks import yes_no
from tformer.fast import linear as fast_linear
from tformer.fast.int8 import Int8Linear
from tformer.fast.int8_embedding import MIN_ROWS, Int8Embedding
from tformer.fast.swap import replace_modules

__all__ = [
    "quantize",
    "dequantize",
    "is_quantized",
    "quantized_modules",
    "quantized_embeddings",
    "quantization_record",
    "apply_record",
    "require_float",
    "PRECISIONS",
    "METHOD",
    "INT8_MODULES",
    "pack_only",
]

PRECISIONS = ("int8", "fp32", "float32")
METHOD = "int8"  # config.json's quantization.method: int8 weights, one float32 scale per output channel (table row)
INT8_MODULES = (Int8Linear, Int8Embedding)  # what holds int8 weights (a state dict's NAME.weight_int8)


def _is_linear(module: nn.Module) -> bool:
    return type(module) in (nn.Linear, fast_linear.Linear)


def _is_table(module: nn.Module) -> bool:
    """An ``nn.Embedding`` that becomes int8: a token table of at least MIN_ROWS rows (max_norm would rescale it)."""
    return type(module) is nn.Embedding and module.num_embeddings >= MIN_ROWS and module.max_norm is None


def quantize(model: nn.Module, precision: str = "int8", *, keep_float: bool = True) -> nn.Module:
    """``model`` with its linear layers and token embeddings in ``precision``, in place; returns it.

    ``"int8"``: every linear layer becomes an :class:`~tformer.fast.int8.Int8Linear` and every ``nn.Embedding`` of
    at least :data:`~tformer.fast.int8_embedding.MIN_ROWS` rows an :class:`~tformer.fast.int8_embedding.
    Int8Embedding` (idempotent). ``keep_float`` (the default) keeps the float modules it replaced, so that
    :func:`dequantize` gives back exactly those weights. ``keep_float=False`` lets them go, and with them the float
    memory (:func:`dequantize` then gives the int8 values as floats), and makes the linear layers packed-only: each
    holds its int8 values once, in the packed copy its first product makes (:mod:`tformer.fast.int8`), so that the
    model takes about a quarter of float32's memory; this is what ``--precision int8`` does. A head tied to a float
    embedding is kept (its weight lives on in the embedding). ``"fp32"`` (or ``"float32"``): :func:`dequantize`.
    """
    yes_no.check(keep_float, "keep_float")  # "no" is a true string: refused, not taken for True
    if precision in ("fp32", "float32"):
        return dequantize(model)
    if precision != "int8":
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    tied = _tied_weights(model)
    tables: dict[int, tuple] = {}  # id(float weight) -> (q, s) of the int8 table made of it, for every holder

    def swap_table(m: nn.Module) -> nn.Module | None:
        if not _is_table(m):
            return None
        assert isinstance(m, nn.Embedding)
        values = tables.get(id(m.weight))
        table = Int8Embedding.from_embedding(m, keep_float, values)
        tables[id(m.weight)] = (table.weight_int8, table.weight_scale)
        return table

    def swap(m: nn.Module) -> nn.Module | None:
        if not isinstance(m, nn.Linear) or not _is_linear(m):
            return None
        values = tables.get(id(m.weight))
        keep = keep_float or (values is None and id(m.weight) in tied)
        return Int8Linear.from_linear(m, keep, packed_only=not keep_float, values=values)

    replace_modules(model, swap_table)
    replace_modules(model, swap)
    return model


def dequantize(model: nn.Module) -> nn.Module:
    """``model`` with a float module in place of every int8 one (:data:`INT8_MODULES`), in place; returns it.
    A module :func:`quantize` kept comes back as it was (the same module and weights); any other becomes an
    ``nn.Linear`` or ``nn.Embedding`` holding ``q · s`` (a model read from an int8 directory has no other float
    weights to give), and modules that held one int8 table (a tied head, shared tables) hold one float weight."""
    floats: dict[int, torch.Tensor] = {}  # id(int8 table) -> the float weight given back for it
    held = {id(p) for p in model.parameters()}  # float weights the model holds itself (a load filled them)

    def kept(m: Int8Linear | Int8Embedding) -> nn.Module | None:
        """The float module quantize kept, unless a load has given the int8 one other values since (then q · s);
        a head whose weight is a float table of the model's own (tied) took the load with it."""
        fresh = m.original is not None and (
            not getattr(m, "stale", False) or id(getattr(m.original, "weight", None)) in held
        )
        return m.original if fresh else None

    def float_table(m: nn.Module) -> nn.Module | None:
        if not isinstance(m, Int8Embedding):
            return None
        original = kept(m)
        table = original or m.to_embedding()
        assert isinstance(table, nn.Embedding)
        if original is None and id(m.weight_int8) in floats:
            table.weight = floats[id(m.weight_int8)]  # tied again
        floats.setdefault(id(m.weight_int8), table.weight)
        return table

    def float_linear(m: nn.Module) -> nn.Module | None:
        if not isinstance(m, Int8Linear):
            return None
        if (original := kept(m)) is not None:
            # a tied head after a load: its weight followed, its bias is here
            if getattr(m, "stale", False) and m.bias is not None:
                with torch.no_grad():
                    cast(torch.Tensor, original.bias).copy_(m.bias)
            return original
        linear = m.to_linear()
        if m.shares_values and id(m.weight_int8) in floats:
            linear.weight = floats[id(m.weight_int8)]  # a head tied to its embedding again
        return linear

    replace_modules(model, float_table)
    replace_modules(model, float_linear)
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
    """The names of ``model``'s int8 linear layers, in order."""
    return [name for name, m in model.named_modules() if isinstance(m, Int8Linear)]


def quantized_embeddings(model: nn.Module) -> list[str]:
    """The names of ``model``'s int8 embedding tables, in order."""
    return [name for name, m in model.named_modules() if isinstance(m, Int8Embedding)]


def is_quantized(model: Any) -> bool:
    """Whether ``model`` holds int8 layers: tformer's, or PyTorch's own quantized modules (``torch.ao``)."""
    if not isinstance(model, nn.Module):
        return False
    return any(
        isinstance(m, INT8_MODULES) or type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()
    )


def quantization_record(model: nn.Module) -> dict | None:
    """What ``config.json`` says of an int8 model: the method, its int8 linear layers (``modules``) and, when it
    has any, its int8 embedding tables (``embeddings``); None for a float model."""
    names, tables = quantized_modules(model), quantized_embeddings(model)
    if not names and not tables:
        return None
    record: dict[str, Any] = {"method": METHOD, "scales": "float32, one per output channel", "modules": names}
    if tables:
        record["scales"] = "float32, one per output channel (embeddings: one per row)"
        record["embeddings"] = tables
    if names and all(m.packed_only for m in model.modules() if isinstance(m, Int8Linear)):
        record["packed_only"] = True  # read back as it was, so that the loaded model computes what this one did
    return record


def pack_only(model: nn.Module) -> nn.Module:
    """Make every :class:`~tformer.fast.int8.Int8Linear` of ``model`` packed-only (:mod:`tformer.fast.int8`): one
    packing each, the int8 values held once; what ``--precision int8`` does to a model read from an int8
    directory. Returns ``model``."""
    for m in model.modules():
        if isinstance(m, Int8Linear) and not m.packed_only:
            m._restore()  # the copies of the other mode go
            m.packed_only = True
    return model


def apply_record(model: nn.Module, record: Any, where: str) -> nn.Module:
    """Put an empty :class:`~tformer.fast.int8.Int8Linear` (``Int8Embedding``) where ``record`` (``config.json``'s
    ``quantization``) names one in ``model`` (just built from its config), for the saved int8 weights to fill;
    returns ``model``. The linear layers are packed-only (:mod:`tformer.fast.int8`) when the record says so (the
    saved model's were). A head tied to an int8 table holds that table's buffers, as :func:`quantize` made it. A
    record tformer does not read is a ValueError naming ``where`` (the file) and the field."""
    if not isinstance(record, dict) or record.get("method") != METHOD:
        got = record.get("method") if isinstance(record, dict) else record
        raise ValueError(f"{where}: quantization.method must be {METHOD!r}, got {got!r:.60}")
    lists: dict[str, list[str]] = {}
    for field, value in (("modules", record.get("modules")), ("embeddings", record.get("embeddings", []))):
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise ValueError(f"{where}: quantization.{field} must be a list of layer names")
        lists[field] = value
    names, table_names = lists["modules"], lists["embeddings"]
    packed_only = record.get("packed_only", False)
    if not isinstance(packed_only, bool):
        raise ValueError(f"{where}: quantization.packed_only must be true or false, got {packed_only!r:.40}")
    modules = dict(model.named_modules())
    for name in names:
        if not _is_linear(modules.get(name, nn.Identity())):
            raise ValueError(f"{where}: quantization.modules names {name!r:.80}, not a linear layer of this model")
    for name in table_names:
        if type(modules.get(name)) is not nn.Embedding:
            raise ValueError(f"{where}: quantization.embeddings names {name!r:.80}, not an embedding of this model")
    tied = _tied_weights(model)
    tables: dict[int, tuple] = {}  # id(float weight) -> (q, s) of the int8 table made of it
    wanted_tables = {id(modules[n]) for n in table_names}

    def empty_table(m: nn.Module) -> nn.Module | None:
        if id(m) not in wanted_tables:
            return None
        assert isinstance(m, nn.Embedding)
        table = Int8Embedding(m.num_embeddings, m.embedding_dim, m.padding_idx, m.weight.device)
        if id(m.weight) in tables:  # tables tied to one weight hold one int8 table
            table.weight_int8, table.weight_scale = tables[id(m.weight)]
        tables[id(m.weight)] = (table.weight_int8, table.weight_scale)
        return table.train(m.training)

    wanted = {id(modules[n]) for n in names}
    replace_modules(model, empty_table)
    replace_modules(model, lambda m: _empty_twin(m, tied, tables, packed_only) if id(m) in wanted else None)
    return model


def _empty_twin(linear: nn.Module, tied: set[int], tables: dict[int, tuple], packed_only: bool) -> Int8Linear:
    """An :class:`~tformer.fast.int8.Int8Linear` of ``linear``'s shape, for the saved weights to fill. A
    head tied to an int8 table (``tables``) holds that table's buffers; one tied to a float embedding (``tied``)
    keeps ``linear`` as its original, whose float weight (the embedding's) is read from the file too."""
    assert isinstance(linear, nn.Linear)
    layer = Int8Linear(
        linear.in_features, linear.out_features, linear.bias is not None, linear.weight.device, packed_only
    )
    values = tables.get(id(linear.weight))
    if values is not None:
        layer.share_values(*values)
    keep = values is None and id(linear.weight) in tied
    layer.__dict__["original"] = linear if keep else None
    if keep and linear.bias is not None:  # the file's bias fills the original's too (one storage): dequantize gives it
        layer._buffers["bias"] = linear.bias.detach()
    return layer.train(linear.training)


def require_float(model: Any, needs: str, what: str | None = None) -> None:
    """A one-line ValueError if ``model`` is int8: ``needs`` says what needs float weights (``"training"``), ``what``
    names the model (a directory, a flag; default: its class)."""
    if is_quantized(model):
        raise ValueError(
            f"{what or type(model).__name__} is an int8 model (tformer.quantize); {needs} needs float weights: use "
            "the float32 model it was made from (tformer.dequantize(model) gives only its int8 values as floats)"
        )
