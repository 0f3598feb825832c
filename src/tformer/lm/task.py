"""Language modelling end to end: text → tokenizer → random blocks → training → perplexity → samples.

* Tokenizers: :class:`CharTokenizer` (one id per character, nanoGPT's Shakespeare setup) and
  :class:`ByteBPETokenizer` (GPT-2 style byte-level BPE trained with the ``tokenizers`` library).
  Both put the special tokens first: ``<unk>`` = 0, ``<pad>`` = 1, ``<|endoftext|>`` = 2, and share
  one small interface (``encode``, ``decode``, ``vocab_size``, ``unit_lengths``, ``save``, ``load``);
  :func:`load_lm_tokenizer` picks the right one from the files in a model directory.
* Data: :func:`read_documents` reads a text file, a folder of ``.txt`` files or a JSONL file with a
  ``"text"`` field; :func:`encode_documents` joins the documents with ``<|endoftext|>`` into one
  stream of ids; :func:`split_ids` keeps the last 10% for validation (as nanoGPT does).
* :class:`LMTask` is what the :class:`~tformer.training.trainer.Trainer` trains: random contiguous blocks of
  ``block_size + 1`` tokens (input = the first ``block_size``, labels = the same shifted by one),
  drawn from a generator seeded per epoch so that resuming is exact.
* :func:`evaluate_stream` scores a stream in non-overlapping blocks: loss per token, perplexity
  and bits per character (char tokenizer) or per byte (BPE).

Dimension legend: B batch, T block size, V vocabulary size, N tokens in a stream.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

import torch

from tformer.files import atomic_write
from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward

__all__ = [
    "SPECIALS", "UNK", "PAD", "EOT", "CharTokenizer", "ByteBPETokenizer", "train_lm_tokenizer", "load_lm_tokenizer",
    "read_documents", "encode_documents", "split_ids", "evaluate_stream", "LMTask", "TextStream",
]

SPECIALS = ["<unk>", "<pad>", "<|endoftext|>"]
UNK, PAD, EOT = range(3)


class CharTokenizer:
    """Character-level: the vocabulary is the set of characters of the training text, after the specials."""

    file_name = "char_tokenizer.json"

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos = SPECIALS + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int | None = None) -> "CharTokenizer":
        chars: set[str] = set()
        for text in texts:
            chars.update(text)
        return cls(chars)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, UNK) for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        """ids → text; ``<pad>`` is dropped, ``<unk>`` and ``<|endoftext|>`` are written out."""
        return "".join(self.itos[i] for i in ids if i != PAD)

    def unit_lengths(self) -> list[int]:
        """Characters per token (1 each, specials included), for bits per character."""
        return [1] * self.vocab_size

    def save(self, directory: str | Path) -> None:
        text = json.dumps({"type": "char", "tokens": self.itos}, ensure_ascii=False, indent=0)
        atomic_write(Path(directory) / self.file_name, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    @classmethod
    def load(cls, directory: str | Path) -> "CharTokenizer":
        tokens = json.loads((Path(directory) / cls.file_name).read_text(encoding="utf-8"))["tokens"]
        if tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"{directory}/{cls.file_name}: the vocabulary must start with {SPECIALS}")
        return cls(tokens[len(SPECIALS):])


class ByteBPETokenizer:
    """Byte-level BPE (GPT-2 style): any text encodes without ``<unk>``; decoding gives it back exactly."""

    file_name = "tokenizer.json"

    def __init__(self, tokenizer) -> None:
        for i, name in enumerate(SPECIALS):
            if tokenizer.token_to_id(name) != i:
                raise ValueError(f"tokenizer must have {name} at id {i}, got {tokenizer.token_to_id(name)}")
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 4096) -> "ByteBPETokenizer":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([i for i in ids if i != PAD], skip_special_tokens=False)

    def unit_lengths(self) -> list[int]:
        """Bytes per token (a byte-level symbol is one byte; a special token counts as one), for bits per byte."""
        return [1 if i < len(SPECIALS) else len(self.tokenizer.id_to_token(i)) for i in range(self.vocab_size)]

    def save(self, directory: str | Path) -> None:
        atomic_write(Path(directory) / self.file_name, lambda tmp: self.tokenizer.save(tmp))

    @classmethod
    def load(cls, directory: str | Path) -> "ByteBPETokenizer":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(Path(directory) / cls.file_name)))


TOKENIZERS = {"char": CharTokenizer, "bpe": ByteBPETokenizer}


def train_lm_tokenizer(kind: str, texts: list[str], vocab_size: int = 4096):
    """``kind`` "char" (vocab_size ignored) or "bpe"."""
    if kind not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {sorted(TOKENIZERS)}, got {kind!r}")
    return TOKENIZERS[kind].train(texts, vocab_size)


def load_lm_tokenizer(directory: str | Path):
    """The tokenizer saved in a model directory (``char_tokenizer.json`` or ``tokenizer.json``)."""
    for cls in TOKENIZERS.values():
        if (Path(directory) / cls.file_name).is_file():
            return cls.load(directory)
    names = " or ".join(c.file_name for c in TOKENIZERS.values())
    raise FileNotFoundError(f"{str(directory)!r} has no LM tokenizer ({names}); is it a `tformer train lm` run?")


# ------------------------------------------------------------------------------------------- data
def read_documents(path: str | Path) -> list[str]:
    """A UTF-8 text file (one document), a folder of ``.txt`` files, or a JSONL file with a ``"text"`` field."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise FileNotFoundError(f"--data {str(path)!r}: the folder holds no .txt files")
        return [f.read_text(encoding="utf-8") for f in files]
    if not path.is_file():
        raise FileNotFoundError(f"--data {str(path)!r}: no such file or folder")
    if path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise ValueError(f"{path}:{n}: each JSONL line must be an object with a string 'text' field")
                docs.append(record["text"])
        return docs
    return [path.read_text(encoding="utf-8")]


def encode_documents(tokenizer, documents: list[str]) -> torch.Tensor:
    """One stream of ids (N,): the documents joined with ``<|endoftext|>``."""
    ids: list[int] = []
    for i, doc in enumerate(documents):
        if i:
            ids.append(EOT)
        ids.extend(tokenizer.encode(doc))
    return torch.tensor(ids, dtype=torch.long)


def split_ids(ids: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation): the last ``val_fraction`` of the stream is the validation part (nanoGPT's split)."""
    n = int(len(ids) * (1 - val_fraction))
    return ids[:n], ids[n:]


def _blocks(ids: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """Rows ``ids[s : s + length]`` for each start s, right-padded with ``<pad>`` past the end → (B, length)."""
    index = starts[:, None] + torch.arange(length)  # (B, length)
    padded = torch.cat([ids, torch.full((length,), PAD, dtype=ids.dtype)])
    return padded[index]


@torch.no_grad()
def evaluate_stream(model, ids: torch.Tensor, unit_lengths: torch.Tensor, block_size: int | None = None,
                    batch_size: int = 32, max_blocks: int | None = None) -> dict:
    """Loss per token, perplexity and bits per unit (character or byte) over ``ids`` (N,).

    The stream is cut into non-overlapping blocks of ``block_size`` predictions (the last one
    shorter); with ``max_blocks``, that many blocks evenly spaced over the stream are scored.
    """
    block_size = block_size or model.config.max_len
    device = next(model.parameters()).device
    starts = torch.arange(0, max(len(ids) - 1, 1), block_size)  # every block predicts ids[s+1 : s+T+1]
    if max_blocks is not None and len(starts) > max_blocks:
        starts = starts[torch.linspace(0, len(starts) - 1, max_blocks).long()]
    nats, tokens, units = 0.0, 0, 0
    was_training = model.training
    model.eval()
    for chunk in starts.split(batch_size):
        rows = _blocks(ids, chunk, block_size + 1)  # (B, T+1)
        x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
        x = x.masked_fill(x == PAD, EOT)  # positions past the end: any real id (their labels are ignored)
        nats += float(sequence_cross_entropy(model(x), y, ignore_index=PAD, reduction="sum"))
        real = y != PAD
        tokens += int(real.sum())
        units += int(unit_lengths.to(device)[y][real].sum())
    model.train(was_training)
    loss = nats / max(tokens, 1)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 700)), "val_bpc": nats / math.log(2) / max(units, 1),
            "tokens": tokens}


class LMTask:
    """Next-token prediction on random contiguous blocks of a token stream (for the Trainer).

    A "batch" is the (B,) tensor of block starts; :meth:`loss` gathers the blocks. Each epoch is
    ``batches_per_epoch`` batches drawn from a generator seeded with (seed, epoch), so a resumed
    run sees exactly the batches the uninterrupted run would have seen.
    """

    metric, higher_is_better = "val_loss", False

    def __init__(self, tokenizer, train_ids: torch.Tensor, val_ids: torch.Tensor, block_size: int, batch_size: int,
                 batches_per_epoch: int = 200, eval_blocks: int | None = 400, seed: int = 0, compile: bool = False) -> None:
        if len(train_ids) < block_size + 1:
            raise ValueError(f"the training text has {len(train_ids)} tokens, fewer than block_size + 1 = {block_size + 1}; "
                             "use a smaller --block-size or more data")
        if len(val_ids) < 2:
            raise ValueError(f"the validation part has {len(val_ids)} tokens; give more data")
        self.tokenizer, self.train_ids, self.val_ids = tokenizer, train_ids, val_ids
        self.block_size, self.batch_size, self.batches_per_epoch = block_size, batch_size, batches_per_epoch
        self.eval_blocks, self.seed, self.compile = eval_blocks, seed, compile
        self.unit_lengths = torch.tensor(tokenizer.unit_lengths())
        self._compiled: tuple | None = None  # (model, torch.compile(model)): same parameters, compiled forward

    def train_batches(self, epoch: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        high = len(self.train_ids) - self.block_size  # last start whose block of T+1 fits, plus one
        return list(torch.randint(high, (self.batches_per_epoch, self.batch_size), generator=g))

    def count_tokens(self, batch: torch.Tensor) -> int:
        return len(batch) * self.block_size

    def _forward(self, model):
        if not self.compile:
            return model
        if self._compiled is None or self._compiled[0] is not model:
            self._compiled = (model, torch.compile(model))
        return self._compiled[1]

    def loss(self, model, batch: torch.Tensor) -> tuple[torch.Tensor, int]:
        device = next(model.parameters()).device
        rows = _blocks(self.train_ids, batch, self.block_size + 1).to(device)  # (B, T+1)
        logits = self._forward(model)(rows[:, :-1])  # (B, T, V)
        labels = rows[:, 1:]  # (B, T) the input shifted by one
        loss = sequence_cross_entropy(logits, labels, ignore_index=PAD, reduction="sum")
        return loss, int((labels != PAD).sum())

    def evaluate(self, model) -> dict:
        result = evaluate_stream(model, self.val_ids, self.unit_lengths, self.block_size, max_blocks=self.eval_blocks)
        result.pop("tokens")
        return result

    def save_extra(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(directory)


class TextStream:
    """Incremental decoding for streaming: ``push(id)`` returns the text that is now safe to print.

    Holds back a trailing incomplete UTF-8 character (byte-level BPE) and any tail that could be
    the start of a stop string; once a stop string appears, the text ends before it.
    """

    def __init__(self, tokenizer, stop: Iterable[str] = ()) -> None:
        self.tokenizer, self.stop_strings = tokenizer, [s for s in stop if s]
        self.ids: list[int] = []
        self.text, self.printed, self.stopped = "", 0, False

    def push(self, token_id: int) -> str:
        if self.stopped:
            return ""
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        hits = [text.find(s, max(self.printed - len(s), 0)) for s in self.stop_strings]
        hits = [h for h in hits if h >= 0]
        if hits:
            self.stopped, text = True, text[: min(hits)]
            safe = len(text)
        else:
            safe = len(text.rstrip("\ufffd"))
            tails = [k for s in self.stop_strings for k in range(1, min(len(s), safe + 1)) if text[:safe].endswith(s[:k])]
            safe -= max(tails, default=0)  # a tail that may still grow into a stop string waits
        self.text = text
        out = text[self.printed : max(safe, self.printed)]
        self.printed = max(safe, self.printed)
        return out

    def flush(self) -> str:
        """The rest of the text (what was held back) once generation has ended."""
        out, self.printed = self.text[self.printed :], len(self.text)
        return out
