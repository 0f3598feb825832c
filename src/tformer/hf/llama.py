"""Llama, Mistral, Qwen2 and Qwen3 (``LlamaForCausalLM``, ...) ↔ :class:`~tformer.models.gpt.GPT`, both directions.

The four share one weight layout (RMSNorm, SwiGLU, RoPE, grouped-query attention, no bias by default) and differ
by a few config fields, each one GPTConfig field:

* Qwen2: a bias on Q, K and V only (``qkv_bias=True, bias=False``);
* Qwen3: RMSNorm on each head's queries and keys (``qk_norm``), its ``head_dim`` set apart from hidden / heads;
* Mistral: one sliding window for every layer (``sliding_window``); Qwen's windows, written as ``layer_types``
  (v5) or ``use_sliding_window`` + ``max_window_layers`` (v4), are read when every layer has the same one;
* Llama: ``attention_bias`` and ``mlp_bias`` (tformer has one ``bias`` for W_O and the feed-forward together);
  RoPE scaling (``rope_scaling`` v4, ``rope_parameters`` v5) as ``GPTConfig.rope_scaling``.

Weights: Q, K, V are stacked into one ``qkv_proj`` (rows Q (H·Dh), K (Hkv·Dh), V (Hkv·Dh)) and split again on
the way out; a tied ``lm_head`` is dropped after checking that it equals the embedding. When writing, a config is
given the first of ``qwen3`` (qk_norm), ``qwen2`` (Q/K/V bias only), ``mistral`` (sliding window), ``llama`` that
holds it exactly (:func:`model_type`); what none holds is refused naming the field.

Dimension legend: D model dim, H query heads, Hkv key/value heads, Dh head dim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from tformer.hf.common import (
    Fields,
    Names,
    check_decoder,
    check_fields,
    contiguous_copy,
    drop_tied,
    dtype_name,
    fuse_qkv,
    make_config,
    pad_id,
    refuse,
    require,
    split_qkv,
    translate,
)
from tformer.hf.sizes import Dim, Rule, Shapes, dim
from tformer.models.gpt import GPTConfig

__all__ = [
    "ARCHITECTURES",
    "FIELDS",
    "NAMES",
    "model_type",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "rope_from_hf",
    "config_names",
    "shapes",
]

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
FIELDS: Fields = {  # every config.json field read here (and by tformer.hf.gemma3): its kind, whether null is allowed
    "model_type": ("str", False),
    "vocab_size": ("count", False),
    "hidden_size": ("count", False),
    "num_attention_heads": ("count", False),
    "num_key_value_heads": ("count", True),
    "num_hidden_layers": ("count", False),
    "intermediate_size": ("count", False),
    "max_position_embeddings": ("count", False),
    "head_dim": ("count", True),
    "hidden_act": ("str", True),
    "pretraining_tp": ("count", True),
    "rms_norm_eps": ("positive", False),
    "attention_dropout": ("fraction", True),
    "attention_bias": ("bool", True),
    "mlp_bias": ("bool", True),
    "rope_theta": ("positive", False),
    "partial_rotary_factor": ("number", False),
    "rope_scaling": ("object", True),
    "rope_parameters": ("object", True),
    "sliding_window": ("count", True),
    "use_sliding_window": ("bool", True),
    "max_window_layers": ("index", True),
    "layer_types": ("strings", True),
    "tie_word_embeddings": ("bool", False),
}
CONFIG_NAMES = {  # each GPTConfig field read from config.json -> that field (messages use the file's words)
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "max_len": "max_position_embeddings",
    "head_dim": "head_dim",
    "norm_eps": "rms_norm_eps",
    "attn_dropout": "attention_dropout",
    "rope_base": "rope_theta",
    "rope_scaling": "rope_scaling",
    "bias": "attention_bias",
    "qkv_bias": "attention_bias",
    "sliding_window": "sliding_window",
    "tie_embeddings": "tie_word_embeddings",
    "pad_id": "pad_token_id",
}
NAMES: Names = [
    ("model.embed_tokens.", "embed.token."),
    *[(f"model.layers.{{i}}.self_attn.{p}_proj.", f"decoder.layers.{{i}}.self_attn.{p}_proj.") for p in "qkv"],
    ("model.layers.{i}.self_attn.o_proj.", "decoder.layers.{i}.self_attn.out_proj."),
    ("model.layers.{i}.self_attn.q_norm.", "decoder.layers.{i}.self_attn.q_norm."),
    ("model.layers.{i}.self_attn.k_norm.", "decoder.layers.{i}.self_attn.k_norm."),
    *[(f"model.layers.{{i}}.mlp.{p}_proj.", f"decoder.layers.{{i}}.ff.{p}_proj.") for p in ("gate", "up", "down")],
    ("model.layers.{i}.input_layernorm.", "decoder.layers.{i}.add_norm1.norm."),
    ("model.layers.{i}.post_attention_layernorm.", "decoder.layers.{i}.add_norm3.norm."),
    ("model.norm.", "decoder.norm."),
    ("lm_head.", "output."),
]
IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer of older versions
QKV = ("q_proj", "k_proj", "v_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")  # each layer's; Gemma 3 adds two


# ------------------------------------------------------------------------------------------------ config


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` for a Llama, Mistral, Qwen2 or Qwen3 config dict; refuses what GPTConfig cannot express,
    and any field of the wrong type or out of range, naming the field."""
    check_fields(hf, FIELDS)
    model_type = hf["model_type"]
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
    theta, scaling = rope_from_hf(hf)
    return make_config(
        GPTConfig,
        hf,
        config_names(hf),
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
        pad_id=pad_id(hf),
        head_dim=hf.get("head_dim") or None,  # None: hidden_size / num_attention_heads (older configs lack it)
        rope_scaling=scaling,
    )


def config_names(hf: Mapping, names: Mapping[str, str] = CONFIG_NAMES) -> dict[str, str]:
    """Each GPTConfig field → the field of ``hf`` it is read from (RoPE scaling: v5's ``rope_parameters`` when the
    file has it, else v4's ``rope_scaling``); ``names``: another architecture's table (Gemma 3's)."""
    return {**names, "rope_scaling": "rope_parameters" if "rope_parameters" in hf else "rope_scaling"}


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of a Llama-layout ``config.json`` gives the weights (:mod:`tformer.hf.sizes`); the
    Gemma 3 block adds its norms (:mod:`tformer.hf.gemma3`)."""
    vocab, d, ff = dim(hf, "vocab_size"), dim(hf, "hidden_size"), dim(hf, "intermediate_size")
    heads = dim(hf, "num_attention_heads")
    kv_heads = dim(hf, "num_key_value_heads", heads)
    head_dim = dim(hf, "head_dim", Dim("hidden_size / num_attention_heads", d.value // heads.value))
    q, kv = heads * head_dim, kv_heads * head_dim  # H·Dh, Hkv·Dh
    layer = "layers.{i}."
    rules = [
        Rule("embed_tokens", (vocab, d)),
        Rule("lm_head", (vocab, d)),
        Rule(layer + "self_attn.q_proj", (q, d)),
        Rule(layer + "self_attn.k_proj", (kv, d)),
        Rule(layer + "self_attn.v_proj", (kv, d)),
        Rule(layer + "self_attn.o_proj", (d, q)),
        Rule(layer + "self_attn.q_norm", (head_dim,)),
        Rule(layer + "self_attn.k_norm", (head_dim,)),
        Rule(layer + "mlp.gate_proj", (ff, d)),
        Rule(layer + "mlp.up_proj", (ff, d)),
        Rule(layer + "mlp.down_proj", (d, ff)),
        *[Rule(layer + norm, (d,)) for norm in NORMS],
        Rule("norm", (d,)),
    ]
    return Shapes(rules, {"layers.{i}": dim(hf, "num_hidden_layers")}, may_be_absent=("head_dim",))


def _refuse_unless(hf: Mapping, field: str, expected: Any, missing_ok: bool = False) -> None:
    if field not in hf and missing_ok:
        return
    if hf.get(field) != expected:
        raise ValueError(f"{hf.get('model_type')} config {field}={hf.get(field)!r} is not supported, only {expected!r}")


def rope_from_hf(hf: Mapping) -> tuple[float, dict | None]:
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


def model_type(config: GPTConfig) -> str:
    """The Hugging Face ``model_type`` of the Llama family that holds ``config`` exactly; a ``ValueError`` names the
    field that none holds."""
    check_decoder(config)
    require(config, dict(ffn="swiglu", positional="rope", norm="rmsnorm", norm_weight_offset=0.0), "Llama")
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    if config.qk_norm:  # Qwen3: its attention_bias would put a bias on W_O as well, and its MLP has none
        if config.bias or qkv_bias:
            raise refuse(config, "bias" if config.bias else "qkv_bias", "Qwen3 (qk_norm) has no such bias")
        return "qwen3"
    if qkv_bias and not config.bias:
        return "qwen2"  # Q/K/V bias only
    if qkv_bias != config.bias:
        raise refuse(config, "qkv_bias", "Llama's attention_bias covers W_Q, W_K, W_V and W_O together")
    if config.sliding_window is not None:
        if config.bias:
            raise refuse(config, "bias", "Mistral (sliding_window) has no bias")
        return "mistral"
    return "llama"


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The ``config.json`` (as a dict) of the Llama-family model holding a :class:`GPT` with ``config``."""
    kind = model_type(config)
    name = dtype_name(dtype)
    rope = {"rope_type": "default", **(config.rope_scaling or {}), "rope_theta": config.rope_base}
    hf: dict[str, Any] = {
        "architectures": [ARCHITECTURES[kind]],
        "model_type": kind,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "pad_token_id": config.pad_id,
        "bos_token_id": None,  # tformer's GPT names no special tokens; its tokenizer does (tformer.hf.export)
        "eos_token_id": None,
        "torch_dtype": name,  # transformers v4's name
        "dtype": name,  # v5's
        "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads or config.n_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.n_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_len,
        "hidden_act": "silu",
        "rms_norm_eps": config.norm_eps,
        "attention_dropout": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "rope_parameters": rope,  # v5
        "rope_theta": config.rope_base,  # v4
    }
    if kind == "llama":
        hf |= {"attention_bias": config.bias, "mlp_bias": config.bias}
    elif kind == "mistral":
        hf |= {"sliding_window": config.sliding_window}
    else:  # qwen2, qwen3
        sliding = config.sliding_window is not None
        hf |= {
            "use_sliding_window": sliding,
            "sliding_window": config.sliding_window,
            "max_window_layers": 0 if sliding else config.n_layers,  # every layer slides, or none
            "layer_types": [("sliding" if sliding else "full") + "_attention"] * config.n_layers,
        }
    if kind == "qwen3":
        hf |= {"attention_bias": False}
    return hf


# ------------------------------------------------------------------------------------------------ state


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig, dtype: torch.dtype | None = None, names: Names = NAMES
) -> dict[str, torch.Tensor]:
    """Llama-layout weights (keys with or without ``model.``) → our :class:`GPT` keys; ``names`` are another
    architecture's prefixes on the same block (:mod:`tformer.hf.gemma3`). Unknown names, a Q without its K and V,
    a tied ``lm_head`` that differs from the embedding: each a ``ValueError``. ``dtype`` casts floating tensors."""
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if IGNORED.search(key):
            continue
        full = key if key.startswith(("model.", "lm_head.")) else "model." + key  # a bare LlamaModel
        ours = translate(full, names, to_ours=True)
        if ours is None:
            raise ValueError(f"unexpected Llama-layout weight {key!r} (no mapping to tformer)")
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[ours] = tensor.contiguous()
    state = fuse_qkv(state, QKV)  # (H·Dh + 2·Hkv·Dh, D)
    if config.tie_embeddings:
        drop_tied(
            state,
            "output.weight",
            "embed.token.weight",
            "lm_head.weight differs from the token embedding, but the config ties them",
        )
    return state


def state_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig, names: Names = NAMES) -> dict[str, torch.Tensor]:
    """Our :class:`GPT` weights in Llama's names: ``qkv_proj`` split into ``q_proj``, ``k_proj``, ``v_proj``; a tied
    ``output.weight`` left out, as ``transformers`` saves it."""
    head_dim = int(config.head_dim or config.d_model // config.n_heads)
    q_rows, kv_rows = config.n_heads * head_dim, (config.n_kv_heads or config.n_heads) * head_dim  # H·Dh, Hkv·Dh
    kept = {k: v for k, v in state.items() if not (k == "output.weight" and config.tie_embeddings)}
    out: dict[str, torch.Tensor] = {}
    for key, tensor in split_qkv(kept, QKV, (q_rows, kv_rows, kv_rows)).items():
        name = translate(key, names, to_ours=False)
        if name is None:
            raise ValueError(f"weight {key!r} has no place in the Hugging Face Llama layout")
        out[name] = tensor
    return contiguous_copy(out)
