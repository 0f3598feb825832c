"""The shape every model config shares: validation, presets, ``replace``, the derived layer config, JSON.

Each family keeps its own frozen dataclass (:class:`~tformer.models.seq2seq.Seq2SeqConfig`,
:class:`~tformer.models.gpt.GPTConfig`, :class:`~tformer.models.bert.BertConfig`) with its own
fields and defaults — the paper's, GPT-2's, BERT's — and derives from :class:`ModelConfig`, which
holds what is the same for all three:

* ``__post_init__`` validates: positive sizes, ``d_model`` divisible by ``n_heads``, the activation,
  dropouts in [0, 1), then the family's own checks (:meth:`ModelConfig.validate`). Every message
  names the field and what it may be, e.g. ``GPTConfig.positional must be one of 'learned', ...``;
* ``preset(name, **overrides)`` from the family's ``PRESETS`` table;
* ``replace(**changes)``, a validated copy;
* ``layer``: the :class:`~tformer.nn.layers.LayerConfig` one encoder/decoder layer needs;
* ``to_dict()`` / ``from_dict(d)``: plain JSON-able data. ``from_dict`` maps field names of older
  releases to today's (``RENAMED``, e.g. seq2seq's ``tie_output`` → ``tie_embeddings``), so their
  ``config.json`` files still load.

The same idea has the same field name in every family: ``d_model``, ``n_heads``, ``d_ff``,
``dropout``, ``attn_dropout``, ``activation``, ``norm_first``, ``norm_eps``, ``bias``, ``max_len``,
``positional``, ``tie_embeddings``, ``pad_id``; ``n_layers`` for a single stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from tformer.checks import check_positive
from tformer.nn.layers import ACTIVATIONS, LayerConfig

__all__ = ["ModelConfig"]

C = TypeVar("C", bound="ModelConfig")


class ModelConfig:
    """Base of the three family configs, each a frozen dataclass.

    It is a plain class with no dataclass fields of its own: the fields every family has are only
    annotated here (for readers and the type checker), and each family declares them with its own
    defaults — in its own order, so a required field like ``vocab_size`` can come first.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}  # name -> field values
    RENAMED: ClassVar[dict[str, str]] = {}  # field name in an older config.json -> today's name
    POSITIVE: ClassVar[tuple[str, ...]] = ()  # the family's integer fields that must be > 0

    # fields every family has, declared (with the family's defaults) by the subclasses
    d_model: int
    n_heads: int
    d_ff: int
    dropout: float
    attn_dropout: float | None
    activation: str
    norm_first: bool
    norm_eps: float
    bias: bool
    max_len: int

    def __post_init__(self) -> None:
        check_positive(self, "d_model", "n_heads", "d_ff", "max_len", *self.POSITIVE)
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"{self._name('d_model')} must be divisible by n_heads, "
                f"got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        self.check_choice("activation", sorted(ACTIVATIONS))
        for name in ("dropout", "attn_dropout"):
            p = getattr(self, name)
            if p is not None and not 0.0 <= p < 1.0:
                raise ValueError(f"{self._name(name)} must be in [0, 1), got {p}")
        self.validate()

    def validate(self) -> None:
        """The family's own checks (overridden); the shared ones ran before."""

    # ------------------------------------------------------------------------------------- helpers

    def _name(self, field: str) -> str:
        return f"{type(self).__name__}.{field}"

    def check_choice(self, field: str, allowed) -> None:
        """``field`` must be one of ``allowed``."""
        value = getattr(self, field)
        if value not in allowed:
            raise ValueError(f"{self._name(field)} must be one of {', '.join(map(repr, allowed))}, got {value!r}")

    def check_token_id(self, field: str, vocab_size: int, optional: bool = False) -> None:
        """``field`` must be a token id in [0, vocab_size) (or ``None`` when ``optional``)."""
        value = getattr(self, field)
        if optional and value is None:
            return
        if not 0 <= value < vocab_size:
            allowed = f"{'None or ' if optional else ''}a valid token id in [0, {vocab_size})"
            raise ValueError(f"{self._name(field)} must be {allowed}, got {value}")

    # ---------------------------------------------------------------------------- derived, copies

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def layer(self) -> LayerConfig:
        """What one encoder/decoder layer needs."""
        return LayerConfig(
            self.d_model,
            self.n_heads,
            self.d_ff,
            self.dropout,
            self.attn_dropout,
            self.activation,
            self.norm_first,
            self.norm_eps,
            self.bias,
        )

    @classmethod
    def preset(cls: type[C], name: str, **overrides: Any) -> C:
        """``GPTConfig.preset("small", vocab_size=65)``: a named size from ``PRESETS``, fields overridden."""
        if name not in cls.PRESETS:
            raise ValueError(f"preset must be one of {sorted(cls.PRESETS)}, got {name!r}")
        return cls(**{**cls.PRESETS[name], **overrides})

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes``, validated like a new config."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]  # every subclass is a dataclass

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """The config from ``to_dict()`` output or an older release's ``config.json`` (old names mapped)."""
        data = {cls.RENAMED.get(k, k): v for k, v in data.items() if k != "model_type"}
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown config fields {unknown} for {cls.__name__}")
        return cls(**data)
