"""Subword tokenizers for translation, trained with the Hugging Face ``tokenizers`` library.

A BPE model over words split at spaces (kept as a leading ``▁``, SentencePiece style) and
punctuation, so decoding gives back normal text ("Je vais bien.") for BLEU. The special tokens
come first, always with the same ids (the layout is defined in :mod:`tformer.tokens`):

    <pad> = 0   <unk> = 1   <sos> = 2   <eos> = 3

``encode`` returns the bare subword ids; the model code adds ``<sos>``/``<eos>`` where the
notes say (decoder input = ``<sos>`` + target, labels = target + ``<eos>``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import cast

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tformer.checks import load_tokenizer_file
from tformer.files import atomic_write
from tformer.tokens import TRANSLATION_EOS, TRANSLATION_PAD, TRANSLATION_SOS, TRANSLATION_SPECIALS, TRANSLATION_UNK

__all__ = ["SPECIALS", "PAD", "UNK", "SOS", "EOS", "train_bpe", "TextTokenizer"]

SPECIALS = TRANSLATION_SPECIALS
PAD, UNK, SOS, EOS = TRANSLATION_PAD, TRANSLATION_UNK, TRANSLATION_SOS, TRANSLATION_EOS


def train_bpe(texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> TextTokenizer:
    """Train a BPE tokenizer on ``texts`` with the special tokens first."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIALS, show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok)


class TextTokenizer:
    """A thin, typed wrapper over ``tokenizers.Tokenizer``: text ↔ ids, save/load."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        for i, name in enumerate(SPECIALS):
            if tokenizer.token_to_id(name) != i:
                raise ValueError(f"tokenizer must have {name} at id {i}, got {tokenizer.token_to_id(name)}")
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Iterable[int]) -> str:
        """ids → text; stops at ``<eos>`` and skips the other special tokens."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(int(i))
        return self.tokenizer.decode(out)

    def id_to_token(self, i: int) -> str:
        return cast(str, self.tokenizer.id_to_token(i))

    def save(self, path: str | Path) -> None:
        atomic_write(path, lambda tmp: self.tokenizer.save(tmp))

    @classmethod
    def load(cls, path: str | Path) -> TextTokenizer:
        tokenizer = load_tokenizer_file(path)  # missing, empty, corrupt, not a tokenizer: one line naming it
        try:
            return cls(tokenizer)
        except ValueError as err:  # not a translation tokenizer (special tokens elsewhere)
            raise ValueError(f"tokenizer file {str(path)!r}: {err}") from None
