"""Hugging Face interop, both directions: one file per architecture, each with the config mapping and the weight
mapping, in and out.

    gpt2.py      GPT2LMHeadModel                       ↔ GPT (learned positions, LayerNorm, MLP)
    gpt_neox.py  GPTNeoXForCausalLM (Pythia)           ↔ GPT (RoPE, LayerNorm, MLP, parallel residual)
    llama.py     Llama, Mistral, Qwen2, Qwen3          ↔ GPT (RMSNorm, SwiGLU, RoPE, GQA, ...)
    gemma3.py    Gemma3ForCausalLM                     ↔ GPT (sandwich norms, GeGLU, local/global layers)
    bert.py      BertForPreTraining / MaskedLM / ...   ↔ Bert
    marian.py    MarianMTModel                         ↔ Seq2SeqTransformer
    common.py    what they share (field checks, renaming, Q/K/V fusing, refusals)
    registry.py  model_type → module, tformer config → module: the one place that lists them
    directory.py a local Hugging Face directory (config.json + safetensors, sharded or not) → a tformer model
    export.py    a tformer model → a directory that transformers loads with its own classes

The entry points:

* :func:`from_hf` — a ``transformers`` model (or a config dict and its weights) → the tformer model with the same
  weights, in eval mode;
* :func:`load` — a local Hugging Face directory → the tformer model, without ``transformers``;
* :func:`export` — a tformer model (and its tokenizer) → a Hugging Face directory; ``tformer export MODEL --to hf
  OUT`` on the command line.

Every mapping works on plain dicts and tensors: nothing here imports ``transformers`` (``from_hf`` knows the
classes by name). What one side cannot express is one ``ValueError`` naming the field, before anything is built
or written. This package knows the Hugging Face formats and tformer's models; it knows nothing about training,
tokenizer kinds or the command line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tformer.fast.quantize import require_float
from tformer.hf import registry, sizes
from tformer.hf.common import dtype_from_hf
from tformer.hf.directory import is_hf_dir, load_hf_dir, load_hf_model
from tformer.hf.export import export
from tformer.hf.registry import (
    ARCHITECTURES,
    CLASSES,
    build,
    config_from_hf,
    config_to_hf,
    load_state,
    state_from_hf,
    state_to_hf,
)

__all__ = [
    "from_hf",
    "load",
    "export",
    "is_hf_dir",
    "load_hf_model",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "dtype_from_hf",
    "ARCHITECTURES",
]


def from_hf(
    source: Any, state: Mapping[str, torch.Tensor] | None = None, dtype: torch.dtype | None = None
) -> nn.Module:
    """The tformer model (in eval mode) with the weights of a Hugging Face model.

    ``source`` is a ``transformers`` model — ``GPT2LMHeadModel`` / ``GPT2Model``, ``LlamaForCausalLM``,
    ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, ``Gemma3ForCausalLM`` → :class:`GPT`;
    ``BertModel``, ``BertForPreTraining``, ``BertForMaskedLM``, ``BertForSequenceClassification`` →
    :class:`Bert`; ``MarianMTModel`` → :class:`Seq2SeqTransformer` — and the result is on its device, in its
    dtype. Or ``source`` is a ``config.json`` dict and ``state`` its weights (Hugging Face names), the result in
    ``dtype`` (None: as stored).

    A GPT-2 without a head (``GPT2Model``) gets GPT-2's tied head; heads a BERT checkpoint lacks are freshly
    initialised (``BertModel``: MLM and NSP; ``BertForMaskedLM``: pooler and NSP); a Marian model is generated
    from with ``sos_id=config.decoder_start_token_id`` (:mod:`tformer.hf.marian`). What tformer cannot express
    (relative positions, attention-scaling variants, unknown activations, biases on some projections only, sliding
    windows on some layers only, ...) is a ``ValueError`` naming the field. So is a quantized model (int8 layers,
    int8 weights): the conversion copies float weights.
    """
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(f"dtype must be None or a floating torch.dtype (torch.float32, ...), got {dtype!r}")
    if isinstance(source, Mapping):
        if state is None:
            raise ValueError("from_hf(config_dict, state): the weights (state) are missing")
        if not isinstance(state, Mapping):
            raise TypeError(f"state must map weight names to tensors (a state_dict), got {type(state).__name__}")
        odd = next((name for name, t in state.items() if not isinstance(t, torch.Tensor)), None)
        if odd is not None:
            raise TypeError(f"state[{odd!r}] must be a torch.Tensor, got {type(state[odd]).__name__}")
        hf, hf_state = dict(source), state
    else:
        name = type(source).__name__
        require_float(source, "from_hf (the conversion copies float weights)", f"this {name}")
        if name not in CLASSES:
            raise TypeError(f"from_hf expects {', '.join(CLASSES[:-1])} or {CLASSES[-1]}, got {name}")
        hf = source.config.to_dict() | {"architectures": [name]}
        hf_state = source.state_dict()
        first = next(source.parameters())
        dtype = first.dtype
    for key, tensor in hf_state.items():  # int8 weights (bitsandbytes, a quantized checkpoint) would be cast silently
        if isinstance(tensor, torch.Tensor) and not tensor.is_floating_point() and key.endswith("weight"):
            raise ValueError(
                f"from_hf: weight {key!r} has dtype {str(tensor.dtype).removeprefix('torch.')}: a quantized model; "
                "the conversion needs float weights (the float model it was quantized from)"
            )
    config = config_from_hf(hf)
    shapes = {name: tuple(t.shape) for name, t in hf_state.items() if isinstance(t, torch.Tensor)}
    sizes.check(registry.shapes(hf), shapes, "the config", lambda name: "the weights")  # before a model is built
    model = build(config).to(dtype) if dtype is not None else build(config)
    load_state(model, state_from_hf(hf_state, config, dtype))
    if not isinstance(source, Mapping):
        model = model.to(first.device)
    return model.eval()


def load(
    directory: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = torch.float32
) -> nn.Module:
    """The tformer model (in eval mode) of the Hugging Face directory ``directory`` — a decoder (GPT-2, Llama,
    Mistral, Qwen2, Qwen3, Gemma 3) as a GPT, a BERT, a Marian translator — read without ``transformers``, on
    ``device``, in ``dtype`` (None: as stored). Each bad file is one line naming it (:mod:`tformer.hf.directory`)."""
    return load_hf_dir(directory, device, dtype)
