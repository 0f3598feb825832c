"""config.json's sizes against the weights' shapes, before a model is built.

A model is built from its config.json: ``vocab_size`` 150,000,000 beside a 300-row embedding asks for 38 GB, and
``num_hidden_layers`` 100,000 for 100,000 layers, before a weight is compared with anything. Each architecture
module says, in the file's own words, which size field gives which axis of which weight (``shapes(hf)``: a list of
:class:`Rule`, and the layer stacks with the field that counts them); :func:`check` holds the shapes the weights
file's header declares (a few kilobytes, read without the tensors) against them, and a weight that disagrees is one
line naming the field and the tensor::

    model config 'D/config.json' says vocab_size=150000000, but tensor 'model.embed_tokens.weight' in
    'D/model.safetensors' has shape (300, 64), where the config gives (vocab_size, hidden_size) = (150000000, 64)

The layer stacks are counted first (:func:`tformer.readers.check_layers`): ``num_hidden_layers`` 100,000 beside a file
of two layers is refused before one layer is built.

A size field the file holds no weight of (an embedding left out) is refused as well: nothing would check it before
the model is built. Names that no rule knows are left to the converter, which refuses them after this.

Dimension legend: V vocabulary size, D model dim, F feed-forward width.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tformer.readers import check_layers

__all__ = ["Dim", "Rule", "Shapes", "dim", "check"]


@dataclass(frozen=True)
class Dim:
    """A size config.json gives an axis, in the file's words: ``Dim("vocab_size", 32000)``; a product says what it
    multiplies (``num_key_value_heads × head_dim``)."""

    name: str
    value: int

    def __mul__(self, other: Dim | int) -> Dim:
        if isinstance(other, int):
            return Dim(f"{other} × {self.name}", other * self.value)
        return Dim(f"{self.name} × {other.name}", self.value * other.value)

    __rmul__ = __mul__

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


def dim(hf: Mapping, field: str, default: Dim | None = None) -> Dim:
    """The field ``field`` of ``hf`` as a :class:`Dim`; ``default`` when it is absent or null."""
    value = hf.get(field)
    if value is None and default is not None:
        return default
    return Dim(field, int(value))  # type: ignore[arg-type]  # checked by the module's FIELDS before


@dataclass(frozen=True)
class Rule:
    """A weight's expected shape: ``module`` (a name suffix, ``{i}`` a layer index) with ``.weight`` and ``.bias``;
    ``bias`` is the bias's shape (None: the weight's first axis, as in ``nn.Linear``; GPT-2's ``Conv1D`` differs)."""

    module: str
    weight: tuple[Dim, ...]
    bias: tuple[Dim, ...] | None = None

    def pattern(self) -> re.Pattern:
        body = re.escape(self.module).replace(r"\{i\}", r"\d+")
        return re.compile(rf"(?:^|\.){body}\.(weight|bias|gamma|beta)$")  # gamma / beta: TF-converted LayerNorms

    def shape(self, kind: str) -> tuple[Dim, ...]:
        if kind in ("weight", "gamma"):
            return self.weight
        return self.bias if self.bias is not None else self.weight[:1]


@dataclass(frozen=True)
class Shapes:
    """What an architecture's config gives its weights: the rules, the layer stacks (a name prefix with ``{i}`` →
    the field that counts them) and the size fields a file may hold no weight of (Marian's position table, which
    it never stores)."""

    rules: Sequence[Rule]
    stacks: Mapping[str, Dim]
    may_be_absent: tuple[str, ...] = ()


def check(shapes: Shapes, found: Mapping[str, tuple[int, ...]], config: str, file_of: Callable[[str], str]) -> None:
    """Refuse, naming the config field and the tensor, weights whose shapes (``found``: name → shape, from the
    header) are not what ``shapes`` (from the config) gives. ``config`` names the config (``model config
    'D/config.json'``), ``file_of(name)`` the file that holds the tensor ``name`` (``file_of("")``: the weights as a
    whole, a sharded directory's index)."""
    for prefix, count in shapes.stacks.items():
        check_layers(found, prefix, str(count), count.value, config, file_of(""))
    seen: set[str] = set()
    rules = [(rule, rule.pattern()) for rule in shapes.rules]
    for name, shape in found.items():
        for rule, pattern in rules:
            match = pattern.search(name)
            if match is None:
                continue
            dims = rule.shape(match.group(1))
            wanted = tuple(d.value for d in dims)
            if tuple(shape) != wanted:
                bad = next((d for d, n in zip(dims, shape) if d.value != n), dims[0] if dims else Dim("rank", 0))
                names = ", ".join(d.name for d in dims) + ("," if len(dims) == 1 else "")
                raise ValueError(
                    f"{config} says {bad}, but tensor {name!r} in {file_of(name)} has shape {tuple(shape)}, where the "
                    f"config gives ({names}) = {wanted}: the config and the weights do not belong together"
                )
            seen.update(d.name for d in dims)
            break
    for rule in shapes.rules:  # a size field that no weight holds would go unchecked into the model
        for d in rule.weight:
            if d.name.isidentifier() and d.name not in seen and d.name not in shapes.may_be_absent:
                raise ValueError(
                    f"{config} says {d}, but {file_of('')} holds no tensor of that size (such as "
                    f"'{rule.module.replace('{i}', '0')}.weight'): the config and the weights do not belong together"
                )
