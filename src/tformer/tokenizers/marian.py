"""Marian's SentencePiece tokenizer (``marian``): the files of a Hugging Face Opus-MT directory, read with the
``sentencepiece`` package (no ``transformers``), cutting and joining text as ``transformers``' MarianTokenizer does.

    source.spm              the SentencePiece model that cuts the source text into pieces
    target.spm              the one that cuts a target text
    vocab.json              piece → id: the model's embedding rows (SentencePiece's own ids are not used)
    target_vocab.json       the target side's, when tokenizer_config.json says ``separate_vocabs``
    tokenizer_config.json   unk_token, eos_token, pad_token (default <unk>, </s>, <pad>), separate_vocabs (optional)

One object is one side: the source (``prefix`` ``""`` or ``"src_"``) or the target (``"target_"`` or ``"tgt_"``); the
files keep their names whatever the prefix, and both sides save the same files.

Encoding a text, as MarianTokenizer (transformers 5) does:

1. the text is cut at the special tokens' own text (``</s>``, ``<unk>``, ``<pad>``), each read as that token;
2. a piece of text that starts with a language code (``>>fr<<``) gives the code as one token;
3. the side's SentencePiece model cuts the rest into pieces, and each piece is looked up in the side's vocabulary
   (vocab.json, or target_vocab.json); a piece it lacks is ``<unk>``;
4. ``add_special_tokens=True`` appends ``</s>`` (the Marian encoder reads it).

Decoding: each id becomes its token (a special token by name, else the vocabulary's piece, else the SentencePiece
model's piece of that id); each run of pieces is joined by SentencePiece (with source.spm unless the vocabularies
are separate, as transformers 5 joins them), a special token is written out with a space after it, ``▁`` becomes a
space and the ends are stripped. ``skip_special_tokens`` drops ``</s>``, ``<unk>`` and ``<pad>`` (transformers
counts ``<unk>`` as special). ``clean_up_tokenization_spaces`` in tokenizer_config.json (``" ."`` → ``"."``, ...) is
applied when it is set.

The special tokens' ids are looked up in vocab.json, for both sides, as transformers does; one it lacks gets the next
free id (``<unk>`` must be there). A Marian decoder starts from ``<pad>`` (``decoder_start_token_id`` in Opus-MT), so
the target side's ``bos_id`` (what its text starts from) is the pad id; the source has none (transformers' has no BOS).

This module knows the ``sentencepiece`` package and the Opus-MT files; nothing about models or the command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tformer.files import atomic_write
from tformer.readers import read_json_object
from tformer.tokenizers.base import Tokenizer

__all__ = ["MarianTokenizer", "MARIAN_FILES"]

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB, CONFIG = (
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer_config.json",
)
MARIAN_FILES = (SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB, CONFIG)
SIDES = {"": "source", "src_": "source", "target_": "target", "tgt_": "target"}  # prefix → side
DEFAULTS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}  # transformers' order: an absent one gets the next id
SPACE = "\u2581"  # ▁, SentencePiece's word boundary
_CLEAN_UP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'")]  # transformers' clean_up_tokenization
_CLEAN_UP += [(" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


class MarianTokenizer(Tokenizer):
    """One side (source or target) of an Opus-MT tokenizer: two SentencePiece models and the vocabulary (or two)."""

    kind = "marian"
    file_name = VOCAB

    def __init__(
        self,
        models: Mapping[str, bytes],
        vocab: Mapping[str, int],
        target_vocab: Mapping[str, int] | None = None,
        settings: Mapping[str, Any] | None = None,
        side: str = "source",
    ) -> None:
        """``models``: the serialized source.spm and target.spm (keys ``"source"``, ``"target"``); ``vocab``:
        vocab.json; ``target_vocab``: target_vocab.json (separate vocabularies); ``settings``:
        tokenizer_config.json."""
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', got {side!r}")
        self.models, self.side = {name: bytes(models[name]) for name in ("source", "target")}, side
        self.vocab, self.settings = dict(vocab), dict(settings or {})
        self.target_vocab = None if target_vocab is None else dict(target_vocab)
        self.separate = self.target_vocab is not None
        self._spm = {name: _processor(data, name) for name, data in self.models.items()}
        names = {name: _name(self.settings.get(f"{name}_token"), default) for name, default in DEFAULTS.items()}
        if names["unk"] not in self.vocab:
            raise ValueError(f"the unknown token {names['unk']!r} must be in vocab.json")
        free = len(self.vocab)  # a special vocab.json lacks gets the next id, as transformers adds it
        self._special_ids: dict[str, int] = {}
        for name, token in names.items():
            self._special_ids[token] = self.vocab.get(token, free)
            free += token not in self.vocab
            setattr(self, f"{name}_id", self._special_ids[token])
        self._specials = {i: token for token, i in self._special_ids.items()}
        self._unk_text = names["unk"]
        self.bos_id = self.pad_id if side == "target" else None  # the decoder's text starts from <pad>
        # this side's vocabulary (piece → id and back), and the model that cuts (encode) and joins (decode) its text
        own = self.target_vocab if side == "target" and self.target_vocab is not None else self.vocab
        self._encoder, self._decoder = own, {i: piece for piece, i in own.items()}
        self._unk_piece = own.get(self._unk_text, self._special_ids[self._unk_text])  # a piece the vocabulary lacks
        self._cutter = self._spm[side]
        self._joiner = self._spm["target" if side == "target" and self.separate else "source"]
        pattern = "|".join(re.escape(t) for t in sorted(self._special_ids, key=len, reverse=True))
        self._split = re.compile(f"({pattern})")
        self._size = max([*own.values(), *self._specials], default=-1) + 1

    # ---------------------------------------------------------------- the interface

    @property
    def vocab_size(self) -> int:
        return self._size

    def _around(self) -> tuple[list[int], list[int]]:
        return [], [self.eos_id] if self.eos_id is not None else []

    def _pieces(self, texts: list[str]) -> list[list[int]]:
        return [self._ids(text) for text in texts]

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in self._split.split(text):
            if not part:
                continue
            if part in self._special_ids:
                ids.append(self._special_ids[part])
                continue
            code = []
            end = part.find("<<") if part.startswith(">>") else -1
            if end != -1:  # a language code, e.g. >>fr<< in a multilingual target's source
                code, part = [part[: end + 2]], part[end + 2 :]
            for piece in code + self._cutter.encode(part, out_type=str):
                ids.append(self._special_ids.get(piece, self._encoder.get(piece, self._unk_piece)))
        return ids

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        text = ""
        run: list[str] = []  # pieces not yet joined
        for i in ids:
            if skip_special_tokens and i in self._specials:
                continue
            token = self._specials.get(i) or self._piece(i)
            if token in self._special_ids:  # by its text: the target vocabulary's own <pad> too
                text, run = text + self._joiner.decode_pieces(run) + token + " ", []
            else:
                run.append(token)
        text = (text + self._joiner.decode_pieces(run)).replace(SPACE, " ").strip()
        if self.settings.get("clean_up_tokenization_spaces") is True:
            for before, after in _CLEAN_UP:
                text = text.replace(before, after)
        return text

    def _piece(self, i: int) -> str:
        """The token of an id that is not a special one: the vocabulary's, else the joining SentencePiece model's,
        else <unk>."""
        if i in self._decoder:
            return self._decoder[i]
        if 0 <= i < self._joiner.get_piece_size():
            return self._joiner.id_to_piece(i) or self._unk_text
        return self._unk_text

    def id_to_token(self, i: int) -> str | None:
        return self._specials.get(i, self._decoder.get(i))

    def token_to_id(self, token: str) -> int | None:
        return self._special_ids.get(token, self._encoder.get(token))

    def other_side(self) -> MarianTokenizer:
        """The tokenizer of the other side, from the same files."""
        other = "target" if self.side == "source" else "source"
        return MarianTokenizer(self.models, self.vocab, self.target_vocab, self.settings, other)

    # ---------------------------------------------------------------- files

    def hf_files(self) -> dict[str, bytes]:
        """Each file of the Opus-MT layout (name → its bytes), as transformers' MarianTokenizer reads them (a
        Hugging Face export writes these instead of tokenizer.json)."""
        settings = {**self.settings, "tokenizer_class": "MarianTokenizer", "separate_vocabs": self.separate}
        settings |= {f"{name}_token": self._specials[getattr(self, f"{name}_id")] for name in DEFAULTS}
        files = {SOURCE_SPM: self.models["source"], TARGET_SPM: self.models["target"], VOCAB: _json(self.vocab)}
        if self.target_vocab is not None:
            files[TARGET_VOCAB] = _json(self.target_vocab)
        files[CONFIG] = _json(settings)
        return files

    def save(self, directory: str | Path, prefix: str = "") -> Path:
        """Every file of the layout (both sides': the prefix only names this side); returns vocab.json's path."""
        _side(prefix)
        for name, data in self.hf_files().items():
            atomic_write(Path(directory) / name, lambda tmp, data=data: Path(tmp).write_bytes(data))
        return Path(directory) / VOCAB

    @classmethod
    def load(cls, directory: str | Path, prefix: str = "") -> MarianTokenizer:
        """The side ``prefix`` names of the Opus-MT tokenizer in ``directory``; a missing or unreadable file is one
        line naming it."""
        side, directory = _side(prefix), Path(directory)
        config = directory / CONFIG
        settings = read_json_object(config, "tokenizer config") if config.exists() else {}
        separate = settings.get("separate_vocabs", False)
        if not isinstance(separate, bool):
            raise ValueError(f"{str(config)!r}: separate_vocabs must be true or false, got {separate!r}")
        models = {}
        for name, file in (("source", SOURCE_SPM), ("target", TARGET_SPM)):
            path = directory / file
            if not path.is_file():
                raise FileNotFoundError(f"SentencePiece model {str(path)!r} is missing")
            models[name] = path.read_bytes()
        vocab = _vocab(directory / VOCAB)
        target_vocab = _vocab(directory / TARGET_VOCAB) if separate else None
        try:
            return cls(models, vocab, target_vocab, settings, side)
        except ValueError as err:
            raise ValueError(f"Marian tokenizer in {str(directory)!r}: {err}") from None

    def __getstate__(self) -> dict[str, Any]:  # SentencePiece's processors are rebuilt from the models' bytes
        return {"models": self.models, "vocab": self.vocab, "target_vocab": self.target_vocab,
                "settings": self.settings, "side": self.side}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]


def _side(prefix: str) -> str:
    if prefix not in SIDES:
        raise ValueError(
            f"a Marian tokenizer's prefix names its side: '' or 'src_' (source), 'target_' or 'tgt_' (target); "
            f"got {prefix!r}"
        )
    return SIDES[prefix]


def _name(value: Any, default: str) -> str:
    """A special token's name in tokenizer_config.json: a string, or an AddedToken dict with its 'content'."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) and value else default


def _vocab(path: Path) -> dict[str, int]:
    """vocab.json (or target_vocab.json): piece → id, each id a non-negative integer."""
    vocab = read_json_object(path, "Marian vocabulary")  # missing, empty, not JSON: one line naming it
    for piece, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ValueError(f"Marian vocabulary {str(path)!r}: {piece!r} must map to an id >= 0, got {i!r}")
    return vocab


def _processor(data: bytes, side: str) -> Any:
    """A ``sentencepiece.SentencePieceProcessor`` of the serialized model ``data``."""
    try:
        import sentencepiece
    except ImportError:
        raise ModuleNotFoundError(
            "reading a Marian (Opus-MT) tokenizer needs the sentencepiece package: pip install 'tformer[text]'"
        ) from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except (RuntimeError, OSError) as err:
        raise ValueError(f"{side}.spm is not a SentencePiece model ({str(err).strip().splitlines()[0]})") from None
    return processor


def _json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
