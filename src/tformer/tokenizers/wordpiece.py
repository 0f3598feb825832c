"""WordPiece for BERT (``wordpiece``): trained here on our own text, or the uncased BERT vocabulary.

Ours is trained with the ``tokenizers`` library the way BERT's was: the BERT normaliser (clean text, lowercase,
strip accents), the BERT pre-tokeniser (split at spaces and punctuation) and WordPiece with ``##`` continuation
pieces; its special tokens come first (:mod:`tformer.tokens`)::

    [PAD] = 0   [UNK] = 1   [CLS] = 2   [SEP] = 3   [MASK] = 4

The uncased BERT vocabulary has them elsewhere ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), so
nothing here hard-codes an id: :class:`WordPieceTokenizer` looks them up by name. It reads a ``tokenizer.json``
(ours or a Hugging Face BERT's) or, without one, a ``vocab.txt``.

``encode`` gives the bare pieces; ``add_special_tokens=True`` gives ``[CLS] A [SEP]``. :meth:`~WordPieceTokenizer.single`
and :meth:`~WordPieceTokenizer.pair` also give the segment (token-type) ids, keeping truncation under our control::

    [CLS] A [SEP]            types 0 0 … 0
    [CLS] A [SEP] B [SEP]    types 0 0 … 0 1 … 1      (A's [CLS] and [SEP] are segment 0, B's [SEP] is 1)
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from tokenizers import Tokenizer as Library
from tokenizers.implementations import BertWordPieceTokenizer

from tformer.readers import load_tokenizer_file, read_text_file
from tformer.text import split_lines
from tformer.tokenizers.library import LibraryTokenizer
from tformer.tokens import BERT_SPECIALS

__all__ = ["WordPieceTokenizer", "truncate_pair", "bert_tokenizer"]

# "[PAD]", "[MASK]", "[unused42]": bracketed names are never picked by MLM nor drawn as random tokens.
_BRACKETED = re.compile(r"^\[[A-Za-z0-9_]+\]$")


def bert_tokenizer(path: str | os.PathLike) -> Library:
    """The ``tokenizers`` library's own tokenizer of a BERT directory: ``tokenizer.json``, else ``vocab.txt``.

    Padding and truncation baked into ``tokenizer.json`` are switched off: its ``encode`` returns exactly the
    sentence's tokens, ``[CLS] … [SEP]``. (:class:`WordPieceTokenizer` wraps it in tformer's interface.)
    """
    path = Path(path)
    tokenizer: Library
    if (path / "tokenizer.json").is_file():
        tokenizer = load_tokenizer_file(path / "tokenizer.json")
    elif (path / "vocab.txt").is_file():
        vocab = path / "vocab.txt"
        text = read_text_file(vocab, "vocabulary file")  # empty, binary: one line naming it; no byte-order mark
        tokens = {token.rstrip(): i for i, token in enumerate(split_lines(text))}  # as the library reads the file
        try:
            implementation = BertWordPieceTokenizer(tokens, lowercase=True)
        except Exception as err:  # the Rust library raises a bare Exception for what it cannot read
            raise ValueError(f"vocabulary file {str(vocab)!r} is not a WordPiece vocab.txt: {err}") from None
        tokenizer = Library.from_str(implementation.to_str())
    else:
        raise FileNotFoundError(f"path {str(path)!r} has neither tokenizer.json nor vocab.txt")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer side until ``len(a) + len(b) <= max_tokens`` (as BERT does)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def _alphabet(trainer: BertWordPieceTokenizer, texts: list[str], limit: int) -> tuple[list[str], list[str]]:
    """The trainer's alphabet, the ``limit`` most frequent characters of ``texts`` (normalized; ties in character
    order), and the continuation pieces (``##e``) of those that can follow another in a word, in character order.

    The ``tokenizers`` trainer picks its alphabet among tied counts in hash-map order, gives each ``##`` piece its id
    when it first meets it while walking a hash map of the words, and breaks ties between merges by those ids: the
    same text gave another vocabulary in each process (huggingface/tokenizers#1794). Given first (the alphabet as its
    initial one, the pieces as specials, then made plain tokens), they are the same every time, and so is the rest."""
    normalizer, pre_tokenizer = trainer.normalizer, trainer.pre_tokenizer
    raw: Counter[str] = Counter()
    for text in texts:
        raw.update(text)
    counts: Counter[str] = Counter()
    for c, n in raw.items():
        for d in normalizer.normalize_str(c):  # lowercased, accents stripped
            counts[d] += n
    alphabet = sorted((c for c in counts if not c.isspace()), key=lambda c: (-counts[c], c))[:limit]

    def continues(c: str) -> bool:  # in a word after another character: not a space, punctuation, CJK, ...
        return [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str("a" + c))] == ["a" + c]

    return alphabet, ["##" + c for c in sorted(alphabet) if continues(c)]


class WordPieceTokenizer(LibraryTokenizer):
    """A ``tokenizers`` WordPiece plus BERT's layout: the specials by name, ``[CLS]``/``[SEP]``, segments."""

    kind = "wordpiece"
    drops_padding = False  # also a Hugging Face BERT's: decodes as the tokenizers library does
    pad_id: int  # every WordPiece has these five (checked when it is made)
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    def __init__(self, tokenizer: Library) -> None:
        missing = [name for name in BERT_SPECIALS if tokenizer.token_to_id(name) is None]
        if missing:
            raise ValueError(f"a BERT tokenizer needs the special tokens {BERT_SPECIALS}; this one lacks {missing}")
        super().__init__(tokenizer)
        ids = [cast(int, tokenizer.token_to_id(t)) for t in BERT_SPECIALS]  # all present (checked above)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids
        self._special_ids = sorted(i for token, i in tokenizer.get_vocab().items() if _BRACKETED.match(token))

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int | None = None,
        min_frequency: int | None = None,
        limit_alphabet: int = 1000,
    ) -> WordPieceTokenizer:
        """An uncased BERT-style WordPiece of ``vocab_size`` ids (default 8000) on ``texts``, the specials first;
        a pair seen fewer than ``min_frequency`` times (default 2) is not merged. The same texts give the same
        vocabulary in every process (:func:`_alphabet`)."""
        texts = texts if isinstance(texts, list) else list(texts)  # read twice
        trainer = BertWordPieceTokenizer(lowercase=True)
        alphabet, pieces = _alphabet(trainer, texts, limit_alphabet)
        options: dict[str, Any] = dict(  # the tokenizers stubs type these more narrowly than the library takes them
            vocab_size=vocab_size or 8000,
            min_frequency=2 if min_frequency is None else min_frequency,
            special_tokens=[*BERT_SPECIALS, *pieces],
            initial_alphabet=alphabet,
            limit_alphabet=limit_alphabet,
            show_progress=False,
        )
        trainer.train_from_iterator(iter(texts), **options)
        saved = json.loads(trainer.to_str())  # the pieces were given as specials for their ids only: plain tokens
        saved["added_tokens"] = [t for t in saved["added_tokens"] if t["content"] in BERT_SPECIALS]
        return cls(Library.from_str(json.dumps(saved)))

    @property
    def special_ids(self) -> list[int]:
        """Every bracketed token (``[PAD]`` … ``[MASK]``, ``[unused0]`` …): never picked by MLM nor drawn at random."""
        return self._special_ids

    def _around(self) -> tuple[list[int], list[int]]:
        return [self.cls_id], [self.sep_id]

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

    @classmethod
    def load(cls, directory: str | Path, prefix: str = "") -> WordPieceTokenizer:
        """From ``directory``'s ``tokenizer.json`` (ours or a Hugging Face BERT's), else its ``vocab.txt``."""
        directory = Path(directory)
        if prefix:  # two WordPieces in one directory: tokenizer.json files only
            return super().load(directory, prefix)
        name = cls.file_name if (directory / cls.file_name).is_file() else "vocab.txt"
        try:
            return cls(bert_tokenizer(directory))
        except ValueError as err:
            if name in str(err):  # already names the file
                raise
            raise ValueError(f"tokenizer file {str(directory / name)!r}: {err}") from None
