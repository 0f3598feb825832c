"""Gemma 3's text decoder (``Gemma3ForCausalLM``, ``model_type="gemma3_text"``) ↔ :class:`~tformer.models.gpt.GPT`.

Gemma 3 is a Llama-shaped block (:mod:`tformer.hf.llama`, whose weight functions this module reuses with its own
names) with five differences, each one :class:`~tformer.models.gpt.GPTConfig` field:

* RMSNorm scales by ``1 + weight`` (``norm_weight_offset=1.0``), the QK-norm too (``qk_norm``);
* four norms a layer, before *and after* each sub-layer (``sandwich_norm``): ``input_layernorm`` and
  ``post_attention_layernorm`` around the attention, ``pre_feedforward_layernorm`` and ``post_feedforward_layernorm``
  around the GeGLU feed-forward (``ffn="geglu"``, GELU tanh);
* token embeddings × √d_model (``embed_scale``), scores × ``query_pre_attn_scalar``^−½ (``attn_scale``);
* local and global layers: ``layer_types`` (or v4's ``sliding_window_pattern``, 6 = five local, one global) becomes
  ``sliding_window_pattern``; the local layers turn at their own RoPE base (``rope_local_base``, v4
  ``rope_local_base_freq``) with no scaling, the global ones at ``rope_theta`` with ``rope_scaling``;
* an optional soft-cap of the logits (``final_logit_softcapping``). The config also carries Gemma 2's
  ``attn_logit_softcapping``, which Gemma 3's attention never applies (QK-norm took its place): it is ignored here
  too, and a GPTConfig with ``attn_softcap`` is refused on the way out.

:func:`config_from_hf` reads transformers v4 and v5 ``config.json`` keys, :func:`config_to_hf` writes both.

Dimension legend: D model dim, Dh head dim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tformer.hf import llama
from tformer.hf.common import (
    Fields,
    Names,
    check_decoder,
    check_fields,
    dtype_name,
    make_config,
    pad_id,
    refuse,
    require,
)
from tformer.hf.sizes import Rule, Shapes
from tformer.models.gpt import GPTConfig

__all__ = [
    "ARCHITECTURES",
    "FIELDS",
    "NAMES",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "config_names",
    "shapes",
]

ARCHITECTURES = {"gemma3_text": "Gemma3ForCausalLM"}
FIELDS: Fields = {  # the Llama fields and Gemma's own
    **llama.FIELDS,
    "hidden_activation": ("str", True),
    "rope_local_base_freq": ("positive", False),
    "sliding_window_pattern": ("count", True),
    "_sliding_window_pattern": ("count", True),
    "use_bidirectional_attention": ("bool", True),
    "query_pre_attn_scalar": ("positive", True),
    "final_logit_softcapping": ("positive", True),
}
CONFIG_NAMES = {  # the Llama fields' names, and Gemma's own
    **llama.CONFIG_NAMES,
    "rope_local_base": "rope_local_base_freq",
    "sliding_window_pattern": "sliding_window_pattern",
    "attn_scale": "query_pre_attn_scalar",
    "final_softcap": "final_logit_softcapping",
}
NAMES: Names = [
    ("model.embed_tokens.", "embed.token."),
    *[(f"model.layers.{{i}}.self_attn.{p}_proj.", f"decoder.layers.{{i}}.self_attn.{p}_proj.") for p in "qkv"],
    ("model.layers.{i}.self_attn.o_proj.", "decoder.layers.{i}.self_attn.out_proj."),
    ("model.layers.{i}.self_attn.q_norm.", "decoder.layers.{i}.self_attn.q_norm."),
    ("model.layers.{i}.self_attn.k_norm.", "decoder.layers.{i}.self_attn.k_norm."),
    *[(f"model.layers.{{i}}.mlp.{p}_proj.", f"decoder.layers.{{i}}.ff.{p}_proj.") for p in ("gate", "up", "down")],
    ("model.layers.{i}.input_layernorm.", "decoder.layers.{i}.add_norm1.norm."),
    ("model.layers.{i}.post_attention_layernorm.", "decoder.layers.{i}.add_norm1.post_norm."),
    ("model.layers.{i}.pre_feedforward_layernorm.", "decoder.layers.{i}.add_norm3.norm."),
    ("model.layers.{i}.post_feedforward_layernorm.", "decoder.layers.{i}.add_norm3.post_norm."),
    ("model.norm.", "decoder.norm."),
    ("lm_head.", "output."),
]


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` for a Gemma 3 text config dict; refuses what GPTConfig cannot express."""
    check_fields(hf, FIELDS)
    if hf.get("use_bidirectional_attention"):
        raise ValueError("gemma3_text config use_bidirectional_attention=True is not supported (a decoder is causal)")
    if hf.get("attention_bias"):
        raise ValueError("gemma3_text config attention_bias=True is not supported: Gemma 3 has no bias")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"gemma3_text config hidden_activation={act!r} is not supported, only 'gelu_pytorch_tanh'")
    n_layers = hf["num_hidden_layers"]
    window, pattern = _window_pattern(hf, n_layers)
    global_theta, local_theta, scaling = _rope(hf)
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    n_heads, kv_heads = hf["num_attention_heads"], hf.get("num_key_value_heads") or hf["num_attention_heads"]
    return make_config(
        GPTConfig,
        hf,
        config_names(hf),
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=n_heads,
        n_layers=n_layers,
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        dropout=0.0,
        attn_dropout=float(hf.get("attention_dropout") or 0.0),
        activation="gelu_tanh",
        norm="rmsnorm",
        norm_weight_offset=1.0,
        norm_eps=hf["rms_norm_eps"],
        ffn="geglu",
        positional="rope",
        rope_base=float(global_theta),
        rope_scaling=scaling,
        rope_local_base=float(local_theta) if window is not None else None,
        bias=False,
        n_kv_heads=None if kv_heads == n_heads else kv_heads,
        head_dim=head_dim,
        qk_norm=True,
        sandwich_norm=True,
        embed_scale=True,
        attn_scale=float(hf.get("query_pre_attn_scalar") or head_dim) ** -0.5,
        sliding_window=window,
        sliding_window_pattern=pattern,
        attn_softcap=None,  # Gemma 3 keeps attn_logit_softcapping in its config but never applies it (QK-norm instead)
        final_softcap=hf.get("final_logit_softcapping"),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        pad_id=pad_id(hf),
    )


def config_names(hf: Mapping) -> dict[str, str]:
    """Each GPTConfig field → the field of ``hf`` it is read from (:func:`tformer.hf.llama.config_names`)."""
    return llama.config_names(hf, CONFIG_NAMES)


def shapes(hf: Mapping) -> Shapes:
    """The Llama block's shapes (:func:`tformer.hf.llama.shapes`) and Gemma's two norms around the feed-forward."""
    base = llama.shapes(hf)
    d = next(rule.weight[0] for rule in base.rules if rule.module == "norm")
    extra = [Rule(f"layers.{{i}}.{norm}", (d,)) for norm in ("pre_feedforward_layernorm", "post_feedforward_layernorm")]
    return Shapes([*base.rules, *extra], base.stacks, base.may_be_absent)


def _window_pattern(hf: Mapping, n_layers: int) -> tuple[int | None, int | None]:
    """(sliding_window, sliding_window_pattern) from ``layer_types`` (v5) or ``sliding_window_pattern`` (v4)."""
    window = hf.get("sliding_window")
    kinds = hf.get("layer_types")
    if kinds is None:
        k = hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern") or 6
        kinds = ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(n_layers)]
    if len(kinds) != n_layers or set(kinds) - {"sliding_attention", "full_attention"}:
        raise ValueError(
            f"gemma3_text config layer_types={kinds!r} is not one 'sliding_attention'/'full_attention' a layer"
        )
    local = [kind == "sliding_attention" for kind in kinds]
    if window is None or not any(local):
        return None, None
    if all(local):
        return window, None
    k = local.index(False) + 1  # the first global layer is layer k - 1
    if local != [(i + 1) % k != 0 for i in range(n_layers)]:
        raise ValueError(
            f"gemma3_text config layer_types={kinds!r} is not every k-th layer global, which is what "
            "GPTConfig.sliding_window_pattern can say"
        )
    return window, k


def _rope(hf: Mapping) -> tuple[float, float, dict | None]:
    """(global θ, local θ, the global layers' scaling) from v5 ``rope_parameters`` or v4's keys."""
    params = hf.get("rope_parameters") or {}
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
    full.update(hf.get("rope_scaling") or {})  # v4: scaling of the global layers
    global_theta = full.pop("rope_theta", hf.get("rope_theta", 1_000_000.0))
    local_theta = local.get("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
    if local.get("rope_type", "default") != "default":
        raise ValueError(f"gemma3_text config: RoPE scaling on the sliding layers ({local!r}) is not supported")
    if "type" in full:  # v4's older spelling
        full.setdefault("rope_type", full.pop("type"))
    if full.pop("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("gemma3_text config partial_rotary_factor other than 1.0 is not supported")
    scaling = None if full.get("rope_type", "default") == "default" else full
    return global_theta, local_theta, scaling


def check(config: GPTConfig) -> None:
    """Refuse, naming the field, a GPTConfig that Gemma 3's block cannot hold."""
    check_decoder(config, gemma=True)
    wanted = dict(
        ffn="geglu",
        norm="rmsnorm",
        norm_weight_offset=1.0,
        norm_scale=True,
        positional="rope",
        bias=False,
        qk_norm=True,
        embed_scale=True,
        attn_softcap=None,
    )
    require(config, wanted, "Gemma 3 (sandwich_norm)")
    if config.qkv_bias:
        raise refuse(config, "qkv_bias", "Gemma 3 has no bias")
    local = [config.is_local(i) for i in range(config.n_layers)]
    if any(local) and config.rope_local_base is None and config.rope_scaling is not None:
        raise refuse(config, "rope_local_base", "Gemma 3's sliding layers turn at their own base, never scaled")
    if _query_scalar(config) is None:
        raise refuse(config, "attn_scale", "Gemma 3 scales scores by query_pre_attn_scalar^-1/2, an integer's")


def _query_scalar(config: GPTConfig) -> int | None:
    """Gemma 3's ``query_pre_attn_scalar`` (an integer) for the score scale ``attn_scale``; None if none fits."""
    if config.attn_scale is None:
        return config.head_dim
    scalar = config.attn_scale**-2.0
    return round(scalar) if abs(scalar - round(scalar)) <= 1e-6 * scalar else None


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The ``config.json`` (as a dict, v4 and v5 keys) of a Gemma 3 text model holding a :class:`GPT`."""
    check(config)
    name = dtype_name(dtype)
    local = [config.is_local(i) for i in range(config.n_layers)]
    local_theta = config.rope_base if config.rope_local_base is None else config.rope_local_base
    full_rope = {"rope_type": "default", **(config.rope_scaling or {}), "rope_theta": config.rope_base}
    return {
        "architectures": [ARCHITECTURES["gemma3_text"]],
        "model_type": "gemma3_text",
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "pad_token_id": config.pad_id,
        "bos_token_id": None,  # tformer's GPT names no special tokens; its tokenizer does (tformer.hf.export)
        "eos_token_id": None,
        "torch_dtype": name,
        "dtype": name,
        "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads or config.n_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.n_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_len,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": config.norm_eps,
        "attention_bias": False,
        "attention_dropout": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "query_pre_attn_scalar": _query_scalar(config),
        "final_logit_softcapping": config.final_softcap,
        "attn_logit_softcapping": None,
        "sliding_window": config.sliding_window or config.max_len,  # unused when no layer slides
        "layer_types": ["sliding_attention" if x else "full_attention" for x in local],  # v5
        "sliding_window_pattern": config.sliding_window_pattern or (1 if not any(local) else config.n_layers + 1),
        "rope_parameters": {  # v5
            "full_attention": full_rope,
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        },
        "rope_theta": config.rope_base,  # v4
        "rope_local_base_freq": local_theta,
        "rope_scaling": config.rope_scaling,
    }


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Gemma 3 weights → our :class:`GPT` keys (the Llama mapping with Gemma's four norms a layer)."""
    return llama.state_from_hf(hf_state, config, dtype, names=NAMES)


def state_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our :class:`GPT` weights in Gemma 3's names."""
    return llama.state_to_hf(state, config, names=NAMES)
