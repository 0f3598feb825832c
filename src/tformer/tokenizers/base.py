"""The one tokenizer interface: every kind of tokenizer answers to the same names.

    kind          what it is                                           file in a directory (``prefix`` + name)
    char          one id per character (the LM)                        char_tokenizer.json
    byte_bpe      GPT-2 style byte-level BPE (the LM)                  tokenizer.json
    bpe           BPE over words, SentencePiece-style ``▁`` (translation)  tokenizer.json
    wordpiece     BERT's WordPiece, trained here or the uncased vocab  tokenizer.json (or vocab.txt)
    hf            any Hugging Face ``tokenizer.json``                  tokenizer.json (+ tokenizer_config.json)

What every kind has:

* ``encode(text)`` → ids; ``encode_batch(texts, padding=...)`` → rows of ids (+ the attention mask when padded,
  with ``pad_id``); ``tokens(text)`` → the pieces; ``decode(ids)`` → text; ``id_to_token`` / ``token_to_id``;
  ``vocab_size``; ``save(directory)`` and ``load(directory)``;
* the special tokens by one set of names: ``pad_id``, ``unk_id``, ``bos_id``, ``eos_id``, ``mask_id``, ``cls_id``,
  ``sep_id`` (``None`` where a kind has none; the layouts, and why ``<pad>`` is 1 in the LM and 0 elsewhere, are in
  :mod:`tformer.tokens`: saved ids never move). ``bos_id`` is what a text starts from (``<sos>``, the LM's
  ``<|endoftext|>``), ``eos_id`` what ends it;
* ``add_special_tokens=True`` gives the ids the way the model reads one text: ``[CLS] … [SEP]`` for WordPiece, what
  its post-processor adds for a Hugging Face tokenizer (Llama 3's BOS, nothing for GPT-2), nothing for the
  translation source and the LM (their specials come from the family's own layout: the decoder's ``<sos>``, the
  ``<|endoftext|>`` between documents). Without it (the default) ``encode`` gives the text's own pieces.
  ``trace``, fill-mask, the explorer and training all go through this one flag;
* ``decode(ids, skip_special_tokens=True)`` drops the special tokens; with ``False`` it writes them out, except
  padding in tformer's own layouts (char, byte_bpe, bpe), which stands for no text.
* ``chat_template``: the Jinja template of a chat model (a Hugging Face directory's; None for the other kinds), and
  ``apply_chat_template(messages)``: the conversation in it, as text or ids (:mod:`.chat_template`).

A ``prefix`` lets two tokenizers share a directory: a translator keeps ``src_tokenizer.json`` and
``tgt_tokenizer.json`` (``prefix="src_"`` and ``"tgt_"``).

This module knows no family, no model and no file format; the kinds live beside it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, overload

import numpy as np

from tformer.checks import check_yes_no
from tformer.tokenizers.chat_template import render_chat

__all__ = ["Tokenizer", "Continuation", "SPECIAL_NAMES"]

# the names every kind answers to (``<name>_id``), in the order they are listed
SPECIAL_NAMES = ("pad", "unk", "bos", "eos", "mask", "cls", "sep")


class Tokenizer(ABC):
    """Text ↔ ids, with the special tokens by name. Subclasses say how pieces are found and files are kept."""

    kind: ClassVar[str]
    file_name: ClassVar[str]  # the file it keeps in a directory (after the prefix)
    unit: ClassVar[str | None] = None  # what one unit of :meth:`unit_lengths` is ("character", "byte"), if any

    pad_id: int | None = None
    unk_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    mask_id: int | None = None
    cls_id: int | None = None
    sep_id: int | None = None
    chat_template: str | None = None  # a chat model's Jinja template (tformer.tokenizers.chat_template)

    # ---------------------------------------------------------------- what each kind provides

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """One past the largest id (every id the tokenizer can give is below it)."""

    @abstractmethod
    def _pieces(self, texts: list[str]) -> list[list[int]]:
        """The bare ids of each text, no special token added."""

    @abstractmethod
    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        """The text of ``ids``."""

    @abstractmethod
    def id_to_token(self, i: int) -> str | None:
        """The token of id ``i`` (None where the vocabulary has no such id)."""

    @abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (None where the vocabulary lacks it)."""

    @abstractmethod
    def save(self, directory: str | Path, prefix: str = "") -> Path:
        """Write the tokenizer into ``directory`` (created if needed) as ``prefix`` + its file name, atomically;
        returns the file's path."""

    @classmethod
    @abstractmethod
    def load(cls, directory: str | Path, prefix: str = "") -> Tokenizer:
        """The tokenizer saved in ``directory`` with ``prefix``; an unreadable file is one line naming it."""

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int | None = None, min_frequency: int | None = None) -> Tokenizer:
        """A new tokenizer of this kind fitted to ``texts`` (kinds that are only loaded refuse)."""
        raise ValueError(f"a {cls.kind} tokenizer is loaded from its directory, not trained here")

    def _around(self) -> tuple[list[int], list[int]]:
        """The special ids ``add_special_tokens=True`` puts before and after one text (none by default)."""
        return [], []

    # ---------------------------------------------------------------- the interface, the same for every kind

    def encode(self, text: str, add_special_tokens: bool = False, max_length: int | None = None) -> list[int]:
        """The ids of ``text``; ``add_special_tokens``: as the model reads one text (see the module docstring);
        ``max_length``: at most that many ids, the text cut at its end (the added specials kept)."""
        check_yes_no(add_special_tokens=add_special_tokens)  # "no" is a true string: refused
        return self._encode_all([text], add_special_tokens, max_length)[0]

    @overload
    def encode_batch(
        self,
        texts: Sequence[str],
        padding: Literal[False] = False,
        max_length: int | None = None,
        add_special_tokens: bool = False,
    ) -> list[list[int]]: ...

    @overload
    def encode_batch(
        self,
        texts: Sequence[str],
        padding: Literal[True],
        max_length: int | None = None,
        add_special_tokens: bool = False,
    ) -> tuple[list[list[int]], list[list[int]]]: ...

    def encode_batch(
        self,
        texts: Sequence[str],
        padding: bool = False,
        max_length: int | None = None,
        add_special_tokens: bool = False,
    ) -> list[list[int]] | tuple[list[list[int]], list[list[int]]]:
        """:meth:`encode` of each text. ``padding=True``: every row filled with ``pad_id`` to the longest, and the
        attention mask (1 = a real token, 0 = padding) returned beside the ids."""
        check_yes_no(padding=padding, add_special_tokens=add_special_tokens)
        rows = self._encode_all(list(texts), add_special_tokens, max_length)
        if not padding:
            return rows
        if self.pad_id is None:
            raise ValueError(f"this {self.kind} tokenizer has no padding token: encode_batch(padding=True) needs one")
        width = max((len(r) for r in rows), default=0)
        ids = [r + [self.pad_id] * (width - len(r)) for r in rows]
        mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
        return ids, mask

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """The ids of each text (no special tokens) as integer arrays (int64; uint32 from tiktoken): :meth:`encode` in
        bulk, what a corpus is prepared with (:mod:`tformer.data`). The ``tokenizers`` kinds encode across the cores,
        characters by one lookup, a byte-level BPE with tiktoken where it is installed (:mod:`.bpe`)."""
        return [np.asarray(ids, dtype=np.int64) for ids in self._encode_all(texts, False, None)]

    def lacks(self, text: str) -> list[str]:
        """The characters of ``text`` this vocabulary has no id for (each read as ``<unk>``), once each, in order:
        none for a subword or byte vocabulary, which reads any text (:class:`~tformer.tokenizers.CharTokenizer`'s
        says which)."""
        return []

    def tokens(self, text: str, add_special_tokens: bool = False) -> list[str]:
        """The pieces ``text`` is cut into (the token of each id :meth:`encode` gives)."""
        return [self.id_to_token(i) or "" for i in self.encode(text, add_special_tokens)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids``; ``skip_special_tokens``: drop the special tokens (else write them out)."""
        check_yes_no(skip_special_tokens=skip_special_tokens)
        return self._decode([int(i) for i in ids], skip_special_tokens)

    @overload
    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: Literal[False] = False,
    ) -> str: ...

    @overload
    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, *, tokenize: Literal[True]
    ) -> list[int]: ...

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, tokenize: bool = False
    ) -> str | list[int]:
        """The conversation ``messages`` ([{"role": "user", "content": "Hi"}, ...]) in :attr:`chat_template`, as
        ``transformers``' ``apply_chat_template`` renders it; ``add_generation_prompt``: ending with what opens the
        assistant's reply; ``tokenize``: its ids instead (encoded without adding special tokens: the template
        writes them). A tokenizer without a chat template refuses, saying so."""
        check_yes_no(add_generation_prompt=add_generation_prompt, tokenize=tokenize)
        if self.chat_template is None:
            raise ValueError(
                f"this {self.kind} tokenizer has no chat template (a chat model's Hugging Face directory has one in "
                "chat_template.jinja or tokenizer_config.json): it cannot lay out a conversation"
            )
        text = render_chat(self.chat_template, messages, add_generation_prompt, **self._template_tokens())
        return self.encode(text) if tokenize else text

    def _template_tokens(self) -> dict[str, str]:
        """The special tokens a chat template sees by name (``bos_token``, ``eos_token``, ...): this kind's own."""
        return {f"{name}_token": token for name, token in self.special_tokens.items()}

    def vocabulary(self) -> list[str]:
        """The token of every id below :attr:`vocab_size` (an id the vocabulary skips shows as its number)."""
        return [self.id_to_token(i) or str(i) for i in range(self.vocab_size)]

    @property
    def special_tokens(self) -> dict[str, str]:
        """The special tokens this kind has, by name: ``{"pad": "<pad>", "unk": "<unk>", ...}``."""
        out = {}
        for name in SPECIAL_NAMES:
            i = getattr(self, f"{name}_id")
            token = self.id_to_token(i) if i is not None else None
            if token is not None:
                out[name] = token
        return out

    @property
    def special_ids(self) -> list[int]:
        """The ids of the special tokens, sorted."""
        return sorted({i for name in SPECIAL_NAMES if (i := getattr(self, f"{name}_id")) is not None})

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Every id that ends a text (a Hugging Face model may name several); the first is :attr:`eos_id`."""
        return () if self.eos_id is None else (self.eos_id,)

    @property
    def start_id(self) -> int | None:
        """What a generation with no prompt starts from: ``bos_id``, else ``eos_id`` (as after a text's end)."""
        return self.bos_id if self.bos_id is not None else self.eos_id

    def hf_files(self) -> dict[str, bytes] | None:
        """The files of the Hugging Face layout of a kind that has its own (name → bytes: an Opus-MT's SentencePiece
        models and vocab.json); None for the kinds a Hugging Face export writes as a tokenizer.json."""
        return None

    def unit_lengths(self) -> list[int]:
        """Units (:attr:`unit`) per id, for bits per character or byte; kinds without a unit refuse."""
        raise ValueError(f"a {self.kind} tokenizer has no unit to score bits per character or byte with")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, vocab_size={self.vocab_size})"

    # ---------------------------------------------------------------- shared machinery

    def _encode_all(self, texts: list[str], add_special_tokens: bool, max_length: int | None) -> list[list[int]]:
        head, tail = self._around() if add_special_tokens else ([], [])
        room = None
        if max_length is not None:
            room = max_length - len(head) - len(tail)
            if room < 0:
                raise ValueError(f"max_length must be at least {len(head) + len(tail)} here, got {max_length}")
        return [[*head, *ids[:room], *tail] for ids in self._pieces(texts)]


class Continuation:
    """The text that ids add after a prompt, for streaming: ``decode(ids)`` = decode(prompt + ids) minus the
    prompt's own text, as ``transformers``' text-generation pipeline cuts it; special tokens are left out, as that
    pipeline (``skip_special_tokens=True``) and OpenAI-style servers leave them (a model that starts a new turn does
    not show ``<|im_start|>user``).

    Decoding the new ids alone is exact for characters and byte-level BPE, but a SentencePiece-style decoder (Llama 2,
    Mistral v0.1: ``▁`` → space, then the first space stripped) would drop the space that starts the continuation.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Iterable[int]) -> None:
        self.tokenizer, self.prompt_ids = tokenizer, list(prompt_ids)
        self.prefix = tokenizer.decode(self.prompt_ids)

    def decode(self, ids: Iterable[int]) -> str:
        ids = list(ids)
        text = self.tokenizer.decode(self.prompt_ids + ids)
        if text.startswith(self.prefix):
            return text[len(self.prefix) :]
        return self.tokenizer.decode(ids)
