"""The translation task: what the :class:`~tformer.training.trainer.Trainer` trains.

Teacher-forced batches by length under a token budget (:mod:`.batching`), label-smoothed cross-entropy
over real target tokens. The training pairs are :class:`~tformer.translation.batching.EncodedPairs` (memory-mapped
shards, or pairs of text encoded in memory): a batch is the indices of its pairs, whose tensors :meth:`fetch` reads
when it is trained on (the Trainer calls it ahead, in a background thread), and an evaluation that reports the validation loss and sacreBLEU (decoding
with the :class:`~tformer.translation.translator.Translator`). With no validation pairs the evaluation
returns nothing (``{}``), never a loss of 0.

Dimension legend: B batch, T target length, V target vocabulary.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from tformer.fast.chunked_loss import chunk_rows, linear_cross_entropy, plain_head
from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward
from tformer.translation.batching import Batch, EncodedPairs, budget_batches
from tformer.translation.pairs import group_references
from tformer.translation.translator import TranslationCut, Translator

__all__ = ["TranslationTask"]


class TranslationTask:
    """Teacher-forced training of a :class:`Translator` on (source, target) sentence pairs.

    ``train``: pairs of text (encoded here) or :class:`EncodedPairs` (the source encoded as :meth:`Translator.translate`
    reads it); ``valid``: pairs of text (its sources and references are BLEU's)."""

    metric, higher_is_better = "bleu", True
    rate_unit = "target tok"  # count_tokens counts the target side's tokens (the loss's), as fairseq's wps does

    def __init__(
        self,
        translator: Translator,
        train: list[tuple[str, str]] | EncodedPairs,
        valid: list[tuple[str, str]],
        batch_tokens: int = 4096,
        label_smoothing: float = 0.1,
        seed: int = 0,
        bleu_sentences: int = 500,
        beam: int = 1,
    ) -> None:
        self.translator, self.batch_tokens, self.label_smoothing, self.seed, self.beam = (
            translator,
            batch_tokens,
            label_smoothing,
            seed,
            beam,
        )
        self.train_pairs = train
        limit = translator.model.config.max_len - 1
        self.train_ids = (train if isinstance(train, EncodedPairs) else self._encode(train)).cut(limit)
        self.valid_ids = self._encode(valid).cut(limit)
        sources, refs = group_references(valid)
        self.bleu_sources = sources[:bleu_sentences]
        self.bleu_refs = [r[:bleu_sentences] for r in refs]
        if not self.bleu_sources:  # no BLEU computed (bleu_sentences=0): the best model is the lowest loss
            self.metric, self.higher_is_better = "val_loss", False

    def _encode(self, pairs: list[tuple[str, str]]) -> EncodedPairs:
        # the source as translate() reads it (an Opus-MT source ends with </s>); the target's ends come in the batch
        src = self.translator.src_tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=True)
        tgt = self.translator.tgt_tokenizer.encode_batch([t for _, t in pairs])
        return EncodedPairs.of(list(zip(src, tgt)))

    # the training loss, a kernel the Trainer chooses (fused CPU backward; TrainConfig(fast=False): the reference)
    cross_entropy = staticmethod(sequence_cross_entropy)
    # a batch whose logits pass LOGITS_AT_ONCE is projected and scored a chunk of positions at a time, its logits never
    # whole (tformer.fast.chunked_loss; TrainConfig(fast=False): whole, the reference)
    chunked = True

    def train_batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's batches, each the indices of its pairs (seeded by the epoch: a resumed run sees the same)."""
        return budget_batches(self.train_ids.sizes(), self.batch_tokens, seed=self.seed * 100_003 + epoch)

    def _batch(self, pairs: EncodedPairs, indices) -> Batch:
        """The translator's own ids: tformer's <pad> 0, <sos> 2, <eos> 3, or an Opus-MT model's."""
        t = self.translator
        return pairs.batch(indices, t.pad_id, t.start_id, t.eos_id)

    def count_tokens(self, batch: np.ndarray | Batch) -> int:
        return batch.n_tokens if isinstance(batch, Batch) else self.train_ids.target_tokens(batch)

    def fetch(self, batch: np.ndarray) -> Batch:
        """The tensors of ``batch`` (its pairs' indices), read from the pairs' ids, on the CPU."""
        return self._batch(self.train_ids, batch)

    def loss(self, model, batch: np.ndarray | Batch) -> tuple[torch.Tensor, int]:
        """``batch``: the indices of its pairs, or their :class:`Batch` already fetched."""
        if not isinstance(batch, Batch):
            batch = self.fetch(batch)
        batch = batch.to(next(model.parameters()).device)
        output = plain_head(model) if self.chunked else None
        chunk = chunk_rows(batch.tgt_out.numel(), output.weight.shape[0]) if output is not None else None
        if chunk is not None and output is not None:  # the logits a chunk of positions at a time, never whole
            hidden = model(batch.src, batch.tgt_in, **batch.forward_args(), head=False)  # (B, T, D)
            loss = linear_cross_entropy(
                hidden, output.weight, batch.tgt_out, chunk, batch.pad, label_smoothing=self.label_smoothing
            )
            return loss, batch.n_tokens
        logits = model(batch.src, batch.tgt_in, **batch.forward_args())  # (B, T, V); masks known: no device read
        loss = self.cross_entropy(
            logits, batch.tgt_out, ignore_index=batch.pad, label_smoothing=self.label_smoothing, reduction="sum"
        )
        return loss, batch.n_tokens

    def evaluate(self, model) -> dict:
        """Validation loss, BLEU and chrF; ``{}`` when there is no validation data (never a made-up 0)."""
        if not len(self.valid_ids):
            return {}
        total, tokens = 0.0, 0
        for g in budget_batches(self.valid_ids.sizes(), self.batch_tokens, seed=0, shuffle=False):
            batch = self._batch(self.valid_ids, g).to(next(model.parameters()).device)
            logits = model(batch.src, batch.tgt_in, **batch.forward_args())
            total += float(sequence_cross_entropy(logits, batch.tgt_out, ignore_index=batch.pad, reduction="sum"))
            tokens += batch.n_tokens
        result = {"val_loss": total / tokens}
        if self.bleu_sources:
            with warnings.catch_warnings():  # a model in training may not end its sentences yet: BLEU counts that
                warnings.simplefilter("ignore", TranslationCut)
                scores = self.translator.evaluate(self.bleu_sources, self.bleu_refs, beam=self.beam)
            result.update(bleu=scores["bleu"], chrf=scores["chrf"])
        return result

    def save_extra(self, directory) -> None:
        self.translator.save_tokenizers(directory)
