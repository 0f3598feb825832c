"""Sequence classification: a linear head on the pooled ``[CLS]`` vector, fine-tuned on ``text<TAB>label``.

    text ─ [CLS] text [SEP] ─ Bert ─ hidden[:, 0] ─ pooler (dense, tanh) ─ dropout ─ Linear ─ (B, num_labels)

Labels are strings in the data; their sorted list is saved as ``labels.json`` in the model directory
(id = position in the list), next to ``tokenizer.json`` and the weights. ``count_tokens`` is the number
of sequences, so the Trainer's loss is the mean cross-entropy per sentence.

The real example: English-vs-French language identification, one side of each sampled Tatoeba pair
(:func:`langid_examples`), so a sentence and its translation never both appear.

Dimension legend: B batch, T tokens, L number of labels.
"""

from __future__ import annotations

import collections
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F

from tformer.bert.pretraining import BertBatch, collate
from tformer.files import atomic_write
from tformer.hf.heads import LABELS_FILE, UNTRAINED_MLM, saved_labels
from tformer.loader import Loaded, load
from tformer.models.bert import Bert
from tformer.outputs import write_output
from tformer.readers import read_json_object
from tformer.text import check_texts, read_lines, read_tsv
from tformer.tokenizers import WordPieceTokenizer

__all__ = [
    "LABELS_FILE",
    "read_labelled_tsv",
    "split_examples",
    "ClassifyTask",
    "TextClassifier",
    "langid_examples",
    "write_tsv",
]


def read_labelled_tsv(path: str | Path) -> list[tuple[str, str]]:
    """``text<TAB>label`` lines → (text, label); blank lines skipped. Any other number of columns is refused with the
    file and line (a third column is a tab inside the text, or another format: the text would hold it)."""
    examples = []
    for lineno, line in enumerate(read_lines(path), 1):  # strict UTF-8: a bad byte is named by file and line
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
            got = f"{len(cols)} columns" if len(cols) != 2 else "an empty column"
            raise ValueError(f"{path}:{lineno}: expected 'text<TAB>label' (2 columns), got {got}: {line[:60]!r}")
        examples.append((cols[0].strip(), cols[1].strip()))
    return examples


def label_note(examples: list[tuple[str, str]], where: str) -> str | None:
    """A note when most labels occur once: the columns are likely the other way round (``label<TAB>text``)."""
    counts = collections.Counter(label for _, label in examples)
    once = sum(1 for n in counts.values() if n == 1)
    if len(counts) > 2 and once > len(counts) / 2:
        return (
            f"note: {where}: {once} of its {len(counts)} labels occur once, so held-out examples have labels never "
            "trained on: is each line text<TAB>label (the label second)?"
        )
    return None


def split_examples(examples: list, valid: float | int = 0.1, seed: int = 0) -> tuple[list, list]:
    """Shuffle (seeded) and hold out ``valid`` examples (a fraction, or a count when >= 1; at least one for a
    fraction > 0, none for ``valid=0``: no validation data)."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_valid = int(valid) if valid >= 1 or valid == 0 else max(round(valid * len(shuffled)), 1)
    if n_valid >= len(shuffled):
        raise ValueError(f"valid={valid} leaves no training examples out of {len(shuffled)}")
    return shuffled[n_valid:], shuffled[:n_valid]


def _batch(tokenizer: WordPieceTokenizer, texts: list[str], label_ids: list[int], max_len: int) -> BertBatch:
    rows = [(*tokenizer.single(ids, max_len), y) for ids, y in zip(tokenizer.encode_batch(texts), label_ids)]
    return collate(rows, tokenizer.pad_id)


class ClassifyTask:
    """Fine-tuning of a :class:`~tformer.Bert` with ``num_labels = len(labels)`` on (text, label) examples."""

    metric, higher_is_better = "accuracy", True
    leaves_parameters_unused = True  # the pretraining heads (MLM, NSP): DDP must not wait for their gradients
    rate_unit = "examples"  # count_tokens counts examples (the loss is per example)

    def __init__(
        self,
        tokenizer: WordPieceTokenizer,
        labels: list[str],
        train: list[tuple[str, str]],
        valid: list[tuple[str, str]],
        max_len: int = 128,
        batch_size: int = 32,
        seed: int = 0,
        untrained_mlm: bool = False,
    ) -> None:
        self.untrained_mlm = untrained_mlm  # a model made from scratch: its MLM head never trains (fill-mask refuses)
        self.tokenizer, self.labels, self.max_len, self.batch_size, self.seed = (
            tokenizer,
            labels,
            max_len,
            batch_size,
            seed,
        )
        index = {label: i for i, label in enumerate(labels)}
        unknown = sorted({y for _, y in [*train, *valid]} - set(index))
        if unknown:
            raise ValueError(f"labels {unknown[:5]} are not in the label set {labels[:10]}")
        self.train = [(text, index[y]) for text, y in train]
        self.valid_batches = [
            _batch(tokenizer, [t for t, _ in chunk], [index[y] for _, y in chunk], max_len)
            for chunk in (valid[k : k + batch_size] for k in range(0, len(valid), batch_size))
        ]

    def train_batches(self, epoch: int) -> list[BertBatch]:
        order = list(range(len(self.train)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        chunks = [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        return [
            _batch(self.tokenizer, [self.train[i][0] for i in c], [self.train[i][1] for i in c], self.max_len)
            for c in chunks
        ]

    @staticmethod
    def count_tokens(batch: BertBatch) -> int:
        return len(batch.labels)

    def loss(self, model, batch: BertBatch) -> tuple[torch.Tensor, int]:
        batch = batch.to(next(model.parameters()).device)
        hidden = model(
            batch.ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask
        )  # (B, T, D): the model, maybe compiled
        logits = model.classifier(model.pool(hidden))  # (B, L), as model.classify
        return F.cross_entropy(logits.float(), batch.labels, reduction="sum"), len(batch.labels)

    def evaluate(self, model) -> dict:
        """Validation loss and accuracy; ``{}`` when nothing is held out (never an accuracy of 0)."""
        if not self.valid_batches:
            return {}
        device = next(model.parameters()).device
        total = right = n = 0.0
        for batch in self.valid_batches:
            batch = batch.to(device)
            logits = model.classify(
                batch.ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask
            )  # (B, L)
            total += float(F.cross_entropy(logits.float(), batch.labels, reduction="sum"))
            right += float((logits.argmax(-1) == batch.labels).sum())
            n += len(batch.labels)
        return {"val_loss": total / max(n, 1), "accuracy": right / max(n, 1)}

    def save_extra(self, directory) -> None:
        self.tokenizer.save(directory)
        untrained = {UNTRAINED_MLM: True} if self.untrained_mlm else {}
        text = json.dumps({"labels": self.labels, **untrained}, indent=2, ensure_ascii=False) + "\n"
        atomic_write(Path(directory) / LABELS_FILE, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


@dataclass
class TextClassifier:
    model: Bert
    tokenizer: WordPieceTokenizer
    labels: list[str]

    @classmethod
    def load(cls, directory: str | Path, flag: str | None = None) -> TextClassifier:
        """The classifier saved by ``tformer train classify`` in ``directory`` (a run's: its best model), through
        :func:`tformer.load` (``flag``: the argument its messages name, ``--model``)."""
        return cls.from_loaded(load(directory, family="bert", flag=flag))

    @classmethod
    def from_loaded(cls, loaded: Loaded) -> TextClassifier:
        """A :class:`TextClassifier` of a BERT :func:`tformer.load` read, with the labels of its ``labels.json`` (a
        Hugging Face sequence classifier: its ``config.json``'s ``id2label``)."""
        directory = loaded.directory
        path, labels = directory / LABELS_FILE, saved_labels(directory)
        if labels is None and loaded.kind.source == "hf":  # transformers' BertForSequenceClassification
            path, labels = directory / "config.json", _hf_labels(loaded)
        elif labels is None:
            raise FileNotFoundError(
                f"{str(path)!r} is missing: {str(loaded.kind.path)!r} is not a `tformer train classify` model"
            )
        model, tokenizer = loaded.model, cast(WordPieceTokenizer, loaded.require_tokenizer())  # a BERT's: WordPiece
        assert isinstance(model, Bert)
        if len(labels) != model.config.num_labels:
            raise ValueError(
                f"labels file {str(path)!r} names {len(labels)} labels, but the model's config.json has "
                f"num_labels={model.config.num_labels}"
            )
        return cls(model, tokenizer, labels)

    @torch.no_grad()
    def predict(self, texts: list[str]) -> list[tuple[str, float]]:
        """(label, probability) of the most likely label for each text."""
        texts = check_texts(texts, "texts")  # a str, or a list of them; no lone surrogate, no NUL
        self.model.eval()
        batch = _batch(self.tokenizer, texts, [0] * len(texts), self.model.config.max_len)
        batch = batch.to(next(self.model.parameters()).device)
        probs = (
            self.model.classify(batch.ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask)
            .float()
            .softmax(-1)
        )  # (B, L)
        best = probs.max(-1)
        return [(self.labels[i], p) for i, p in zip(best.indices.tolist(), best.values.tolist())]


def _hf_labels(loaded: Loaded) -> list[str]:
    """A Hugging Face sequence classifier's labels: its ``config.json``'s ``id2label``, in id order; a directory without
    ``classifier.*`` weights (an encoder, a pretraining checkpoint) has no trained head to label with: one line."""
    from tformer.hf.directory import weight_names

    where = str(loaded.kind.path)
    if not any(name.startswith("classifier.") for name in weight_names(loaded.directory)):
        raise ValueError(
            f"{where!r} has no classifier.* weights: not a sequence classifier (BertForSequenceClassification)"
        )
    config = loaded.directory / "config.json"
    id2label = read_json_object(config, "config file").get("id2label")
    labels = [id2label.get(str(i)) for i in range(len(id2label))] if isinstance(id2label, dict) else []
    if not labels or not all(isinstance(x, str) for x in labels):  # (transformers writes ids as strings)
        raise ValueError(
            f"config file {str(config)!r}: id2label must name the labels of ids 0, 1, ..., got {id2label!r}"
        )
    return [str(x) for x in labels]


def langid_examples(tatoeba: str | Path, n: int = 20000, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (sentence, "en"|"fr") examples, half each, from distinct Tatoeba pairs; shuffled, seeded."""
    pairs = read_tsv(tatoeba)
    if n < 2 or n > len(pairs):
        raise ValueError(f"n must be between 2 and the number of pairs ({len(pairs)}), got {n}")
    rng = random.Random(seed)
    chosen = rng.sample(range(len(pairs)), n)
    half = n // 2
    examples = [(pairs[i][0], "en") for i in chosen[:half]] + [(pairs[i][1], "fr") for i in chosen[half:]]
    rng.shuffle(examples)
    return examples


def write_tsv(examples: list[tuple[str, str]], path: str | Path) -> None:
    """Write (text, label) examples as ``text<TAB>label`` lines (atomically)."""
    text = "".join(f"{t}\t{y}\n" for t, y in examples)
    write_output(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
