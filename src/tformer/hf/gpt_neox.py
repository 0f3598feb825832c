"""GPT-NeoX (``GPTNeoXForCausalLM``, ``model_type="gpt_neox"``) ↔ :class:`~tformer.models.gpt.GPT`, both directions.

GPT-NeoX's block is tformer's GPT block with rotary positions: pre-LN with a final LayerNorm, RoPE ("rotate half", as
tformer's), a plain MLP, biases everywhere. With ``use_parallel_residual=False`` and ``rotary_pct=1.0`` it is the
Hugging Face layout of the presets ``shakespeare-char-6min`` (trained with ``--shift-tokens 0``: no layout has token
shift) and ``shakespeare-char-30min-gelu`` (RoPE with GPT-2's MLP), which neither GPT-2 (learned positions) nor Llama
(RMSNorm, SwiGLU) holds; Pythia's (EleutherAI) parallel block and quarter-head rotary are
``GPTConfig.parallel_residual`` and ``rope_dim``. What changes on the way:

* ``query_key_value`` is the fused (Q, K, V) projection with its rows grouped by head (H × (Q, K, V) × Dh); tformer's
  ``qkv_proj`` holds all of Q, then K, then V. The rows are regrouped both ways;
* the head is ``embed_out`` (transformers v4's name, which v5 reads as ``lm_head``); both are read;
* ``hidden_dropout`` is tformer's residual dropout, ``attention_dropout`` its attention dropout, and the MLP drops
  nothing inside (``ffn_dropout`` 0; training only).

Refused (one ``ValueError`` naming the field): ``attention_bias=False``, RoPE scaling; in the other direction, a
GPTConfig that is not this block (see :func:`check`).

Dimension legend: D model dim, H heads, Dh head dim, F feed-forward width, V vocabulary size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from tformer.hf.common import (
    ACTIVATIONS,
    Fields,
    Names,
    activation,
    check_decoder,
    check_fields,
    contiguous_copy,
    drop_tied,
    dtype_name,
    hf_activation,
    make_config,
    pad_id,
    refuse,
    require,
    translate,
)
from tformer.hf.llama import rope_from_hf
from tformer.hf.sizes import Rule, Shapes, dim
from tformer.models.gpt import GPTConfig

__all__ = [
    "ARCHITECTURES",
    "FIELDS",
    "NAMES",
    "check",
    "regroup_qkv",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "shapes",
]

ARCHITECTURES = {"gpt_neox": "GPTNeoXForCausalLM"}
FIELDS: Fields = {  # every config.json field read here: its kind, and whether null is allowed
    "model_type": ("str", False),
    "vocab_size": ("count", False),
    "hidden_size": ("count", False),
    "num_attention_heads": ("count", False),
    "num_hidden_layers": ("count", False),
    "intermediate_size": ("count", False),
    "max_position_embeddings": ("count", False),
    "hidden_act": ("str", False),
    "layer_norm_eps": ("positive", False),
    "hidden_dropout": ("fraction", True),
    "attention_dropout": ("fraction", True),
    "use_parallel_residual": ("bool", True),
    "attention_bias": ("bool", True),
    "tie_word_embeddings": ("bool", True),
    "rotary_pct": ("number", True),
    "rotary_emb_base": ("positive", True),
    "rope_parameters": ("object", True),
    "rope_scaling": ("object", True),
}
CONFIG_NAMES = {  # each GPTConfig field read from config.json -> that field (messages use the file's words)
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "max_len": "max_position_embeddings",
    "dropout": "hidden_dropout",
    "attn_dropout": "attention_dropout",
    "activation": "hidden_act",
    "norm_eps": "layer_norm_eps",
    "rope_base": "rotary_emb_base",
    "tie_embeddings": "tie_word_embeddings",
    "pad_id": "pad_token_id",
    "parallel_residual": "use_parallel_residual",
    "rope_dim": "rotary_pct",  # (its fraction of the head: rotary_pct × hidden_size / num_attention_heads)
}
NAMES: Names = [
    ("gpt_neox.embed_in.", "embed.token."),
    ("gpt_neox.layers.{i}.input_layernorm.", "decoder.layers.{i}.add_norm1.norm."),
    ("gpt_neox.layers.{i}.attention.query_key_value.", "decoder.layers.{i}.self_attn.qkv_proj."),  # regrouped
    ("gpt_neox.layers.{i}.attention.dense.", "decoder.layers.{i}.self_attn.out_proj."),
    ("gpt_neox.layers.{i}.post_attention_layernorm.", "decoder.layers.{i}.add_norm3.norm."),
    ("gpt_neox.layers.{i}.mlp.dense_h_to_4h.", "decoder.layers.{i}.ff.linear1."),
    ("gpt_neox.layers.{i}.mlp.dense_4h_to_h.", "decoder.layers.{i}.ff.linear2."),
    ("gpt_neox.final_layer_norm.", "decoder.norm."),
    ("embed_out.", "output."),
]
# the causal-mask and rotary buffers of older versions
IGNORED = re.compile(r"\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$|\.rotary_emb\.inv_freq$")


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` from a GPT-NeoX config dict; refuses what our GPT cannot express, naming the field."""
    check_fields(hf, FIELDS)
    if not hf.get("attention_bias", True):
        raise ValueError(
            "gpt_neox config attention_bias=False is not supported, only True: tformer's GPT has one bias flag for "
            "the attention and the MLP, whose GPT-NeoX linears always have one"
        )
    params = dict(hf.get("rope_parameters") or {})  # v5; v4 writes rotary_emb_base and rotary_pct
    params.setdefault("rope_theta", hf.get("rotary_emb_base", 10000.0))
    factor = params.pop("partial_rotary_factor", hf.get("rotary_pct", 0.25))  # (transformers' default)
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0 < factor <= 1:
        raise ValueError(f"gpt_neox config partial_rotary_factor={factor!r} must be a number in (0, 1]")
    theta, scaling = rope_from_hf({**hf, "rope_parameters": params, "partial_rotary_factor": 1.0})
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    rope_dim = int(head_dim * factor)  # as transformers counts it
    return make_config(
        GPTConfig,
        hf,
        CONFIG_NAMES,
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        dropout=float(hf.get("hidden_dropout") or 0.0),
        attn_dropout=float(hf.get("attention_dropout") or 0.0),
        ffn_dropout=0.0,  # GPT-NeoX's MLP drops nothing inside
        activation=activation(hf.get("hidden_act", "gelu"), "hidden_act"),
        positional="rope",
        rope_base=float(theta),
        rope_scaling=scaling,
        norm_eps=hf["layer_norm_eps"],
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_id=pad_id(hf),
        parallel_residual=bool(hf.get("use_parallel_residual", True)),  # (transformers' default)
        rope_dim=None if rope_dim == head_dim else rope_dim,
    )


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of a GPT-NeoX ``config.json`` gives the weights (:mod:`tformer.hf.sizes`)."""
    vocab, d, ff = dim(hf, "vocab_size"), dim(hf, "hidden_size"), dim(hf, "intermediate_size")
    layer = "layers.{i}."
    rules = [
        Rule("embed_in", (vocab, d)),
        Rule("embed_out", (vocab, d)),
        Rule("lm_head", (vocab, d)),
        Rule(layer + "input_layernorm", (d,)),
        Rule(layer + "post_attention_layernorm", (d,)),
        Rule(layer + "attention.query_key_value", (3 * d, d), (3 * d,)),  # (Q, K, V) of each head in turn
        Rule(layer + "attention.dense", (d, d)),
        Rule(layer + "mlp.dense_h_to_4h", (ff, d), (ff,)),
        Rule(layer + "mlp.dense_4h_to_h", (d, ff), (d,)),
        Rule("final_layer_norm", (d,)),
    ]
    return Shapes(rules, {"layers.{i}": dim(hf, "num_hidden_layers")})


def check(config: GPTConfig) -> None:
    """Refuse, naming the field, a GPTConfig that GPT-NeoX's block cannot hold."""
    check_decoder(config, neox=True)
    wanted = dict(ffn="mlp", positional="rope", norm="layernorm", bias=True, qk_norm=False, sliding_window=None)
    require(config, wanted, "GPT-NeoX (RoPE with an MLP)")
    if config.rope_scaling is not None:
        raise refuse(config, "rope_scaling", "tformer writes GPT-NeoX's plain RoPE only")
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    if not qkv_bias or (config.n_kv_heads or config.n_heads) != config.n_heads:
        field = "qkv_bias" if not qkv_bias else "n_kv_heads"
        raise refuse(config, field, "GPT-NeoX has a biased, full-width query_key_value")
    if config.head_dim != config.d_model // config.n_heads:
        raise refuse(config, "head_dim", "GPT-NeoX's head width is hidden_size / num_attention_heads")
    if hf_activation(config.activation) is None:
        raise refuse(config, "activation", f"GPT-NeoX allows {sorted(set(ACTIVATIONS.values()))}")
    if config.rope_dim is not None and int(_head_dim(config) * _fraction(config)) != config.rope_dim:
        raise refuse(config, "rope_dim", "its fraction of head_dim does not give it back as transformers counts it")


def _head_dim(config: GPTConfig) -> int:
    return int(config.head_dim or config.d_model // config.n_heads)


def _fraction(config: GPTConfig) -> float:
    """``rotary_pct``: the part of each head that turns."""
    return 1.0 if config.rope_dim is None else config.rope_dim / _head_dim(config)


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The ``config.json`` (as a dict) of a GPT-NeoX holding a :class:`GPT` with ``config`` and weights of ``dtype``;
    RoPE written in both versions' words (v5's ``rope_parameters``, v4's ``rotary_pct`` and ``rotary_emb_base``)."""
    check(config)
    name = dtype_name(dtype)
    return {
        "architectures": [ARCHITECTURES["gpt_neox"]],
        "model_type": "gpt_neox",
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "pad_token_id": config.pad_id,
        "bos_token_id": None,  # tformer's GPT names no special tokens; its tokenizer does (tformer.hf.export)
        "eos_token_id": None,
        "torch_dtype": name,  # transformers v4's name
        "dtype": name,  # v5's
        "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads,
        "num_hidden_layers": config.n_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_len,
        "hidden_act": hf_activation(config.activation),
        "layer_norm_eps": config.norm_eps,
        "hidden_dropout": config.dropout,
        "attention_dropout": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "use_parallel_residual": config.parallel_residual,
        "attention_bias": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": config.rope_base,
            "partial_rotary_factor": _fraction(config),
        },
        "rotary_pct": _fraction(config),
        "rotary_emb_base": config.rope_base,
    }


def regroup_qkv(tensor: torch.Tensor, n_heads: int, to_ours: bool) -> torch.Tensor:
    """``query_key_value``'s rows (H, 3, Dh) ↔ ``qkv_proj``'s (3, H, Dh): a weight's, a bias's, a LoRA ``B``'s."""
    groups = (n_heads, 3) if to_ours else (3, n_heads)
    return tensor.reshape(*groups, -1, *tensor.shape[1:]).transpose(0, 1).reshape(tensor.shape)


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """GPT-NeoX weights (keys with or without ``gpt_neox.``; the head as ``embed_out`` or ``lm_head``) → our keys.

    Unknown names are a ``ValueError``; a tied head that differs from the embedding too. ``dtype`` casts floating
    tensors (None: kept)."""
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if IGNORED.search(key):
            continue
        full = "embed_out." + key.removeprefix("lm_head.") if key.startswith("lm_head.") else key
        full = full if full.startswith(("gpt_neox.", "embed_out.")) else "gpt_neox." + full  # a bare GPTNeoXModel
        ours = translate(full, NAMES, to_ours=True)
        if ours is None:
            raise ValueError(f"unexpected GPT-NeoX-layout weight {key!r} (no mapping to tformer)")
        if ours.endswith("qkv_proj.weight") or ours.endswith("qkv_proj.bias"):
            tensor = regroup_qkv(tensor, config.n_heads, to_ours=True)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[ours] = tensor.contiguous()
    if config.tie_embeddings:
        drop_tied(
            state,
            "output.weight",
            "embed.token.weight",
            "embed_out.weight differs from the token embedding, but the config ties them",
        )
    return state


def state_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our :class:`GPT` weights in GPT-NeoX's names, ``qkv_proj``'s rows grouped by head; a tied head left out, as
    ``transformers`` saves it."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key == "output.weight" and config.tie_embeddings:
            continue
        name = translate(key, NAMES, to_ours=False)
        if name is None:
            raise ValueError(f"weight {key!r} has no place in the Hugging Face GPT-NeoX layout")
        if key.endswith("qkv_proj.weight") or key.endswith("qkv_proj.bias"):
            tensor = regroup_qkv(tensor, config.n_heads, to_ours=False)
        out[name] = tensor
    return contiguous_copy(out)
