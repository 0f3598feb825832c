"""Encoder-only Transformer (BERT): bidirectional self-attention with a padding mask only.

    [CLS] A [SEP] B [SEP] ─ token + position + segment embeddings ─ LayerNorm ─ N × encoder layer ─ hidden (B, T, D)
        hidden ─ MLM head (dense, GELU, LayerNorm, Linear tied to the token embeddings) → (B, T, V)
        hidden[:, 0] ─ pooler (dense, tanh) ─ NSP head → (B, 2)   /   classification head → (B, num_labels)

Defaults follow BERT: post-LN, exact GELU, learned positions, LayerNorm eps 1e-12.

Dimension legend: B batch, T sequence length, D model dim, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from tformer.models.checkpoint import PretrainedMixin
from tformer.checks import check_ids, check_length, check_positive
from tformer.fast.dropout import Dropout
from tformer.nn.recorder import Recorder
from tformer.nn.layers import ACTIVATIONS, Encoder, LayerConfig
from tformer.nn.positional import InputEmbedding

__all__ = ["BertConfig", "Bert"]

_PRESETS = {
    "tiny": dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=128),
    "small": dict(d_model=256, n_heads=4, n_layers=4, d_ff=1024, max_len=128),
    "base": dict(d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_len=512),  # BERT-base
}


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    d_ff: int = 3072
    max_len: int = 512
    n_segments: int = 2  # token-type (segment) vocabulary
    dropout: float = 0.1
    attn_dropout: float | None = None  # None = same as dropout
    activation: str = "gelu"
    norm_first: bool = False  # post-LN (BERT)
    norm_eps: float = 1e-12
    bias: bool = True
    pad_id: int = 0
    num_labels: int = 0  # size of the sequence-classification head (0 = no head)

    def __post_init__(self) -> None:
        check_positive(self, "vocab_size", "n_layers", "max_len", "n_segments")
        _ = self.layer
        if self.num_labels < 0:
            raise ValueError(f"num_labels must be >= 0, got {self.num_labels}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id must be a valid token id, got {self.pad_id}")

    @property
    def layer(self) -> LayerConfig:
        return LayerConfig(self.d_model, self.n_heads, self.d_ff, self.dropout, self.attn_dropout,
                           self.activation, self.norm_first, self.norm_eps, self.bias)

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """``BertConfig.preset("tiny", vocab_size=8000)``; presets: tiny, small, base (= BERT-base)."""
        if name not in _PRESETS:
            raise ValueError(f"preset must be one of {sorted(_PRESETS)}, got {name!r}")
        return cls(**{**_PRESETS[name], **overrides})

    def replace(self, **changes) -> "BertConfig":
        return replace(self, **changes)


class MLMHead(nn.Module):
    """dense → activation → LayerNorm → Linear to the vocabulary (weight tied to the token embeddings)."""

    def __init__(self, config: BertConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.activation = ACTIVATIONS[config.activation]
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.decoder.weight = embedding.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden))))  # (B, T, D) -> (B, T, V)


class Bert(PretrainedMixin, nn.Module):
    model_type = "bert"
    config_class = BertConfig

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, "learned", scale=False,
                                    dropout=c.dropout, n_segments=c.n_segments, norm_eps=c.norm_eps)
        self.encoder = Encoder(c.layer, c.n_layers, final_norm=c.norm_first)
        self.pooler = nn.Linear(c.d_model, c.d_model)
        self.mlm_head = MLMHead(c, self.embed.token)
        self.nsp_head = nn.Linear(c.d_model, 2)
        self.classifier = nn.Sequential(Dropout(c.dropout), nn.Linear(c.d_model, c.num_labels)) if c.num_labels else None
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias") and "norm" not in name:
                nn.init.zeros_(p)

    def forward(
        self,
        ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        return_attention: bool = False,
    ):
        """``ids`` (B, T) → hidden states (B, T, D).

        ``token_type_ids`` (B, T): 0 for sentence A, 1 for sentence B. ``attention_mask`` (B, T):
        1/``True`` = real token; defaults to ``ids != pad_id``.
        ``return_attention=True`` returns ``(hidden, weights)`` (weights by module name).
        """
        if return_attention:
            with Recorder(self) as rec:
                hidden = self.forward(ids, token_type_ids, attention_mask)
            return hidden, rec.weights()
        check_ids(ids, "ids", self.config.vocab_size)
        check_length(ids.shape[1], self.config.max_len, "ids")
        if token_type_ids is not None:
            check_ids(token_type_ids, "token_type_ids", self.config.n_segments)
        if attention_mask is None:
            attention_mask = ids != self.config.pad_id
        elif attention_mask.shape != ids.shape:
            raise ValueError(f"attention_mask must have the shape of ids {tuple(ids.shape)}, got {tuple(attention_mask.shape)}")
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        return self.encoder(self.embed(ids, segments=token_type_ids), mask)  # (B, T, D)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """The [CLS] vector through dense + tanh: (B, T, D) → (B, D)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def pretraining_logits(self, ids, token_type_ids=None, attention_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """MLM logits (B, T, V) and NSP logits (B, 2); NSP class 0 = "B follows A" (as in BERT)."""
        hidden = self(ids, token_type_ids, attention_mask)
        return self.mlm_head(hidden), self.nsp_head(self.pool(hidden))

    def classify(self, ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Sequence-classification logits (B, num_labels) from the pooled [CLS] vector."""
        if self.classifier is None:
            raise ValueError("this model has no classification head: build it with BertConfig(num_labels=N)")
        return self.classifier(self.pool(self(ids, token_type_ids, attention_mask)))

    def trace(self, *args, **kwargs):
        """Glass box: every intermediate tensor of one forward pass; see :func:`tformer.inspect.trace.trace_bert`."""
        from tformer.inspect.trace import trace_bert

        return trace_bert(self, *args, **kwargs)
