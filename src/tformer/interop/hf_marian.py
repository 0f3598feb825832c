"""Hugging Face ``MarianMTModel`` → :class:`tformer.Seq2SeqTransformer` with the same weights.

Marian (the OPUS-MT models) is the paper's encoder–decoder with a few fixed choices; they map onto
our config like this:

* post-LN (``norm_first=False``), no final LayerNorm after either stack;
* token embeddings × √D when ``scale_embedding`` is set (real OPUS-MT checkpoints set it; the
  ``MarianConfig`` default does not), read from the config either way;
* **sinusoidal positions laid out as halves**, ``[sin(pos·ω₀) … sin(pos·ω_{D/2-1}) | cos(pos·ω₀) …]``,
  where ours interleaves sin and cos. Rather than a second sinusoidal variant, the converted model
  uses ``positional="learned"`` and Marian's own table is copied into the position weights (frozen,
  ``requires_grad=False``, as Marian keeps it);
* one embedding table shared by encoder, decoder and ``lm_head`` (``share_encoder_decoder_embeddings``,
  ``tie_word_embeddings``); untied variants map to ``share_embeddings=False`` / ``tie_embeddings=False``;
* ``final_logits_bias`` is added to the logits by Marian; ours has no output bias, so a nonzero one
  is refused (a freshly built model has zeros);
* ``q_proj``, ``k_proj``, ``v_proj`` are concatenated into our fused ``qkv_proj`` (rows Q, K, V);
* activation ``relu``, ``gelu``, ``gelu_new`` and ``swish``/``silu``;
* dropouts: ``dropout`` and ``attention_dropout`` map to ours; Marian's ``activation_dropout`` (inside
  the FFN) has no separate field here, ours uses ``dropout`` there; ``layerdrop`` is not supported.
  Both only matter in training mode (the converted model is returned in eval mode).

**Generation.** Marian starts the decoder with ``decoder_start_token_id``, which equals
``pad_token_id``: pass it as ``sos_id`` to :func:`tformer.generation.translate_ids` /
:func:`~tformer.generation.beam_search`, with ``eos_id=config.eos_token_id``. HF's ``generate`` also
applies ``forced_eos_token_id`` (EOS forced at ``max_length``) and the checkpoint's
``bad_words_ids``; ours does not, so compare with those unset.

Dimension legend: D model dim, V vocabulary size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from tformer.interop.common import activation, drop_tied, fuse_qkv, rename
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = ["marian_config_from_hf", "marian_state_from_hf", "marian_from_hf"]

_MARIAN_PREFIX = [(r"^model\.", "")]
_MARIAN_IGNORED = re.compile(r"^(model\.shared\.weight|final_logits_bias)$")  # see marian_state_from_hf
_MARIAN_RENAMES = [
    (r"^encoder\.embed_tokens\.", "src_embed.token."),
    (r"^decoder\.embed_tokens\.", "tgt_embed.token."),
    (r"^encoder\.embed_positions\.", "src_embed.position."),
    (r"^decoder\.embed_positions\.", "tgt_embed.position."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.", r"\1.layers.\2.self_attn."),  # q/k/v fused below
    (r"^(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.", r"\1.layers.\2.add_norm1.norm."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.", r"decoder.layers.\1.cross_attn."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.", r"decoder.layers.\1.add_norm2.norm."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.fc1\.", r"\1.layers.\2.ff.linear1."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.fc2\.", r"\1.layers.\2.ff.linear2."),
    (r"^encoder\.layers\.(\d+)\.final_layer_norm\.", r"encoder.layers.\1.add_norm2.norm."),
    (r"^decoder\.layers\.(\d+)\.final_layer_norm\.", r"decoder.layers.\1.add_norm3.norm."),
    (r"^lm_head\.", "output."),
]


def _marian_activation(name: str) -> str:
    if name in ("swish", "silu"):  # x·sigmoid(x)
        return "silu"
    return activation(name, "activation_function")


def marian_config_from_hf(hf: Mapping) -> Seq2SeqConfig:
    """Our :class:`Seq2SeqConfig` from a Hugging Face Marian config dict; refuses what ours cannot express."""
    if hf.get("model_type", "marian") != "marian":
        raise ValueError(f"from_hf: expected a Marian config (model_type 'marian'), got {hf['model_type']!r}")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[a] != hf[b]:
            raise ValueError(f"from_hf: Marian with {a}={hf[a]} != {b}={hf[b]} is not supported")
    if hf.get("encoder_layerdrop") or hf.get("decoder_layerdrop"):
        raise ValueError("from_hf: Marian with layerdrop > 0 is not supported")
    if hf["d_model"] % 2:
        raise ValueError(f"from_hf: Marian with an odd d_model ({hf['d_model']}) is not supported")
    share = hf.get("share_encoder_decoder_embeddings", True)
    return Seq2SeqConfig(
        src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf.get("decoder_vocab_size") or hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=hf["dropout"],
        attn_dropout=hf["attention_dropout"],
        activation=_marian_activation(hf["activation_function"]),
        norm_first=False,
        final_norm=False,
        max_len=hf["max_position_embeddings"],
        positional="learned",  # Marian's [sin | cos] table is copied in (see the module docstring)
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        share_embeddings=share and hf.get("tie_word_embeddings", True),  # HF ties nothing without the latter
        tie_embeddings=hf.get("tie_word_embeddings", True),
        pad_id=hf["pad_token_id"],
    )


def marian_state_from_hf(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Marian weights renamed to our :class:`Seq2SeqTransformer` keys; tied copies are left for the loader.

    ``model.shared`` is skipped: the encoder reads ``encoder.embed_tokens`` (the same tensor when tied).
    A nonzero ``final_logits_bias`` is refused (our output projection has no bias).
    """
    bias = hf_state.get("final_logits_bias")
    if bias is not None and torch.count_nonzero(bias):
        raise ValueError("from_hf: Marian's final_logits_bias is nonzero and tformer's output layer has no bias")
    state = {
        rename(key, _MARIAN_PREFIX, _MARIAN_RENAMES, "Marian"): tensor
        for key, tensor in hf_state.items()
        if not _MARIAN_IGNORED.match(key)
    }
    return fuse_qkv(state, ("q_proj", "k_proj", "v_proj"))


def _drop_tied(state: dict[str, torch.Tensor], key: str, tied_to: str) -> str:
    return drop_tied(
        state, key, tied_to, f"from_hf: Marian weight for {key} differs from {tied_to}, but the config ties them"
    )


def marian_from_hf(model: Any) -> Seq2SeqTransformer:
    """The :class:`Seq2SeqTransformer` of a ``MarianMTModel`` (see the module docstring); not moved, not in eval mode."""
    config = marian_config_from_hf(model.config.to_dict())
    ours = Seq2SeqTransformer(config)
    state = marian_state_from_hf(model.state_dict())
    tied = []
    if config.share_embeddings:
        tied.append(_drop_tied(state, "tgt_embed.token.weight", "src_embed.token.weight"))
    if config.tie_embeddings:
        tgt_table = "src_embed.token.weight" if config.share_embeddings else "tgt_embed.token.weight"
        tied.append(_drop_tied(state, "output.weight", tgt_table))
    missing, unexpected = ours.load_state_dict(state, strict=False)
    if [k for k in missing if k not in tied] or unexpected:
        raise ValueError(f"from_hf: Marian weights do not fit the model: missing {missing}, unexpected {unexpected}")
    for embed in (ours.src_embed, ours.tgt_embed):
        assert embed.position is not None  # positional="learned"
        embed.position.weight.requires_grad_(False)  # a fixed sinusoidal table in Marian
    return ours
