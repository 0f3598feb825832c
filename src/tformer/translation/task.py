"""The translation task: what the :class:`~tformer.training.trainer.Trainer` trains.

Teacher-forced batches by length under a token budget (:mod:`.batching`), label-smoothed cross-entropy
over real target tokens, and an evaluation that reports the validation loss and sacreBLEU (decoding
with the :class:`~tformer.translation.translator.Translator`). With no validation pairs the evaluation
returns nothing (``{}``), never a loss of 0.

Dimension legend: B batch, T target length, V target vocabulary.
"""

from __future__ import annotations

import torch

from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward
from tformer.translation.batching import Batch, make_batch, token_budget_batches
from tformer.translation.pairs import group_references
from tformer.translation.translator import Translator

__all__ = ["TranslationTask"]


class TranslationTask:
    """Teacher-forced training of a :class:`Translator` on (source, target) sentence pairs."""

    metric, higher_is_better = "bleu", True

    def __init__(
        self,
        translator: Translator,
        train: list[tuple[str, str]],
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
        self.train_ids = self._encode(train, limit)
        self.valid_ids = self._encode(valid, limit)
        sources, refs = group_references(valid)
        self.bleu_sources = sources[:bleu_sentences]
        self.bleu_refs = [r[:bleu_sentences] for r in refs]
        if not self.bleu_sources:  # no BLEU computed (bleu_sentences=0): the best model is the lowest loss
            self.metric, self.higher_is_better = "val_loss", False

    def _encode(self, pairs: list[tuple[str, str]], limit: int) -> list[tuple[list[int], list[int]]]:
        # the source as translate() reads it (an Opus-MT source ends with </s>); the target's ends come in make_batch
        src = self.translator.src_tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=True)
        tgt = self.translator.tgt_tokenizer.encode_batch([t for _, t in pairs])
        return [(s[:limit], t[:limit]) for s, t in zip(src, tgt) if s and t]

    # the training loss, a kernel the Trainer chooses (fused CPU backward; TrainConfig(fast=False): the reference)
    cross_entropy = staticmethod(sequence_cross_entropy)

    def train_batches(self, epoch: int) -> list[Batch]:
        groups = token_budget_batches(self.train_ids, self.batch_tokens, seed=self.seed * 100_003 + epoch)
        return [self._batch([self.train_ids[i] for i in g]) for g in groups]

    def _batch(self, pairs: list[tuple[list[int], list[int]]]) -> Batch:
        """The translator's own ids: tformer's <pad> 0, <sos> 2, <eos> 3, or an Opus-MT model's."""
        t = self.translator
        return make_batch(pairs, t.pad_id, t.start_id, t.eos_id)

    @staticmethod
    def count_tokens(batch: Batch) -> int:
        return batch.n_tokens

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, int]:
        batch = batch.to(next(model.parameters()).device)
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = self.cross_entropy(
            logits, batch.tgt_out, ignore_index=batch.pad, label_smoothing=self.label_smoothing, reduction="sum"
        )
        return loss, batch.n_tokens

    def evaluate(self, model) -> dict:
        """Validation loss, BLEU and chrF; ``{}`` when there is no validation data (never a made-up 0)."""
        if not self.valid_ids:
            return {}
        total, tokens = 0.0, 0
        for g in token_budget_batches(self.valid_ids, self.batch_tokens, seed=0, shuffle=False):
            batch = self._batch([self.valid_ids[i] for i in g]).to(next(model.parameters()).device)
            logits = model(batch.src, batch.tgt_in)
            total += float(sequence_cross_entropy(logits, batch.tgt_out, ignore_index=batch.pad, reduction="sum"))
            tokens += batch.n_tokens
        result = {"val_loss": total / tokens}
        if self.bleu_sources:
            scores = self.translator.evaluate(self.bleu_sources, self.bleu_refs, beam=self.beam)
            result.update(bleu=scores["bleu"], chrf=scores["chrf"])
        return result

    def save_extra(self, directory) -> None:
        self.translator.save_tokenizers(directory)
