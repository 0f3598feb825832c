"""Text ↔ ids for the explorer, one small adapter per family, all with one face: ``encode``, ``decode``, ``vocab``.

Every model's tokenizer does the work through the one interface of :mod:`tformer.tokenizers` (whatever its kind:
the translator's BPE, a GPT's characters, byte-level BPE or Hugging Face tokenizer, BERT's WordPiece); the notes'
toy model has a list of words. The adapters differ only in what the family shows: ``encode`` returns the ids and
the piece each id stands for (the labels of the rows and columns the page draws); ``vocab`` names every id (top-k
candidates, logits columns).

Dimension legend: none (lists of ids).
"""

from __future__ import annotations

import re

from tformer.text import normalize
from tformer.tokenizers import Tokenizer, WordPieceTokenizer
from tformer.tokens import TRANSLATION_EOS

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
    """A translation model's source or target tokenizer (BPE, a Marian's SentencePiece), on the normalised text (as
    ``Translator`` encodes it): the source with what the encoder reads after it (a Marian's ``</s>``; tformer's
    encoder reads the bare source), the target bare (the decoder's input after its start token)."""

    def __init__(self, tokenizer: Tokenizer, source: bool = False) -> None:
        self.tokenizer, self.source = tokenizer, source
        self.vocab = tokenizer.vocabulary()

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(normalize(text), add_special_tokens=self.source)
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        """The text up to the first ``<eos>`` (``eos_id``), special tokens dropped."""
        ids = list(ids)
        eos = self.tokenizer.eos_id
        return self.tokenizer.decode(ids[: ids.index(eos)] if eos in ids else ids)


class LMCodec:
    """A GPT's tokenizer (characters, byte-level BPE, a Hugging Face one); each id is named by the text it decodes to."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab = [self._name(i) for i in range(tokenizer.vocab_size)]
        # tformer's own: <|endoftext|> starts and ends a text; a Hugging Face directory's tokenizer names its own
        self.start, self.pad = tokenizer.start_id, tokenizer.pad_id
        self.eos = tokenizer.eos_ids[0] if tokenizer.eos_ids else None

    def _name(self, i: int) -> str:
        text = self.tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" in text or not text:  # byte-level BPE: a lone byte of a character shows as �
            return self.tokenizer.id_to_token(i) or str(i)
        return text

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text, add_special_tokens=True)  # what the model reads, as `generate` feeds it
        if not ids and self.start is not None:
            ids = [self.start]  # no prompt: start as after a document boundary
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode([i for i in ids if i != self.eos])


class WordPieceCodec:
    """BERT's WordPiece pieces, without [CLS]/[SEP] (the session lays out single sentences and pairs with the
    tokenizer's ``single`` and ``pair``, as training does)."""

    def __init__(self, tokenizer: WordPieceTokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab = tokenizer.vocabulary()

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        ids = self.tokenizer.encode(text)
        return ids, [self.vocab[i] for i in ids]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)
