"""Hugging Face ``config.json`` ↔ :class:`GPTConfig` for decoder-only models (GPT-2, Llama, Mistral, Qwen2, Qwen3).

The config half of :mod:`tformer.models.hf_format` (which re-exports everything public here; import from there).
Plain dicts, no ``transformers`` import.

* :func:`config_from_hf` reads transformers v4 keys (``rope_theta``, ``rope_scaling``, ``torch_dtype``, Qwen's
  ``use_sliding_window`` / ``max_window_layers``) and v5 ones (``rope_parameters``, ``dtype``, ``layer_types``);
* :func:`hf_model_type` picks the Hugging Face family that holds a config exactly, :func:`config_to_hf` writes it.

Every refusal is one ``ValueError`` naming the field and its value. Before any conversion, every field a converter
reads is checked for its type and range (:data:`FIELDS`): a JSON ``"2"``, ``true`` or ``-5`` where a count or
a positive number belongs is refused naming the Hugging Face field (``rope_theta=-5`` would give NaN angles,
``tie_word_embeddings="no"`` would read as true).

Dimension legend: D model dim, H query heads, Hkv key/value heads, Dh head dim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from tformer.models.gpt import GPTConfig
from tformer.models.hf_gemma import GEMMA3_TYPES, gemma3_config_from_hf

__all__ = [
    "FIELDS",
    "check_fields",
    "config_from_hf",
    "gpt2_config_from_hf",
    "dtype_from_hf",
    "hf_model_type",
    "config_to_hf",
    "gpt2_layout",
    "LLAMA_TYPES",
    "ARCHITECTURES",
]

LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # one weight layout, a few config quirks each
ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}
# GPT-2's ``activation_function`` -> ours (and back: the first name of each of ours)
_GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "relu2": "relu2",
}
_GEMMA_FIELDS = (
    "attn_softcap",
    "final_softcap",
    "sliding_window_pattern",
    "rope_local_base",
    "norm_scale",
    "sandwich_norm",
    "embed_scale",
    "attn_scale",
)  # GPTConfig fields that must keep their defaults to be written in a Hugging Face layout
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


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
# every config.json field a converter reads (GPT-2, the Llama family, Gemma 3): its kind, and whether null is
# allowed (where the converter reads null as "absent")
FIELDS: dict[str, tuple[str, bool]] = {
    "model_type": ("str", False),
    "vocab_size": ("count", False),
    # GPT-2
    "n_embd": ("count", False),
    "n_head": ("count", False),
    "n_layer": ("count", False),
    "n_inner": ("count", True),
    "n_positions": ("count", False),
    "resid_pdrop": ("fraction", False),
    "attn_pdrop": ("fraction", False),
    "layer_norm_epsilon": ("positive", False),
    "activation_function": ("str", False),
    "scale_attn_weights": ("bool", False),
    "scale_attn_by_inverse_layer_idx": ("bool", True),
    "reorder_and_upcast_attn": ("bool", True),
    "add_cross_attention": ("bool", True),
    # Llama, Mistral, Qwen2, Qwen3, Gemma 3
    "hidden_size": ("count", False),
    "num_attention_heads": ("count", False),
    "num_key_value_heads": ("count", True),
    "num_hidden_layers": ("count", False),
    "intermediate_size": ("count", False),
    "max_position_embeddings": ("count", False),
    "head_dim": ("count", True),
    "hidden_act": ("str", True),
    "hidden_activation": ("str", True),
    "pretraining_tp": ("count", True),
    "rms_norm_eps": ("positive", False),
    "attention_dropout": ("fraction", True),
    "attention_bias": ("bool", True),
    "mlp_bias": ("bool", True),
    "rope_theta": ("positive", False),
    "rope_local_base_freq": ("positive", False),
    "partial_rotary_factor": ("number", False),
    "rope_scaling": ("object", True),
    "rope_parameters": ("object", True),
    "sliding_window": ("count", True),
    "use_sliding_window": ("bool", True),
    "max_window_layers": ("index", True),
    "layer_types": ("strings", True),
    "sliding_window_pattern": ("count", True),
    "_sliding_window_pattern": ("count", True),
    "use_bidirectional_attention": ("bool", True),
    "query_pre_attn_scalar": ("positive", True),
    "final_logit_softcapping": ("positive", True),
    "tie_word_embeddings": ("bool", False),
}
_ROPE_FIELDS = {"rope_theta": "positive", "partial_rotary_factor": "number", "rope_type": "str", "type": "str"}


def check_fields(hf: Mapping, fields: Mapping[str, tuple[str, bool]] = FIELDS) -> None:
    """Every field of ``fields`` (default :data:`FIELDS`; ``tformer.interop.hf`` passes BERT's) present in ``hf``
    has its kind (and the RoPE dicts' ``rope_theta`` ...); a ``ValueError`` names the first that does not, its
    value and what it must be."""
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


def gpt2_layout(config: GPTConfig) -> bool:
    """Which of the two weight layouts ``config`` has: GPT-2's (plain MLP) or Llama's (gated feed-forward)."""
    return config.ffn == "mlp"


# ------------------------------------------------------------------------------------------------ config


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face decoder config dict; refuses what GPTConfig cannot express, and any
    field of the wrong type or out of range (:func:`check_fields`)."""
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise ValueError(f"config model_type={model_type!r} is not supported; supported: {sorted(ARCHITECTURES)}")
    check_fields(hf)
    if model_type == "gpt2":
        return gpt2_config_from_hf(hf)
    if model_type in LLAMA_TYPES:
        return _llama_config_from_hf(hf, model_type)
    if model_type in GEMMA3_TYPES:  # tformer.models.hf_gemma
        return gemma3_config_from_hf(hf)
    raise ValueError(f"config model_type={model_type!r} is not supported; supported: {sorted(ARCHITECTURES)}")


def gpt2_config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` from a Hugging Face GPT-2 config dict; refuses what our GPT cannot express."""
    for field in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if hf.get(field):
            raise ValueError(f"from_hf: GPT-2 with {field}=True is not supported")
    if not hf.get("scale_attn_weights", True):
        raise ValueError("from_hf: GPT-2 with scale_attn_weights=False is not supported (we always scale by 1/√d_k)")
    act = hf.get("activation_function", "gelu_new")
    if act not in _GPT2_ACTIVATIONS:
        raise ValueError(
            f"from_hf: activation_function={act!r} is not supported; supported: {sorted(_GPT2_ACTIVATIONS)}"
        )
    d_model = hf["n_embd"]
    return GPTConfig(
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=hf["n_head"],
        n_layers=hf["n_layer"],
        d_ff=hf.get("n_inner") or 4 * d_model,
        max_len=hf["n_positions"],
        dropout=hf["resid_pdrop"],
        attn_dropout=hf["attn_pdrop"],
        activation=_GPT2_ACTIVATIONS[act],
        norm_eps=hf["layer_norm_epsilon"],
        tie_embeddings=hf.get("tie_word_embeddings", True),
        pad_id=_pad_id(hf),
    )


def _llama_config_from_hf(hf: Mapping, model_type: str) -> GPTConfig:
    """Llama and its close relatives: RMSNorm, SwiGLU, RoPE, grouped-query attention, no bias by default."""
    _refuse_unless(hf, "hidden_act", "silu")  # SiLU in the gate is what makes the feed-forward SwiGLU
    _refuse_unless(hf, "pretraining_tp", 1, missing_ok=True)
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    kv_heads = hf.get("num_key_value_heads") or n_heads
    attention_bias = bool(hf.get("attention_bias", False))  # Llama, Qwen3: Q, K, V and O
    mlp_bias = bool(hf.get("mlp_bias", False))  # Llama only
    if model_type == "qwen2":  # Q, K, V bias always, none elsewhere
        bias, qkv_bias = False, True
    else:  # our ``bias`` covers W_O and the feed-forward together; Llama names them apart
        if attention_bias != mlp_bias:
            raise ValueError(
                f"{model_type} config attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported: "
                "tformer's GPT has one bias flag for the attention output and the feed-forward"
            )
        bias, qkv_bias = attention_bias, None
    theta, scaling = _rope(hf)
    return GPTConfig(
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=n_heads,
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        dropout=0.0,  # Llama-family models have no residual dropout
        attn_dropout=float(hf.get("attention_dropout") or 0.0),
        activation="silu",
        norm="rmsnorm",
        ffn="swiglu",
        positional="rope",
        rope_base=float(theta),
        norm_eps=hf["rms_norm_eps"],
        bias=bias,
        qkv_bias=qkv_bias,
        n_kv_heads=None if kv_heads == n_heads else kv_heads,
        qk_norm=model_type == "qwen3",
        sliding_window=_sliding_window(hf, model_type),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_id=_pad_id(hf),
        head_dim=hf.get("head_dim") or None,  # None: hidden_size / num_attention_heads (older configs lack it)
        rope_scaling=scaling,
    )


def _refuse_unless(hf: Mapping, field: str, expected: Any, missing_ok: bool = False) -> None:
    if field not in hf and missing_ok:
        return
    if hf.get(field) != expected:
        raise ValueError(f"{hf.get('model_type')} config {field}={hf.get(field)!r} is not supported, only {expected!r}")


def _rope(hf: Mapping) -> tuple[float, dict | None]:
    """RoPE's base θ and scaling dict (Hugging Face keys, None for none) from v5 ``rope_parameters`` or v4 keys."""
    params = dict(hf.get("rope_parameters") or {})  # v5: {"rope_type", "rope_theta", ...}
    params.update(hf.get("rope_scaling") or {})  # v4: {"rope_type" (or "type"), "factor", ...}
    theta = params.pop("rope_theta", hf.get("rope_theta", 10000.0))
    if "type" in params:  # v4's older spelling
        params.setdefault("rope_type", params.pop("type"))
    factor = params.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if factor != 1.0:
        raise ValueError(f"{hf.get('model_type')} config partial_rotary_factor={factor!r} is not supported, only 1.0")
    if params.get("rope_type", "default") == "default":
        return theta, None
    return theta, params


def _sliding_window(hf: Mapping, model_type: str) -> int | None:
    """The window every layer uses, or None; layers that differ (Qwen2's ``max_window_layers``) are refused."""
    window = hf.get("sliding_window")
    if model_type in ("llama", "mistral"):  # Llama has no window; Mistral's applies to every layer
        return window if model_type == "mistral" else None
    n_layers = hf["num_hidden_layers"]
    kinds = hf.get("layer_types")
    if kinds is None:  # v4 Qwen: layers from max_window_layers on slide, when use_sliding_window
        use = hf.get("use_sliding_window", False) and window is not None
        first = hf.get("max_window_layers", n_layers)
        kinds = ["sliding_attention" if use and i >= first else "full_attention" for i in range(n_layers)]
    unknown = sorted(set(kinds) - {"full_attention", "sliding_attention"})
    if unknown:
        raise ValueError(f"{model_type} config layer_types={unknown[0]!r} is not supported")
    if len(set(kinds)) > 1:
        raise ValueError(
            f"{model_type} config max_window_layers={hf.get('max_window_layers')!r} gives a sliding window to some "
            "layers only (layer_types differ); tformer's GPT uses one window for every layer"
        )
    return window if kinds and kinds[0] == "sliding_attention" else None


def _pad_id(hf: Mapping) -> int | None:
    pad = hf.get("pad_token_id")
    return pad if isinstance(pad, int) and 0 <= pad < hf["vocab_size"] else None


def dtype_from_hf(hf: Mapping) -> torch.dtype | None:
    """The weights' dtype named in a ``config.json`` (v5 ``dtype``, v4 ``torch_dtype``); None if absent."""
    name = hf.get("dtype") or hf.get("torch_dtype")
    if name is None:
        return None
    if name not in _DTYPES:
        raise ValueError(f"config dtype={name!r} is not supported; supported: {sorted(_DTYPES)}")
    return _DTYPES[name]


# ------------------------------------------------------------------------------------------------ export


def hf_model_type(config: GPTConfig) -> str:
    """The Hugging Face ``model_type`` that holds ``config`` exactly; a ``ValueError`` names the field that none does."""

    def refuse(field: str, why: str) -> ValueError:
        return ValueError(f"GPTConfig.{field}={getattr(config, field)!r} has no Hugging Face layout: {why}")

    defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    for field in _GEMMA_FIELDS:  # Gemma's options: none of the five families has them
        if field in defaults and getattr(config, field) != defaults[field]:
            raise refuse(field, f"GPT-2, Llama, Mistral and Qwen have no {field} (Gemma's); only {defaults[field]!r}")
    if not config.norm_first or config.final_norm is False:
        raise refuse(
            "norm_first" if not config.norm_first else "final_norm", "GPT-2 and Llama are pre-LN with a final norm"
        )
    if getattr(config, "rope_scaling", None) is not None and config.positional != "rope":
        raise refuse("rope_scaling", "needs positional='rope'")
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    if gpt2_layout(config):
        wanted = dict(positional="learned", norm="layernorm", bias=True, qk_norm=False, sliding_window=None)
        for field, value in wanted.items():
            if getattr(config, field) != value:
                raise refuse(field, f"the GPT-2 layout (ffn='mlp') needs {field}={value!r}")
        if not qkv_bias or (config.n_kv_heads or config.n_heads) != config.n_heads:
            raise refuse("qkv_bias" if not qkv_bias else "n_kv_heads", "GPT-2 has a biased, full-width c_attn")
        if config.head_dim != config.d_model // config.n_heads:
            raise refuse("head_dim", "GPT-2's head width is n_embd / n_head")
        if config.activation not in _GPT2_ACTIVATIONS.values():
            raise refuse("activation", f"GPT-2 allows {sorted(set(_GPT2_ACTIVATIONS.values()))}")
        return "gpt2"
    wanted = dict(ffn="swiglu", positional="rope", norm="rmsnorm", norm_weight_offset=0.0)
    for field, value in wanted.items():
        if getattr(config, field) != value:
            raise refuse(field, f"the Llama layout needs {field}={value!r}")
    if config.qk_norm:  # Qwen3: its attention_bias would put a bias on W_O as well, and its MLP has none
        if config.bias or qkv_bias:
            raise refuse("bias" if config.bias else "qkv_bias", "Qwen3 (qk_norm) has no such bias")
        return "qwen3"
    if qkv_bias and not config.bias:
        return "qwen2"  # Q/K/V bias only
    if qkv_bias != config.bias:
        raise refuse("qkv_bias", "Llama's attention_bias covers W_Q, W_K, W_V and W_O together")
    if config.sliding_window is not None:
        if config.bias:
            raise refuse("bias", "Mistral (sliding_window) has no bias")
        return "mistral"
    return "llama"


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (as a dict) of a :class:`GPT` with ``config`` and weights of ``dtype``."""
    model_type = hf_model_type(config)
    dtype_name = {v: k for k, v in _DTYPES.items()}[dtype]
    hf: dict[str, Any] = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "pad_token_id": config.pad_id,
        "bos_token_id": None,  # tformer's GPT names no special tokens; its tokenizer does
        "eos_token_id": None,
        "torch_dtype": dtype_name,  # transformers v4's name
        "dtype": dtype_name,  # v5's
    }
    attn_dropout = config.dropout if config.attn_dropout is None else config.attn_dropout
    if model_type == "gpt2":
        return hf | {
            "n_embd": config.d_model,
            "n_head": config.n_heads,
            "n_layer": config.n_layers,
            "n_inner": config.d_ff,
            "n_positions": config.max_len,
            "activation_function": {v: k for k, v in reversed(_GPT2_ACTIVATIONS.items())}[config.activation],
            "resid_pdrop": config.dropout,
            "embd_pdrop": config.dropout,
            "attn_pdrop": attn_dropout,
            "layer_norm_epsilon": config.norm_eps,
        }
    rope = {"rope_type": "default", **(getattr(config, "rope_scaling", None) or {}), "rope_theta": config.rope_base}
    hf |= {
        "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads or config.n_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.n_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_len,
        "hidden_act": "silu",
        "rms_norm_eps": config.norm_eps,
        "attention_dropout": attn_dropout,
        "rope_parameters": rope,  # v5
        "rope_theta": config.rope_base,  # v4
    }
    if model_type == "llama":
        hf |= {"attention_bias": config.bias, "mlp_bias": config.bias}
    elif model_type == "mistral":
        hf |= {"sliding_window": config.sliding_window}
    elif model_type in ("qwen2", "qwen3"):
        sliding = config.sliding_window is not None
        hf |= {
            "use_sliding_window": sliding,
            "sliding_window": config.sliding_window,
            "max_window_layers": 0 if sliding else config.n_layers,  # every layer slides, or none
            "layer_types": [("sliding" if sliding else "full") + "_attention"] * config.n_layers,
        }
    if model_type == "qwen3":
        hf |= {"attention_bias": False}
    return hf
