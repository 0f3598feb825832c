"""Encoder–decoder Transformer for translation ("I am good." → "Je vais bien.").

    src ids ─ InputEmbedding ─ Encoder ──────────────┐ memory (B, S, D)
    tgt ids ─ InputEmbedding ─ Decoder (masked self-attn, cross-attn over memory, FFN) ─ Linear → logits

Defaults follow the paper ("Attention Is All You Need"): post-LN, ReLU, sinusoidal positions,
embeddings scaled by √D, target embedding tied to the output projection. Departures are options.

Dimension legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from tformer.nn.cache import KVCache
from tformer.models.checkpoint import PretrainedMixin
from tformer.checks import check_ids, check_length, check_positive
from tformer.nn.recorder import Recorder
from tformer.nn.layers import Decoder, Encoder, LayerConfig
from tformer.fast.linear import Linear
from tformer.nn.masks import padding_mask
from tformer.nn.positional import InputEmbedding

__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer"]

_PRESETS = {
    "tiny": dict(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256, dropout=0.1),
    "small": dict(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024, dropout=0.1),
    "base": dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048, dropout=0.1),
}


@dataclass(frozen=True)
class Seq2SeqConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attn_dropout: float | None = None  # None = same as dropout
    activation: str = "relu"  # "relu" (paper) | "gelu" | "gelu_tanh"
    norm_first: bool = False  # False = post-LN (paper); True = pre-LN (GPT-2 style)
    final_norm: bool | None = None  # LayerNorm after each stack; None = only for pre-LN
    norm_eps: float = 1e-5
    bias: bool = True
    max_len: int = 512  # longest source or target sequence (size of the positional table)
    positional: str = "sinusoidal"  # "sinusoidal" (paper) | "learned"
    scale_embeddings: bool = True  # multiply token embeddings by √D (paper)
    share_embeddings: bool = False  # one embedding table for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding matrix (paper)
    pad_id: int = 0

    def __post_init__(self) -> None:
        check_positive(self, "src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers", "max_len")
        _ = self.layer
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")  # validates d_model, n_heads, d_ff, dropout, activation
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings=True needs src_vocab_size == tgt_vocab_size, got {self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(f"pad_id must be a valid token id, got {self.pad_id}")

    @property
    def layer(self) -> LayerConfig:
        return LayerConfig(self.d_model, self.n_heads, self.d_ff, self.dropout, self.attn_dropout,
                           self.activation, self.norm_first, self.norm_eps, self.bias)

    @classmethod
    def preset(cls, name: str, **overrides) -> "Seq2SeqConfig":
        """``Seq2SeqConfig.preset("small", src_vocab_size=8000, tgt_vocab_size=8000)``; presets: tiny, small, base."""
        if name not in _PRESETS:
            raise ValueError(f"preset must be one of {sorted(_PRESETS)}, got {name!r}")
        return cls(**{**_PRESETS[name], **overrides})

    def replace(self, **changes) -> "Seq2SeqConfig":
        return replace(self, **changes)


class Seq2SeqTransformer(PretrainedMixin, nn.Module):
    model_type = "seq2seq"
    config_class = Seq2SeqConfig

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = c = config
        embed = dict(d_model=c.d_model, max_len=c.max_len, positional=c.positional, scale=c.scale_embeddings, dropout=c.dropout)
        self.src_embed = InputEmbedding(c.src_vocab_size, **embed)
        self.tgt_embed = InputEmbedding(c.tgt_vocab_size, **embed)
        if c.share_embeddings:
            self.tgt_embed.token.weight = self.src_embed.token.weight
        self.encoder = Encoder(c.layer, c.n_encoder_layers, c.final_norm)
        self.decoder = Decoder(c.layer, c.n_decoder_layers, c.final_norm)
        self.output = Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.tgt_embed.token.weight
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and not (self.config.tie_output and name == "output.weight"):
                nn.init.xavier_uniform_(p)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``src`` (B, S) ids → memory (B, S, D). ``src_mask`` defaults to the source padding mask."""
        check_ids(src, "src", self.config.src_vocab_size)
        check_length(src.shape[1], self.config.max_len, "src")
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        return self.encoder(self.src_embed(src), src_mask)  # (B, S, D)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """``tgt`` (B, T) decoder input ids → logits (B, T, V).

        With a ``cache``, ``tgt`` holds only the new positions; their positions start after the
        cached ones. ``memory_mask`` is the source padding mask (B, 1, 1, S). ``memory`` and its mask may
        have B / G rows, each serving G consecutive rows of ``tgt`` (beam search's G beams of one source).
        """
        check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        start = cache.length if cache is not None else 0
        check_length(start + tgt.shape[1], self.config.max_len, "tgt")
        positions = slice(start, start + tgt.shape[1])  # the table's rows start.. (a view)
        # Self-attention: look-ahead (causal) + target padding. With a cache the keys include
        # earlier positions, which were all real tokens when they were fed.
        self_mask = padding_mask(tgt, self.config.pad_id) if cache is None else None  # (B, 1, 1, T)
        if self_mask is not None:  # position 0 is the start token, real even where it is the pad id (Marian)
            self_mask[..., 0] = True
        x = self.tgt_embed(tgt, positions)  # (B, T, D)
        x = self.decoder(x, memory, self_mask, memory_mask, causal=True, cache=cache)  # (B, T, D)
        return self.output(x)  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, return_attention: bool = False):
        """Teacher-forced pass: ``src`` (B, S), ``tgt`` (B, T) = ``<sos>`` + target → logits (B, T, V).

        With ``return_attention=True`` returns ``(logits, weights)``, ``weights`` a dict from module
        name (e.g. ``"decoder.layers.0.cross_attn"``) to attention weights (B, H, T, S).
        """
        if not return_attention:
            memory_mask = padding_mask(src, self.config.pad_id)
            return self.decode(tgt, self.encode(src, memory_mask), memory_mask)
        with Recorder(self) as rec:
            logits = self.forward(src, tgt)
        return logits, rec.weights()

    def new_cache(self, max_len: int | None = None) -> KVCache:
        """An empty KV cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers, max_len or self.config.max_len)

    def trace(self, *args, **kwargs):
        """Glass box: every intermediate tensor of one forward pass; see :func:`tformer.inspect.trace.trace_seq2seq`."""
        from tformer.inspect.trace import trace_seq2seq

        return trace_seq2seq(self, *args, **kwargs)
