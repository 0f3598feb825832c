"""Every tokenizer behind one interface (:class:`Tokenizer`), one function that trains any kind and one that loads
any kind from a directory.

* :mod:`.base` — the interface: ``encode``, ``encode_batch`` (with padding), ``tokens``, ``decode``, ``vocab_size``,
  ``save`` / ``load`` to and from a directory, the special tokens by one set of names (``pad_id``, ``unk_id``,
  ``bos_id``, ``eos_id``, ``mask_id``, ``cls_id``, ``sep_id``), ``add_special_tokens``;
* :mod:`.char` — characters (``char``); :mod:`.bpe` — byte-level BPE (``byte_bpe``) and translation BPE (``bpe``);
  :mod:`.wordpiece` — BERT's WordPiece (``wordpiece``); :mod:`.hf` — any Hugging Face ``tokenizer.json`` (``hf``);
  :mod:`.marian` — an Opus-MT translator's SentencePiece models and vocab.json (``marian``, one object per side);
  :mod:`.library` — what the kinds built on the ``tokenizers`` library share.

    tok = train_tokenizer("wordpiece", texts, vocab_size=8000)
    tok.save("runs/x")
    tok = load_tokenizer("runs/x")            # the kind is found from the files
    ids, mask = tok.encode_batch(["a cat", "a dog sat"], padding=True, add_special_tokens=True)

:func:`load_tokenizer` reads every file name tformer has written (``char_tokenizer.json``, ``tokenizer.json``,
a translator's ``src_tokenizer.json`` / ``tgt_tokenizer.json`` with ``prefix``), a BERT ``vocab.txt`` and an Opus-MT
``source.spm`` + ``vocab.json`` (the prefix names the side: ``""``/``src_`` or ``target_``/``tgt_``); which kind
a ``tokenizer.json`` is comes from what it holds: WordPiece with BERT's specials, BPE with the language model's or
translation's layout (:mod:`tformer.tokens`), else a Hugging Face tokenizer.

This package knows the ``tokenizers`` and ``sentencepiece`` libraries and the special-token layouts; it knows nothing
about models, families, training or the command line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tformer.readers import load_tokenizer_file
from tformer.tokenizers.base import SPECIAL_NAMES, Continuation, Tokenizer
from tformer.tokenizers.bpe import BPETokenizer, ByteBPETokenizer
from tformer.tokenizers.char import CharTokenizer
from tformer.tokenizers.hf import HFTokenizer
from tformer.tokenizers.marian import MarianTokenizer
from tformer.tokenizers.wordpiece import WordPieceTokenizer, bert_tokenizer, truncate_pair
from tformer.tokens import BERT_SPECIALS, LM_SPECIALS, TRANSLATION_SPECIALS

__all__ = [
    "Tokenizer",
    "Continuation",
    "SPECIAL_NAMES",
    "CharTokenizer",
    "ByteBPETokenizer",
    "BPETokenizer",
    "WordPieceTokenizer",
    "HFTokenizer",
    "MarianTokenizer",
    "KINDS",
    "train_tokenizer",
    "load_tokenizer",
    "tokenizer_kind",
    "bert_tokenizer",
    "truncate_pair",
]

KINDS: dict[str, type[Tokenizer]] = {
    cls.kind: cls
    for cls in (CharTokenizer, ByteBPETokenizer, BPETokenizer, WordPieceTokenizer, HFTokenizer, MarianTokenizer)
}
TRAINED = ("char", "byte_bpe", "bpe", "wordpiece")  # hf and marian are loaded, never trained here


def train_tokenizer(
    kind: str, texts: Iterable[str], vocab_size: int | None = None, min_frequency: int | None = None
) -> Tokenizer:
    """A new tokenizer of ``kind`` (char, byte_bpe, bpe, wordpiece) fitted to ``texts``; unset sizes take the
    kind's defaults (byte_bpe 4096 ids, bpe and wordpiece 8000 and a minimum pair frequency of 2; char keeps
    every character)."""
    if kind not in TRAINED:
        why = " (a Hugging Face tokenizer is loaded from its directory)" if kind in ("hf", "marian") else ""
        raise ValueError(f"tokenizer kind must be one of {list(TRAINED)}, got {kind!r}{why}")
    if vocab_size is not None and vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
    return _interruptible(lambda: KINDS[kind].train(texts, vocab_size, min_frequency))


def _interruptible(train: Callable[[], Tokenizer]) -> Tokenizer:
    """``train()`` in a thread of its own while the main thread waits: the tokenizers library learns its merges in
    Rust, where Python runs no signal handler until it returns, so a Ctrl-C would wait for the whole training (minutes
    on a large corpus). Waiting here, the main thread takes KeyboardInterrupt at once; the thread is a daemon, left to
    the process's end. Off the main thread (no signal reaches it): ``train()`` as it is."""
    if threading.current_thread() is not threading.main_thread():
        return train()
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["tokenizer"] = train()
        except BaseException as err:  # raised where the caller is
            done["error"] = err

    worker = threading.Thread(target=run, name="tformer tokenizer training", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)  # a lock's wait: a signal's handler runs here
    if "error" in done:
        raise done["error"]
    return done["tokenizer"]


def tokenizer_kind(directory: str | Path, prefix: str = "") -> str:
    """The kind of the tokenizer saved in ``directory`` (with ``prefix``), from the files present and, for a
    ``tokenizer.json``, what it holds. No tokenizer file: FileNotFoundError naming the names looked for."""
    directory = Path(directory)
    if (directory / (prefix + CharTokenizer.file_name)).is_file():
        return "char"
    path = directory / (prefix + "tokenizer.json")
    if path.is_file():
        return _library_kind(load_tokenizer_file(path))
    if (directory / (prefix + "vocab.txt")).is_file():
        return "wordpiece"
    if (directory / "source.spm").is_file() and (directory / "vocab.json").is_file():
        return "marian"  # an Opus-MT layout: its files keep their names, the prefix names the side
    names = " or ".join(prefix + n for n in (CharTokenizer.file_name, "tokenizer.json", "vocab.txt"))
    raise FileNotFoundError(f"{str(directory)!r} has no tokenizer ({names})")


def load_tokenizer(directory: str | Path, prefix: str = "", kinds: Iterable[str] | None = None) -> Tokenizer:
    """The tokenizer saved in ``directory`` (with ``prefix``), of whichever kind its files say.

    ``kinds``: the kinds the caller can use (the language model: char or byte_bpe). A file of another kind is
    read as the first of those whose file is there, so the error names what is wrong in it (a layout, a field).
    """
    directory = Path(directory)
    kind = tokenizer_kind(directory, prefix)
    wanted = list(kinds) if kinds is not None else list(KINDS)
    if kind not in wanted:
        for name in wanted:
            cls = KINDS[name]
            if (directory / (prefix + cls.file_name)).is_file():
                return cls.load(directory, prefix)  # raises, naming the file and what it lacks
        raise ValueError(f"{str(directory)!r} holds a {kind} tokenizer; this needs {' or '.join(wanted)}")
    return KINDS[kind].load(directory, prefix)


def _library_kind(tokenizer) -> str:
    """wordpiece, byte_bpe or bpe when a ``tokenizers.Tokenizer`` has that kind's model and layout, else hf."""
    model = type(tokenizer.model).__name__  # "BPE", "WordPiece", "Unigram", ...

    def first(specials: list[str]) -> bool:
        return all(tokenizer.token_to_id(t) == i for i, t in enumerate(specials))

    if model == "WordPiece" and all(tokenizer.token_to_id(t) is not None for t in BERT_SPECIALS):
        return "wordpiece"
    if model == "BPE" and first(LM_SPECIALS):
        return "byte_bpe"
    if model == "BPE" and first(TRANSLATION_SPECIALS):
        return "bpe"
    return "hf"
