"""BERT pretraining data and task: documents → NSP sentence pairs → MLM masking → MLM + NSP loss.

**Documents.** A text file where blank lines separate documents and consecutive lines are consecutive
sentences (Tiny Shakespeare's speeches work as is); a ``.tsv`` file (Tatoeba) gives its first column
as one long document. Each line is one sentence; BERT packs several sentences per segment, we keep
one per segment, which keeps the NSP labels exact and the code short. A corpus of any size is read as a stream and
tokenized once into memory-mapped shards with a sentence index (:mod:`tformer.data.sentences`, the same rules);
:func:`read_sentence_documents` reads a small file whole, in memory.

**NSP** (:func:`nsp_arrays`). For every sentence A that has a successor in its document: with
probability ½ B is that successor (label 0, "B follows A", as in BERT), otherwise B is a random
sentence from another document (label 1) — from the same document, but never A or its successor,
when there is only one. An epoch's pairs are three arrays; a batch (:class:`PairBatch`) reads its sentences from
the corpus when it is trained on (:meth:`BertPretrainTask.fetch`, in the Trainer's feed thread).

**MLM** (:class:`MLMCollator`). Each non-special token is picked with probability 15%; a picked token
becomes ``[MASK]`` (80%), a random non-special token (10%) or stays (10%). Labels hold the original
id at picked positions and -100 (ignored) everywhere else. All randomness comes from a
``torch.Generator`` seeded per (seed, epoch, batch), so epochs are reproducible and resume is exact.

**Loss.** ``count_tokens`` is the number of MLM-labelled tokens. ``loss`` returns
``MLM summed over those tokens + NSP mean × that count``, so what the Trainer divides by the count is
``MLM mean + NSP mean`` — BERT's pretraining loss — and ``tokens/s`` counts predicted tokens.

Dimension legend: B batch, T longest sequence in the batch, D model dim, V vocabulary, N picked tokens.
"""

from __future__ import annotations

import functools
import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tformer.data.sentences import Sentences, held_out_sentences
from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward
from tformer.text import read_lines
from tformer.tokenizers import WordPieceTokenizer

__all__ = [
    "IGNORE",
    "read_sentence_documents",
    "split_documents",
    "nsp_pairs",
    "nsp_arrays",
    "BertBatch",
    "collate",
    "MLMCollator",
    "PairBatch",
    "BertPretrainTask",
]

IGNORE = -100  # label of positions that carry no loss
_DOCS_AT_ONCE = 1 << 16  # documents whose pairs are drawn from one list of their sizes
_COUNTS_KEPT = 4096  # MLM counts of fetched batches kept until the Trainer asks for them


# ------------------------------------------------------------------------------------------ documents


def read_sentence_documents(path: str | Path) -> list[list[str]]:
    """Documents (lists of sentences) from a text file (blank line = new document) or a ``.tsv`` (first column)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--data {str(path)!r}: no such file")
    lines = [line.strip() for line in read_lines(path)]  # strict UTF-8: a bad byte is named by file and line
    if path.suffix == ".tsv":
        column = [line.split("\t")[0].strip() for line in lines if line]
        return [
            [s for k, s in enumerate(column) if s and (k == 0 or s != column[k - 1])]
        ]  # Tatoeba repeats a source per translation
    docs, current = [], []
    for line in lines + [""]:
        if line:
            current.append(line)
        elif current:
            docs.append(current)
            current = []
    return docs


def split_documents(docs: list[list[str]], valid: float | int = 0.05) -> tuple[list[list[str]], list[list[str]]]:
    """Hold out the last ``valid`` sentences (a fraction, or a count when >= 1) of the text, cutting a document if
    needed; at least 3 for a fraction > 0 (NSP needs them), none for ``valid=0`` (no validation data)."""
    n_valid = held_out_sentences(sum(len(d) for d in docs), valid)
    train, left = [list(d) for d in docs], n_valid
    held: list[list[str]] = []
    while left:
        last = train[-1]
        take = min(left, len(last))
        held.insert(0, last[len(last) - take :])
        del last[len(last) - take :]
        if not last:
            train.pop()
        left -= take
    return train, held


def nsp_pairs(doc_sizes: Sequence[int], seed: int = 0) -> list[tuple[int, int, int]]:
    """``(a, b, label)`` over flat sentence indices (documents laid end to end); label 0 = B follows A, 1 = random.
    The pairs of :func:`nsp_arrays`, as a list (for a small corpus: the lessons)."""
    a, b, labels = nsp_arrays(doc_sizes, seed)
    return list(zip(a.tolist(), b.tolist(), labels.tolist()))


def nsp_arrays(doc_sizes: Sequence[int] | np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The NSP pairs as three arrays ``(a, b, label)`` (int64, int64, int8), shuffled: one pair for each sentence A
    that has a successor in its document (see the module), drawn from ``random.Random(seed)``: the draws, and so
    the pairs and their order, of a list of pairs built and shuffled with that generator, held as arrays."""
    sizes = np.asarray(doc_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total < 3:
        raise ValueError(f"NSP needs at least 3 sentences, got {total}")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rng = random.Random(seed)
    a_out, b_out, labels = array("q"), array("q"), array("b")
    for lo in range(0, len(sizes), _DOCS_AT_ONCE):  # a chunk of documents at a time: no list of them all
        for start, size in zip(starts[lo : lo + _DOCS_AT_ONCE].tolist(), sizes[lo : lo + _DOCS_AT_ONCE].tolist()):
            for a in range(start, start + size - 1):
                if rng.random() < 0.5:
                    a_out.append(a)
                    b_out.append(a + 1)
                    labels.append(0)
                    continue
                for _ in range(10):  # another document, as BERT does
                    b = rng.randrange(total)
                    if not start <= b < start + size:
                        break
                else:  # (almost) everything is this document: any sentence but A and its successor
                    b = rng.randrange(total - 2)
                    b += 2 if b >= a else 0
                a_out.append(a)
                b_out.append(b)
                labels.append(1)
    order = array("q", range(len(a_out)))
    rng.shuffle(order)  # the draws of shuffling the list of pairs itself: the same order
    at = np.frombuffer(order, dtype=np.int64)
    if not len(at):
        return nsp_empty()
    return (
        np.frombuffer(a_out, dtype=np.int64)[at],
        np.frombuffer(b_out, dtype=np.int64)[at],
        np.frombuffer(labels, dtype=np.int8)[at],
    )


# --------------------------------------------------------------------------------------------- batches


@dataclass
class BertBatch:
    ids: torch.Tensor  # (B, T)
    token_type_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T) bool, True = real token
    labels: torch.Tensor  # (B,) NSP label (0 = B follows A) or class id
    mlm_labels: torch.Tensor | None = None  # (B, T) original id at picked positions, IGNORE elsewhere

    def to(self, device) -> BertBatch:
        return replace(self, **{f.name: t.to(device) for f in fields(self) if (t := getattr(self, f.name)) is not None})

    def pin_memory(self) -> BertBatch:
        """Each tensor in pinned memory (the Trainer's feed, for a copy to the GPU that does not wait)."""
        return replace(
            self, **{f.name: t.pin_memory() for f in fields(self) if (t := getattr(self, f.name)) is not None}
        )


def collate(rows: list[tuple[list[int], list[int], int]], pad_id: int) -> BertBatch:
    """``(ids, token_type_ids, label)`` rows → a :class:`BertBatch` padded to the longest row."""
    width = max(len(ids) for ids, _, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    types = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)  # (B, T)
    for i, (row, segs, _) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        types[i, : len(segs)] = torch.tensor(segs)
        mask[i, : len(row)] = True
    return BertBatch(ids, types, mask, torch.tensor([label for _, _, label in rows]))


class MLMCollator:
    """BERT's masking: pick ``pick`` of the non-special tokens; of those, ``mask`` → [MASK], ``random`` → a random token, the rest stay."""

    def __init__(
        self, tokenizer: WordPieceTokenizer, pick: float = 0.15, mask: float = 0.8, random: float = 0.1
    ) -> None:
        if not 0 < pick <= 1 or mask < 0 or random < 0 or mask + random > 1:
            raise ValueError(
                f"need 0 < pick <= 1 and mask, random >= 0 with mask + random <= 1; got {pick}, {mask}, {random}"
            )
        self.pick, self.mask, self.random = pick, mask, random
        self.mask_id = tokenizer.mask_id
        self.special_ids = torch.tensor(tokenizer.special_ids)
        specials = set(tokenizer.special_ids)
        self.candidates = torch.tensor(
            [i for i in range(tokenizer.vocab_size) if i not in specials]
        )  # random replacements

    def __call__(self, batch: BertBatch, generator: torch.Generator) -> BertBatch:
        ids = batch.ids
        maskable = ~torch.isin(ids, self.special_ids)  # (B, T); padding is a special token too
        picked = (torch.rand(ids.shape, generator=generator) < self.pick) & maskable
        labels = torch.where(picked, ids, torch.full_like(ids, IGNORE))  # (B, T)
        roll = torch.rand(ids.shape, generator=generator)  # one draw decides [MASK] / random / keep
        to_mask = picked & (roll < self.mask)
        to_random = picked & (roll >= self.mask) & (roll < self.mask + self.random)
        random_ids = self.candidates[torch.randint(len(self.candidates), ids.shape, generator=generator)]  # (B, T)
        masked = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        masked = torch.where(to_random, random_ids, masked)
        return BertBatch(masked, batch.token_type_ids, batch.attention_mask, batch.labels, labels)


class LazyBatches(Sequence):
    """``len`` and indexing (ints and slices, as the Trainer uses them) over batches built on demand."""

    def __init__(self, n: int, make) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.make(i) for i in range(*index.indices(self.n))]
        if not -self.n <= index < self.n:
            raise IndexError(index)
        return self.make(index % self.n)


class PairBatch:
    """A batch of NSP pairs whose sentences are not read yet: :meth:`BertPretrainTask.fetch` reads them from the
    corpus, lays them out and masks them into a :class:`BertBatch` (the Trainer's feed does, in a thread, just before
    the step); reading a field (``ids``, ``mlm_labels``, ...) or :meth:`to` reads it too, once. ``key``: which batch of
    which epoch it is."""

    def __init__(self, read: Callable[[], BertBatch], key: tuple[int, int]) -> None:
        self._read, self.key = read, key
        self._batch: BertBatch | None = None

    def read(self) -> BertBatch:
        if self._batch is None:
            self._batch = self._read()
        return self._batch

    def to(self, device) -> BertBatch:
        return self.read().to(device)

    @property
    def ids(self) -> torch.Tensor:
        return self.read().ids

    @property
    def token_type_ids(self) -> torch.Tensor:
        return self.read().token_type_ids

    @property
    def attention_mask(self) -> torch.Tensor:
        return self.read().attention_mask

    @property
    def labels(self) -> torch.Tensor:
        return self.read().labels

    @property
    def mlm_labels(self) -> torch.Tensor | None:
        return self.read().mlm_labels


# ------------------------------------------------------------------------------------------------ task


class BertPretrainTask:
    r"""MLM + NSP pretraining of a :class:`~tformer.Bert` on documents (see the module docstring).

    ``train_docs`` and ``valid_docs`` are :class:`~tformer.data.sentences.Sentences` (a prepared corpus, its ids
    memory-mapped) or documents in memory (lists of sentences, encoded here). The task holds the documents' sizes and
    an epoch's NSP pairs as arrays (about 17 bytes a pair), no Python object per sentence or pair: a batch is a
    :class:`PairBatch`, its sentences read from the corpus when it is trained on (:meth:`fetch`).
    """

    metric, higher_is_better = "val_loss", False
    rate_unit = "masked tok"  # count_tokens counts the MLM-labelled tokens (the loss is summed over them)
    # the MLM loss, a kernel the Trainer chooses (fused CPU backward; TrainConfig(fast=False): the reference)
    cross_entropy = staticmethod(sequence_cross_entropy)

    def __init__(
        self,
        tokenizer: WordPieceTokenizer,
        train_docs: list[list[str]] | Sentences,
        valid_docs: list[list[str]] | Sentences,
        max_len: int = 128,
        batch_size: int = 32,
        seed: int = 0,
        mlm_pick: float = 0.15,
    ) -> None:
        self.tokenizer, self.max_len, self.batch_size, self.seed = tokenizer, max_len, batch_size, seed
        self.collator = MLMCollator(tokenizer, pick=mlm_pick)
        self.train = train_docs if isinstance(train_docs, Sentences) else _encoded(tokenizer, train_docs)
        self.valid = valid_docs if isinstance(valid_docs, Sentences) else _encoded(tokenizer, valid_docs)
        self.train_sizes = self.train.document_sizes()  # (documents,) int64
        valid_sizes = self.valid.document_sizes()
        self.valid_pairs = nsp_arrays(valid_sizes, seed=12345) if len(valid_sizes) else nsp_empty()
        self._counts: dict[tuple[int, int], int] = {}  # MLM tokens of the batches fetched, until counted

    def _batch(self, sentences: Sentences, pairs, start: int, seed: int) -> BertBatch:
        """The pairs ``start`` to ``start + batch_size`` read from ``sentences``, laid out, padded and masked with a
        generator seeded with ``seed``. A sentence is read up to ``max_len`` ids: the pair trims it further."""
        a, b, labels = (p[start : start + self.batch_size].tolist() for p in pairs)
        rows = [
            (
                *self.tokenizer.pair(
                    sentences.ids(i, self.max_len).tolist(), sentences.ids(j, self.max_len).tolist(), self.max_len
                ),
                label,
            )
            for i, j, label in zip(a, b, labels)
        ]
        return self.collator(collate(rows, self.tokenizer.pad_id), torch.Generator().manual_seed(seed))

    @property
    def valid_batches(self) -> LazyBatches:
        """The held-out pairs' batches, the same at every evaluation (read from the corpus when used)."""
        n = len(self.valid_pairs[0])

        def make(i: int) -> BertBatch:
            k = i * self.batch_size
            return self._batch(self.valid, self.valid_pairs, k, 12345 + k)

        return LazyBatches((n + self.batch_size - 1) // self.batch_size, make)

    def train_batches(self, epoch: int) -> LazyBatches:
        """Fresh NSP pairs and masks every epoch, the same ones for the same (seed, epoch): :class:`PairBatch`\\ es."""
        seed = self.seed * 1_000_003 + epoch
        pairs = nsp_arrays(self.train_sizes, seed)

        def make(i: int) -> PairBatch:
            return PairBatch(
                functools.partial(self._batch, self.train, pairs, i * self.batch_size, seed * 100_003 + i), (seed, i)
            )

        return LazyBatches((len(pairs[0]) + self.batch_size - 1) // self.batch_size, make)

    def fetch(self, batch: PairBatch | BertBatch) -> BertBatch:
        """The batch's sentences read, laid out and masked (on the CPU); its MLM token count kept for
        :meth:`count_tokens`, which the Trainer asks of the same batch next."""
        if not isinstance(batch, PairBatch):
            return batch
        built = batch.read()
        if len(self._counts) >= _COUNTS_KEPT:  # counts never asked for (a run stopped mid-epoch): the oldest go
            self._counts.pop(next(iter(self._counts)), None)
        self._counts[batch.key] = _count(built)
        return built

    def count_tokens(self, batch: PairBatch | BertBatch) -> int:
        """The MLM-labelled tokens of ``batch`` (at least 1): the loss is summed over them."""
        if isinstance(batch, PairBatch):
            counted = self._counts.pop(batch.key, None)
            return counted if counted is not None else _count(batch.read())
        return _count(batch)

    @staticmethod
    def _outputs(model, batch: BertBatch):
        """MLM logits at the picked positions only (N, V), their labels (N,), NSP logits (B, 2)."""
        labels = _mlm_labels(batch)  # (B, T)
        picked = labels != IGNORE  # (B, T)
        hidden = model(
            batch.ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask
        )  # (B, T, D): the model, maybe compiled
        mlm_logits, nsp_logits = model.pretraining_heads(hidden, picked)
        return mlm_logits, labels[picked], nsp_logits  # (N, V), (N,), (B, 2)

    def loss(self, model, batch: PairBatch | BertBatch) -> tuple[torch.Tensor, int]:
        """``batch``: a :class:`PairBatch` (read here), or its :class:`BertBatch` already fetched."""
        built = batch.read() if isinstance(batch, PairBatch) else batch
        built = built.to(next(model.parameters()).device)
        mlm_logits, mlm_labels, nsp_logits = self._outputs(model, built)
        n = _count(built)
        mlm = self.cross_entropy(mlm_logits[None], mlm_labels[None], reduction="sum")
        nsp = F.cross_entropy(nsp_logits.float(), built.labels)
        return mlm + nsp * n, n

    def evaluate(self, model) -> dict:
        """Held-out MLM and NSP loss and accuracy; ``{}`` when nothing is held out (never a loss of 0)."""
        batches = self.valid_batches
        if not batches:
            return {}
        device = next(model.parameters()).device
        mlm_loss = mlm_right = n_mlm = nsp_loss = nsp_right = n_seq = 0.0
        for batch in batches:
            batch = batch.to(device)
            mlm_logits, mlm_labels, nsp_logits = self._outputs(model, batch)
            mlm_loss += float(F.cross_entropy(mlm_logits.float(), mlm_labels, reduction="sum"))
            mlm_right += float((mlm_logits.argmax(-1) == mlm_labels).sum())
            n_mlm += len(mlm_labels)
            nsp_loss += float(F.cross_entropy(nsp_logits.float(), batch.labels, reduction="sum"))
            nsp_right += float((nsp_logits.argmax(-1) == batch.labels).sum())
            n_seq += len(batch.labels)
        mlm, nsp = mlm_loss / max(n_mlm, 1), nsp_loss / max(n_seq, 1)
        return {
            "val_loss": mlm + nsp,
            "mlm_loss": mlm,
            "nsp_loss": nsp,
            "mlm_acc": mlm_right / max(n_mlm, 1),
            "nsp_acc": nsp_right / max(n_seq, 1),
        }

    def save_extra(self, directory) -> None:
        self.tokenizer.save(directory)


def nsp_empty() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """No pairs, as :func:`nsp_arrays` gives them."""
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)


def _encoded(tokenizer: WordPieceTokenizer, docs: list[list[str]]) -> Sentences:
    """Documents of sentences in memory, encoded (one call for all)."""
    flat = iter(tokenizer.encode_batch([s for d in docs for s in d]))
    return Sentences.of([[next(flat) for _ in d] for d in docs])


def _count(batch: BertBatch) -> int:
    return max(int((_mlm_labels(batch) != IGNORE).sum()), 1)


def _mlm_labels(batch: BertBatch) -> torch.Tensor:
    """The MLM labels of a pretraining batch (a classification batch has none)."""
    if batch.mlm_labels is None:
        raise ValueError("a pretraining batch needs mlm_labels (this looks like a classification batch)")
    return batch.mlm_labels
