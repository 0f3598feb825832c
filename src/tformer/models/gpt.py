"""Decoder-only Transformer language model (GPT-2 style).

    ids ─ token + learned position embedding ─ N × [masked self-attention, FFN] ─ LayerNorm ─ Linear → logits

The blocks are :class:`~tformer.nn.layers.DecoderLayer` without cross-attention. Defaults follow
GPT-2: pre-LN with a final LayerNorm, GELU (tanh approximation), learned positions, no embedding
scaling, output projection tied to the token embedding. ``positional="rope"`` replaces the learned
position table by rotary position embedding in every self-attention (GPT-NeoX, LLaMA).

The choices of today's decoders are one field each, all off by default (GPT-2's block, bit for bit):
``norm="rmsnorm"`` (``norm_weight_offset=1.0`` for Gemma's ``1 + weight``), ``ffn="swiglu"`` / ``"geglu"``,
``n_kv_heads`` (grouped-query attention, the KV cache holds only those heads), ``qk_norm``, ``qkv_bias``,
``sliding_window`` (Mistral; the KV cache of those layers keeps only the window), ``attn_softcap`` and ``final_softcap``
(Gemma 2's c·tanh(x / c) on the attention scores and on the logits), ``shift_tokens`` (each sub-layer also reads
the positions just before its own through part of its features: :mod:`tformer.nn.shift`).
A Llama-shaped block: ``norm="rmsnorm", ffn="swiglu", positional="rope", bias=False, n_kv_heads=...``;
Qwen2 adds ``qkv_bias=True``, Qwen3 ``qk_norm=True`` instead.

Forward conventions shared with the other families: token ids first, ``attention_mask`` (B, Tk)
bool, ``True`` = real token, keyword-only ``return_attention``.

Dimension legend: B batch, T sequence length, D model dim, V vocabulary size.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from tformer.checks import check_ids
from tformer.models.attention_output import returns_attention
from tformer.models.checkpoint import PretrainedMixin
from tformer.models.config import ModelConfig
from tformer.nn.cache import Cache, KVCache, open_positions
from tformer.nn.hooks import HookPoint, keep_at_hand
from tformer.nn.layers import Decoder, LayerConfig
from tformer.nn.positional import ROPE_SCALINGS, InputEmbedding, rope_frequencies, rotary_tables

__all__ = ["GPTConfig", "GPT"]


# GPT-2 small's values of the fields every family shares (tformer.models.config.ModelConfig)
GPT2 = dict(
    d_model=768,
    n_heads=12,
    d_ff=3072,
    max_len=1024,  # the context length (block size)
    activation="gelu_tanh",  # GPT-2's "gelu_new"
    norm_first=True,  # pre-LN
)


MAX_VOCAB_MULTIPLE = 4096  # GPTConfig.vocab_multiple's largest: padding beyond a tile's size buys nothing


@dataclass(frozen=True, kw_only=True)
class GPTConfig(ModelConfig, defaults=GPT2):
    """``GPTConfig.preset("small", vocab_size=65)``; presets: tiny, small, base (= GPT-2 small)."""

    PRESETS: ClassVar[dict] = {
        "tiny": dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=128),
        "small": dict(d_model=256, n_heads=4, n_layers=4, d_ff=1024, max_len=256),
        "base": dict(d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=1024),  # GPT-2 small
    }
    POSITIVE: ClassVar[tuple] = ("vocab_size", "vocab_multiple", "n_layers")

    vocab_size: int
    # the token table and the output head get rows up to a multiple of this (64: the GPU's matrix tiles; GPT-2's 50,257
    # → 50,304, as nanoGPT pads it); the rows past vocab_size are never fed and their logits are cut off
    vocab_multiple: int = 1
    n_layers: int = 12
    final_norm: bool | None = None  # None = only for pre-LN (GPT-2's ln_f)
    positional: str = (
        "learned"  # "learned" (GPT-2) | "sinusoidal" | "rope" (rotary, in self-attention: GPT-NeoX, LLaMA)
    )
    rope_base: float = 10000.0  # RoPE: angle of pair i at position t = t · rope_base^(−2i/head_dim)
    tie_embeddings: bool = True  # output projection = token embedding matrix
    pad_id: int | None = None  # a padding token, if the tokenizer has one (ignored by the loss)
    # today's decoders (Llama, Qwen, Mistral, Gemma); the defaults are GPT-2's block
    norm_weight_offset: float = 0.0  # RMSNorm only: 1.0 = Gemma's (1 + weight), the weight starting at 0
    qkv_bias: bool | None = None  # bias of the Q/K/V projection; None = same as bias (Qwen2: True, bias=False)
    sliding_window: int | None = None  # each position attends to the last this many positions only (Mistral)
    attn_softcap: float | None = None  # attention scores → c·tanh(scores / c) (Gemma 2)
    final_softcap: float | None = None  # logits → c·tanh(logits / c) (Gemma 2)
    # per-head width Dh; None = d_model // n_heads, filled in by __post_init__ (so always an int after); Gemma sets it
    head_dim: int | None = None  # type: ignore[assignment]  # the base class derives it; here a field
    rope_scaling: dict | None = None  # RoPE for longer contexts: {"rope_type": "linear" | "llama3" | "yarn", ...}
    sliding_window_pattern: int | None = None  # None: every layer slides; k: every k-th layer global (Gemma 3: 6)
    rope_local_base: float | None = None  # RoPE base of the sliding layers, unscaled (Gemma 3: 10,000); None = same
    norm_scale: bool = True  # False: no learned scale in the norms
    sandwich_norm: bool = False  # a second norm on each sub-layer's output, before the residual add (Gemma 2/3)
    embed_scale: bool = False  # token embeddings × √d_model (Gemma)
    attn_scale: float | None = None  # the scores' factor; None = 1/√head_dim (Gemma 3: query_pre_attn_scalar^−½)
    parallel_residual: bool = False  # x + attn(norm1(x)) + ff(norm3(x)): GPT-NeoX's and Pythia's block
    rope_dim: int | None = None  # RoPE turns the first rope_dim dims of each head, the rest pass (Pythia: Dh / 4)
    # each sub-layer's normed input: feature group i of shift_tokens + 1 from i positions back (tformer.nn.shift;
    # x-transformers' shift_tokens, RWKV's token shift without its learned mix); 0 = GPT-2's block
    shift_tokens: int = 0

    def __post_init__(self) -> None:
        # head_dim is filled in before the shared checks, so ``config.head_dim`` is always the width in use
        if self.head_dim is None and _divides(self.n_heads, self.d_model):
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        super().__post_init__()

    def replace(self, **changes):
        """A validated copy; a ``head_dim`` that followed d_model / n_heads keeps following them."""
        follows = self.head_dim == self.d_model // self.n_heads
        if "head_dim" not in changes and follows and ("d_model" in changes or "n_heads" in changes):
            changes["head_dim"] = None
        return super().replace(**changes)

    def to_dict(self) -> dict:
        """The fields as JSON; a ``head_dim`` that follows d_model / n_heads is written as null (derived again on
        reading), so editing ``n_heads`` in a config.json does not keep a stale head width."""
        data = super().to_dict()
        if self.head_dim == self.d_model // self.n_heads:
            data["head_dim"] = None
        return data

    @property
    def table_rows(self) -> int:
        """The rows of the token table and the output head: ``vocab_size`` rounded up to ``vocab_multiple``."""
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

    def validate(self) -> None:
        if self.head_dim is None:  # left unfilled: d_model / n_heads is not a whole number
            raise ValueError(
                f"GPTConfig.d_model must be divisible by n_heads (or head_dim set), "
                f"got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        self.check_choice("positional", ("sinusoidal", "learned", "rope"))
        rope_dim = self.rope_dim
        if rope_dim is not None and not (
            self.positional == "rope" and 0 < rope_dim <= self.head_dim and rope_dim % 2 == 0
        ):
            raise ValueError(
                f"GPTConfig.rope_dim must be None or an even number of dims in [2, head_dim={self.head_dim}] with "
                f"positional='rope', got {rope_dim!r} (positional={self.positional!r})"
            )
        self._check_rope_scaling()
        if self.sliding_window_pattern is not None and (self.sliding_window is None or self.sliding_window_pattern < 1):
            raise ValueError(
                f"GPTConfig.sliding_window_pattern must be None or >= 1 with a sliding_window set, "
                f"got {self.sliding_window_pattern} (sliding_window={self.sliding_window})"
            )
        for name in ("final_softcap", "rope_local_base"):  # (the layer options: ModelConfig.check_layer_options)
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"GPTConfig.{name} must be None or > 0, got {value}")
        if not self.rope_base > 0:  # a negative base gives NaN angles
            raise ValueError(f"GPTConfig.rope_base must be > 0, got {self.rope_base}")
        if self.positional == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"GPTConfig.positional='rope' needs an even head dimension, got head_dim={self.head_dim}")
        self.check_token_id("pad_id", self.vocab_size, optional=True)
        if self.shift_tokens >= self.d_model:  # (a whole number >= 0: the layer options' check)
            raise ValueError(f"GPTConfig.shift_tokens must be below d_model={self.d_model}, got {self.shift_tokens}")
        if self.vocab_multiple > MAX_VOCAB_MULTIPLE:  # (>= 1: POSITIVE)
            raise ValueError(
                f"GPTConfig.vocab_multiple must be at most {MAX_VOCAB_MULTIPLE} (a multiple of rows for the GPU's "
                f"tiles, 64 say), got {self.vocab_multiple}"
            )

    def _check_rope_scaling(self) -> None:
        s = self.rope_scaling
        if s is None:
            return
        kind = s.get("rope_type") if isinstance(s, dict) else None
        if kind not in ROPE_SCALINGS:
            raise ValueError(
                f"GPTConfig.rope_scaling must be None or an object with rope_type one of "
                f"{', '.join(map(repr, ROPE_SCALINGS))}, got {s!r}"
            )
        required, optional = ROPE_SCALINGS[kind]
        missing = [k for k in required if k not in s]
        unknown = sorted(set(s) - {"rope_type", *required, *optional})
        if missing or unknown:
            raise ValueError(f"GPTConfig.rope_scaling ({kind}) lacks {missing} / has unknown keys {unknown}")
        for key, value in s.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if key not in ("rope_type", "truncate") and value is not None and not (number and value > 0):
                raise ValueError(f"GPTConfig.rope_scaling[{key!r}] must be a number > 0, got {value!r}")
        if self.positional != "rope":
            raise ValueError(f"GPTConfig.rope_scaling needs positional='rope', got positional={self.positional!r}")

    def is_local(self, i: int) -> bool:
        """Whether layer ``i`` attends through the sliding window (else to every earlier position)."""
        k = self.sliding_window_pattern
        return self.sliding_window is not None and (k is None or (i + 1) % k != 0)

    @property
    def layers(self) -> list[LayerConfig]:
        """One :class:`LayerConfig` per layer: the global layers of a sliding-window pattern have no window."""
        layer = self.layer
        full = dataclasses.replace(layer, sliding_window=None)
        return [layer if self.is_local(i) else full for i in range(self.n_layers)]


def _divides(n: object, d: object) -> bool:
    """``n`` divides ``d`` (both positive integers; anything else is left to the type checks)."""
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (n, d))
    return ok and d % n == 0  # type: ignore[operator]


def _head(d_model: int, vocab_size: int, rows: int) -> nn.Linear:
    """The output projection onto ``rows`` >= ``vocab_size`` logits, no bias: the words' rows drawn with the random
    numbers ``nn.Linear(d_model, vocab_size)`` draws (so a padded model starts as an unpadded one does), the padding
    rows (``GPTConfig.vocab_multiple``) 0."""
    if rows == vocab_size:
        return nn.Linear(d_model, vocab_size, bias=False)
    head = nn.Linear(d_model, rows, bias=False, device="meta")  # no draws: the weight is made below
    head.weight = nn.Parameter(torch.empty(rows, d_model))
    nn.init.kaiming_uniform_(head.weight[:vocab_size], a=math.sqrt(5))  # nn.Linear's own init, on the words' rows
    with torch.no_grad():
        head.weight[vocab_size:].zero_()
    return head


class GPT(PretrainedMixin, nn.Module):
    """A decoder-only language model: token (and position) embeddings, a stack of causal decoder layers, a final norm
    and the vocabulary head (tied to the token table unless the config says otherwise). ``GPT(GPTConfig(...))``
    builds it; ``model(ids)`` gives the next-token logits (B, T, V); ``new_cache()`` is its KV cache for decoding;
    ``save_pretrained`` / ``from_pretrained`` write and read it (``tformer.load`` reads any GPT directory)."""

    model_type = "gpt"
    config_class = GPTConfig
    config: GPTConfig
    stacks = {"decoder.layers.{i}": "n_layers"}
    word_tables = ("embed.token.weight", "output.weight")  # a row per id: table_rows of them (vocab_multiple)
    rope_inv_freq: torch.Tensor  # positional="rope": a buffer (see __init__)

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(
            c.vocab_size, c.d_model, c.max_len, c.positional, scale=c.embed_scale, dropout=c.dropout, rows=c.table_rows
        )
        self.decoder = Decoder(c.layers, c.n_layers, c.final_norm, cross_attention=False)
        # RoPE: the inverse frequencies (n, Dh/2) of the global (, local) layers, a buffer outside the state dict (it
        # is the config's), so .to(device) moves it; float32 whatever the weights' dtype (see _apply); and their factors
        self._rope_factors: tuple[float, ...] = ()
        if c.positional == "rope":
            frequencies, self._rope_factors = self._rope_frequencies()
            self.register_buffer("rope_inv_freq", frequencies, persistent=False)
        self.output = _head(c.d_model, c.vocab_size, c.table_rows)  # vocab_size rows + vocab_multiple's padding
        if c.tie_embeddings:
            self.output.weight = self.embed.token.weight
        self.hook_logits = HookPoint()  # (B, T, V), soft-capped if the model caps (tformer.nn.hooks)
        keep_at_hand(self)
        self._init_weights()

    def _rope_frequencies(self) -> tuple[torch.Tensor, tuple[float, ...]]:
        """RoPE's inverse frequencies (n, Dh/2), float32, and factors: the global layers' (, the sliding layers')."""
        c = self.config
        assert c.head_dim is not None  # filled in by GPTConfig.__post_init__
        width = c.rope_dim or c.head_dim  # the dims that turn: all, or the first rope_dim (apply_rotary)
        pairs = [rope_frequencies(width, c.rope_base, c.rope_scaling)]
        if c.rope_local_base is not None:
            pairs.append(rope_frequencies(width, c.rope_local_base))
        return torch.stack([f.float() for f, _ in pairs]), tuple(factor for _, factor in pairs)

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's ``_apply`` (``.to``, ``.cuda``, ``.bfloat16``, ``to_empty``), then RoPE's frequencies made again
        in float32 where the buffer now is: a cast to bfloat16 would round the angles (a meta model's are empty)."""
        super()._apply(fn, recurse)
        if self.config.positional == "rope":
            self.rope_inv_freq = self._rope_frequencies()[0].to(self.rope_inv_freq.device)
        return self

    def _init_weights(self) -> None:
        """GPT-2 initialisation: N(0, 0.02), residual output projections scaled by 1/√(2·n_layers)."""
        for name, p in self.named_parameters():
            if p.dim() > 1:
                std = (
                    0.02 / math.sqrt(2 * self.config.n_layers)
                    if name.endswith(("out_proj.weight", "linear2.weight", "down_proj.weight"))
                    else 0.02
                )
                words = p[: self.config.vocab_size] if name in self.word_tables else p  # the padding rows stay 0
                nn.init.normal_(words, std=std)
            elif name.endswith("bias") and "norm" not in name:
                nn.init.zeros_(p)

    @returns_attention
    def forward(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: Cache | None = None,
        logits_to_keep: int = 0,
        head: bool = True,
    ) -> torch.Tensor:
        """``ids`` (B, T) → logits (B, T, V).

        ``attention_mask`` (B, Tk) bool, ``True`` = real token, covers the cached positions too
        (Tk = cached + T); use it for left-padded batches, with ``positions`` (B, T) counting real
        tokens only. With a ``cache``, ``ids`` holds only the new positions. With a static cache
        (:class:`tformer.generation.static_cache.StaticKVCache`) the positions are counted on the device (give
        ``positions`` for a padded batch) and ``attention_mask`` is (B, T), the new positions' only: the cache keeps it.
        ``return_attention=True`` returns ``(logits, weights)`` (weights by module name). ``logits_to_keep=k`` > 0
        projects only the last k positions onto the vocabulary, (B, k, V): generation's prefill needs the last one
        only, and (B, T, V) is the largest tensor of a long prompt (Hugging Face's argument of the same name).
        ``head=False`` returns the final hidden states (B, T, D) instead, not projected onto the vocabulary: what a loss
        that projects them itself, a chunk at a time, takes (:func:`tformer.fast.chunked_loss.linear_cross_entropy`).
        """
        check_ids(ids, "ids", self.config.vocab_size)
        rope = self.config.positional == "rope"
        if cache is None:
            where, mask = open_positions(0, ids, attention_mask, positions, self.config.max_len)
        else:  # the positions after the cached ones (tformer.nn.cache's protocol, for every kind of cache)
            where, mask = cache.begin(ids, attention_mask, positions, self.config.max_len)
        x = self.embed(ids, where)  # (B, T, D)
        rotary: list | tuple | None = None
        if rope:
            frequencies = zip(self.rope_inv_freq, self._rope_factors)
            tables = [self._rotary(where, f) for f in frequencies]  # global layers (, local layers)
            rotary = tables[0]
            if len(tables) == 2:  # Gemma 3: the sliding layers turn at their own base
                rotary = [tables[1] if self.config.is_local(i) else tables[0] for i in range(self.config.n_layers)]
        real = None  # token shift: padding reads as zeros; attention_mask covers the new positions last
        if self.config.shift_tokens and attention_mask is not None:
            real = attention_mask[:, -ids.shape[1] :].bool()  # (B, T)
        x = self.decoder(x, self_mask=mask, causal=True, cache=cache, rotary=rotary, real=real)  # (B, T, D)
        if logits_to_keep > 0:
            x = x[:, -logits_to_keep:]  # (B, k, D)
        if not head:
            return x
        logits = self.output(x)  # (B, T or k, rows)
        if logits.shape[-1] != self.config.vocab_size:  # the padding rows' (vocab_multiple) cut off: a view
            logits = logits[..., : self.config.vocab_size]  # (B, T or k, V)
        cap = self.config.final_softcap
        return self.hook_logits(logits if cap is None else cap * torch.tanh(logits / cap))

    def _rotary(
        self, where: torch.Tensor, frequencies: tuple[torch.Tensor, float]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of positions ``where`` (T,) or (B, T), shaped to broadcast over heads: (B or 1, 1, T, Dh)."""
        cos, sin = rotary_tables(where, 0, frequencies=frequencies)
        return (cos[:, None], sin[:, None]) if where.dim() == 2 else (cos, sin)

    def new_cache(self, max_len: int | None = None) -> KVCache:
        """A KV cache; the sliding-window layers' stores keep only the positions their window still needs."""
        c = self.config
        return KVCache(c.n_layers, max_len or c.max_len, self.cache_windows())

    def cache_windows(self) -> list[int | None]:
        """Each decoder layer's sliding window, None for a layer that sees every earlier position (what a cache of
        this model is made with: :meth:`new_cache`, ``StaticKVCache.for_model``)."""
        c = self.config
        return [c.sliding_window if c.is_local(i) else None for i in range(c.n_layers)]
