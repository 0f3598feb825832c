"""What the kinds built on the Hugging Face ``tokenizers`` library share: one ``tokenizers.Tokenizer`` inside,
kept whole in one JSON file.

Byte-level BPE, translation BPE, WordPiece and any Hugging Face ``tokenizer.json`` are all such a file; only
their special tokens and what ``add_special_tokens`` adds differ, and those live in their own modules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from tformer.files import atomic_write
from tformer.readers import load_tokenizer_file
from tformer.tokenizers.base import Tokenizer

__all__ = ["LibraryTokenizer", "check_layout"]

T = TypeVar("T", bound="LibraryTokenizer")


class LibraryTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (:attr:`tokenizer`) behind the one interface."""

    file_name = "tokenizer.json"
    drops_padding = True  # tformer's own layouts: <pad> stands for no text, even when specials are written out

    def __init__(self, tokenizer: Any) -> None:
        tokenizer.no_padding()  # a saved padding or truncation setting would change what encode gives
        tokenizer.no_truncation()
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def _pieces(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)  # fast: no offsets (0.20)
        return [np.array(e.ids, dtype=np.int64) for e in encode(texts, add_special_tokens=False)]

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        if self.drops_padding:
            ids = [i for i in ids if i != self.pad_id]
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return cast("str | None", self.tokenizer.id_to_token(int(i)))

    def token_to_id(self, token: str) -> int | None:
        return cast("int | None", self.tokenizer.token_to_id(token))

    def save(self, directory: str | Path, prefix: str = "") -> Path:
        path = Path(directory) / (prefix + self.file_name)
        atomic_write(path, lambda tmp: self.tokenizer.save(tmp))
        return path

    @classmethod
    def load(cls: type[T], directory: str | Path, prefix: str = "") -> T:
        path = Path(directory) / (prefix + cls.file_name)
        tokenizer = load_tokenizer_file(path)  # missing, empty, corrupt, not a tokenizer: one line naming it
        try:
            return cls(tokenizer)
        except ValueError as err:  # another kind's file (special tokens elsewhere)
            raise ValueError(f"tokenizer file {str(path)!r}: {err}") from None


def check_layout(tokenizer: Any, specials: list[str], kind: str) -> None:
    """Refuse a tokenizer whose special tokens are not at the ids of ``specials`` (its position = its id)."""
    for i, name in enumerate(specials):
        if tokenizer.token_to_id(name) != i:
            raise ValueError(
                f"a {kind} tokenizer must have {name} at id {i}, got {tokenizer.token_to_id(name)} "
                f"(tformer's layouts are in tformer.tokens)"
            )
