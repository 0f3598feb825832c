"""Marian (``MarianMTModel``, the OPUS-MT models) ↔ :class:`~tformer.models.seq2seq.Seq2SeqTransformer`, both ways.

Marian is the paper's encoder–decoder with a few fixed choices; they map onto our config like this:

* post-LN (``norm_first=False``), no LayerNorm after either stack (``final_norm`` off), LayerNorm eps 1e-5
  (Marian has no field for it), biases everywhere, the plain MLP;
* token embeddings × √D when ``scale_embedding`` is set (real OPUS-MT checkpoints set it; the ``MarianConfig``
  default does not);
* **sinusoidal positions laid out as halves**, ``[sin(pos·ω₀) … sin(pos·ω_{D/2-1}) | cos(pos·ω₀) …]``, where the
  paper's (our ``"sinusoidal"``) interleaves sin and cos. Reading, the converted model uses
  ``positional="sinusoidal_halves"``, Marian's table: fixed, a buffer, so that fine-tuning leaves it as Marian does,
  and the model is written back as it is. Writing a ``positional="sinusoidal"`` model, every weight's
  model-dimension axis is reordered by one permutation (even channels first, then odd: :func:`channel_order`):
  LayerNorm, attention and feed-forward commute with it, so Marian's table then lines up with ours and the logits
  are the same. A ``"learned"`` table (a model read from Marian by an earlier tformer, which copied the table in) is
  written only while it is still Marian's: Marian recomputes its table and never stores it;
* one embedding table shared by encoder, decoder and ``lm_head`` (``share_encoder_decoder_embeddings``,
  ``tie_word_embeddings``); untied variants map to ``share_embeddings=False`` / ``tie_embeddings=False``;
* ``final_logits_bias``, added to the logits (OPUS-MT's trained output bias, ``decoder_ff_logit_out_b``), is our
  ``output.bias`` (``output_bias=True``); a checkpoint without one gets zeros, as transformers gives it. Fine-tuning
  trains it with every other weight (transformers keeps it fixed, a buffer). An export writes ours, or zeros for a
  model without one;
* ``q_proj``, ``k_proj``, ``v_proj`` are concatenated into our fused ``qkv_proj`` (rows Q, K, V);
* activation ``relu``, ``gelu``, ``gelu_new`` and ``swish``/``silu``;
* dropouts: ``dropout``, ``attention_dropout`` and ``activation_dropout`` (inside the FFN) map to our ``dropout``,
  ``attn_dropout`` and ``ffn_dropout``; ``layerdrop`` is not supported. Only training sees them.

**Generation.** Marian starts the decoder with ``decoder_start_token_id`` (in OPUS-MT the pad token): pass it as
``sos_id`` to :func:`tformer.generation.translate_ids` / :func:`~tformer.generation.beam_search`, with
``eos_id=config.eos_token_id``. An export writes the translation tokenizer's ``<sos>`` and ``<eos>`` there.
HF's ``generate`` also applies ``forced_eos_token_id`` (EOS forced at ``max_length``) and the checkpoint's
``bad_words_ids``; ours does not, so compare with those unset (an export leaves them unset).

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
from tformer.hf.sizes import Rule, Shapes, dim
from tformer.models.loading import fill
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from tformer.nn.positional import sinusoidal_table
from tformer.tokens import TRANSLATION_EOS, TRANSLATION_SOS

__all__ = [
    "ARCHITECTURES",
    "FIELDS",
    "config_from_hf",
    "config_to_hf",
    "state_from_hf",
    "state_to_hf",
    "load_state",
    "channel_order",
    "marian_table",
    "config_names",
    "shapes",
]

ARCHITECTURES = {"marian": "MarianMTModel"}
MARIAN_ACTIVATIONS = {**ACTIVATIONS, "swish": "silu", "silu": "silu"}  # x·sigmoid(x)
FIELDS: Fields = {  # every config.json field read here: its kind, and whether null is allowed
    "model_type": ("str", False),
    "vocab_size": ("count", False),
    "decoder_vocab_size": ("count", True),
    "d_model": ("count", False),
    "encoder_attention_heads": ("count", False),
    "decoder_attention_heads": ("count", False),
    "encoder_layers": ("count", False),
    "decoder_layers": ("count", False),
    "encoder_ffn_dim": ("count", False),
    "decoder_ffn_dim": ("count", False),
    "max_position_embeddings": ("count", False),
    "dropout": ("fraction", False),
    "attention_dropout": ("fraction", False),
    "activation_dropout": ("fraction", True),
    "encoder_layerdrop": ("fraction", True),
    "decoder_layerdrop": ("fraction", True),
    "activation_function": ("str", False),
    "scale_embedding": ("bool", True),
    "share_encoder_decoder_embeddings": ("bool", True),
    "tie_word_embeddings": ("bool", True),
    "pad_token_id": ("index", False),
    "decoder_start_token_id": ("index", True),
}
CONFIG_NAMES = {  # each Seq2SeqConfig field read from config.json -> that field (messages use the file's words)
    "src_vocab_size": "vocab_size",
    "d_model": "d_model",
    "n_heads": "encoder_attention_heads",
    "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers",
    "d_ff": "encoder_ffn_dim",
    "max_len": "max_position_embeddings",
    "dropout": "dropout",
    "attn_dropout": "attention_dropout",
    "ffn_dropout": "activation_dropout",
    "activation": "activation_function",
    "scale_embeddings": "scale_embedding",
    "share_embeddings": "share_encoder_decoder_embeddings",
    "tie_embeddings": "tie_word_embeddings",
    "pad_id": "pad_token_id",
}
_PREFIX = [(r"^model\.", "")]
_IGNORED = re.compile(r"^(model\.shared\.weight|model\.(en|de)coder\.embed_positions\.weight)$")
_RENAMES = [
    (r"^encoder\.embed_tokens\.", "src_embed.token."),
    (r"^decoder\.embed_tokens\.", "tgt_embed.token."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.", r"\1.layers.\2.self_attn."),  # q/k/v fused below
    (r"^(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.", r"\1.layers.\2.add_norm1.norm."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.", r"decoder.layers.\1.cross_attn."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.", r"decoder.layers.\1.add_norm2.norm."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.fc1\.", r"\1.layers.\2.ff.linear1."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.fc2\.", r"\1.layers.\2.ff.linear2."),
    (r"^encoder\.layers\.(\d+)\.final_layer_norm\.", r"encoder.layers.\1.add_norm2.norm."),
    (r"^decoder\.layers\.(\d+)\.final_layer_norm\.", r"decoder.layers.\1.add_norm3.norm."),
    (r"^lm_head\.", "output."),
    (r"^final_logits_bias$", "output.bias"),  # (1, V) there, (V,) here: reshaped in state_from_hf
]
_WRITE = [  # ours -> Hugging Face's (the inverse of the renames above)
    (r"^src_embed\.token\.", "model.encoder.embed_tokens."),
    (r"^tgt_embed\.token\.", "model.decoder.embed_tokens."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.(q|k|v|out)_proj\.", r"model.\1.layers.\2.self_attn.\3_proj."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.add_norm1\.norm\.", r"model.\1.layers.\2.self_attn_layer_norm."),
    (r"^decoder\.layers\.(\d+)\.cross_attn\.", r"model.decoder.layers.\1.encoder_attn."),
    (r"^decoder\.layers\.(\d+)\.add_norm2\.norm\.", r"model.decoder.layers.\1.encoder_attn_layer_norm."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.ff\.linear1\.", r"model.\1.layers.\2.fc1."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.ff\.linear2\.", r"model.\1.layers.\2.fc2."),
    (r"^encoder\.layers\.(\d+)\.add_norm2\.norm\.", r"model.encoder.layers.\1.final_layer_norm."),
    (r"^decoder\.layers\.(\d+)\.add_norm3\.norm\.", r"model.decoder.layers.\1.final_layer_norm."),
    (r"^output\.", "lm_head."),
]
QKV = ("q_proj", "k_proj", "v_proj")


# ------------------------------------------------------------------------------------------------ config


def config_from_hf(hf: Mapping) -> Seq2SeqConfig:
    """Our :class:`Seq2SeqConfig` from a Hugging Face Marian config dict; refuses what ours cannot express."""
    if hf.get("model_type", "marian") != "marian":
        raise ValueError(f"from_hf: expected a Marian config (model_type 'marian'), got {hf['model_type']!r}")
    check_fields({"model_type": "marian", **hf}, FIELDS)  # types and ranges, naming the field
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[a] != hf[b]:
            raise ValueError(f"from_hf: Marian with {a}={hf[a]} != {b}={hf[b]} is not supported")
    if hf.get("encoder_layerdrop") or hf.get("decoder_layerdrop"):
        raise ValueError("from_hf: Marian with layerdrop > 0 is not supported")
    if hf["d_model"] % 2:
        raise ValueError(f"from_hf: Marian with an odd d_model ({hf['d_model']}) is not supported")
    share = hf.get("share_encoder_decoder_embeddings", True)
    return make_config(
        Seq2SeqConfig,
        {"model_type": "marian", **hf},
        config_names(hf),
        src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf.get("decoder_vocab_size") or hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=hf["dropout"],
        attn_dropout=hf["attention_dropout"],
        ffn_dropout=float(hf.get("activation_dropout") or 0.0),  # (transformers' default: 0)
        activation=activation(hf["activation_function"], "activation_function", MARIAN_ACTIVATIONS),
        norm_first=False,
        final_norm=False,
        max_len=hf["max_position_embeddings"],
        positional="sinusoidal_halves",  # Marian's [sin | cos] table (see the module docstring)
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        share_embeddings=share and hf.get("tie_word_embeddings", True),  # HF ties nothing without the latter
        tie_embeddings=hf.get("tie_word_embeddings", True),
        output_bias=True,  # MarianMTModel's final_logits_bias
        pad_id=hf["pad_token_id"],
    )


def config_names(hf: Mapping) -> dict[str, str]:
    """Each Seq2SeqConfig field → the field of ``hf`` it is read from (the target vocabulary: ``decoder_vocab_size``
    when the file has one, else ``vocab_size``)."""
    return CONFIG_NAMES | {"tgt_vocab_size": "decoder_vocab_size" if hf.get("decoder_vocab_size") else "vocab_size"}


def shapes(hf: Mapping) -> Shapes:
    """The shape each size field of a Marian ``config.json`` gives the weights (:mod:`tformer.hf.sizes`); the position
    tables are Marian's fixed ones, rarely stored."""
    vocab, d, positions = dim(hf, "vocab_size"), dim(hf, "d_model"), dim(hf, "max_position_embeddings")
    target = vocab if hf.get("decoder_vocab_size") in (None, vocab.value) else dim(hf, "decoder_vocab_size")
    rules = [Rule("shared", (vocab, d)), Rule("encoder.embed_tokens", (vocab, d))]
    rules += [Rule("decoder.embed_tokens", (target, d)), Rule("lm_head", (target, d))]
    for stack, attentions in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "encoder_attn"))):
        layer, ff = f"{stack}.layers.{{i}}.", dim(hf, f"{stack}_ffn_dim")
        rules.append(Rule(f"{stack}.embed_positions", (positions, d)))
        for attention in attentions:
            rules += [Rule(f"{layer}{attention}.{p}_proj", (d, d)) for p in ("q", "k", "v", "out")]
            rules.append(Rule(f"{layer}{attention}_layer_norm", (d,)))
        rules += [Rule(layer + "fc1", (ff, d)), Rule(layer + "fc2", (d, ff)), Rule(layer + "final_layer_norm", (d,))]
    stacks = {f"{stack}.layers.{{i}}": dim(hf, f"{stack}_layers") for stack in ("encoder", "decoder")}
    return Shapes(rules, stacks, may_be_absent=("max_position_embeddings",))


def check(config: Seq2SeqConfig) -> None:
    """Refuse, naming the field, a Seq2SeqConfig that Marian cannot hold (the position table is checked with the
    weights, :func:`state_to_hf`)."""
    if config.norm_first:
        raise refuse(config, "norm_first", "Marian is post-LN (a LayerNorm after each residual add)")
    if config.final_norm:
        raise refuse(config, "final_norm", "Marian has no LayerNorm after either stack")
    require(config, dict(norm="layernorm", ffn="mlp", n_kv_heads=None, qk_norm=False, bias=True), "Marian")
    if config.norm_eps != 1e-5:
        raise refuse(config, "norm_eps", "Marian's LayerNorms have eps 1e-5 and no field to change it")
    if hf_activation(config.activation, MARIAN_ACTIVATIONS) is None:
        raise refuse(config, "activation", f"Marian allows {sorted(set(MARIAN_ACTIVATIONS.values()))}")


def config_to_hf(
    config: Seq2SeqConfig, dtype: torch.dtype = torch.float32, sos_id: int | None = None, eos_id: int | None = None
) -> dict[str, Any]:
    """The ``config.json`` (as a dict) of the ``MarianMTModel`` holding a :class:`Seq2SeqTransformer` with ``config``.

    ``sos_id`` / ``eos_id``: the target tokenizer's start and end ids (default: the translation family's ``<sos>``
    and ``<eos>``), written as ``decoder_start_token_id`` and ``eos_token_id``."""
    check(config)
    name = dtype_name(dtype)
    sos = TRANSLATION_SOS if sos_id is None else sos_id
    eos = TRANSLATION_EOS if eos_id is None else eos_id
    share = config.share_embeddings and config.tie_embeddings  # Marian ties nothing without tie_word_embeddings
    return {
        "architectures": [ARCHITECTURES["marian"]],
        "model_type": "marian",
        "is_encoder_decoder": True,
        "vocab_size": config.src_vocab_size,
        "decoder_vocab_size": config.tgt_vocab_size,
        "share_encoder_decoder_embeddings": share,
        "tie_word_embeddings": config.tie_embeddings,
        "d_model": config.d_model,
        "encoder_layers": config.n_encoder_layers,
        "decoder_layers": config.n_decoder_layers,
        "encoder_attention_heads": config.n_heads,
        "decoder_attention_heads": config.n_heads,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "activation_function": hf_activation(config.activation, MARIAN_ACTIVATIONS),
        "dropout": config.dropout,
        "attention_dropout": config.dropout if config.attn_dropout is None else config.attn_dropout,
        "activation_dropout": config.dropout if config.ffn_dropout is None else config.ffn_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "max_position_embeddings": config.max_len,
        "scale_embedding": config.scale_embeddings,
        "pad_token_id": config.pad_id,
        "decoder_start_token_id": sos,
        "bos_token_id": None,
        "eos_token_id": eos,
        "forced_eos_token_id": None,
        "torch_dtype": name,
        "dtype": name,
    }


# ------------------------------------------------------------------------------------------------ state


def marian_table(max_len: int, d_model: int) -> torch.Tensor:
    """Marian's sinusoidal table (max_len, D): the paper's table with its columns in :func:`channel_order`."""
    return sinusoidal_table(max_len, d_model, halves=True)


def channel_order(d_model: int) -> torch.Tensor:
    """The model-dimension permutation from our layout to Marian's: channel j of Marian is our channel order[j],
    the even ones (sin) first, then the odd ones (cos)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def state_from_hf(
    hf_state: Mapping[str, torch.Tensor], config: Seq2SeqConfig | None = None, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Marian weights renamed to our :class:`Seq2SeqTransformer` keys; tied copies are left for :func:`load_state`.

    ``model.shared`` is read only where the encoder's table is absent (``save_pretrained`` stores a shared table
    once, under that name); the position tables are Marian's fixed ones, the model's own (``"sinusoidal_halves"``);
    ``final_logits_bias`` (1, V) becomes ``output.bias`` (V,). ``config`` is not needed (the names say it all);
    ``dtype`` casts floating tensors (None: kept).
    """
    state = {
        rename(key, _PREFIX, _RENAMES, "Marian"): tensor for key, tensor in hf_state.items() if not _IGNORED.match(key)
    }
    shared = hf_state.get("model.shared.weight")
    if shared is not None:
        state.setdefault("src_embed.token.weight", shared)
    if "output.bias" in state:
        state["output.bias"] = state["output.bias"].reshape(-1)
    if dtype is not None:
        state = {k: t.to(dtype) if t.is_floating_point() else t for k, t in state.items()}
    return fuse_qkv(state, QKV)


def load_state(model: Seq2SeqTransformer, state: dict[str, torch.Tensor], owned: bool = False) -> Seq2SeqTransformer:
    """Copy ``state`` (from :func:`state_from_hf`) into ``model`` (in place): tied copies checked and dropped, every
    parameter filled (Marian's position table is the model's own buffer, ``positional="sinusoidal_halves"``)."""
    config = model.config
    tied = []
    if config.share_embeddings:
        tied.append(_drop_tied(state, "tgt_embed.token.weight", "src_embed.token.weight"))
    if config.tie_embeddings:
        tgt_table = "src_embed.token.weight" if config.share_embeddings else "tgt_embed.token.weight"
        tied.append(_drop_tied(state, "output.weight", tgt_table))
    dtype = model.src_embed.token.weight.dtype
    if config.output_bias and "output.bias" not in state:  # transformers' zeros where the file has none
        state["output.bias"] = torch.zeros(config.tgt_vocab_size, dtype=dtype)
    expected = model.state_dict()
    missing = sorted(k for k in set(expected) - set(state) if k not in tied)
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    if missing or unexpected or wrong:
        raise ValueError(
            f"from_hf: Marian weights do not fit the model: missing {missing}, unexpected {unexpected}, "
            f"shapes {[f'{k}: {tuple(state[k].shape)} vs {tuple(expected[k].shape)}' for k in wrong]}"
        )
    fill(model, state, owned)  # each weight dropped from ``state`` once in (owned: no copy)
    return model


def _drop_tied(state: dict[str, torch.Tensor], key: str, tied_to: str) -> str:
    return drop_tied(
        state, key, tied_to, f"from_hf: Marian weight for {key} differs from {tied_to}, but the config ties them"
    )


def state_to_hf(state: Mapping[str, torch.Tensor], config: Seq2SeqConfig) -> dict[str, torch.Tensor]:
    """Our :class:`Seq2SeqTransformer` weights in Marian's names, channels reordered for a ``"sinusoidal"`` model (see
    the module docstring); a learned position table that is not Marian's is refused naming ``positional``."""
    state = dict(state)
    tables = [state.pop(k) for k in ("src_embed.position.weight", "tgt_embed.position.weight") if k in state]
    bias = state.pop("output.bias", None)  # (V,): along the words, no channel to reorder
    if config.positional == "learned":
        expected = marian_table(config.max_len, config.d_model)
        if any(not torch.allclose(t.float().cpu(), expected, atol=1e-6, rtol=0) for t in tables):
            raise refuse(
                config,
                "positional",
                "Marian's positions are a fixed sinusoidal table it recomputes, and this model's learned table is "
                "not that table",
            )
    elif config.positional == "sinusoidal":
        state = _reorder_channels(state, channel_order(config.d_model))
    d = config.d_model
    out = {
        rename(key, [], _WRITE, "Marian", to_ours=False): tensor
        for key, tensor in split_qkv(state, QKV, (d, d, d)).items()
        if not (key == "output.weight" and config.tie_embeddings)
        and not (key == "tgt_embed.token.weight" and config.share_embeddings and config.tie_embeddings)
    }
    if config.share_embeddings and config.tie_embeddings:  # one table, stored as transformers stores it
        out["model.shared.weight"] = out.pop("model.encoder.embed_tokens.weight")
    zeros = torch.zeros(config.tgt_vocab_size, dtype=next(iter(state.values())).dtype)
    out["final_logits_bias"] = (zeros if bias is None else bias).reshape(1, -1)
    return contiguous_copy(out)


def _reorder_channels(state: Mapping[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor with its model-dimension axis in Marian's channel order: the columns of the embeddings, the
    output layer and each projection reading the residual stream; the rows (and bias) of each projection writing
    into it; the LayerNorms whole. Q/K/V's rows and the feed-forward's hidden units stay."""
    out = {}
    for key, t in state.items():
        if key.endswith(("token.weight", "qkv_proj.weight", "linear1.weight")) or key == "output.weight":
            t = t[:, order]  # (out, D): reads the residual stream
        elif key.endswith(("out_proj.weight", "linear2.weight")):
            t = t[order]  # (D, in): writes into it
        elif key.endswith(("out_proj.bias", "linear2.bias", "norm.weight", "norm.bias")):
            t = t[order]  # (D,)
        elif not key.endswith(("qkv_proj.bias", "linear1.bias")):
            raise ValueError(f"weight {key!r} has no place in the Hugging Face Marian layout")
        out[key] = t
    return out
