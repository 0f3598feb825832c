"""Feed-forward, add & norm, encoder and decoder layers, and the N-layer stacks.

Every sub-layer is wrapped in a residual connection and a LayerNorm that lives in the module (its
scale and shift are learned parameters; ``LayerConfig.norm="rmsnorm"`` puts an RMSNorm there instead,
:mod:`tformer.nn.norms`). Two placements, chosen by ``LayerConfig.norm_first``:

* post-LN (the paper, ``norm_first=False``):  ``x = norm(x + dropout(sublayer(x)))``
* pre-LN  (GPT-2,     ``norm_first=True``):   ``x = x + dropout(sublayer(norm(x)))``

Encoder layer:  self-attention → add & norm → feed-forward → add & norm.
Decoder layer:  masked self-attention → add & norm → cross-attention (Q from the decoder, K/V from the encoder output) →
add & norm → feed-forward → add & norm. ``cross_attention=False`` drops the middle block: that is the GPT block; with
``parallel_residual`` its feed-forward reads the layer's input, not the attention's sum (``x + attn(norm1(x)) +
ff(norm3(x))``: GPT-J, GPT-NeoX, Pythia). ``LayerConfig.ffn`` picks the paper's MLP or a gated one (SwiGLU, GeGLU), both
in :mod:`tformer.nn.feedforward`; the attention options of today's decoders (grouped-query, ``head_dim``, QK-norm, Q/K/V
bias) are described in :class:`MultiHeadAttention`.

Hook points (:mod:`tformer.nn.hooks`), each (B, T, D): an :class:`AddNorm`'s ``hook_norm`` (its norm's output: the
sub-layer's input in pre-LN, the block's output in post-LN), ``hook_residual`` (x + sublayer: the output in pre-LN)
and, with ``sandwich_norm``, ``hook_post_norm`` (the sub-layer's output, normed), with ``shift_tokens``, ``hook_shifted``
(what the sub-layer reads: the norm's output token-shifted, :mod:`tformer.nn.shift`); a stack's ``hook_final_norm``.

Dimension legend: B batch, S source length, T target length, D model dim, F feed-forward dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tformer.checks import check_yes_no_fields
from tformer.nn.attention import MultiHeadAttention
from tformer.nn.cache import Cache, LayerCache
from tformer.nn.feedforward import ACTIVATIONS, GATED, FeedForward, GatedFeedForward
from tformer.nn.hooks import HookPoint, keep_at_hand
from tformer.nn.norms import NORMS, make_norm
from tformer.nn.shift import shift_tokens

__all__ = [
    "LAYER_OPTIONS",
    "check_layer_options",
    "LayerConfig",
    "AddNorm",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "EncoderDecoder",
]


def _positive_or_none(value, _n_heads: int) -> str | None:
    return None if value is None or value > 0 else "must be None or > 0"


def _one_of(allowed: Sequence[str]):
    return lambda value, _n_heads: None if value in allowed else f"must be one of {', '.join(map(repr, allowed))}"


def _count(value, _n_heads: int) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else "must be a whole number >= 0"


def _kv_heads(value, n_heads: int) -> str | None:
    ok = value is None or (value > 0 and n_heads % value == 0)
    return None if ok else f"must be None or a positive divisor of n_heads={n_heads}"


# Each option of a layer beyond the paper's (today's decoders), with its one check: LayerConfig declares them all,
# a family config the ones it offers, both checked here (the check: value, n_heads -> what is wrong, or None)
LAYER_OPTIONS = {
    "norm": _one_of(NORMS),
    "norm_weight_offset": None,  # (rmsnorm only: check_layer_options)
    "norm_scale": None,
    "ffn": _one_of(("mlp", *GATED)),
    "n_kv_heads": _kv_heads,
    "head_dim": _positive_or_none,
    "qk_norm": None,
    "qkv_bias": None,
    "sliding_window": _positive_or_none,
    "attn_softcap": _positive_or_none,
    "sandwich_norm": None,  # (pre-LN only: check_layer_options)
    "attn_scale": _positive_or_none,
    "parallel_residual": None,  # (pre-LN only: check_layer_options)
    "shift_tokens": _count,  # (pre-LN only, at most d_model − 1: check_layer_options)
}


def check_layer_options(options, n_heads: int, norm_first: bool, name=lambda field: field) -> None:
    """Check the layer options among ``options`` (field → value: a LayerConfig's or a family config's), each by
    its check in :data:`LAYER_OPTIONS` and the two that depend on another field; an error names the field as
    ``name(field)`` (``GPTConfig.sliding_window``)."""
    for field, check in LAYER_OPTIONS.items():
        problem = check(options[field], n_heads) if check is not None and field in options else None
        if problem:
            raise ValueError(f"{name(field)} {problem}, got {options[field]!r}")
    offset = options.get("norm_weight_offset", 0.0)
    if offset != 0.0 and options.get("norm") != "rmsnorm":
        raise ValueError(
            f"{name('norm_weight_offset')} applies to norm='rmsnorm' only, got {offset} with "
            f"norm={options.get('norm')!r}"
        )
    if options.get("sandwich_norm") and not norm_first:
        raise ValueError(
            f"{name('sandwich_norm')} needs norm_first=True (pre-LN): the post-LN layer already norms the sum"
        )
    if options.get("shift_tokens") and not norm_first:
        raise ValueError(f"{name('shift_tokens')} needs norm_first=True (pre-LN): it shifts what each sub-layer reads")
    if options.get("parallel_residual") and not norm_first:
        raise ValueError(
            f"{name('parallel_residual')} needs norm_first=True (pre-LN): both sub-layers read the layer's input"
        )


@dataclass(frozen=True)
class LayerConfig:
    """What one encoder/decoder layer needs; the model configs derive it (``config.layer``)."""

    d_model: int
    n_heads: int
    d_ff: int
    dropout: float = 0.1
    attn_dropout: float | None = None  # dropout on the attention weights; None = same as ``dropout``
    activation: str = "relu"
    norm_first: bool = False
    norm_eps: float = 1e-5
    bias: bool = True
    # today's decoders (the defaults are the paper's / GPT-2's layer)
    norm: str = "layernorm"  # "layernorm" | "rmsnorm" (Llama, Qwen, Mistral, Gemma)
    norm_weight_offset: float = 0.0  # RMSNorm scale = offset + weight; 1.0 = Gemma's (1 + weight)
    ffn: str = "mlp"  # "mlp" (Linear, activation, Linear) | "swiglu" | "geglu" (gated; d_ff = hidden width)
    n_kv_heads: int | None = None  # key/value heads; None = n_heads; 1 = multi-query; else grouped-query
    head_dim: int | None = None  # None = d_model // n_heads
    qk_norm: bool = False  # RMSNorm on each head's queries and keys, before RoPE (Qwen3, Gemma 3)
    qkv_bias: bool | None = None  # bias of W_Q/W_K/W_V; None = same as ``bias`` (Qwen2: True with bias=False)
    sliding_window: int | None = None  # causal self-attention sees only the last this many positions (Mistral)
    attn_softcap: float | None = None  # attention scores → c·tanh(scores / c) (Gemma 2)
    norm_scale: bool = True  # False: the norms learn no scale (nor shift)
    sandwich_norm: bool = False  # pre-LN plus a norm on each sub-layer's output before the residual (Gemma 2/3)
    attn_scale: float | None = None  # the scores' factor; None = 1/√head_dim
    # the feed-forward reads the layer's input, not the attention's sum: x + attn(norm1(x)) + ff(norm3(x)) (GPT-J,
    # GPT-NeoX, Pythia); a decoder layer without cross-attention only
    parallel_residual: bool = False
    # dropout on the feed-forward's hidden layer; None = same as ``dropout`` (the paper's, nn.Transformer's); 0 = none
    # there, as GPT-2, BERT and nanoGPT (their residual dropout only)
    ffn_dropout: float | None = None
    # each sub-layer's normed input: feature group i of shift_tokens + 1 taken from i positions back (tformer.nn.shift;
    # x-transformers' shift_tokens); 0 = off; a decoder layer without cross-attention, pre-LN
    shift_tokens: int = 0

    def __post_init__(self) -> None:
        check_yes_no_fields(self)  # bias="no" is a true string: refused, not a layer with biases
        if self.d_model <= 0 or self.n_heads <= 0 or self.d_ff <= 0:
            raise ValueError(
                f"d_model, n_heads and d_ff must be positive, got {self.d_model}, {self.n_heads}, {self.d_ff}"
            )
        check_layer_options(vars(self), self.n_heads, self.norm_first)
        if self.shift_tokens >= self.d_model:
            raise ValueError(f"shift_tokens must be below d_model={self.d_model}, got {self.shift_tokens}")
        if self.head_dim is None and self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        for name in ("dropout", "attn_dropout", "ffn_dropout"):
            p = getattr(self, name)
            if p is not None and not 0.0 <= p < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {p}")

    @property
    def attention_dropout(self) -> float:
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    @property
    def feed_forward_dropout(self) -> float:
        return self.dropout if self.ffn_dropout is None else self.ffn_dropout

    def attention(self) -> MultiHeadAttention:
        """A new attention module with this layer's options."""
        return MultiHeadAttention(
            self.d_model,
            self.n_heads,
            self.attention_dropout,
            self.bias,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            qkv_bias=self.qkv_bias,
            qk_norm=self.qk_norm,
            norm_eps=self.norm_eps,
            sliding_window=self.sliding_window,
            softcap=self.attn_softcap,
            scale=self.attn_scale,
            norm_weight_offset=self.norm_weight_offset,
        )

    def feed_forward(self) -> nn.Module:
        """A new feed-forward module: the paper's MLP or a gated one (:mod:`tformer.nn.feedforward`)."""
        if self.ffn == "mlp":
            return FeedForward(self.d_model, self.d_ff, self.activation, self.feed_forward_dropout, self.bias)
        return GatedFeedForward(self.d_model, self.d_ff, self.ffn, self.feed_forward_dropout, self.bias)

    def make_norm(self) -> nn.Module:
        """A new LayerNorm or RMSNorm over d_model."""
        return make_norm(self.norm, self.d_model, self.norm_eps, self.bias, self.norm_weight_offset, self.norm_scale)


class AddNorm(nn.Module):
    """Residual connection + LayerNorm around one sub-layer, post-LN or pre-LN.

    ``sandwich_norm`` (with pre-LN) adds a second norm on the sub-layer's output: ``x + post(sublayer(norm(x)))``.
    """

    hook_post_norm: HookPoint  # only with sandwich_norm
    hook_shifted: HookPoint  # only with shift_tokens

    def __init__(self, cfg: LayerConfig) -> None:
        super().__init__()
        self.norm = cfg.make_norm()
        self.post_norm = cfg.make_norm() if cfg.sandwich_norm else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first
        self.shift = cfg.shift_tokens  # the sub-layer reads norm(x) token-shifted (tformer.nn.shift); 0 = as it is
        self.hook_norm, self.hook_residual = HookPoint(), HookPoint()
        if self.post_norm is not None:
            self.hook_post_norm = HookPoint()
        if self.shift:
            self.hook_shifted = HookPoint()
        keep_at_hand(self)

    def forward(
        self,
        x: torch.Tensor,
        sublayer,
        source: torch.Tensor | None = None,
        real: torch.Tensor | None = None,
        carry=None,
    ) -> torch.Tensor:
        """``x + dropout(sublayer(norm(x)))`` (pre-LN); ``source``: what the sub-layer reads instead of ``x``
        (normed), its output still added to ``x`` (a parallel residual: :class:`DecoderLayer`). With ``shift_tokens``,
        ``real`` (B, T) marks padding and ``carry`` is the cache's (:func:`tformer.nn.shift.shift_tokens`)."""
        if not self.norm_first:  # post-LN (the paper): norm(x + dropout(sublayer(x)))
            h = sublayer(x)
            if self.training:  # dropout is the identity in evaluation: decoding skips even the call
                h = self.dropout(h)
            return self.hook_norm(self.norm(self.hook_residual(x + h)))
        read = x if source is None else source
        h = self.hook_norm(self.norm(read))  # (B, T, D)
        if self.shift:  # feature group i from i positions back
            h = self.hook_shifted(shift_tokens(h, self.shift, real, carry))
        h = sublayer(h)  # pre-LN: x + dropout(sublayer(norm(x)))
        if self.post_norm is not None:  # sandwich (Gemma 2/3): the sub-layer's output is normed too
            h = self.hook_post_norm(self.post_norm(h))
        if self.training:
            h = self.dropout(h)
        return self.hook_residual(x + h)


class EncoderLayer(nn.Module):
    """Self-attention → add & norm → feed-forward → add & norm."""

    def __init__(self, cfg: LayerConfig) -> None:
        super().__init__()
        self.self_attn = cfg.attention()
        self.add_norm1 = AddNorm(cfg)
        self.ff = cfg.feed_forward()
        self.add_norm2 = AddNorm(cfg)
        if cfg.shift_tokens:  # (it shifts along a causal decoder's positions; its cache keeps what it read)
            raise ValueError("shift_tokens is a decoder-only layer's (no encoder)")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.add_norm1(x, lambda h: self.self_attn(h, mask=mask))  # (B, S, D)
        return self.add_norm2(x, self.ff)  # (B, S, D)


class DecoderLayer(nn.Module):
    """Masked self-attention → add & norm → cross-attention → add & norm → feed-forward → add & norm."""

    def __init__(self, cfg: LayerConfig, cross_attention: bool = True) -> None:
        super().__init__()
        self.self_attn = cfg.attention()
        self.add_norm1 = AddNorm(cfg)
        self.cross_attn = cfg.attention() if cross_attention else None
        self.add_norm2 = AddNorm(cfg) if cross_attention else None
        self.ff = cfg.feed_forward()
        self.add_norm3 = AddNorm(cfg)
        for option in ("parallel_residual", "shift_tokens"):
            if getattr(cfg, option) and cross_attention:
                raise ValueError(f"{option} is a decoder-only layer's (no cross-attention)")
        self.parallel = cfg.parallel_residual  # the feed-forward reads x, not x + attention (GPT-NeoX)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        causal: bool = True,
        cache: LayerCache | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        real: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x`` (B, T, D) decoder states; ``memory`` (B, S, D) encoder output; returns (B, T, D).

        ``rotary``: cos/sin of the positions for rotary self-attention (GPT with ``positional="rope"``). ``real`` (B, T)
        bool, False at padding: what a token-shifted sub-layer (``shift_tokens``) reads there as zeros."""
        shift = self.add_norm1.shift
        carry1 = carry3 = None
        if shift and cache is not None:  # the positions read before these come from the cache, which keeps them
            carry1, carry3 = (lambda h: cache.carry(0, h, shift)), (lambda h: cache.carry(1, h, shift))
        attended = self.add_norm1(
            x,
            lambda h: self.self_attn(h, mask=self_mask, causal=causal, cache=cache, rotary=rotary),
            real=real,
            carry=carry1,
        )
        if self.parallel:  # x + attn(norm1(x)) + ff(norm3(x)): the feed-forward reads the layer's input
            return self.add_norm3(attended, self.ff, source=x, real=real, carry=carry3)
        x = attended
        cross_attn, add_norm2 = self.cross_attn, self.add_norm2
        if cross_attn is not None and add_norm2 is not None:
            if memory is None:
                raise ValueError("memory (the encoder output) is required by a decoder layer with cross-attention")
            x = add_norm2(x, lambda h: cross_attn(h, memory, mask=memory_mask, cache=cache))
        return self.add_norm3(x, self.ff, real=real, carry=carry3)


class Encoder(nn.Module):
    """N encoder layers; a final norm when ``final_norm`` (needed by pre-LN stacks)."""

    hook_final_norm: HookPoint  # only with a final norm

    def __init__(self, cfg: LayerConfig, n_layers: int, final_norm: bool | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(n_layers))
        final_norm = cfg.norm_first if final_norm is None else final_norm
        self.norm = cfg.make_norm() if final_norm else None
        if self.norm is not None:
            self.hook_final_norm = HookPoint()
        keep_at_hand(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)  # (B, S, D)
        return x if self.norm is None else self.hook_final_norm(self.norm(x))


class Decoder(nn.Module):
    """N decoder layers; the same encoder output ``memory`` feeds the cross-attention of every layer.

    ``cfg`` may be one :class:`LayerConfig` per layer (their sliding windows may differ: Gemma 3's local and global
    layers), and ``rotary`` in :meth:`forward` one (cos, sin) pair per layer (their RoPE bases may differ).
    """

    hook_final_norm: HookPoint  # only with a final norm

    def __init__(
        self,
        cfg: LayerConfig | Sequence[LayerConfig],
        n_layers: int,
        final_norm: bool | None = None,
        cross_attention: bool = True,
    ) -> None:
        super().__init__()
        configs = [cfg] * n_layers if isinstance(cfg, LayerConfig) else list(cfg)
        if len(configs) != n_layers:
            raise ValueError(f"Decoder got {len(configs)} layer configs for n_layers={n_layers}")
        cfg = configs[-1]  # the final norm's kind
        self.layers = nn.ModuleList(DecoderLayer(c, cross_attention) for c in configs)
        final_norm = cfg.norm_first if final_norm is None else final_norm
        self.norm = cfg.make_norm() if final_norm else None
        if self.norm is not None:
            self.hook_final_norm = HookPoint()
        keep_at_hand(self)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        causal: bool = True,
        cache: Cache | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        real: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``real`` (B, T): False at padding, for token-shifted layers (:class:`DecoderLayer`)."""
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache has {len(cache)} layers, the decoder has {len(self.layers)}")
        per_layer = isinstance(rotary, list)  # one (cos, sin) pair per layer, else one for all
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            layer_rotary = rotary[i] if per_layer else rotary  # type: ignore[index]
            x = layer(x, memory, self_mask, memory_mask, causal, layer_cache, layer_rotary, real)  # (B, T, D)
        return x if self.norm is None else self.hook_final_norm(self.norm(x))


class EncoderDecoder(nn.Module):
    """The bare encoder–decoder stacks (the equivalent of ``nn.Transformer``): vectors in, vectors out."""

    def __init__(
        self, cfg: LayerConfig, n_encoder_layers: int, n_decoder_layers: int, final_norm: bool | None = None
    ) -> None:
        super().__init__()
        self.encoder = Encoder(cfg, n_encoder_layers, final_norm)
        self.decoder = Decoder(cfg, n_decoder_layers, final_norm)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        causal: bool = True,
    ) -> torch.Tensor:
        """``src`` (B, S, D), ``tgt`` (B, T, D) → (B, T, D)."""
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, causal)
