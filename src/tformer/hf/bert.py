"""BERT (``BertModel``, ``BertForPreTraining``, ``BertForMaskedLM``, ``BertForSequenceClassification``) ↔
:class:`~tformer.models.bert.Bert`, both directions.

tformer's Bert is BERT's block (post-LN, learned positions and segments, an embedding LayerNorm, biases everywhere)
with its three heads: the MLM head (dense, activation, LayerNorm, a decoder tied to the word embeddings), the pooler
with the NSP head, and an optional classifier. What changes on the way:

* BERT keeps W_Q, W_K, W_V as three ``Linear``\\ s (``query``, ``key``, ``value``); ours is one (3D, D) ``qkv_proj``;
* reading, heads a checkpoint lacks keep their fresh init (``BertModel`` has no MLM or NSP head,
  ``BertForMaskedLM`` no pooler); an MLM decoder that is not the word embeddings is refused (ours is always tied);
* writing, a Bert without a classifier becomes ``BertForPreTraining`` (every head; ``BertForMaskedLM`` and
  ``BertModel`` load the same files), one with a classifier ``BertForSequenceClassification`` (the encoder, the
  pooler and the classifier: that class has no MLM or NSP head, so those are not written).

The weight mapping and the config mapping work on plain dicts: :mod:`tformer.hf.directory` reads a
``config.json`` + ``model.safetensors`` directory through them without ``transformers``.

Dimension legend: D model dim, V vocabulary size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from tformer.hf.common import (
    Fields,
    activation,
    check_fields,
    contiguous_copy,
    drop_tied,
    dtype_name,
    fuse_qkv,
    hf_activation,
    make_config,
    refuse,
    rename,
    require,
    split_qkv,
)
from tformer.hf.sizes import Dim, Rule, Shapes, dim
from tformer.models.bert import Bert, BertConfig

__all__ = [
    "ARCHITECTURES",
    "HEAD_PREFIXES",
    "WITHOUT",
    "FIELDS",
    "IGNORED",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "load_state",
    "shapes",
]

ARCHITECTURES = {"bert": "BertForPreTraining"}  # with a classifier: BertForSequenceClassification
CLASSIFIER = "BertForSequenceClassification"
# each pretraining head of our Bert, and the prefix of its weights in Hugging Face's names (a checkpoint without them,
# a sentence-transformers encoder, leaves ours at their init: tformer.bert.fill_mask.untrained_heads)
HEAD_PREFIXES = {"mlm_head": "cls.predictions.", "nsp_head": "cls.seq_relationship."}
# what a BERT is exported as when a head never trained (its weights left out): by the heads that did
WITHOUT = {("mlm_head",): "BertModel", ("nsp_head",): "BertForMaskedLM", ("mlm_head", "nsp_head"): "BertModel"}
REQUIRED = (  # what config_from_hf reads from a Hugging Face BERT config.json
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
FIELDS: Fields = {  # the kind of each field read, and whether null is allowed
    **{name: ("count", False) for name in REQUIRED[:7]},
    "hidden_dropout_prob": ("fraction", False),
    "attention_probs_dropout_prob": ("fraction", False),
    "hidden_act": ("str", False),
    "layer_norm_eps": ("positive", False),
    "pad_token_id": ("index", True),
    "position_embedding_type": ("str", True),
    "is_decoder": ("bool", True),
    "add_cross_attention": ("bool", True),
}

CONFIG_NAMES = {  # each BertConfig field read from config.json -> that field (messages use the file's words)
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "max_len": "max_position_embeddings",
    "n_segments": "type_vocab_size",
    "dropout": "hidden_dropout_prob",
    "attn_dropout": "attention_probs_dropout_prob",
    "activation": "hidden_act",
    "norm_eps": "layer_norm_eps",
    "pad_id": "pad_token_id",
    "num_labels": "num_labels",
}

# HF BERT weight names -> ours: the prefix rules first, then the one rename that matches.
_PREFIX = [
    (r"^bert\.", ""),
    (r"\.gamma$", ".weight"),  # LayerNorm names of TF-converted checkpoints
    (r"\.beta$", ".bias"),
]
_RENAMES = [
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
# ours -> Hugging Face's, for writing (the inverse of the renames above)
_WRITE = [
    (r"^embed\.token\.", "bert.embeddings.word_embeddings."),
    (r"^embed\.position\.", "bert.embeddings.position_embeddings."),
    (r"^embed\.segment\.", "bert.embeddings.token_type_embeddings."),
    (r"^embed\.norm\.", "bert.embeddings.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.(query|key|value)\.", r"bert.encoder.layer.\1.attention.self.\2."),
    (r"^encoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"bert.encoder.layer.\1.attention.output.dense."),
    (r"^encoder\.layers\.(\d+)\.add_norm1\.norm\.", r"bert.encoder.layer.\1.attention.output.LayerNorm."),
    (r"^encoder\.layers\.(\d+)\.ff\.linear1\.", r"bert.encoder.layer.\1.intermediate.dense."),
    (r"^encoder\.layers\.(\d+)\.ff\.linear2\.", r"bert.encoder.layer.\1.output.dense."),
    (r"^encoder\.layers\.(\d+)\.add_norm2\.norm\.", r"bert.encoder.layer.\1.output.LayerNorm."),
    (r"^pooler\.", "bert.pooler.dense."),
    (r"^mlm_head\.dense\.", "cls.predictions.transform.dense."),
    (r"^mlm_head\.norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^mlm_head\.decoder\.bias$", "cls.predictions.bias"),
    (r"^nsp_head\.", "cls.seq_relationship."),
    (r"^classifier\.1\.", "classifier."),
]
IGNORED = re.compile(r"(^|\.)embeddings\.position_ids$")  # a buffer, not a weight
_HEADS = ("pooler.", "mlm_head.", "nsp_head.", "classifier.")  # may be missing from a checkpoint


# ------------------------------------------------------------------------------------------------ config


def config_from_hf(hf: Mapping, num_labels: int | None = None) -> BertConfig:
    """Our :class:`BertConfig` from a Hugging Face BERT config dict (``config.json`` or ``config.to_dict()``).

    ``num_labels`` sizes the classification head (0 = none). Hugging Face configs always carry a ``num_labels``,
    so only the model's class tells whether it really has that head: None reads it from ``architectures``
    (``BertForSequenceClassification``: the config's ``num_labels``; any other class: none).
    """
    if num_labels is None:
        classes = hf.get("architectures") or []
        num_labels = (hf.get("num_labels") or len(hf.get("id2label") or {})) if CLASSIFIER in classes else 0
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"from_hf: expected a BERT config (model_type 'bert'), got model_type={hf['model_type']!r}")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"from_hf: position_embedding_type={position_type!r} is not supported, only 'absolute'")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError("from_hf: BERT as a decoder (is_decoder / add_cross_attention) is not supported")
    missing = [name for name in REQUIRED if name not in hf]
    if missing:
        raise ValueError(f"from_hf: the BERT config has no {', '.join(map(repr, missing))} (not a BERT config?)")
    check_fields({"model_type": "bert", **hf}, FIELDS)  # types and ranges, naming the field
    pad = hf.get("pad_token_id")
    return make_config(
        BertConfig,
        {"model_type": "bert", **hf},
        CONFIG_NAMES,
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"],
        n_segments=hf["type_vocab_size"],
        dropout=hf["hidden_dropout_prob"],
        attn_dropout=hf["attention_probs_dropout_prob"],
        ffn_dropout=0.0,  # BERT's intermediate layer drops nothing (hidden_dropout_prob after the output dense)
        activation=activation(hf["hidden_act"], "hidden_act"),
        norm_eps=hf["layer_norm_eps"],
        pad_id=0 if pad is None else pad,
        num_labels=num_labels,
    )


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of a BERT ``config.json`` gives the weights (:mod:`tformer.hf.sizes`)."""
    vocab, d, ff = dim(hf, "vocab_size"), dim(hf, "hidden_size"), dim(hf, "intermediate_size")
    layer = "encoder.layer.{i}."
    rules = [
        Rule("embeddings.word_embeddings", (vocab, d)),
        Rule("embeddings.position_embeddings", (dim(hf, "max_position_embeddings"), d)),
        Rule("embeddings.token_type_embeddings", (dim(hf, "type_vocab_size"), d)),
        Rule("embeddings.LayerNorm", (d,)),
        *[Rule(f"{layer}attention.self.{name}", (d, d)) for name in ("query", "key", "value")],
        Rule(layer + "attention.output.dense", (d, d)),
        Rule(layer + "attention.output.LayerNorm", (d,)),
        Rule(layer + "intermediate.dense", (ff, d)),
        Rule(layer + "output.dense", (d, ff)),
        Rule(layer + "output.LayerNorm", (d,)),
        Rule("pooler.dense", (d, d)),
        Rule("cls.predictions.transform.dense", (d, d)),
        Rule("cls.predictions.transform.LayerNorm", (d,)),
        Rule("cls.predictions.decoder", (vocab, d)),
        Rule("cls.predictions", (), (vocab,)),  # its bias, ``cls.predictions.bias``
        Rule("cls.seq_relationship", (Dim("2 (is next, is not)", 2), d)),
    ]
    return Shapes(rules, {"encoder.layer.{i}": dim(hf, "num_hidden_layers")})


def check(config: BertConfig) -> None:
    """Refuse, naming the field, a BertConfig that Hugging Face's BERT cannot hold."""
    wanted = dict(norm_first=False, bias=True, norm="layernorm", ffn="mlp", n_kv_heads=None, qk_norm=False)
    require(config, wanted, "BERT")
    if hf_activation(config.activation) is None:
        raise refuse(config, "activation", "BERT's hidden_act has no such function")


def config_to_hf(config: BertConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The ``config.json`` (as a dict) of the BERT holding a :class:`Bert` with ``config``."""
    check(config)
    name = dtype_name(dtype)
    hf: dict[str, Any] = {
        "architectures": [CLASSIFIER if config.num_labels else ARCHITECTURES["bert"]],
        "model_type": "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads,
        "num_hidden_layers": config.n_layers,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_len,
        "type_vocab_size": config.n_segments,
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "hidden_act": hf_activation(config.activation),
        "layer_norm_eps": config.norm_eps,
        "pad_token_id": config.pad_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,  # the MLM decoder is the word embedding matrix
        "torch_dtype": name,
        "dtype": name,
    }
    if config.num_labels:
        hf |= {
            "num_labels": config.num_labels,
            "id2label": {str(i): f"LABEL_{i}" for i in range(config.num_labels)},
            "label2id": {f"LABEL_{i}": i for i in range(config.num_labels)},
        }
    return hf


# ------------------------------------------------------------------------------------------------ state


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: BertConfig | None = None, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Hugging Face BERT weights (``state_dict()`` or a safetensors file) renamed to our :class:`Bert` keys
    (``config`` is not needed: the names say it all); ``dtype`` casts floating tensors (None: kept).

    Accepts keys with or without the ``bert.`` prefix; unknown keys raise a ``ValueError``.
    """
    state: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        if IGNORED.search(key):
            continue
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[rename(key, _PREFIX, _RENAMES, "BERT")] = tensor
    return fuse_qkv(state, ("query", "key", "value"))


def load_state(model: Bert, state: dict[str, torch.Tensor]) -> Bert:
    """Copy ``state`` (from :func:`state_from_hf`) into ``model`` (in place); heads the checkpoint lacks keep their
    init."""
    # our MLM decoder weight *is* the token embedding: refuse an untied checkpoint instead of losing weights
    drop_tied(
        state,
        "mlm_head.decoder.weight",
        "embed.token.weight",
        "from_hf: the MLM decoder weight differs from the word embeddings (tie_word_embeddings=False) "
        "and tformer's Bert always ties them",
    )
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(_HEADS) and k != "mlm_head.decoder.weight"]
    if missing or unexpected:
        raise ValueError(f"from_hf: BERT weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return model


def state_to_hf(state: Mapping[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Our :class:`Bert` weights in Hugging Face's names: Q, K, V split; the tied MLM decoder left out (it is the
    word embedding matrix); with a classifier, the MLM and NSP heads left out (``BertForSequenceClassification``
    has neither)."""
    d = config.d_model
    out: dict[str, torch.Tensor] = {}
    for key, tensor in split_qkv(state, ("query", "key", "value"), (d, d, d)).items():
        if key == "mlm_head.decoder.weight" or (config.num_labels and key.startswith(("mlm_head.", "nsp_head."))):
            continue
        out[rename(key, [], _WRITE, "BERT", to_ours=False)] = tensor
    return contiguous_copy(out)
