"""Encoder–decoder Transformer for translation ("I am good." → "Je vais bien.").

    src ids ─ InputEmbedding ─ Encoder ──────────────┐ memory (B, S, D)
    tgt ids ─ InputEmbedding ─ Decoder (masked self-attn, cross-attn over memory, FFN) ─ Linear → logits

Defaults follow the paper ("Attention Is All You Need"): post-LN, ReLU, sinusoidal positions,
embeddings scaled by √D, target embedding tied to the output projection. Departures are options.

The two stacks have their own depths, ``n_encoder_layers`` and ``n_decoder_layers`` (the names of
PyTorch's ``nn.Transformer``): a single ``n_layers`` would hide that they may differ (Marian models,
deep-encoder/shallow-decoder translators). The single-stack GPT and BERT call theirs ``n_layers``.

Forward conventions shared with GPT and BERT: token ids first, then ``attention_mask`` (B, S) bool,
``True`` = real source token (defaults to ``src != pad_id``), then keyword-only ``return_attention``.

Dimension legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from tformer.checks import check_ids, check_length, unless_all_real
from tformer.models.attention_output import returns_attention
from tformer.models.checkpoint import PretrainedMixin
from tformer.models.config import ModelConfig
from tformer.nn.cache import Cache, KVCache, open_positions
from tformer.nn.hooks import HookPoint, keep_at_hand
from tformer.nn.layers import Decoder, Encoder
from tformer.nn.masks import check_mask, padding_mask
from tformer.nn.positional import InputEmbedding

__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer"]


@dataclass(frozen=True, kw_only=True)
class Seq2SeqConfig(ModelConfig):  # the shared fields' defaults are ModelConfig's: the paper's base model
    """``Seq2SeqConfig.preset("small", src_vocab_size=8000, tgt_vocab_size=8000)``; presets: tiny, small, base."""

    PRESETS: ClassVar[dict] = {
        "tiny": dict(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256, dropout=0.1),
        "small": dict(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024, dropout=0.1),
        "base": dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048, dropout=0.1),
    }
    RENAMED: ClassVar[dict] = {"tie_output": "tie_embeddings"}  # tformer 0.1 config.json
    POSITIVE: ClassVar[tuple] = ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers")

    src_vocab_size: int
    tgt_vocab_size: int
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    final_norm: bool | None = None  # LayerNorm after each stack; None = only for pre-LN
    positional: str = "sinusoidal"  # "sinusoidal" (paper) | "sinusoidal_halves" ([sin | cos], Marian) | "learned"
    scale_embeddings: bool = True  # multiply token embeddings by √D (paper)
    share_embeddings: bool = False  # one embedding table for source and target (needs a joint vocabulary)
    tie_embeddings: bool = True  # output projection = target embedding matrix (paper); 0.1's tie_output
    output_bias: bool = False  # a bias added to the logits (Marian's final_logits_bias); the paper has none
    pad_id: int = 0  # the padding token of both sides (masked out, ignored by the loss)

    def validate(self) -> None:
        self.check_choice("positional", ("sinusoidal", "sinusoidal_halves", "learned"))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"Seq2SeqConfig.share_embeddings=True needs src_vocab_size == tgt_vocab_size, "
                f"got {self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        self.check_token_id("pad_id", min(self.src_vocab_size, self.tgt_vocab_size))


class Seq2SeqTransformer(PretrainedMixin, nn.Module):
    """The encoder–decoder Transformer of "Attention Is All You Need" (translation): source and target embeddings
    with positions, the encoder and decoder stacks, the output head. ``model(src, tgt)`` is the teacher-forced pass
    (logits (B, T, V)); :meth:`encode` and :meth:`decode` are its halves, as decoding calls them."""

    model_type = "seq2seq"
    config_class = Seq2SeqConfig
    config: Seq2SeqConfig
    stacks = {"encoder.layers.{i}": "n_encoder_layers", "decoder.layers.{i}": "n_decoder_layers"}

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = c = config
        embed: dict[str, Any] = dict(
            d_model=c.d_model, max_len=c.max_len, positional=c.positional, scale=c.scale_embeddings, dropout=c.dropout
        )
        self.src_embed = InputEmbedding(c.src_vocab_size, **embed)
        self.tgt_embed = InputEmbedding(c.tgt_vocab_size, **embed)
        if c.share_embeddings:
            self.tgt_embed.token.weight = self.src_embed.token.weight
        self.encoder = Encoder(c.layer, c.n_encoder_layers, c.final_norm)
        self.decoder = Decoder(c.layer, c.n_decoder_layers, c.final_norm)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=c.output_bias)
        if c.tie_embeddings:
            self.output.weight = self.tgt_embed.token.weight
        self.hook_logits = HookPoint()  # (B, T, V) (tformer.nn.hooks)
        keep_at_hand(self)
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and not (self.config.tie_embeddings and name == "output.weight"):
                nn.init.xavier_uniform_(p)
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)  # every word equally likely before training, as Marian starts it

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``src`` (B, S) ids → memory (B, S, D). ``src_mask`` defaults to the source padding mask, which
        :meth:`decode` needs too (its ``memory_mask``): ``decode(tgt, memory, padding_mask(src, pad_id))``."""
        if src_mask is None:
            src_mask = unless_all_real(padding_mask(src, self.config.pad_id))  # (B, 1, 1, S); None: nothing padded
        else:  # named here, not as a layer's mask (a (B, S) key-padding mask: padding_mask's shape is (B, 1, 1, S))
            check_mask(src_mask, "src_mask", src.shape[0], src.shape[1], src.shape[1])
        return self._encode(src, src_mask)

    def _encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`encode` with the mask as given (None: nothing to hide)."""
        check_ids(src, "src", self.config.src_vocab_size)
        check_length(src.shape[1], self.config.max_len, "src")
        return self.encoder(self.src_embed(src), src_mask)  # (B, S, D)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        *,
        tgt_padded: bool | None = None,
        head: bool = True,
    ) -> torch.Tensor:
        """``tgt`` (B, T) decoder input ids → logits (B, T, V); ``head=False``: the final hidden states (B, T, D).

        With a ``cache``, ``tgt`` holds only the new positions; their positions start after the
        cached ones (:mod:`tformer.nn.cache`'s protocol; a static cache counts them on the device). ``memory_mask`` is
        the source padding mask (B, 1, 1, S), ``tformer.nn.masks.padding_mask(src, config.pad_id)`` as :meth:`forward`
        builds it; None: every source position is attended to, a pad too (as ``nn.Transformer``'s decoder without
        ``memory_key_padding_mask``), so pass it whenever ``src`` has padding. ``memory`` and its mask may
        have B / G rows, each serving G consecutive rows of ``tgt`` (beam search's G beams of one source).
        ``tgt_padded``: whether a row of ``tgt`` after its first position is padding, where the caller knows it (a
        batch made on the host); None: read off ``tgt`` (one read of the device).
        """
        check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        if cache is None:
            positions, _ = open_positions(0, tgt, max_len=self.config.max_len, name="tgt")  # (T,)
        else:  # the positions after the cached ones (tformer.nn.cache's protocol, for every kind of cache)
            positions, _ = cache.begin(tgt, max_len=self.config.max_len, name="tgt")  # (T,)
        # Self-attention: look-ahead (causal) + target padding. With a cache the keys include
        # earlier positions, which were all real tokens when they were fed.
        self_mask = padding_mask(tgt, self.config.pad_id) if cache is None else None  # (B, 1, 1, T)
        if self_mask is not None:  # position 0 is the start token, real even where it is the pad id (Marian)
            self_mask[..., 0] = True
            self_mask = unless_all_real(self_mask, tgt_padded)  # None where no target is padded (the causal path)
        x = self.tgt_embed(tgt, positions)  # (B, T, D)
        x = self.decoder(x, memory, self_mask, memory_mask, causal=True, cache=cache)  # (B, T, D)
        if not head:
            return x
        return self.hook_logits(self.output(x))  # (B, T, V)

    @returns_attention
    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        src_padded: bool | None = None,
        tgt_padded: bool | None = None,
        head: bool = True,
    ) -> torch.Tensor:
        """Teacher-forced pass: ``src`` (B, S), ``tgt`` (B, T) = ``<sos>`` + target → logits (B, T, V).

        ``attention_mask`` (B, S): 1/``True`` = real source token; defaults to ``src != pad_id``.
        ``src_padded``, ``tgt_padded``: whether any source / target row is padded, where the caller knows it (a
        batch made on the host knows its rows' lengths); a side without padding then has no mask and attention takes
        its unmasked path. None (the default): read off the masks, one read of the device each (a synchronisation on
        a GPU; the training step passes both, :class:`~tformer.translation.batching.Batch`).
        With ``return_attention=True`` returns ``(logits, weights)``, ``weights`` a dict from module
        name (e.g. ``"decoder.layers.0.cross_attn"``) to attention weights (B, H, T, S).
        ``head=False`` returns the decoder's final hidden states (B, T, D) instead, not projected onto the vocabulary:
        what a loss that projects them itself, a chunk at a time, takes
        (:func:`tformer.fast.chunked_loss.linear_cross_entropy`).
        """
        if attention_mask is None:
            memory_mask = unless_all_real(padding_mask(src, self.config.pad_id), src_padded)  # (B, 1, 1, S) or None
        elif attention_mask.shape != src.shape:
            raise ValueError(
                f"attention_mask must have the shape of src {tuple(src.shape)}, got {tuple(attention_mask.shape)}"
            )
        else:
            memory_mask = unless_all_real(attention_mask.bool()[:, None, None, :], src_padded)  # (B, 1, 1, S)
        return self.decode(tgt, self._encode(src, memory_mask), memory_mask, tgt_padded=tgt_padded, head=head)

    def new_cache(self, max_len: int | None = None) -> KVCache:
        """An empty KV cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers, max_len or self.config.max_len)

    def cache_windows(self) -> list[int | None]:
        """Each decoder layer's sliding window: None, every earlier position (what a cache of this model is made
        with)."""
        return [None] * self.config.n_decoder_layers
