"""Which file converts what: Hugging Face ``model_type`` → architecture module, tformer config → the module that
writes it, and the four conversions dispatched through them.

Every architecture module (:mod:`.gpt2`, :mod:`.gpt_neox`, :mod:`.llama`, :mod:`.gemma3`, :mod:`.bert`, :mod:`.marian`)
has the same four functions on plain dicts and tensors: ``config_from_hf``, ``config_to_hf``, ``state_from_hf``,
``state_to_hf``, and an ``ARCHITECTURES`` table (``model_type`` → the ``transformers`` class that loads it). This module
is the one place that lists them; :mod:`tformer.hf` and :mod:`tformer.hf.directory` go through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch
from torch import nn

from tformer.hf import bert, common, gemma3, gpt2, gpt_neox, llama, marian
from tformer.hf.sizes import Shapes
from tformer.models.bert import Bert, BertConfig
from tformer.models.config import ModelConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.loading import no_init
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = [
    "MODULES",
    "ARCHITECTURES",
    "DECODER_TYPES",
    "CLASSES",
    "module_for_hf",
    "module_for",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "build",
    "load_state",
    "shapes",
    "hf_field",
]

MODULES: dict[str, ModuleType] = {  # Hugging Face model_type -> the module that reads and writes it
    model_type: module
    for module in (gpt2, gpt_neox, llama, gemma3, bert, marian)
    for model_type in module.ARCHITECTURES
}
ARCHITECTURES: dict[str, str] = {  # model_type -> the transformers class an export names
    model_type: cls
    for module in (gpt2, gpt_neox, llama, gemma3, bert, marian)
    for model_type, cls in module.ARCHITECTURES.items()
}
DECODER_TYPES = (*gpt2.ARCHITECTURES, *gpt_neox.ARCHITECTURES, *llama.ARCHITECTURES, *gemma3.ARCHITECTURES)  # a GPT
CLASSES = (  # the transformers classes from_hf converts (by name: tformer.hf never imports transformers)
    "GPT2LMHeadModel",
    "GPT2Model",
    "GPTNeoXForCausalLM",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Gemma3ForCausalLM",
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "MarianMTModel",
)


def module_for_hf(hf: Mapping) -> ModuleType:
    """The module that reads a config dict, by its ``model_type``; an unknown one is a ValueError naming it."""
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODULES:
        raise ValueError(f"config model_type={model_type!r} is not supported; supported: {sorted(MODULES)}")
    return MODULES[model_type]


def module_for(config: ModelConfig) -> ModuleType:
    """The module that writes a tformer config: a GPT goes to GPT-2 (plain MLP), GPT-NeoX (plain MLP with RoPE),
    Gemma 3 (sandwich norms) or the Llama family (the rest); each refuses, naming the field, what its layout cannot
    hold."""
    if isinstance(config, GPTConfig):
        if config.ffn == "mlp":
            return gpt_neox if config.positional == "rope" else gpt2
        return gemma3 if config.sandwich_norm else llama
    if isinstance(config, BertConfig):
        return bert
    if isinstance(config, Seq2SeqConfig):
        return marian
    raise ValueError(f"{type(config).__name__} has no Hugging Face layout")


def config_from_hf(hf: Mapping) -> ModelConfig:
    """Our config for a Hugging Face config dict, by its ``model_type``."""
    return module_for_hf(hf).config_from_hf(hf)


def hf_field(hf: Mapping, ours: str) -> str:
    """The field of the config dict ``hf`` that our config field ``ours`` is read from (``d_model`` → ``hidden_size``
    in a Llama, ``n_embd`` in a GPT-2): what a message about a Hugging Face model names."""
    module = module_for_hf(hf)
    names = module.config_names(hf) if hasattr(module, "config_names") else module.CONFIG_NAMES
    return names.get(ours, ours)


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of the config dict ``hf`` gives its weights (:mod:`tformer.hf.sizes`)."""
    return module_for_hf(hf).shapes(hf)


def config_to_hf(config: ModelConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (as a dict) that holds ``config``; refuses naming the field."""
    return module_for(config).config_to_hf(config, dtype)


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: ModelConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Hugging Face weights → our names, for a config from :func:`config_from_hf`."""
    return module_for(config).state_from_hf(hf_state, config, dtype)


def state_to_hf(state: Mapping[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our weights (``state_dict()``) → Hugging Face's names, each its own contiguous CPU tensor; a GPT's token table
    and head without their padding rows (``GPTConfig.vocab_multiple``: Hugging Face's config has ``vocab_size`` rows)."""
    if isinstance(config, GPTConfig) and config.table_rows != config.vocab_size:
        state = {k: t[: config.vocab_size] if k in GPT.word_tables else t for k, t in state.items()}
    return module_for(config).state_to_hf(state, config)


def build(config: ModelConfig, empty: bool = False) -> nn.Module:
    """A fresh tformer model of ``config``'s family; ``empty``: its parameters not initialised, for
    :func:`load_state` to fill (a GPT's and a translator's are all filled; a BERT's heads may be absent from a
    checkpoint and keep their init, so a BERT is always initialised)."""
    if isinstance(config, BertConfig):
        return Bert(config)
    if not isinstance(config, (GPTConfig, Seq2SeqConfig)):
        raise ValueError(f"{type(config).__name__} is not a tformer model config")
    with no_init() if empty else contextlib.nullcontext():
        return GPT(config) if isinstance(config, GPTConfig) else Seq2SeqTransformer(config)


def load_state(model: nn.Module, state: dict[str, torch.Tensor], owned: bool = False) -> nn.Module:
    """Copy ``state`` (our names) into ``model``: strictly for a GPT (every weight used, every parameter filled);
    a BERT's missing heads keep their init; a Marian model gets its fixed position table."""
    if isinstance(model, Bert):
        return bert.load_state(model, state)
    if isinstance(model, Seq2SeqTransformer):
        return marian.load_state(model, state, owned)
    return common.load_state(model, state, owned=owned)
