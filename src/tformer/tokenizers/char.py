"""One id per character (nanoGPT's Shakespeare setup): the ``char`` kind of the language model.

The vocabulary is the set of characters of the training text, after the language model's specials (the layout
of :mod:`tformer.tokens`): ``<unk>`` 0, ``<pad>`` 1, ``<|endoftext|>`` 2 (both ``bos_id`` and ``eos_id``). A
character the vocabulary lacks encodes as ``<unk>``. Kept as ``char_tokenizer.json``:
``{"type": "char", "tokens": [...]}``, the position of a token being its id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tformer.files import atomic_write
from tformer.readers import read_json_object
from tformer.tokenizers.base import Tokenizer
from tformer.tokens import LM_EOT, LM_PAD, LM_SPECIALS, LM_UNK

__all__ = ["CharTokenizer"]


class CharTokenizer(Tokenizer):
    """Characters, after the specials; ``itos`` is the list of tokens (the id is the position)."""

    kind = "char"
    file_name = "char_tokenizer.json"
    unit = "character"
    pad_id, unk_id, bos_id, eos_id = LM_PAD, LM_UNK, LM_EOT, LM_EOT

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos = LM_SPECIALS + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        # encode_arrays' lookup: the characters' code points, sorted, and their ids (then <unk>, for any other)
        points = sorted((ord(c), i) for i, c in enumerate(self.itos) if len(c) == 1)
        self._points = np.array([p for p, _ in points], dtype=np.uint32)
        self._point_ids = np.array([i for _, i in points] + [LM_UNK], dtype=np.int64)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int | None = None, min_frequency: int | None = None
    ) -> CharTokenizer:
        """Every character of ``texts`` (``vocab_size`` and ``min_frequency`` do not apply: each character is kept)."""
        chars: set[str] = set()
        for text in texts:
            chars.update(text)
        return cls(chars)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def _pieces(self, texts: list[str]) -> list[list[int]]:
        return [[self.stoi.get(c, LM_UNK) for c in text] for text in texts]

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """Every character looked up at once: its code point found among the vocabulary's (sorted), else ``<unk>``."""
        out = []
        for text in texts:
            points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            at = np.searchsorted(self._points, points)
            known = at < len(self._points)
            known[known] = self._points[at[known]] == points[known]
            out.append(np.where(known, self._point_ids[np.minimum(at, len(self._points))], LM_UNK))
        return out

    def lacks(self, text: str) -> list[str]:
        """The characters of ``text`` the vocabulary has no id for (each read as ``<unk>``), once each, in order."""
        return [c for c in dict.fromkeys(text) if self.encode_arrays([c])[0][0] == LM_UNK]

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        drop = set(self.special_ids) if skip_special_tokens else {LM_PAD}  # <pad> stands for no text
        bad = next((i for i in ids if not 0 <= i < len(self.itos)), None)
        if bad is not None:
            raise ValueError(f"id {bad} is not in this character vocabulary (0 to {len(self.itos) - 1})")
        return "".join(self.itos[i] for i in ids if i not in drop)

    def id_to_token(self, i: int) -> str | None:
        return self.itos[i] if 0 <= i < len(self.itos) else None

    def token_to_id(self, token: str) -> int | None:
        return self.stoi.get(token)

    def unit_lengths(self) -> list[int]:
        """Characters per id (1 each, specials included), for bits per character."""
        return [1] * self.vocab_size

    def save(self, directory: str | Path, prefix: str = "") -> Path:
        path = Path(directory) / (prefix + self.file_name)
        text = json.dumps({"type": "char", "tokens": self.itos}, ensure_ascii=False, indent=0)
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        return path

    @classmethod
    def load(cls, directory: str | Path, prefix: str = "") -> CharTokenizer:
        path = Path(directory) / (prefix + cls.file_name)
        data = read_json_object(path, "tokenizer file")
        tokens = data.get("tokens")
        if data.get("type") != "char" or not isinstance(tokens, list):
            raise ValueError(
                f"tokenizer file {str(path)!r} is not a character tokenizer (type 'char', a 'tokens' list)"
            )
        if tokens[: len(LM_SPECIALS)] != LM_SPECIALS:
            raise ValueError(f"tokenizer file {str(path)!r}: the vocabulary must start with {LM_SPECIALS}")
        chars = tokens[len(LM_SPECIALS) :]
        bad = next((t for t in chars if not isinstance(t, str) or len(t) != 1), None)
        if bad is not None or len(set(chars)) != len(chars):
            what = f"{bad!r} is not one character" if bad is not None else "a character appears twice"
            raise ValueError(f"tokenizer file {str(path)!r}: {what}")
        return cls(chars)
