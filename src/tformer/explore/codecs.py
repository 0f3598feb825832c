"""Text ↔ ids for the explorer, one small adapter per tokenizer, all with one face: ``encode``, ``decode``, ``vocab``.

The families' own tokenizers do the work (:class:`~tformer.translation.tokenizer.TextTokenizer`, the LM's
character or byte-level BPE tokenizer, BERT's :class:`~tformer.bert.tokenizer.WordPiece`); the notes' toy model
has a list of words. ``encode`` returns the ids and the piece each id stands for (the labels of the rows and
columns the page draws); ``vocab`` names every id (top-k candidates, logits columns).

Dimension legend: none (lists of ids).
"""

from __future__ import annotations

import re
from typing import Any

from tformer.text import normalize
from tformer.tokens import LM_EOT, TRANSLATION_EOS

__all__ = ["ToyCodec", "TranslationCodec", "LMCodec", "WordPieceCodec"]

_WORDS = re.compile(r"\w+|[^\w\s]")


class ToyCodec:
    """The toy model's words: ``"I am good."`` → I, am, good, . (an unknown word is ``<unk>``)."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = list(vocab)

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = [self.vocab.index(w) if w in self.vocab else 1 for w in _WORDS.findall(text)]  # 1 = <unk>
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        words = []
        for i in ids:
            if i == TRANSLATION_EOS:
                break
            if i >= 4:  # the specials <pad> <unk> <sos> <eos> come first
                words.append(self.vocab[i])
        return " ".join(words)


class TranslationCodec:
    """A translation model's source or target BPE, on the normalised text (as ``Translator`` encodes it)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        enc = self.tokenizer.tokenizer.encode(normalize(text), add_special_tokens=False)
        return list(enc.ids), list(enc.tokens)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


class LMCodec:
    """A GPT's character or byte-level BPE tokenizer; each id is named by the text it decodes to."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab = [self._name(i) for i in range(tokenizer.vocab_size)]
        # tformer's own: <|endoftext|> starts and ends a text; a Hugging Face directory's tokenizer names its own
        self.start = getattr(tokenizer, "start_id", LM_EOT)
        self.eos = (getattr(tokenizer, "eos_ids", ()) or (LM_EOT,))[0]
        self.pad = getattr(tokenizer, "pad_id", None)

    def _name(self, i: int) -> str:
        text = self.tokenizer.decode([i])
        inner = getattr(self.tokenizer, "tokenizer", None)  # byte-level BPE: a lone byte of a character shows as �
        return inner.id_to_token(i) if inner is not None and ("\ufffd" in text or not text) else text

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text) or [self.start]  # no prompt: start as after a document boundary
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode([i for i in ids if i != self.eos])


class WordPieceCodec:
    """BERT's WordPiece pieces, without [CLS]/[SEP] (the session lays out single sentences and pairs)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text)
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)
