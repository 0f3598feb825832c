"""Convert Hugging Face ``transformers`` models into tformer models with the same weights.

``from_hf(model)`` accepts

* ``GPT2LMHeadModel`` / ``GPT2Model``, ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
  ``Qwen3ForCausalLM`` → :class:`tformer.GPT` (the config and weight mapping, both ways, are plain dicts in
  :mod:`tformer.models.hf_format`, which also writes a GPT in the Hugging Face layout);
* ``BertModel``, ``BertForPreTraining``, ``BertForMaskedLM``, ``BertForSequenceClassification``
  → :class:`tformer.Bert`;
* ``MarianMTModel`` → :class:`tformer.Seq2SeqTransformer` (in :mod:`tformer.interop.hf_marian`).

The helpers both converter modules use live in :mod:`tformer.interop.common`; this module imports
:mod:`~tformer.interop.hf_marian` for the dispatch, never the other way round.

The weight-name mapping for BERT (:func:`bert_state_from_hf`) and the config mapping
(:func:`bert_config_from_hf`) work on plain dicts, so :mod:`tformer.bert.embeddings` reuses them to read a
``config.json`` + ``model.safetensors`` directory without importing ``transformers`` at all.

What changes on the way:

* GPT-2's ``Conv1D`` stores weights as (in, out); ``nn.Linear`` wants (out, in): every GPT-2
  matrix is transposed. ``c_attn`` is already the fused (Q, K, V) projection, in our row order.
* BERT keeps W_Q, W_K, W_V as three ``Linear``s; they are concatenated into one (3D, D) ``qkv_proj``.
* GPT-2 has separate embedding and residual dropouts (``embd_pdrop``, ``resid_pdrop``); tformer has
  one, taken from ``resid_pdrop``. Irrelevant in eval mode (the converted model is returned in eval).

Dimension legend: D model dim, V vocabulary size, L number of layers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tformer.checks import load_safetensors, read_json_object
from tformer.interop.common import activation, drop_tied, fuse_qkv, rename
from tformer.interop.hf_marian import marian_from_hf
from tformer.models.bert import Bert, BertConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.hf_config import check_fields
from tformer.models.hf_format import config_from_hf, load_state, state_from_hf
from tformer.models.hf_format import gpt2_config_from_hf as gpt_config_from_hf  # its name here before the move
from tformer.models.seq2seq import Seq2SeqTransformer

__all__ = [
    "from_hf",
    "gpt_config_from_hf",
    "gpt_state_from_hf",
    "bert_config_from_hf",
    "bert_state_from_hf",
    "load_hf_bert_state",
    "read_hf_bert_dir",
    "bert_from_hf_dir",
]

# HF BERT weight names -> ours: the prefix rules first, then the one rename that matches.
# Heads absent from a checkpoint keep our fresh init.
_BERT_PREFIX = [
    (r"^bert\.", ""),
    (r"\.gamma$", ".weight"),  # LayerNorm names of TF-converted checkpoints
    (r"\.beta$", ".bias"),
]
_BERT_RENAMES = [
    (r"^embeddings\.word_embeddings\.", "embed.token."),
    (r"^embeddings\.position_embeddings\.", "embed.position."),
    (r"^embeddings\.token_type_embeddings\.", "embed.segment."),
    (r"^embeddings\.LayerNorm\.", "embed.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"encoder.layers.\1.self_attn.\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"encoder.layers.\1.self_attn.out_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"encoder.layers.\1.add_norm1.norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"encoder.layers.\1.ff.linear1."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"encoder.layers.\1.ff.linear2."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"encoder.layers.\1.add_norm2.norm."),
    (r"^pooler\.dense\.", "pooler."),
    (r"^cls\.predictions\.transform\.dense\.", "mlm_head.dense."),
    (r"^cls\.predictions\.transform\.LayerNorm\.", "mlm_head.norm."),
    (r"^cls\.predictions\.decoder\.", "mlm_head.decoder."),
    (r"^cls\.predictions\.bias$", "mlm_head.decoder.bias"),
    (r"^cls\.seq_relationship\.", "nsp_head."),
    (r"^classifier\.", "classifier.1."),
]
_BERT_IGNORED = re.compile(r"(^|\.)embeddings\.position_ids$")  # a buffer, not a weight
_BERT_HEADS = ("pooler.", "mlm_head.", "nsp_head.", "classifier.")  # may be missing from a checkpoint

# ----------------------------------------------------------------------------------------------- BERT


def bert_config_from_hf(hf: Mapping, num_labels: int = 0) -> BertConfig:
    """Our :class:`BertConfig` from a Hugging Face BERT config dict (``config.json`` or ``config.to_dict()``).

    ``num_labels`` sizes the classification head (0 = none): HF configs always carry a ``num_labels``,
    so only the caller knows whether the model really has that head.
    """
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"from_hf: expected a BERT config (model_type 'bert'), got model_type={hf['model_type']!r}")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"from_hf: position_embedding_type={position_type!r} is not supported, only 'absolute'")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError("from_hf: BERT as a decoder (is_decoder / add_cross_attention) is not supported")
    pad = hf.get("pad_token_id")
    missing = [name for name in _BERT_FIELDS if name not in hf]
    if missing:
        raise ValueError(f"from_hf: the BERT config has no {', '.join(map(repr, missing))} (not a BERT config?)")
    check_fields({"model_type": "bert", **hf}, _BERT_KINDS)  # types and ranges, naming the field
    return BertConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        n_segments=hf["type_vocab_size"],
        dropout=hf["hidden_dropout_prob"],
        attn_dropout=hf["attention_probs_dropout_prob"],
        activation=activation(hf["hidden_act"], "hidden_act"),
        norm_eps=hf["layer_norm_eps"],
        pad_id=0 if pad is None else pad,
        num_labels=num_labels,
    )


_BERT_FIELDS = (  # what bert_config_from_hf reads from a Hugging Face BERT config.json
    "vocab_size",
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "hidden_act",
    "layer_norm_eps",
)
_BERT_KINDS = {  # the kind of each field read (tformer.models.hf_config.check_fields), and whether null is allowed
    **{name: ("count", False) for name in _BERT_FIELDS[:7]},
    "hidden_dropout_prob": ("fraction", False),
    "attention_probs_dropout_prob": ("fraction", False),
    "hidden_act": ("str", False),
    "layer_norm_eps": ("positive", False),
    "pad_token_id": ("index", True),
    "position_embedding_type": ("str", True),
    "is_decoder": ("bool", True),
    "add_cross_attention": ("bool", True),
}


def read_hf_bert_dir(directory: str | os.PathLike) -> tuple[dict[str, Any], BertConfig, dict[str, torch.Tensor]]:
    """The ``config.json`` (as a dict), our :class:`BertConfig` and the weights of a Hugging Face BERT directory.

    Checked before any model is built: a missing, empty, binary, truncated or non-object ``config.json``, a
    config that is not BERT's or whose values are out of range (the size limit of
    :data:`tformer.models.config.MAX_PARAMETERS` included), a ``model.safetensors`` that is missing or not
    readable: each is one ``ValueError`` / ``FileNotFoundError`` that names the file.
    """
    directory = Path(directory)
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    config = read_json_object(config_path, "model config")
    try:
        bert_config = bert_config_from_hf(config)
    except (ValueError, TypeError) as err:  # missing fields; values of the wrong type or out of range
        raise ValueError(f"model config {str(config_path)!r}: {err}") from None
    state = load_safetensors(weights_path)  # NaN / inf: one line naming the file and the tensor
    for name, tensor in state.items():  # an integer or boolean weight would be cast without a word
        if not tensor.is_floating_point() and not _BERT_IGNORED.search(name):
            raise ValueError(
                f"weights file {str(weights_path)!r}: tensor {name!r} has dtype "
                f"{str(tensor.dtype).removeprefix('torch.')}; a weight must be floating point"
            )
    return config, bert_config, state


def bert_from_hf_dir(directory: str | os.PathLike, config: BertConfig, state: Mapping[str, torch.Tensor]) -> Bert:
    """A :class:`Bert` of ``config`` holding ``state`` (from :func:`read_hf_bert_dir`); weights that do not fit
    the config (names, shapes) are a ``ValueError`` naming the weights file."""
    weights_path = Path(directory) / "model.safetensors"
    try:
        return load_hf_bert_state(Bert(config), state).eval()
    except (ValueError, RuntimeError, KeyError) as err:  # unknown names, shapes that differ, a missing Q/K/V
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"weights file {str(weights_path)!r} does not fit its config.json: {reason}") from None


def bert_state_from_hf(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face BERT weights (``state_dict()`` or a safetensors file) renamed to our :class:`Bert` keys.

    Accepts keys with or without the ``bert.`` prefix; unknown keys raise a ``ValueError``.
    """
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if _BERT_IGNORED.search(key):
            continue
        ours = rename(key, _BERT_PREFIX, _BERT_RENAMES, "BERT")
        state[ours] = tensor
    return fuse_qkv(state, ("query", "key", "value"))


def load_hf_bert_state(model: Bert, hf_state: Mapping[str, torch.Tensor]) -> Bert:
    """Copy Hugging Face BERT weights into ``model`` (in place); heads the checkpoint lacks keep their init."""
    state = bert_state_from_hf(hf_state)
    # our MLM decoder weight *is* the token embedding: refuse an untied checkpoint instead of losing weights
    drop_tied(
        state,
        "mlm_head.decoder.weight",
        "embed.token.weight",
        "from_hf: the MLM decoder weight differs from the word embeddings (tie_word_embeddings=False) "
        "and tformer's Bert always ties them",
    )
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(_BERT_HEADS) and k != "mlm_head.decoder.weight"]
    if missing or unexpected:
        raise ValueError(f"from_hf: BERT weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return model


def _bert_from_hf(model: Any) -> Bert:
    from transformers import BertForSequenceClassification

    num_labels = (model.config.num_labels or 0) if isinstance(model, BertForSequenceClassification) else 0
    ours = Bert(bert_config_from_hf(model.config.to_dict(), num_labels=num_labels))
    return load_hf_bert_state(ours, model.state_dict())


# ---------------------------------------------------------------------------------------------- GPT-2


def gpt_state_from_hf(hf_state: Mapping[str, torch.Tensor], config: GPTConfig | None = None) -> dict[str, torch.Tensor]:
    """GPT-2 weights renamed to our keys: :func:`tformer.models.hf_format.state_from_hf`, under its name from before
    the move. Without ``config`` the head counts as untied: a ``lm_head.weight`` stays, as ``output.weight``."""
    return state_from_hf(hf_state, config or _ANY_GPT2)


_ANY_GPT2 = GPTConfig(vocab_size=1, d_model=8, n_heads=1, n_layers=1, d_ff=8, max_len=8, tie_embeddings=False)


def _gpt_from_hf(model: Any) -> GPT:
    """GPT-2, Llama, Mistral, Qwen2, Qwen3: the mapping lives in :mod:`tformer.models.hf_format`."""
    config = config_from_hf(model.config.to_dict())
    return load_state(GPT(config), state_from_hf(model.state_dict(), config))  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ entry point


def from_hf(model: nn.Module) -> GPT | Bert | Seq2SeqTransformer:
    """The tformer equivalent of a Hugging Face GPT-2, BERT or Marian model, same weights, same device, in eval mode.

    * ``GPT2LMHeadModel`` / ``GPT2Model`` → :class:`GPT` (output projection tied to the token embedding as in
      GPT-2, so a ``GPT2Model`` gets GPT-2's LM head for free; ``tie_word_embeddings=False`` keeps its own head).
    * ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` → :class:`GPT`
      with RMSNorm, SwiGLU, RoPE, grouped-query attention, tied or untied head, Mistral's sliding window,
      Qwen2's Q/K/V bias, Qwen3's q/k norm; every weight is used and every parameter filled.
    * ``BertModel`` → :class:`Bert` with the encoder and pooler copied; the MLM, NSP (and no
      classification) heads are freshly initialised.
    * ``BertForPreTraining`` → encoder, pooler, MLM and NSP heads copied.
    * ``BertForMaskedLM`` → encoder and MLM head copied; it has no pooler, so pooler and NSP head are fresh.
    * ``BertForSequenceClassification`` → encoder, pooler and classifier (``num_labels`` outputs)
      copied; MLM and NSP heads fresh.
    * ``MarianMTModel`` → :class:`Seq2SeqTransformer`; generate with ``sos_id=config.decoder_start_token_id``
      (Marian's pad token); details in :mod:`tformer.interop.hf_marian`.

    Unsupported configurations (relative positions, attention-scaling variants, unknown activations,
    biases on some projections only, sliding windows on some layers only) raise ``ValueError`` naming the field.
    """
    import transformers

    bert_types = (
        transformers.BertModel,
        transformers.BertForPreTraining,
        transformers.BertForMaskedLM,
        transformers.BertForSequenceClassification,
    )
    ours: GPT | Bert | Seq2SeqTransformer
    decoders = (
        transformers.GPT2LMHeadModel,
        transformers.GPT2Model,
        transformers.LlamaForCausalLM,
        transformers.MistralForCausalLM,
        transformers.Qwen2ForCausalLM,
        transformers.Qwen3ForCausalLM,
        transformers.Gemma3ForCausalLM,
    )
    if isinstance(model, decoders):
        ours = _gpt_from_hf(model)
    elif isinstance(model, bert_types):
        ours = _bert_from_hf(model)
    elif isinstance(model, transformers.MarianMTModel):
        ours = marian_from_hf(model)
    else:
        raise TypeError(
            "from_hf expects GPT2LMHeadModel, GPT2Model, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
            "Qwen3ForCausalLM, Gemma3ForCausalLM, BertModel, BertForPreTraining, BertForMaskedLM, "
            f"BertForSequenceClassification or MarianMTModel, got {type(model).__name__}"
        )
    first = next(model.parameters())
    return ours.to(device=first.device, dtype=first.dtype).eval()
