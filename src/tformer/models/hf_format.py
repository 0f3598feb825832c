"""The Hugging Face layout of decoder-only checkpoints (GPT-2, Llama, Mistral, Qwen2, Qwen3), both directions.

Plain dicts in, plain dicts out: nothing here imports ``transformers``, so a ``config.json`` + safetensors
directory can be read (and a tformer :class:`~tformer.models.gpt.GPT` written in that layout) without it.

* ``config_from_hf(hf: Mapping) -> GPTConfig``: a ``config.json`` (or ``PretrainedConfig.to_dict()``),
  dispatched on ``hf["model_type"]``: ``"gpt2"``, ``"llama"``, ``"mistral"``, ``"qwen2"``, ``"qwen3"``. Reads
  transformers v4 keys (``rope_theta``, ``rope_scaling``, ``torch_dtype``) and v5 ones (``rope_parameters``,
  ``dtype``). Whatever :class:`GPTConfig` cannot express (a bias on some projections only, sliding windows on
  some layers only, an activation other than SiLU, RoPE scaling before GPTConfig has ``rope_scaling``, ...)
  is one ``ValueError`` naming the field and its value.
* ``state_from_hf(hf_state: Mapping[str, Tensor], config: GPTConfig, dtype=None) -> dict[str, Tensor]``:
  Hugging Face weight names → ours, for a config from ``config_from_hf``. Keys with or without the
  ``transformer.`` / ``model.`` prefix; Q, K, V stacked into one ``qkv_proj`` (rows Q (H·Dh), K (Hkv·Dh),
  V (Hkv·Dh)); GPT-2's ``Conv1D`` (in, out) matrices transposed to ``Linear`` (out, in); a tied ``lm_head``
  dropped (after checking it equals the embedding). ``dtype`` casts floating tensors (None: kept).
* ``load_state(model, state)``: loads it strictly: every weight used, every parameter filled, shapes equal;
  ``gpt_from_hf(hf, hf_state, dtype=None) -> GPT`` does all three (eval mode).
* ``config_to_hf(config, dtype=torch.float32) -> dict`` and ``state_to_hf(state, config) -> dict``: the
  inverses. A GPT-2-shaped config (LayerNorm, MLP, learned positions) is written as ``"gpt2"``; a
  RMSNorm + SwiGLU + RoPE one as ``"llama"``, or as ``"qwen3"`` (qk_norm), ``"qwen2"`` (Q/K/V bias only) or
  ``"mistral"`` (sliding window) where Llama's config has no field for it.
* ``dtype_from_hf(hf) -> torch.dtype | None``: the weights' dtype a ``config.json`` names.

Dimension legend: D model dim, H query heads, Hkv key/value heads, Dh head dim, V vocabulary size.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tformer.models.gpt import GPT, GPTConfig

__all__ = [
    "config_from_hf",
    "state_from_hf",
    "load_state",
    "gpt_from_hf",
    "dtype_from_hf",
    "gpt2_config_from_hf",
    "LLAMA_TYPES",
]

LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # one weight layout, a few config quirks each
ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
# GPT-2's ``activation_function`` -> ours (and back: the first name of each of ours)
_GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "relu2": "relu2",
}
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# (Hugging Face name, ours) prefixes; {i} is the layer index. Read both ways.
_GPT2_NAMES = [
    ("transformer.wte.", "embed.token."),
    ("transformer.wpe.", "embed.position."),
    ("transformer.h.{i}.ln_1.", "decoder.layers.{i}.add_norm1.norm."),
    ("transformer.h.{i}.attn.c_attn.", "decoder.layers.{i}.self_attn.qkv_proj."),  # already Q, K, V rows
    ("transformer.h.{i}.attn.c_proj.", "decoder.layers.{i}.self_attn.out_proj."),
    ("transformer.h.{i}.ln_2.", "decoder.layers.{i}.add_norm3.norm."),
    ("transformer.h.{i}.mlp.c_fc.", "decoder.layers.{i}.ff.linear1."),
    ("transformer.h.{i}.mlp.c_proj.", "decoder.layers.{i}.ff.linear2."),
    ("transformer.ln_f.", "decoder.norm."),
    ("lm_head.", "output."),
]
_LLAMA_NAMES = [
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
_IGNORED = re.compile(r"\.attn\.(bias|masked_bias)$|\.rotary_emb\.inv_freq$")  # buffers of older versions


def _gpt2_layout(config: GPTConfig) -> bool:
    """Which of the two weight layouts ``config`` has: GPT-2's (plain MLP) or Llama's (gated feed-forward)."""
    return config.ffn == "mlp"


# ------------------------------------------------------------------------------------------------ config


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face decoder config dict; refuses what GPTConfig cannot express."""
    model_type = hf.get("model_type")
    if model_type == "gpt2":
        return gpt2_config_from_hf(hf)
    if model_type in LLAMA_TYPES:
        return _llama_config_from_hf(hf, model_type)
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
    extra: dict[str, Any] = {}
    head_dim = hf.get("head_dim") or d_model // n_heads
    if head_dim != d_model // n_heads or d_model % n_heads:
        extra["head_dim"] = head_dim  # refused below when GPTConfig has no such field
    theta, scaling = _rope(hf)
    if scaling is not None:
        extra["rope_scaling"] = scaling
    missing = sorted(set(extra) - {f.name for f in dataclasses.fields(GPTConfig)})
    if missing:
        raise ValueError(f"{model_type} config {missing[0]}={extra[missing[0]]!r} is not supported by this GPTConfig")
    return GPTConfig(
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=n_heads,
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        dropout=0.0,  # Llama-family models have no residual dropout
        attn_dropout=float(hf.get("attention_dropout", 0.0)),
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
        **extra,
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
    if model_type == "llama" or window is None:
        return None
    if model_type == "mistral":
        return window
    n_layers = hf["num_hidden_layers"]
    kinds = hf.get("layer_types")
    if kinds is None:  # v4 Qwen: layers from max_window_layers on slide, when use_sliding_window
        use = hf.get("use_sliding_window", False)
        first = hf.get("max_window_layers", n_layers)
        kinds = ["sliding_attention" if use and i >= first else "full_attention" for i in range(n_layers)]
    if len(set(kinds)) > 1:
        raise ValueError(
            f"{model_type} config max_window_layers={hf.get('max_window_layers')!r} gives a sliding window to some "
            "layers only (layer_types differ); tformer's GPT uses one window for every layer"
        )
    if kinds and kinds[0] not in ("full_attention", "sliding_attention"):
        raise ValueError(f"{model_type} config layer_types={kinds[0]!r} is not supported")
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


# ------------------------------------------------------------------------------------------------ state


def _translate(key: str, names: list[tuple[str, str]], to_ours: bool) -> str | None:
    """``key`` with its prefix swapped by the one rule of ``names`` that matches (None if none does)."""
    for hf_name, ours in names:
        src, dst = (hf_name, ours) if to_ours else (ours, hf_name)
        match = re.match(re.escape(src).replace(r"\{i\}", r"(\d+)"), key)
        if match:
            return (dst.replace("{i}", match.group(1)) if match.groups() else dst) + key[match.end() :]
    return None


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Hugging Face weights (``state_dict()`` or safetensors) → our :class:`GPT` keys, for ``config``.

    Unknown names are a ``ValueError``; a tied ``lm_head`` that differs from the embedding too.
    """
    gpt2 = _gpt2_layout(config)
    names, prefix = (_GPT2_NAMES, "transformer.") if gpt2 else (_LLAMA_NAMES, "model.")
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if _IGNORED.search(key):
            continue
        full = key if key.startswith((prefix, "lm_head.")) else prefix + key  # a bare GPT2Model / LlamaModel
        ours = _translate(full, names, to_ours=True)
        if ours is None:
            raise ValueError(f"unexpected {'GPT-2' if gpt2 else 'Llama'}-layout weight {key!r} (no mapping to tformer)")
        if gpt2 and ours.startswith("decoder.layers.") and tensor.dim() == 2:
            tensor = tensor.t()  # Conv1D (in, out) -> Linear (out, in)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[ours] = tensor.contiguous()
    if not gpt2:
        for key in [k for k in state if k.endswith(".self_attn.q_proj.weight") or k.endswith(".self_attn.q_proj.bias")]:
            start, kind = key.rsplit(".q_proj.", 1)
            parts = [state.pop(f"{start}.{p}_proj.{kind}", None) for p in "qkv"]
            if any(p is None for p in parts):
                raise ValueError(f"weights {start}: q_proj.{kind} without k_proj.{kind} and v_proj.{kind}")
            state[f"{start}.qkv_proj.{kind}"] = torch.cat(parts, dim=0)  # type: ignore[arg-type]  # (H·Dh + 2·Hkv·Dh, D)
    head = state.get("output.weight")
    if config.tie_embeddings and head is not None:
        if not torch.equal(head, state.get("embed.token.weight", head)):
            raise ValueError("lm_head.weight differs from the token embedding, but the config ties them")
        del state["output.weight"]
    return state


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """Copy ``state`` (our names) into ``model``: every weight used, every parameter filled, shapes equal."""
    expected = model.state_dict()
    tied = {"output.weight"} if getattr(model.config, "tie_embeddings", False) else set()
    missing = sorted(set(expected) - set(state) - tied)
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
    model.load_state_dict(dict(state), strict=False)
    return model


def gpt_from_hf(hf: Mapping, hf_state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> GPT:
    """A :class:`GPT` (eval mode) built from a Hugging Face config dict and loaded strictly with its weights."""
    config = config_from_hf(hf)
    model = GPT(config)
    if dtype is not None:
        model = model.to(dtype)
    load_state(model, state_from_hf(hf_state, config, dtype))
    return model.eval()
