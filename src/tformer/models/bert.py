"""Encoder-only Transformer (BERT): bidirectional self-attention with a padding mask only.

    [CLS] A [SEP] B [SEP] ─ token + position + segment embeddings ─ LayerNorm ─ N × encoder layer ─ hidden (B, T, D)
        hidden ─ MLM head (dense, GELU, LayerNorm, Linear tied to the token embeddings) → (B, T, V)
        hidden[:, 0] ─ pooler (dense, tanh) ─ NSP head → (B, 2)   /   classification head → (B, num_labels)

Defaults follow BERT: post-LN, exact GELU, learned positions, LayerNorm eps 1e-12. The MLM decoder
is always tied to the token embeddings (as in BERT), so there is no ``tie_embeddings`` field.

Forward conventions shared with the other families: token ids first, then ``token_type_ids`` (the
segment ids, Hugging Face's name, also the name in :class:`~tformer.bert.pretraining.BertBatch`),
``attention_mask`` (B, T) bool, ``True`` = real token, and keyword-only ``return_attention``.
Pretraining calls :meth:`Bert.pretraining_logits`, which gives the MLM logits at the picked
positions and the NSP logits; classification calls :meth:`Bert.classify`.

Dimension legend: B batch, T sequence length, D model dim, V vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
from torch import nn

from tformer.checks import check_ids, check_length, unless_all_real
from tformer.models.attention_output import returns_attention
from tformer.models.checkpoint import PretrainedMixin
from tformer.models.config import ModelConfig
from tformer.nn.feedforward import ACTIVATIONS
from tformer.nn.hooks import HookPoint, keep_at_hand
from tformer.nn.layers import Encoder
from tformer.nn.positional import InputEmbedding

__all__ = ["BertConfig", "Bert"]


# BERT-base's values of the fields every family shares (tformer.models.config.ModelConfig)
BERT_BASE = dict(d_model=768, n_heads=12, d_ff=3072, max_len=512, activation="gelu", norm_eps=1e-12)


@dataclass(frozen=True, kw_only=True)
class BertConfig(ModelConfig, defaults=BERT_BASE):
    """``BertConfig.preset("tiny", vocab_size=8000)``; presets: tiny, small, base (= BERT-base).

    ``norm`` applies to the encoder layers; the embedding and MLM-head LayerNorms stay."""

    PRESETS: ClassVar[dict] = {
        "tiny": dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=128),
        "small": dict(d_model=256, n_heads=4, n_layers=4, d_ff=1024, max_len=128),
        "base": dict(d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=512),  # BERT-base
    }
    POSITIVE: ClassVar[tuple] = ("vocab_size", "n_layers", "n_segments")

    vocab_size: int = 30522
    n_layers: int = 12
    n_segments: int = 2  # token-type (segment) vocabulary
    num_labels: int = 0  # size of the sequence-classification head (0 = no head)
    pad_id: int = 0  # the padding token (masked out)

    def validate(self) -> None:
        if self.num_labels < 0:
            raise ValueError(f"BertConfig.num_labels must be >= 0 (0 = no classification head), got {self.num_labels}")
        self.check_token_id("pad_id", self.vocab_size)


class MLMHead(nn.Module):
    """dense → activation → LayerNorm → Linear to the vocabulary (weight tied to the token embeddings)."""

    def __init__(self, config: BertConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.activation = cast(Callable[[torch.Tensor], torch.Tensor], ACTIVATIONS[config.activation])
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.decoder.weight = embedding.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden))))  # (B, T, D) -> (B, T, V)


class Bert(PretrainedMixin, nn.Module):
    """An encoder-only model (BERT): token, position and segment embeddings, a stack of encoder layers, and its heads
    (masked language modelling, next-sentence prediction, the pooler; a classifier with ``num_labels``).
    ``model(ids, token_type_ids=..., attention_mask=...)`` gives the hidden states (B, T, D);
    :meth:`pretraining_logits` and :meth:`classify` the heads' logits."""

    model_type = "bert"
    config_class = BertConfig
    stacks = {"encoder.layers.{i}": "n_layers"}
    config: BertConfig

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(
            c.vocab_size,
            c.d_model,
            c.max_len,
            "learned",
            scale=False,
            dropout=c.dropout,
            n_segments=c.n_segments,
            norm_eps=c.norm_eps,
        )
        self.encoder = Encoder(c.layer, c.n_layers, final_norm=c.norm_first)
        self.pooler = nn.Linear(c.d_model, c.d_model)
        self.mlm_head = MLMHead(c, self.embed.token)
        self.nsp_head = nn.Linear(c.d_model, 2)
        self.classifier = (
            nn.Sequential(nn.Dropout(c.dropout), nn.Linear(c.d_model, c.num_labels)) if c.num_labels else None
        )
        self.hook_logits = HookPoint()  # the MLM logits, (B, T, V) or (N, V) (tformer.nn.hooks)
        keep_at_hand(self)
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias") and "norm" not in name:
                nn.init.zeros_(p)

    @returns_attention
    def forward(
        self,
        ids: torch.Tensor,
        *,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``ids`` (B, T) → hidden states (B, T, D).

        ``token_type_ids`` (B, T): 0 for sentence A, 1 for sentence B. ``attention_mask`` (B, T):
        1/``True`` = real token; defaults to ``ids != pad_id``. Both by name (here, in :meth:`classify` and
        :meth:`pretraining_logits`): Hugging Face's ``BertModel`` takes ``attention_mask`` second, and a mask of 0s
        and 1s read as segments would give other numbers without a word.
        ``return_attention=True`` returns ``(hidden, weights)`` (weights by module name).
        """
        check_ids(ids, "ids", self.config.vocab_size)
        check_length(ids.shape[1], self.config.max_len, "ids")
        if token_type_ids is not None:
            check_ids(token_type_ids, "token_type_ids", self.config.n_segments)
        if attention_mask is None:
            attention_mask = ids != self.config.pad_id
        elif attention_mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask must have the shape of ids {tuple(ids.shape)}, got {tuple(attention_mask.shape)}"
            )
        mask = unless_all_real(attention_mask.bool()[:, None, None, :])  # (B, 1, 1, T); None: nothing padded
        return self.encoder(self.embed(ids, segments=token_type_ids), mask)  # (B, T, D)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """The [CLS] vector through dense + tanh: (B, T, D) → (B, D)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def pretraining_logits(
        self,
        ids: torch.Tensor,
        *,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MLM logits (B, T, V) and NSP logits (B, 2); NSP class 0 = "B follows A" (as in BERT).

        ``mlm_positions`` (B, T) bool, ``True`` = a picked token: the MLM logits are then computed at
        those N positions only, (N, V) in row-major order — what pretraining needs, at a fraction of
        the cost of the vocabulary projection at every position.
        """
        hidden = self(ids, token_type_ids=token_type_ids, attention_mask=attention_mask)  # (B, T, D)
        return self.pretraining_heads(hidden, mlm_positions)

    def pretraining_heads(
        self, hidden: torch.Tensor, mlm_positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The two heads of :meth:`pretraining_logits` on the encoder's output ``hidden`` (B, T, D): MLM logits
        (B, T, V) or (N, V) at ``mlm_positions``, NSP logits (B, 2). (Training calls the model, compiled or not,
        then this: the picked positions' count changes from batch to batch, which a compiled graph would not.)"""
        picked = hidden if mlm_positions is None else hidden[mlm_positions]  # (B, T, D) or (N, D)
        return self.hook_logits(self.mlm_head(picked)), self.nsp_head(self.pool(hidden))

    def classify(
        self,
        ids: torch.Tensor,
        *,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Sequence-classification logits (B, num_labels) from the pooled [CLS] vector."""
        if self.classifier is None:
            raise ValueError("this model has no classification head: build it with BertConfig(num_labels=N)")
        hidden = self(ids, token_type_ids=token_type_ids, attention_mask=attention_mask)  # (B, T, D)
        return self.classifier(self.pool(hidden))
