"""WordPiece for BERT: train one on our own text, or load the uncased BERT vocabulary.

Our tokenizers are trained with the ``tokenizers`` library the way BERT's was: the BERT normaliser
(clean text, lowercase, strip accents), the BERT pre-tokeniser (split at spaces and punctuation) and
WordPiece with ``##`` continuation pieces. The special tokens come first (the layouts are in
:mod:`tformer.tokens`)::

    [PAD] = 0   [UNK] = 1   [CLS] = 2   [SEP] = 3   [MASK] = 4

The uncased BERT vocabulary has them elsewhere ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
[MASK] 103), so nothing here hard-codes an id: :class:`WordPiece` looks them up by name.

``encode`` gives the bare pieces; :meth:`WordPiece.single` and :meth:`WordPiece.pair` add the
specials and the segment (token-type) ids themselves, so truncation stays under our control::

    [CLS] A [SEP]            types 0 0 … 0
    [CLS] A [SEP] B [SEP]    types 0 0 … 0 1 … 1      (A's [CLS] and [SEP] are segment 0, B's [SEP] is 1)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from tformer.checks import load_tokenizer_file, read_text_file
from tformer.files import atomic_write
from tformer.tokens import BERT_SPECIALS

__all__ = ["SPECIAL_TOKENS", "TOKENIZER_FILE", "WordPiece", "train_wordpiece", "truncate_pair", "bert_tokenizer"]

SPECIAL_TOKENS = BERT_SPECIALS
TOKENIZER_FILE = "tokenizer.json"
# "[PAD]", "[MASK]", "[unused42]": bracketed names are never picked by MLM nor drawn as random tokens.
_SPECIAL = re.compile(r"^\[[A-Za-z0-9_]+\]$")


def bert_tokenizer(path: str | os.PathLike) -> Tokenizer | BertWordPieceTokenizer:
    """The uncased BERT WordPiece tokenizer of a model directory: ``tokenizer.json``, else ``vocab.txt``.

    Padding and truncation baked into ``tokenizer.json`` are switched off: ``encode`` returns exactly
    the sentence's tokens, ``[CLS] … [SEP]``.
    """
    path = Path(path)
    tokenizer: Tokenizer | BertWordPieceTokenizer
    if (path / "tokenizer.json").is_file():
        tokenizer = load_tokenizer_file(path / "tokenizer.json")
    elif (path / "vocab.txt").is_file():
        vocab = path / "vocab.txt"
        read_text_file(vocab, "vocabulary file")  # empty, binary: one line naming it
        try:
            tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
        except Exception as err:  # the Rust library raises a bare Exception for what it cannot read
            raise ValueError(f"vocabulary file {str(vocab)!r} is not a WordPiece vocab.txt: {err}") from None
    else:
        raise FileNotFoundError(f"path {str(path)!r} has neither tokenizer.json nor vocab.txt")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def train_wordpiece(
    texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2, limit_alphabet: int = 1000
) -> WordPiece:
    """Train an uncased BERT-style WordPiece tokenizer on ``texts``, the special tokens first."""
    trainer = BertWordPieceTokenizer(lowercase=True)
    options: dict[str, Any] = dict(  # the tokenizers stubs type these more narrowly than the library takes them
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=limit_alphabet,
        show_progress=False,
    )
    trainer.train_from_iterator(iter(texts), **options)
    return WordPiece(Tokenizer.from_str(trainer.to_str()))


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer side until ``len(a) + len(b) <= max_tokens`` (as BERT does)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) >= len(b) else b).pop()
    return a, b


class WordPiece:
    """A ``tokenizers`` WordPiece tokenizer plus BERT's layout: ids of the specials, [CLS]/[SEP], segments."""

    def __init__(self, tokenizer: Tokenizer | BertWordPieceTokenizer) -> None:
        missing = [name for name in SPECIAL_TOKENS if tokenizer.token_to_id(name) is None]
        if missing:
            raise ValueError(f"a BERT tokenizer needs the special tokens {SPECIAL_TOKENS}; this one lacks {missing}")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        ids = [cast(int, tokenizer.token_to_id(t)) for t in SPECIAL_TOKENS]  # all present (checked above)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids
        vocab = tokenizer.get_vocab()
        self.special_ids = sorted(i for token, i in vocab.items() if _SPECIAL.match(token))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Word pieces of ``text``, without [CLS]/[SEP]."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def id_to_token(self, i: int) -> str:
        return cast(str, self.tokenizer.id_to_token(int(i)))

    def single(self, a: list[int], max_len: int) -> tuple[list[int], list[int]]:
        """``[CLS] A [SEP]`` (A cut to fit ``max_len``) and its segment ids (all 0)."""
        if max_len < 2:
            raise ValueError(f"max_len must be >= 2 for [CLS] A [SEP], got {max_len}")
        ids = [self.cls_id, *a[: max_len - 2], self.sep_id]
        return ids, [0] * len(ids)

    def pair(self, a: list[int], b: list[int], max_len: int) -> tuple[list[int], list[int]]:
        """``[CLS] A [SEP] B [SEP]`` (the longer side trimmed to fit ``max_len``) and its segment ids."""
        if max_len < 3:
            raise ValueError(f"max_len must be >= 3 for [CLS] A [SEP] B [SEP], got {max_len}")
        a, b = truncate_pair(a, b, max_len - 3)
        ids = [self.cls_id, *a, self.sep_id, *b, self.sep_id]
        return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)

    def save(self, directory: str | Path) -> None:
        """Write ``directory/tokenizer.json`` (atomically)."""
        atomic_write(Path(directory) / TOKENIZER_FILE, lambda tmp: self.tokenizer.save(tmp))

    @classmethod
    def load(cls, directory: str | Path) -> WordPiece:
        """From a model directory's ``tokenizer.json`` (ours or Hugging Face's), else its ``vocab.txt`` (a training
        run's: its best model's)."""
        from tformer.models.checkpoint import model_dir

        directory = model_dir(directory)
        name = TOKENIZER_FILE if (directory / TOKENIZER_FILE).is_file() else "vocab.txt"
        try:
            return cls(bert_tokenizer(directory))
        except ValueError as err:
            if name in str(err):  # already names the file
                raise
            raise ValueError(f"tokenizer file {str(directory / name)!r}: {err}") from None
