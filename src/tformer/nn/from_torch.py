"""Convert PyTorch's own Transformer modules into tformer modules with the same weights.

``from_torch(module)`` accepts ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``, ``nn.TransformerDecoder`` and
``nn.Transformer`` and returns ``MultiHeadAttention``, ``EncoderLayer``, ``DecoderLayer``,
``Encoder``, ``Decoder`` and ``EncoderDecoder`` respectively, in eval mode.

Three boundary differences to remember when feeding both:

* tformer modules are always batch-first: transpose inputs of a ``batch_first=False`` module;
* masks: tformer uses ``True`` = may attend; convert PyTorch masks with
  :func:`tformer.nn.masks.from_torch` and reshape key-padding masks (B, S) to (B, 1, 1, S);
* a decoder is causal unless told otherwise: ``DecoderLayer``, ``Decoder`` and ``EncoderDecoder`` hide the future
  by default (``causal=True``), where PyTorch's modules hide nothing without a ``tgt_mask``
  (``nn.Transformer.generate_square_subsequent_mask``); pass ``causal=False`` to compare with a call that has none.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from tformer.nn.attention import MultiHeadAttention
from tformer.nn.layers import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, LayerConfig

__all__ = ["from_torch"]

_RENAMES = [
    (r"(^|\.)in_proj_(weight|bias)$", r"\1qkv_proj.\2"),  # also a bare nn.MultiheadAttention
    (r"multihead_attn\.", "cross_attn."),
    (r"(^|\.)linear([12])\.", r"\1ff.linear\2."),
    (r"(^|\.)norm([123])\.", r"\1add_norm\2.norm."),
]


def _rename(key: str) -> str:
    for pattern, repl in _RENAMES:
        key = re.sub(pattern, repl, key)
    return key


def _check_attention(mha: nn.MultiheadAttention) -> None:
    if not mha._qkv_same_embed_dim:
        raise ValueError("from_torch: nn.MultiheadAttention with kdim/vdim != embed_dim is not supported")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("from_torch: nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")


def _activation(layer: nn.Module) -> str:
    """The layer's activation, read off the module itself (torch's ``activation_relu_or_gelu`` flag says 2 for any
    ``nn.GELU``, the tanh approximation too)."""
    act = layer.activation
    if act is torch.nn.functional.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is torch.nn.functional.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    raise ValueError(f"from_torch: activation {act!r} is not supported (use ReLU or GELU)")


def _layer_config(layer: Any) -> LayerConfig:  # an nn.TransformerEncoderLayer / DecoderLayer
    _check_attention(layer.self_attn)
    return LayerConfig(
        d_model=layer.self_attn.embed_dim,
        n_heads=layer.self_attn.num_heads,
        d_ff=layer.linear1.out_features,
        dropout=layer.dropout.p,
        attn_dropout=layer.self_attn.dropout,
        activation=_activation(layer),
        norm_first=layer.norm_first,
        norm_eps=layer.norm1.eps,
        bias=layer.linear1.bias is not None,
    )


def _build(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.MultiheadAttention):
        _check_attention(module)
        return MultiHeadAttention(
            module.embed_dim, module.num_heads, module.dropout, bias=module.in_proj_bias is not None
        )
    if isinstance(module, nn.TransformerEncoderLayer):
        return EncoderLayer(_layer_config(module))
    if isinstance(module, nn.TransformerDecoderLayer):
        return DecoderLayer(_layer_config(module))
    if isinstance(module, nn.TransformerEncoder):
        return Encoder(_layer_config(module.layers[0]), len(module.layers), final_norm=module.norm is not None)
    if isinstance(module, nn.TransformerDecoder):
        return Decoder(_layer_config(module.layers[0]), len(module.layers), final_norm=module.norm is not None)
    if isinstance(module, nn.Transformer):
        enc, dec = module.encoder, module.decoder
        if (enc.norm is None) != (dec.norm is None):
            raise ValueError("from_torch: nn.Transformer with a final norm on only one stack is not supported")
        return EncoderDecoder(
            _layer_config(enc.layers[0]), len(enc.layers), len(dec.layers), final_norm=enc.norm is not None
        )
    raise TypeError(
        "from_torch expects nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, "
        f"nn.TransformerEncoder, nn.TransformerDecoder or nn.Transformer, got {type(module).__name__}"
    )


def from_torch(module: nn.Module) -> nn.Module:
    """The tformer equivalent of a PyTorch Transformer module, with its weights copied, in eval mode."""
    ours = _build(module)
    state = {_rename(k): v for k, v in module.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    return ours.to(next(module.parameters()).device).eval()
