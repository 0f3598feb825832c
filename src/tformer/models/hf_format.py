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

The config functions live in :mod:`tformer.models.hf_config` (re-exported here); the weight names here.
``save_pretrained(dir, format="hf")`` of a :class:`GPT` goes through this module, registered with
:func:`tformer.models.checkpoint.register_hf_layout` (the checkpoint module cannot import it: it imports that one).

Dimension legend: D model dim, H query heads, Hkv key/value heads, Dh head dim, V vocabulary size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tformer.models.checkpoint import register_hf_layout
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.hf_config import (
    ARCHITECTURES,
    LLAMA_TYPES,
    config_from_hf,
    config_to_hf,
    dtype_from_hf,
    gpt2_config_from_hf,
    gpt2_layout,
    hf_model_type,
)
from tformer.models.hf_gemma import GEMMA3_NAMES

__all__ = [
    "config_from_hf",
    "state_from_hf",
    "load_state",
    "gpt_from_hf",
    "hf_model_type",
    "config_to_hf",
    "state_to_hf",
    "dtype_from_hf",
    "gpt2_config_from_hf",
    "LLAMA_TYPES",
    "ARCHITECTURES",
]

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
    gpt2 = gpt2_layout(config)
    names, prefix = (_GPT2_NAMES, "transformer.") if gpt2 else (_LLAMA_NAMES, "model.")
    if config.sandwich_norm:  # Gemma 3: a norm before and after each sub-layer (tformer.models.hf_gemma)
        names = GEMMA3_NAMES
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


def state_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our :class:`GPT` weights (``state_dict()``) in Hugging Face names, each its own contiguous tensor.

    ``qkv_proj`` is split into ``q_proj``, ``k_proj``, ``v_proj`` (Llama layout) or transposed as GPT-2's
    ``c_attn``; a tied ``output.weight`` is left out, as ``transformers`` saves it.
    """
    gpt2 = gpt2_layout(config)
    names = _GPT2_NAMES if gpt2 else _LLAMA_NAMES
    head_dim = int(config.head_dim or config.d_model // config.n_heads)
    q_rows, kv_rows = config.n_heads * head_dim, (config.n_kv_heads or config.n_heads) * head_dim  # H·Dh, Hkv·Dh
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key == "output.weight" and config.tie_embeddings:
            continue
        pieces = {key: tensor}
        if not gpt2 and ".self_attn.qkv_proj." in key:
            start, kind = key.split(".qkv_proj.")
            q, k, v = tensor.split([q_rows, kv_rows, kv_rows])  # rows Q (H·Dh), K (Hkv·Dh), V (Hkv·Dh)
            pieces = {f"{start}.q_proj.{kind}": q, f"{start}.k_proj.{kind}": k, f"{start}.v_proj.{kind}": v}
        for ours, piece in pieces.items():
            name = _translate(ours, names, to_ours=False)
            if name is None:
                raise ValueError(
                    f"weight {ours!r} has no place in the Hugging Face {'GPT-2' if gpt2 else 'Llama'} layout"
                )
            if gpt2 and ours.startswith("decoder.layers.") and piece.dim() == 2:
                piece = piece.t()  # Linear (out, in) -> Conv1D (in, out)
            out[name] = piece.detach().cpu().contiguous().clone()  # no storage shared (safetensors refuses it)
    return out


def _hf_layout(model: nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` and weights of a :class:`GPT` in the Hugging Face layout (for ``save_pretrained``)."""
    config = model.config
    assert isinstance(config, GPTConfig)
    hf = config_to_hf(config, next(model.parameters()).dtype)
    return hf, state_to_hf(model.state_dict(), config)


register_hf_layout(GPT.model_type, _hf_layout)
