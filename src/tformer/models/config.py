"""The shape every model config shares: validation, presets, ``replace``, the derived layer config, JSON.

Each family's config is a frozen dataclass (:class:`~tformer.models.seq2seq.Seq2SeqConfig`,
:class:`~tformer.models.gpt.GPTConfig`, :class:`~tformer.models.bert.BertConfig`) derived from
:class:`ModelConfig`, which declares the fields all three have, once (with the paper's defaults; GPT-2's and
BERT's are a table in their family's module), and holds what is the same for all three:

* ``__post_init__`` validates, before anything is allocated: each field's type against its annotation
  (an ``int`` field takes an integer, not ``"64"``, ``64.0`` or ``true``; a ``float`` field a finite number;
  a ``bool`` field ``true``/``false``), positive sizes, ``d_model`` divisible by ``n_heads``, the
  activation, dropouts in [0, 1), ``norm_eps`` > 0, then the family's own checks
  (:meth:`ModelConfig.validate`), then the size: a config whose parameter count, computed from its fields
  (:meth:`ModelConfig.approx_parameters`), exceeds :data:`MAX_PARAMETERS` (20 billion, 80 GB of float32
  weights: far beyond what this toolkit trains, so a typo or a crafted ``config.json``) is refused before a
  tensor exists. Every message names the field and what it may be, e.g.
  ``GPTConfig.positional must be one of 'learned', ...``;
* ``preset(name, **overrides)`` from the family's ``PRESETS`` table;
* ``replace(**changes)``, a validated copy;
* ``layer``: the :class:`~tformer.nn.layers.LayerConfig` one encoder/decoder layer needs;
* ``to_dict()`` / ``from_dict(d)``: plain JSON-able data. ``from_dict`` maps field names of older
  releases to today's (``RENAMED``, e.g. seq2seq's ``tie_output`` → ``tie_embeddings``), so their
  ``config.json`` files still load.

The same idea has the same field name in every family: ``d_model``, ``n_heads``, ``d_ff``,
``dropout``, ``attn_dropout``, ``ffn_dropout``, ``activation``, ``norm_first``, ``norm_eps``, ``bias``, ``max_len``,
``positional``, ``tie_embeddings``, ``pad_id``; ``n_layers`` for a single stack.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from tformer.checks import check_positive
from tformer.nn.feedforward import ACTIVATIONS
from tformer.nn.layers import LAYER_OPTIONS, LayerConfig, check_layer_options

__all__ = ["ModelConfig", "MAX_PARAMETERS", "MAX_TABLE_POSITIONS", "shape_given"]

# The largest model a config may describe (parameters, counted from the fields before building):
# 20 billion, 80 GB of float32 weights. Far above anything this toolkit trains; a config.json past it
# is a typo or a crafted file, refused before a tensor is allocated.
MAX_PARAMETERS = 20_000_000_000
# A position table (sinusoidal or learned) is allocated whole when the model is built: (max_len, d_model). A
# max_len of 10⁸ stays under MAX_PARAMETERS with a small d_model yet asks for tens of GB; 2²⁰ positions is
# far past every tabled model (GPT-2: 1,024; BERT: 512). Rotary positions have no table and no such limit.
MAX_TABLE_POSITIONS = 1 << 20

C = TypeVar("C", bound="ModelConfig")


class _NamesItsFields:
    """Refuses a field the family does not have before the dataclass's ``__init__`` would, saying what the field is
    called here: ``GPTConfig(n_embd=384)`` (nanoGPT's name) is told ``d_model``, a misspelling its nearest. A base
    of :class:`ModelConfig` rather than its own method, so that ``inspect.signature`` of every config (help, the
    API's checks) still reads the dataclass's ``__init__``."""

    def __new__(cls, *args: Any, **fields: Any):
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = [name for name in fields if name not in known]
        if unknown:
            raise TypeError(unknown_fields(cls, unknown))
        return super().__new__(cls)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig(_NamesItsFields):
    """Base of the three family configs: the fields every family has, declared here once.

    Their defaults are the paper's; a family states its own in one table, as a class keyword
    (``class GPTConfig(ModelConfig, defaults=GPT2)``), and declares only the fields it alone has. Every field
    is keyword-only, so a family's required field (``vocab_size``) needs no place in the order.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}  # name -> field values
    RENAMED: ClassVar[dict[str, str]] = {}  # field name in an older config.json -> today's name
    POSITIVE: ClassVar[tuple[str, ...]] = ()  # the family's integer fields that must be > 0

    d_model: int = 512  # the width of every token's vector
    n_heads: int = 8  # attention heads (d_model = n_heads · head_dim unless head_dim is set apart)
    d_ff: int = 2048  # the feed-forward's hidden width
    dropout: float = 0.1
    attn_dropout: float | None = None  # dropout on the attention weights; None = same as dropout
    ffn_dropout: float | None = None  # dropout on the feed-forward's hidden layer; None = same as dropout; 0 = GPT-2's
    activation: str = "relu"  # of the feed-forward: "relu" (paper) | "gelu" | "gelu_tanh" | "relu2" | "silu"
    norm_first: bool = False  # False = post-LN (paper); True = pre-LN (GPT-2)
    norm_eps: float = 1e-5
    bias: bool = True  # biases in the linear layers
    max_len: int = 512  # longest sequence: the positional table's rows, a GPT's context
    # today's layer options (the defaults are the paper's layer)
    norm: str = "layernorm"  # "layernorm" | "rmsnorm": x / √(mean(x²) + norm_eps) · w
    ffn: str = "mlp"  # "mlp" | "swiglu" | "geglu": down(act(gate(x)) · up(x)), d_ff the hidden width
    n_kv_heads: int | None = None  # key/value heads: None = n_heads; 1 = multi-query; else grouped-query
    qk_norm: bool = False  # RMSNorm (norm_eps) on each head's queries and keys (Qwen3, Gemma 3)

    def __init_subclass__(cls, defaults: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        """``defaults``: the family's defaults of shared fields, turned into the field declarations the
        dataclass decorator reads (the type and the meaning stay the ones above)."""
        super().__init_subclass__(**kwargs)
        shared = {f.name: f for f in dataclasses.fields(ModelConfig)}
        annotations = cls.__dict__.get("__annotations__", {})
        for name, value in (defaults or {}).items():
            if name not in shared:
                raise TypeError(f"{cls.__name__}: {name!r} is not a field every family shares")
            annotations[name] = shared[name].type
            setattr(cls, name, value)
        cls.__annotations__ = annotations

    def __post_init__(self) -> None:
        self.check_types()
        check_positive(self, "d_model", "n_heads", "d_ff", "max_len", *self.POSITIVE)
        if self.d_model % self.n_heads != 0 and "head_dim" not in self._field_names():  # else Dh is set apart
            raise ValueError(
                f"{self._name('d_model')} must be divisible by n_heads, "
                f"got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        self.check_choice("activation", sorted(ACTIVATIONS))
        for name in ("dropout", "attn_dropout", "ffn_dropout"):
            p = getattr(self, name)
            if p is not None and not 0.0 <= p < 1.0:
                raise ValueError(f"{self._name(name)} must be in [0, 1), got {p}")
        if not self.norm_eps > 0:
            raise ValueError(f"{self._name('norm_eps')} must be > 0, got {self.norm_eps}")
        self.check_layer_options()
        self.validate()
        if getattr(self, "positional", None) != "rope" and self.max_len > MAX_TABLE_POSITIONS:
            raise ValueError(
                f"{self._name('max_len')} must be at most {MAX_TABLE_POSITIONS:,} with a position table "
                f"(positional={getattr(self, 'positional', 'sinusoidal')!r}), got {self.max_len:,}"
            )
        n = self.approx_parameters()
        if n > MAX_PARAMETERS:
            sizes = ", ".join(
                f"{name}={getattr(self, name)}"
                for name in self._field_names()
                if name in ("d_model", "d_ff", "max_len", "n_segments", "num_labels")
                or name.endswith("vocab_size")
                or name.startswith("n_")
                and name.endswith("layers")
            )
            raise ValueError(
                f"{type(self).__name__} describes about {n:,} parameters, more than the limit of "
                f"{MAX_PARAMETERS:,} (tformer.models.config.MAX_PARAMETERS): {sizes}"
            )

    def check_types(self) -> None:
        """Each field's value must match its annotation (``int``, ``float``, ``bool``, ``str``, ``X | None``).

        JSON gives ``"64"``, ``64.0``, ``1e9`` or ``true`` as easily as ``64``: each is refused here with
        the field's name, instead of failing later deep inside PyTorch (or allocating terabytes).
        """
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, f.name)
            kinds = [k.strip() for k in str(f.type).split("|")]
            if value is None and "None" in kinds:
                continue
            if not any(_is_kind(value, k) for k in kinds):
                raise ValueError(f"{self._name(f.name)} must be {_describe(kinds)}, got {value!r}")

    def approx_parameters(self) -> int:
        """The parameter count, from the fields (no tensor built), within a few percent.

        Every embedding-like table (``*vocab_size``, ``n_segments``, ``max_len`` unless the positions are rotary,
        ``num_labels``) has ``d_model`` columns; an encoder layer has 4·D² (attention; 2·D² + 2·D²·Hkv/H
        grouped-query) + 2·D·F (feed-forward; 3·D·F gated) weights, a decoder layer with cross-attention
        8·D² + 2·D·F. Biases and norms are left out.
        """
        d, f = self.d_model, self.d_ff
        if getattr(self, "ffn", "mlp") != "mlp":  # a gated feed-forward has three D·F matrices, not two
            f = f * 3 // 2
        kv_heads = getattr(self, "n_kv_heads", None) or self.n_heads  # grouped-query: smaller W_K, W_V
        width = self.n_heads * self.head_dim  # H·Dh: = D unless head_dim is set apart
        attention = 2 * d * width + 2 * d * width * kv_heads // self.n_heads
        tables = [n for n in self._field_names() if n.endswith("vocab_size") or n in ("n_segments", "num_labels")]
        positions = 0 if getattr(self, "positional", None) == "rope" else self.max_len  # RoPE has no table
        rows = positions + sum(getattr(self, n) or 0 for n in tables)
        n_layers = getattr(self, "n_layers", 0) + getattr(self, "n_encoder_layers", 0)
        n_cross = getattr(self, "n_decoder_layers", 0)
        return rows * d + n_layers * (attention + 2 * d * f) + n_cross * (8 * d * d + 2 * d * f)

    def _field_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

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
        """What one encoder/decoder layer needs: the shared fields, plus the layer options the family has."""
        fields = set(self._field_names())
        options = {name: getattr(self, name) for name in LAYER_OPTIONS if name in fields}
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
            ffn_dropout=self.ffn_dropout,
            **options,
        )

    def check_layer_options(self) -> None:
        """The checks of the layer options a family has (``norm``, ``ffn``, ``n_kv_heads``, ...), each the one of
        :data:`tformer.nn.layers.LAYER_OPTIONS`, naming the field (``GPTConfig.sliding_window``)."""
        fields = set(self._field_names())
        options = {name: getattr(self, name) for name in LAYER_OPTIONS if name in fields}
        check_layer_options(options, self.n_heads, self.norm_first, self._name)

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
            raise ValueError(unknown_fields(cls, unknown))
        return cls(**data)


# other libraries' names for tformer's fields (nanoGPT's GPTConfig, Hugging Face's config.json): named in the error
# a config given them raises, not taken for them (a GPT-2 config.json goes through tformer.hf, which maps it whole)
OTHER_NAMES = {
    "n_embd": "d_model",
    "hidden_size": "d_model",
    "n_head": "n_heads",
    "num_attention_heads": "n_heads",
    "n_layer": "n_layers",
    "num_hidden_layers": "n_layers",
    "n_inner": "d_ff",
    "intermediate_size": "d_ff",
    "block_size": "max_len",
    "n_positions": "max_len",
    "max_position_embeddings": "max_len",
}


def unknown_fields(cls: type, unknown: list[str]) -> str:
    """``GPTConfig has no field 'n_embd': its name here is 'd_model'``, one clause per unknown name (the family's
    fields listed where a name has no near one)."""
    fields = sorted(f.name for f in dataclasses.fields(cls))
    said, lost = [], False
    for name in unknown:
        mapped = OTHER_NAMES.get(name)
        if mapped == "n_layers" and mapped not in fields:  # an encoder-decoder's two stacks
            said.append(f"{name!r}: its names here are 'n_encoder_layers' and 'n_decoder_layers'")
            continue
        close = [mapped] if mapped in fields else difflib.get_close_matches(name, fields, 1)
        said.append(f"{name!r}: its name here is {close[0]!r}" if close else repr(name))
        lost = lost or not close
    listed = f" (its fields: {', '.join(fields)})" if lost else ""
    return f"{cls.__name__} has no field {'; '.join(said)}{listed}"


def shape_given(**fields: float | None) -> dict[str, float]:
    """The fields of a model's shape a run was given over its preset's (``d_model=256, n_layers=None`` →
    ``{"d_model": 256}``): the ``--d-model``, ``--n-heads``, ``--d-ff``, ``--n-*layers`` and ``--ffn-dropout``
    flags."""
    return {name: value for name, value in fields.items() if value is not None}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "None":  # "X | None": None was accepted before, anything else must be an X
        return value is None
    return True  # an annotation this check does not know: left to the family's own checks


def _describe(kinds: list[str]) -> str:
    words = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string"}
    return " or ".join(words.get(k, k) for k in kinds)
