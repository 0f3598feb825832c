"""What the Hugging Face converters share: field checks, activation names, weight renaming, Q/K/V fusing and
splitting, tied weights, strict loading, dtypes, and the refusal of a tformer setting that has no equivalent.

Each architecture file (:mod:`.gpt2`, :mod:`.llama`, :mod:`.gemma3`, :mod:`.bert`, :mod:`.marian`) imports from
here; none imports another, and nothing here imports ``transformers``.

Dimension legend: D model dim, H query heads, Hkv key/value heads, Dh head dim.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from tformer.models.loading import fill

__all__ = [
    "ACTIVATIONS",
    "activation",
    "hf_activation",
    "Fields",
    "check_fields",
    "make_config",
    "in_own_words",
    "Names",
    "translate",
    "rename",
    "fuse_qkv",
    "split_qkv",
    "drop_tied",
    "load_state",
    "check_fit",
    "contiguous_copy",
    "pad_id",
    "DTYPES",
    "dtype_from_hf",
    "dtype_name",
    "refuse",
    "require",
    "check_decoder",
    "GEMMA_FIELDS",
    "NEOX_FIELDS",
]

# Hugging Face ``hidden_act`` / ``activation_function`` name -> ours (and back: the first name of each of ours)
ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu2": "relu2",
}


def activation(name: str, field: str, allowed: Mapping[str, str] = ACTIVATIONS) -> str:
    """Our activation name for Hugging Face's ``name`` (read from the config field ``field``)."""
    if name not in allowed:
        raise ValueError(f"from_hf: {field}={name!r} is not supported; supported: {sorted(allowed)}")
    return allowed[name]


def hf_activation(ours: str, allowed: Mapping[str, str] = ACTIVATIONS) -> str | None:
    """Hugging Face's first name for our activation ``ours`` (None if ``allowed`` has none)."""
    return next((hf for hf, name in allowed.items() if name == ours), None)


# --------------------------------------------------------------------------------------------- config fields

Fields = dict[str, tuple[str, bool]]  # config.json field -> (kind, whether null is allowed: read as "absent")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # kind -> (test, what the message says is expected)
    "count": (lambda v: _is_int(v) and v > 0, "an integer > 0"),
    "index": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: _is_number(v) and v > 0, "a finite number > 0"),
    "number": (_is_number, "a finite number"),
    "fraction": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "object": (lambda v: isinstance(v, Mapping), "a JSON object"),
    "strings": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
}
_ROPE_FIELDS = {"rope_theta": "positive", "partial_rotary_factor": "number", "rope_type": "str", "type": "str"}


def check_fields(hf: Mapping, fields: Fields) -> None:
    """Every field of ``fields`` present in ``hf`` has its kind (and the RoPE dicts' ``rope_theta`` ...); a
    ``ValueError`` names the first that does not, its value and what it must be. A JSON ``"2"``, ``true`` or ``-5``
    where a count or a positive number belongs would otherwise be cast or give NaN (``rope_theta=-5``), and
    ``tie_word_embeddings="no"`` would read as true."""
    where = f"{hf.get('model_type')} config" if isinstance(hf.get("model_type"), str) else "config"
    for field, (kind, nullable) in fields.items():
        if field in hf and not (hf[field] is None and nullable):
            _check(where, field, hf[field], kind)
    for field in ("rope_parameters", "rope_scaling"):
        if field not in fields:
            continue
        params = hf.get(field) or {}
        # v5 Gemma 3: one dict per kind of layer
        nested = [(f"{field}.{k}", v) for k, v in params.items() if k in ("full_attention", "sliding_attention")]
        for name, sub in [(field, params), *nested]:
            _check(where, name, sub, "object")
            for key, kind in _ROPE_FIELDS.items():
                if key in sub and not (sub[key] is None and key != "rope_theta"):
                    _check(where, f"{name}.{key}", sub[key], kind)


def _check(where: str, field: str, value: Any, kind: str) -> None:
    test, expected = _KINDS[kind]
    if not test(value):
        raise ValueError(f"{where} {field}={value!r} must be {expected}")


C = TypeVar("C")


def make_config(cls: Callable[..., C], hf: Mapping, names: Mapping[str, str], **fields: Any) -> C:
    """``cls(**fields)``, our config read from the Hugging Face config ``hf``; a value it refuses is said in the
    file's own words: ``names`` maps each of our fields to the config.json field it was read from, so
    ``GPTConfig.d_model must be divisible by n_heads`` reaches the user as ``hidden_size must be divisible by
    num_attention_heads``."""
    try:
        return cls(**fields)
    except ValueError as err:
        where = f"{hf.get('model_type')} config" if isinstance(hf.get("model_type"), str) else "config"
        raise ValueError(f"{where}: {in_own_words(str(err), getattr(cls, '__name__', ''), names)}") from None


def in_own_words(message: str, config_class: str, names: Mapping[str, str]) -> str:
    """``message`` (a refusal by our ``config_class``) with each of our field names replaced by the Hugging Face one
    it maps to (``names``): ``GPTConfig.d_model`` and ``d_model`` → ``hidden_size``; a field read from no config.json
    field loses its class (``positional='rope' needs ...``), and the class alone becomes "this config"."""
    fields = "|".join(sorted(map(re.escape, names), key=len, reverse=True)) or "(?!)"
    message = re.sub(rf"\b(?:{config_class}\.)?({fields})\b", lambda m: names[m.group(1)], message)
    message = re.sub(rf"\b{config_class}\.", "", message)
    return re.sub(rf"\b{config_class}\b", "this config", message)


def pad_id(hf: Mapping) -> int | None:
    """``pad_token_id`` when it is an id of the vocabulary, else None."""
    pad = hf.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < hf["vocab_size"] else None


# --------------------------------------------------------------------------------------------------- weights

Names = list[tuple[str, str]]  # (Hugging Face prefix, ours); {i} is a layer index. Read both ways.


def translate(key: str, names: Names, to_ours: bool) -> str | None:
    """``key`` with its prefix swapped by the one rule of ``names`` that matches (None if none does)."""
    for hf_name, ours in names:
        src, dst = (hf_name, ours) if to_ours else (ours, hf_name)
        match = re.match(re.escape(src).replace(r"\{i\}", r"(\d+)"), key)
        if match:
            return (dst.replace("{i}", match.group(1)) if match.groups() else dst) + key[match.end() :]
    return None


Rules = list[tuple[str, str]]  # (regex, replacement)


def rename(key: str, prefix: Rules, renames: Rules, family: str, to_ours: bool = True) -> str:
    """Normalise ``key`` with the ``prefix`` rules, then apply the one ``renames`` rule that matches it; a key no
    rule matches is a ``ValueError`` naming it (``to_ours``: a Hugging Face weight read, else one of ours written)."""
    for pattern, repl in prefix:
        key = re.sub(pattern, repl, key)
    for pattern, repl in renames:
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    if to_ours:
        raise ValueError(f"from_hf: unexpected {family} weight {key!r} (no mapping to tformer)")
    raise ValueError(f"weight {key!r} has no place in the Hugging Face {family} layout")


def fuse_qkv(state: dict[str, torch.Tensor], names: tuple[str, str, str]) -> dict[str, torch.Tensor]:
    """Each attention's ``<attn>.{q}.{weight,bias}``, ``{k}``, ``{v}`` → one ``<attn>.qkv_proj.*`` (rows Q, K, V).

    ``names`` are the three projection names of the source library, e.g. ``("query", "key", "value")``; a Q
    without its K and V is a ``ValueError`` naming the attention.
    """
    q_name = f".{names[0]}."
    fused = {}
    for key in [k for k in state if q_name in k]:
        prefix, kind = key.split(q_name)  # e.g. "decoder.layers.0.cross_attn", "weight"
        parts = [state.pop(f"{prefix}.{name}.{kind}", None) for name in names]
        if any(p is None for p in parts):
            raise ValueError(f"weights {prefix}: {names[0]}.{kind} without {names[1]}.{kind} and {names[2]}.{kind}")
        fused[f"{prefix}.qkv_proj.{kind}"] = torch.cat(parts, dim=0)  # type: ignore[arg-type]  # (H·Dh + 2·Hkv·Dh, D)
    return {**state, **fused}


def split_qkv(
    state: Mapping[str, torch.Tensor], names: tuple[str, str, str], rows: tuple[int, int, int]
) -> dict[str, torch.Tensor]:
    """The inverse of :func:`fuse_qkv`: each ``<attn>.qkv_proj.*`` → ``<attn>.{q}.*``, ``{k}``, ``{v}``, the
    fused rows cut into ``rows`` (Q (H·Dh), K (Hkv·Dh), V (Hkv·Dh))."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if ".qkv_proj." not in key:
            out[key] = tensor
            continue
        start, kind = key.split(".qkv_proj.")
        for name, part in zip(names, tensor.split(list(rows))):
            out[f"{start}.{name}.{kind}"] = part
    return out


def drop_tied(state: dict[str, torch.Tensor], key: str, tied_to: str, message: str) -> str:
    """Remove ``key`` (tied to ``tied_to`` in our model) after checking the checkpoint really ties them.

    Raises ``ValueError(message)`` when both are present and differ; returns ``key``.
    """
    tensor = state.pop(key, None)
    other = state.get(tied_to)
    if tensor is not None and other is not None and not torch.equal(tensor, other):
        raise ValueError(message)
    return key


def load_state(
    model: nn.Module, state: Mapping[str, torch.Tensor], tied: tuple[str, ...] = (), owned: bool = False
) -> nn.Module:
    """Put ``state`` (our names) into ``model``: every weight used, every parameter filled (but the ``tied`` ones,
    and a GPT's tied ``output.weight``), shapes equal. ``owned``: the tensors are the caller's alone (read from a
    file) and go in as they are (:func:`tformer.models.loading.fill`); else they are copied."""
    check_fit(model, state, tied)
    fill(model, state if isinstance(state, dict) else dict(state), owned)  # each dropped from ``state`` once in
    return model


def check_fit(model: nn.Module, state: Mapping[str, torch.Tensor], tied: tuple[str, ...] = ()) -> None:
    """``state`` (our names; tensors of any device, the meta one included: only names and shapes are read) fills
    every parameter of ``model`` but the ``tied`` ones (and a GPT's tied ``output.weight``), with nothing left over
    and every shape equal; else one ``ValueError`` listing what is missing, unexpected or of another shape."""
    expected = model.state_dict()
    tied_set = set(tied) | ({"output.weight"} if getattr(model.config, "tie_embeddings", False) else set())
    missing = sorted(set(expected) - set(state) - tied_set)
    unexpected = sorted(set(state) - set(expected))
    both = sorted(set(state) & set(expected))
    wrong = [
        f"{k}: {tuple(state[k].shape)} vs {tuple(expected[k].shape)}"
        for k in both
        if state[k].shape != expected[k].shape
    ]
    if missing or unexpected or wrong:
        raise ValueError(
            f"weights do not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}, shapes {wrong[:5]}"
        )


def contiguous_copy(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor its own contiguous CPU copy: safetensors refuses tensors that share storage."""
    return {k: t.detach().cpu().contiguous().clone() for k, t in state.items()}


# ---------------------------------------------------------------------------------------------------- dtypes

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def dtype_from_hf(hf: Mapping) -> torch.dtype | None:
    """The weights' dtype named in a ``config.json`` (v5 ``dtype``, v4 ``torch_dtype``); None if absent."""
    name = hf.get("dtype") or hf.get("torch_dtype")
    if name is None:
        return None
    if name not in DTYPES:
        raise ValueError(f"config dtype={name!r} is not supported; supported: {sorted(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``, ...; a dtype Hugging Face configs do not name is a ValueError."""
    names = {v: k for k, v in DTYPES.items()}
    if dtype not in names:
        raise ValueError(f"weights of dtype {dtype} cannot be exported; supported: {sorted(DTYPES)}")
    return names[dtype]


# -------------------------------------------------------------------------------------------------- refusals


def refuse(config: Any, field: str, why: str) -> ValueError:
    """The one-line refusal of a tformer setting that no Hugging Face class can hold: it names the field."""
    return ValueError(f"{type(config).__name__}.{field}={getattr(config, field)!r} has no Hugging Face layout: {why}")


def require(config: Any, wanted: Mapping[str, Any], layout: str) -> None:
    """Refuse the first field of ``config`` that differs from ``wanted`` (field -> the one value ``layout`` has)."""
    for field, value in wanted.items():
        if getattr(config, field) != value:
            raise refuse(config, field, f"the {layout} layout needs {field}={value!r}")


# GPTConfig fields of Gemma's block (tformer.hf.gemma3): GPT-2 and the Llama family have none of them
GEMMA_FIELDS = (
    "attn_softcap",
    "final_softcap",
    "sliding_window_pattern",
    "rope_local_base",
    "norm_scale",
    "sandwich_norm",
    "embed_scale",
    "attn_scale",
)


# GPTConfig fields of GPT-NeoX's block (tformer.hf.gpt_neox): no other layout has them
NEOX_FIELDS = ("parallel_residual", "rope_dim")


# GPTConfig fields no Hugging Face decoder has (x-transformers' and RWKV's ideas, tformer's own in this form)
TFORMER_FIELDS = ("shift_tokens",)


def check_decoder(config: Any, gemma: bool = False, neox: bool = False) -> None:
    """What every decoder layout needs of a GPTConfig: pre-LN with a final norm, RoPE scaling only with RoPE, and
    (unless ``gemma``) Gemma's fields at their defaults, (unless ``neox``) GPT-NeoX's; tformer's own at theirs."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for field in TFORMER_FIELDS:
        if field in defaults and getattr(config, field) != defaults[field]:
            raise refuse(  # (the Tiny Shakespeare recipes set it: the flag trains their model without it)
                config,
                field,
                f"no Hugging Face decoder has it (tformer.nn.shift); only {defaults[field]!r} "
                f"(`tformer train lm --{field.replace('_', '-')} {defaults[field]!r}` trains one without it)",
            )
    for field in () if neox else NEOX_FIELDS:
        if field in defaults and getattr(config, field) != defaults[field]:
            raise refuse(config, field, f"only GPT-NeoX's block (RoPE with an MLP) has it; only {defaults[field]!r}")
    if not gemma:
        for field in GEMMA_FIELDS:
            if field in defaults and getattr(config, field) != defaults[field]:
                raise refuse(
                    config, field, f"GPT-2, Llama, Mistral and Qwen have no {field} (Gemma's); only {defaults[field]!r}"
                )
    if not config.norm_first or config.final_norm is False:
        field = "norm_first" if not config.norm_first else "final_norm"
        raise refuse(config, field, "GPT-2, Llama and Gemma are pre-LN with a final norm")
    if config.rope_scaling is not None and config.positional != "rope":
        raise refuse(config, "rope_scaling", "needs positional='rope'")
