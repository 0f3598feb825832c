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

A corpus is encoded in bulk (:meth:`ByteBPETokenizer.encode_arrays`, what :mod:`tformer.data` prepares with) by
``tiktoken`` where it is installed (the extra ``tformer[data]``): the same vocabulary as ranks, GPT-2's split pattern
(the ``ByteLevel`` pre-tokenizer's), the specials matched as the library matches its added tokens; about 5× the
``tokenizers`` library's speed per core. It is chosen when the tokenizer is made, only when it gives the library's
ids on a probe text, and every bulk call checks a slice of its first text against the library (a difference: the
library's ids for the whole call); :attr:`ByteBPETokenizer.bulk_encoder` says which one runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
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
        self._tiktoken = _tiktoken_twin(tokenizer)  # the bulk encoder: tiktoken's twin of this BPE, or None

    @property
    def bulk_encoder(self) -> str:
        """What :meth:`encode_arrays` runs: ``"tiktoken"`` or ``"tokenizers"``."""
        return "tokenizers" if self._tiktoken is None else "tiktoken"

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        if self._tiktoken is None or not texts:
            return super().encode_arrays(texts)
        probe = texts[0][:_CHECKED]
        if self._tiktoken.encode(probe, allowed_special="all") != self.tokenizer.encode(probe).ids:
            return super().encode_arrays(texts)  # never seen; the library's ids are the truth
        twin = self._tiktoken
        with ThreadPoolExecutor(min(len(texts), os.cpu_count() or 1)) as pool:  # tiktoken lets go of the GIL
            return list(pool.map(lambda text: twin.encode_to_numpy(text, allowed_special="all"), texts))  # uint32

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


# GPT-2's split pattern: the ByteLevel pre-tokenizer's (tokenizers' byte_level.rs), tiktoken's r50k_base
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_CHECKED = 4096  # characters of each bulk call's first text encoded by both, compared
_PROBE = (
    "It's 3.14 o'clock, they'll see: 'Twas naïve—¿qué? 字字 ✓✓ 😀!\n\n  indented\tTAB  \r\n"
    "<|endoftext|>x<pad> 12345678 don'T I'M   \u00a0\u2028end"
)


def _byte_symbols() -> dict[str, int]:
    """The byte-level alphabet reversed: the character standing for each byte -> the byte (GPT-2's bytes_to_unicode:
    a printable byte stands for itself, the others for 256, 257, ... in order)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    symbols, shifted = {}, 256
    for b in range(256):
        if b in printable:
            symbols[chr(b)] = b
        else:
            symbols[chr(shifted)] = b
            shifted += 1
    return symbols


def _tiktoken_twin(tokenizer: Library) -> Any:
    """A ``tiktoken.Encoding`` with this byte-level BPE's vocabulary as its ranks, when tiktoken is installed and
    it encodes the probe text as the library does; else None."""
    try:
        import tiktoken
    except ImportError:
        return None
    decode = _byte_symbols()
    specials = {t: i for i, t in enumerate(LM_SPECIALS)}
    try:
        ranks = {
            bytes(decode[c] for c in token): i for token, i in tokenizer.get_vocab().items() if token not in specials
        }
        twin = tiktoken.Encoding(
            "tformer-byte-bpe", pat_str=_GPT2_SPLIT, mergeable_ranks=ranks, special_tokens=specials
        )
    except (KeyError, ValueError):  # a symbol outside the byte alphabet, ranks not one per id
        return None
    probe = _PROBE * 3
    return twin if twin.encode(probe, allowed_special="all") == tokenizer.encode(probe).ids else None


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
