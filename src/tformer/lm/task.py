"""The language-model task: what the :class:`~tformer.training.trainer.Trainer` trains, and how a stream is scored.

* :class:`LMTask`: random contiguous blocks of ``max_len + 1`` tokens (input = the first
  ``max_len``, labels = the same shifted by one), drawn from a generator seeded per epoch so that
  resuming is exact.
* :func:`evaluate_stream` scores a stream in non-overlapping blocks: loss per token, perplexity and
  bits per character (char tokenizer) or per byte (BPE).

Dimension legend: B batch, T block size, V vocabulary size, N tokens in a stream.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tformer.data import TokenStream
from tformer.fast.chunked_loss import chunk_rows, linear_cross_entropy, plain_head
from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward

IGNORE = -100  # the label of a position past the end of the stream (skipped by the loss)

__all__ = ["LMTask", "evaluate_stream"]


@torch.no_grad()
def evaluate_stream(
    model,
    ids: torch.Tensor | TokenStream,
    unit_lengths: torch.Tensor | None,
    max_len: int | None = None,
    batch_size: int = 32,
    max_blocks: int | None = None,
) -> dict:
    """Loss per token, perplexity and bits per unit (character or byte; without ``unit_lengths``, a Hugging Face
    tokenizer's, none) over ``ids`` (N,): a tensor, or a stream memory-mapped from shards.

    The stream is cut into non-overlapping blocks of ``max_len`` predictions (the last one
    shorter); with ``max_blocks``, that many blocks evenly spaced over the stream are scored.
    """
    if len(ids) < 2:
        raise ValueError(f"nothing to score: the text has {len(ids)} token(s), at least 2 are needed")
    stream = ids if isinstance(ids, TokenStream) else TokenStream.of(ids)
    max_len = max_len or model.config.max_len
    device = next(model.parameters()).device
    starts = torch.arange(0, max(len(ids) - 1, 1), max_len)  # every block predicts ids[s+1 : s+T+1]
    if max_blocks is not None and len(starts) > max_blocks:
        starts = starts[torch.linspace(0, len(starts) - 1, max_blocks).long()]
    nats, tokens, units = 0.0, 0, 0
    was_training = model.training
    model.eval()
    for chunk in starts.split(batch_size):
        rows = stream.rows(chunk, max_len + 1, fill=IGNORE)  # (B, T+1), past the end: IGNORE
        x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
        x = x.clamp(min=0)  # positions past the end: any real id (their labels are ignored)
        nats += float(sequence_cross_entropy(model(x), y, ignore_index=IGNORE, reduction="sum"))
        real = y != IGNORE
        tokens += int(real.sum())
        if unit_lengths is not None:
            units += int(unit_lengths.to(device)[y.clamp(min=0)][real].sum())
    model.train(was_training)
    loss = nats / max(tokens, 1)
    result = {"val_loss": loss, "val_ppl": math.exp(loss) if loss < 700 else math.inf, "tokens": tokens}
    if unit_lengths is not None:
        result["val_bpc"] = nats / math.log(2) / max(units, 1)
    return result


class LMTask:
    r"""Next-token prediction on random contiguous blocks of a token stream (for the Trainer).

    The streams are tensors or :class:`~tformer.data.TokenStream`\ s memory-mapped from prepared shards (a corpus of
    any size: only the blocks of a batch are read). A "batch" is the (B,) tensor of block starts; :meth:`fetch`
    reads its blocks (the Trainer may call it ahead, in a background thread), :meth:`loss` trains on them. Each epoch is
    ``batches_per_epoch`` batches drawn from a generator seeded with (seed, epoch), so a resumed
    run sees exactly the batches the uninterrupted run would have seen.
    """

    metric, higher_is_better = "val_loss", False

    def __init__(
        self,
        tokenizer,
        train_ids: torch.Tensor | TokenStream,
        val_ids: torch.Tensor | TokenStream,
        max_len: int,
        batch_size: int,
        batches_per_epoch: int = 200,
        eval_blocks: int | None = 400,
        seed: int = 0,
    ) -> None:
        if len(train_ids) < max_len + 1:
            raise ValueError(
                f"the training text has {len(train_ids)} tokens, fewer than max_len + 1 = {max_len + 1}; "
                "use a smaller --max-len or more data"
            )
        self.tokenizer = tokenizer
        self.train_ids = train_ids if isinstance(train_ids, TokenStream) else TokenStream.of(train_ids)
        self.val_ids = val_ids if isinstance(val_ids, TokenStream) else TokenStream.of(val_ids)
        self.max_len, self.batch_size, self.batches_per_epoch = max_len, batch_size, batches_per_epoch
        self.eval_blocks, self.seed = eval_blocks, seed
        # bits per character or byte: tformer's own tokenizers know each id's length; a Hugging Face one does not
        self.unit_lengths = torch.tensor(tokenizer.unit_lengths()) if tokenizer.unit is not None else None

    # the training loss, a kernel the Trainer chooses (fused CPU backward; TrainConfig(fast=False): the reference)
    cross_entropy = staticmethod(sequence_cross_entropy)
    # a batch whose logits pass LOGITS_AT_ONCE is projected and scored a chunk of positions at a time, its logits never
    # whole (tformer.fast.chunked_loss; TrainConfig(fast=False): whole, the reference)
    chunked = True

    def train_batches(self, epoch: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        high = len(self.train_ids) - self.max_len  # last start whose block of T+1 fits, plus one
        return list(torch.randint(high, (self.batches_per_epoch, self.batch_size), generator=g))

    def count_tokens(self, batch: torch.Tensor) -> int:
        return len(batch) * self.max_len

    def fetch(self, batch: torch.Tensor) -> torch.Tensor:
        """The blocks of ``batch`` (its starts), read from the stream → (B, T+1), on the CPU."""
        return self.train_ids.rows(batch, self.max_len + 1, fill=IGNORE)

    def loss(self, model, batch: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``batch``: the starts (B,), or their blocks (B, T+1) already fetched (and moved, by the Trainer)."""
        device = next(model.parameters()).device
        rows = batch if batch.dim() == 2 else self.fetch(batch)
        rows = rows.to(device, non_blocking=True)  # (B, T+1)
        labels = rows[:, 1:]  # (B, T) the input shifted by one
        output = plain_head(model) if self.chunked else None
        chunk = chunk_rows(labels.numel(), output.weight.shape[0]) if output is not None else None
        if chunk is not None and output is not None:  # the logits a chunk at a time (summed: every block is whole)
            hidden = model(rows[:, :-1], head=False)  # (B, T, D)
            softcap = model.config.final_softcap
            vocab = model.config.vocab_size  # the head's rows may be more (GPTConfig.vocab_multiple)
            loss = linear_cross_entropy(hidden, output.weight, labels, chunk, IGNORE, softcap=softcap, classes=vocab)
            return loss, labels.numel()
        logits = model(rows[:, :-1])  # (B, T, V)
        loss = self.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")  # every block is whole
        return loss, labels.numel()

    def evaluate(self, model) -> dict:
        """Validation loss, perplexity, bits per unit; ``{}`` when there is no validation text (never a 0)."""
        if len(self.val_ids) < 2:
            return {}
        result = evaluate_stream(model, self.val_ids, self.unit_lengths, self.max_len, max_blocks=self.eval_blocks)
        result.pop("tokens")
        return result

    def save_extra(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(directory)
