"""GPT-2 (``GPT2LMHeadModel``, ``model_type="gpt2"``) ↔ :class:`~tformer.models.gpt.GPT`, both directions.

GPT-2's block is tformer's default GPT block: pre-LN with a final LayerNorm (``ln_f``), learned positions, a plain
MLP, biases everywhere, the head tied to the token embedding. What changes on the way:

* GPT-2's ``Conv1D`` stores a matrix as (in, out), ``nn.Linear`` as (out, in): every matrix of a block is
  transposed. ``c_attn`` is already the fused (Q, K, V) projection, in our row order;
* GPT-2 has an embedding and a residual dropout (``embd_pdrop``, ``resid_pdrop``); tformer has one, read from
  ``resid_pdrop`` and written to both. GPT-2's MLP drops nothing inside: a model read from it has ``ffn_dropout``
  0, and one written to it keeps no ``ffn_dropout`` (config.json has no field for it). Only training sees them;
* ``activation_function``: ``gelu_new`` / ``gelu_pytorch_tanh`` are our ``gelu_tanh``; ``gelu``, ``relu``,
  ``relu2``, ``silu`` keep their names.

Refused (one ``ValueError`` naming the field): attention scaling variants (``scale_attn_weights=False``,
``scale_attn_by_inverse_layer_idx``, ``reorder_and_upcast_attn``), cross-attention; in the other direction, a
GPTConfig that is not GPT-2's block (see :func:`check`).

Dimension legend: D model dim, V vocabulary size.
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
from tformer.hf.sizes import Dim, Rule, Shapes, dim
from tformer.models.gpt import GPTConfig

__all__ = [
    "ARCHITECTURES",
    "FIELDS",
    "check",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "shapes",
]

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel"}
FIELDS: Fields = {  # every config.json field read here: its kind, and whether null is allowed
    "model_type": ("str", False),
    "vocab_size": ("count", False),
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
    "tie_word_embeddings": ("bool", False),
}
CONFIG_NAMES = {  # each GPTConfig field read from config.json -> that field (messages use the file's words)
    "vocab_size": "vocab_size",
    "d_model": "n_embd",
    "n_heads": "n_head",
    "n_layers": "n_layer",
    "d_ff": "n_inner",
    "max_len": "n_positions",
    "dropout": "resid_pdrop",
    "attn_dropout": "attn_pdrop",
    "activation": "activation_function",
    "norm_eps": "layer_norm_epsilon",
    "tie_embeddings": "tie_word_embeddings",
    "pad_id": "pad_token_id",
}
NAMES: Names = [
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
IGNORED = re.compile(r"\.attn\.(bias|masked_bias)$")  # the causal-mask buffers of older versions


def config_from_hf(hf: Mapping) -> GPTConfig:
    """Our :class:`GPTConfig` from a GPT-2 config dict; refuses what our GPT cannot express, naming the field."""
    check_fields(hf, FIELDS)
    for field in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if hf.get(field):
            raise ValueError(f"from_hf: GPT-2 with {field}=True is not supported")
    if not hf.get("scale_attn_weights", True):
        raise ValueError("from_hf: GPT-2 with scale_attn_weights=False is not supported (we always scale by 1/√d_k)")
    d_model = hf["n_embd"]
    return make_config(
        GPTConfig,
        hf,
        CONFIG_NAMES,
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=hf["n_head"],
        n_layers=hf["n_layer"],
        d_ff=hf.get("n_inner") or 4 * d_model,
        max_len=hf["n_positions"],
        dropout=hf["resid_pdrop"],
        attn_dropout=hf["attn_pdrop"],
        ffn_dropout=0.0,  # GPT-2's MLP drops nothing inside (resid_pdrop after it)
        activation=activation(hf.get("activation_function", "gelu_new"), "activation_function"),
        norm_eps=hf["layer_norm_epsilon"],
        tie_embeddings=hf.get("tie_word_embeddings", True),
        pad_id=pad_id(hf),
    )


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of a GPT-2 ``config.json`` gives the weights (:mod:`tformer.hf.sizes`); a ``Conv1D``
    matrix is (in, out), its bias (out,)."""
    vocab, d, positions = dim(hf, "vocab_size"), dim(hf, "n_embd"), dim(hf, "n_positions")
    ff = dim(hf, "n_inner", Dim("4 × n_embd", 4 * d.value))
    rules = [
        Rule("wte", (vocab, d)),
        Rule("wpe", (positions, d)),
        Rule("lm_head", (vocab, d)),
        Rule("h.{i}.ln_1", (d,)),
        Rule("h.{i}.ln_2", (d,)),
        Rule("h.{i}.attn.c_attn", (d, 3 * d), (3 * d,)),  # Q, K, V side by side
        Rule("h.{i}.attn.c_proj", (d, d)),
        Rule("h.{i}.mlp.c_fc", (d, ff), (ff,)),
        Rule("h.{i}.mlp.c_proj", (ff, d), (d,)),
        Rule("ln_f", (d,)),
    ]
    return Shapes(rules, {"h.{i}": dim(hf, "n_layer")})


def check(config: GPTConfig) -> None:
    """Refuse, naming the field, a GPTConfig that GPT-2's block cannot hold."""
    check_decoder(config)
    wanted = dict(ffn="mlp", positional="learned", norm="layernorm", bias=True, qk_norm=False, sliding_window=None)
    if config.positional == "rope":  # (registry.module_for gives such a GPT GPT-NeoX's layout)
        raise refuse(config, "positional", "GPT-2 has learned positions; a GPT with RoPE and an MLP is GPT-NeoX's")
    require(config, wanted, "GPT-2 (ffn='mlp')")
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    if not qkv_bias or (config.n_kv_heads or config.n_heads) != config.n_heads:
        raise refuse(config, "qkv_bias" if not qkv_bias else "n_kv_heads", "GPT-2 has a biased, full-width c_attn")
    if config.head_dim != config.d_model // config.n_heads:
        raise refuse(config, "head_dim", "GPT-2's head width is n_embd / n_head")
    if hf_activation(config.activation) is None:
        raise refuse(config, "activation", f"GPT-2 allows {sorted(set(ACTIVATIONS.values()))}")


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The ``config.json`` (as a dict) of a GPT-2 holding a :class:`GPT` with ``config`` and weights of ``dtype``."""
    check(config)
    name = dtype_name(dtype)
    return {
        "architectures": [ARCHITECTURES["gpt2"]],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "pad_token_id": config.pad_id,
        "bos_token_id": None,  # tformer's GPT names no special tokens; its tokenizer does (tformer.hf.export)
        "eos_token_id": None,
        "torch_dtype": name,  # transformers v4's name
        "dtype": name,  # v5's
        "n_embd": config.d_model,
        "n_head": config.n_heads,
        "n_layer": config.n_layers,
        "n_inner": config.d_ff,
        "n_positions": config.max_len,
        "activation_function": hf_activation(config.activation),
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "layer_norm_epsilon": config.norm_eps,
    }


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """GPT-2 weights (``state_dict()`` or safetensors; keys with or without ``transformer.``) → our keys.

    Unknown names are a ``ValueError``; a tied ``lm_head`` that differs from the embedding too. ``dtype`` casts
    floating tensors (None: kept).
    """
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if IGNORED.search(key):
            continue
        full = key if key.startswith(("transformer.", "lm_head.")) else "transformer." + key  # a bare GPT2Model
        ours = translate(full, NAMES, to_ours=True)
        if ours is None:
            raise ValueError(f"unexpected GPT-2-layout weight {key!r} (no mapping to tformer)")
        if ours.startswith("decoder.layers.") and tensor.dim() == 2:
            tensor = tensor.t()  # Conv1D (in, out) -> Linear (out, in)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[ours] = tensor.contiguous()
    if config.tie_embeddings:
        drop_tied(
            state,
            "output.weight",
            "embed.token.weight",
            "lm_head.weight differs from the token embedding, but the config ties them",
        )
    return state


def state_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our :class:`GPT` weights in GPT-2's names, matrices transposed to ``Conv1D``; a tied head left out, as
    ``transformers`` saves it."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key == "output.weight" and config.tie_embeddings:
            continue
        name = translate(key, NAMES, to_ours=False)
        if name is None:
            raise ValueError(f"weight {key!r} has no place in the Hugging Face GPT-2 layout")
        out[name] = tensor.t() if key.startswith("decoder.layers.") and tensor.dim() == 2 else tensor
    return contiguous_copy(out)
