"""The two BPE kinds trained here with the ``tokenizers`` library.

* :class:`ByteBPETokenizer` (``byte_bpe``, the language model): GPT-2 style byte-level BPE; any text encodes
  without ``<unk>`` and decodes back exactly. ``<unk>`` 0, ``<pad>`` 1, ``<|endoftext|>`` 2 (begins and ends a
  document, so it is both ``bos_id`` and ``eos_id``).
* :class:`BPETokenizer` (``bpe``, translation): BPE over words split at spaces (kept as a leading ``▁``,
  SentencePiece style) and punctuation, so decoding gives back normal text ("Je vais bien.") for BLEU.
  ``<pad>`` 0, ``<unk>`` 1, ``<sos>`` 2 (``bos_id``), ``<eos>`` 3 (``eos_id``). The encoder reads the bare source;
  the decoder reads ``<sos>`` + target and learns target + ``<eos>`` (the batching adds them).

Both put their specials first, always at the ids of :mod:`tformer.tokens`; neither adds a special token to one
text (``add_special_tokens`` changes nothing).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer as Library
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from tformer.tokenizers.library import LibraryTokenizer, check_layout
from tformer.tokens import (
    LM_EOT,
    LM_PAD,
    LM_SPECIALS,
    LM_UNK,
    TRANSLATION_EOS,
    TRANSLATION_PAD,
    TRANSLATION_SOS,
    TRANSLATION_SPECIALS,
    TRANSLATION_UNK,
)

__all__ = ["ByteBPETokenizer", "BPETokenizer"]


class ByteBPETokenizer(LibraryTokenizer):
    """Byte-level BPE (GPT-2 style) with the language model's specials first."""

    kind = "byte_bpe"
    unit = "byte"
    pad_id, unk_id, bos_id, eos_id = LM_PAD, LM_UNK, LM_EOT, LM_EOT

    def __init__(self, tokenizer: Library) -> None:
        check_layout(tokenizer, LM_SPECIALS, self.kind)
        super().__init__(tokenizer)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int | None = None, min_frequency: int | None = None
    ) -> ByteBPETokenizer:
        """Byte-level BPE of ``vocab_size`` ids (default 4096) on ``texts``, every byte in the alphabet."""
        tok = Library(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size or 4096,
            min_frequency=min_frequency or 0,
            special_tokens=LM_SPECIALS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    def unit_lengths(self) -> list[int]:
        """Bytes per id (a byte-level symbol is one byte; a special token counts as one), for bits per byte."""
        n = len(LM_SPECIALS)
        return [1 if i < n else len(self.tokenizer.id_to_token(i)) for i in range(self.vocab_size)]


class BPETokenizer(LibraryTokenizer):
    """Word-level BPE for translation, with the translation specials first."""

    kind = "bpe"
    pad_id, unk_id, bos_id, eos_id = TRANSLATION_PAD, TRANSLATION_UNK, TRANSLATION_SOS, TRANSLATION_EOS

    def __init__(self, tokenizer: Library) -> None:
        check_layout(tokenizer, TRANSLATION_SPECIALS, self.kind)
        super().__init__(tokenizer)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int | None = None, min_frequency: int | None = None
    ) -> BPETokenizer:
        """BPE of ``vocab_size`` ids (default 8000) on ``texts``; a pair seen fewer than ``min_frequency`` times
        (default 2) is not merged."""
        tok = Library(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size or 8000,
            min_frequency=2 if min_frequency is None else min_frequency,
            special_tokens=TRANSLATION_SPECIALS,
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)
