"""Tokenizers of the language model: characters or byte-level BPE, with one special-token layout.

* :class:`CharTokenizer`: one id per character (nanoGPT's Shakespeare setup);
* :class:`ByteBPETokenizer`: GPT-2 style byte-level BPE trained with the ``tokenizers`` library.

Both put the special tokens first (``<unk>`` = 0, ``<pad>`` = 1, ``<|endoftext|>`` = 2; the layout is in
:mod:`tformer.tokens`) and share one small interface (``encode``, ``decode``, ``vocab_size``,
``unit_lengths``, ``save``, ``load``); :func:`load_lm_tokenizer` picks the right one from the files in a
model directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tformer.checks import load_tokenizer_file, read_json_object
from tformer.files import atomic_write
from tformer.tokens import LM_EOT, LM_PAD, LM_SPECIALS, LM_UNK

__all__ = [
    "SPECIALS",
    "UNK",
    "PAD",
    "EOT",
    "CharTokenizer",
    "ByteBPETokenizer",
    "train_lm_tokenizer",
    "load_lm_tokenizer",
]

SPECIALS = LM_SPECIALS
UNK, PAD, EOT = LM_UNK, LM_PAD, LM_EOT


class CharTokenizer:
    """Character-level: the vocabulary is the set of characters of the training text, after the specials."""

    file_name = "char_tokenizer.json"

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos = SPECIALS + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int | None = None) -> CharTokenizer:
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
    def load(cls, directory: str | Path) -> CharTokenizer:
        path = Path(directory) / cls.file_name
        data = read_json_object(path, "tokenizer file")
        tokens = data.get("tokens")
        if data.get("type") != "char" or not isinstance(tokens, list):
            raise ValueError(
                f"tokenizer file {str(path)!r} is not a character tokenizer (type 'char', a 'tokens' list)"
            )
        if tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"tokenizer file {str(path)!r}: the vocabulary must start with {SPECIALS}")
        chars = tokens[len(SPECIALS) :]
        bad = next((t for t in chars if not isinstance(t, str) or len(t) != 1), None)
        if bad is not None or len(set(chars)) != len(chars):
            what = f"{bad!r} is not one character" if bad is not None else "a character appears twice"
            raise ValueError(f"tokenizer file {str(path)!r}: {what}")
        return cls(chars)


class ByteBPETokenizer:
    """Byte-level BPE (GPT-2 style): any text encodes without ``<unk>``; decoding gives it back exactly."""

    file_name = "tokenizer.json"

    def __init__(self, tokenizer) -> None:
        for i, name in enumerate(SPECIALS):
            if tokenizer.token_to_id(name) != i:
                raise ValueError(f"tokenizer must have {name} at id {i}, got {tokenizer.token_to_id(name)}")
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 4096) -> ByteBPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIALS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
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
    def load(cls, directory: str | Path) -> ByteBPETokenizer:
        path = Path(directory) / cls.file_name
        tokenizer = load_tokenizer_file(path)  # missing, empty, corrupt, not a tokenizer: one line naming it
        try:
            return cls(tokenizer)
        except ValueError as err:  # not an LM tokenizer (special tokens elsewhere)
            raise ValueError(f"tokenizer file {str(path)!r}: {err}") from None


TOKENIZERS: dict[str, type[CharTokenizer] | type[ByteBPETokenizer]] = {"char": CharTokenizer, "bpe": ByteBPETokenizer}


def train_lm_tokenizer(kind: str, texts: list[str], vocab_size: int = 4096):
    """``kind`` "char" (vocab_size ignored) or "bpe"."""
    if kind not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {sorted(TOKENIZERS)}, got {kind!r}")
    return TOKENIZERS[kind].train(texts, vocab_size)


def load_lm_tokenizer(directory: str | Path):
    """The tokenizer saved in a model directory (``char_tokenizer.json`` or ``tokenizer.json``; a training run's:
    its best model's)."""
    from tformer.models.checkpoint import model_dir

    directory = model_dir(directory)
    for cls in TOKENIZERS.values():
        if (Path(directory) / cls.file_name).is_file():
            return cls.load(directory)
    names = " or ".join(c.file_name for c in TOKENIZERS.values())
    raise FileNotFoundError(f"{str(directory)!r} has no LM tokenizer ({names}); is it a `tformer train lm` run?")
