"""Fill-mask: the MLM head's distribution at every ``[MASK]`` of a sentence.

    "the cat sat on the [MASK]." ─ [CLS] … [MASK] … [SEP] ─ Bert ─ hidden (1, T, D)
        ─ rows at the [MASK] positions (M, D) ─ MLM head ─ (M, V) ─ softmax ─ top-k per [MASK]

:func:`load_masked_lm` reads a directory written by ``tformer train bert`` (our ``config.json``) or a
Hugging Face BERT directory (``config.json`` with ``hidden_size``, ``model.safetensors`` holding the
``cls.predictions`` MLM head, ``tokenizer.json`` or ``vocab.txt``).

Dimension legend: T tokens, D model dim, V vocabulary, M number of [MASK] tokens, K top-k.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tformer.bert.tokenizer import WordPiece
from tformer.models.bert import Bert

__all__ = ["load_masked_lm", "fill_mask"]


def _load_hf(directory: Path, config: dict) -> Bert:
    from safetensors.torch import load_file

    from tformer.interop.hf import bert_config_from_hf, load_hf_bert_state

    weights = directory / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{str(weights)!r} is missing (only safetensors Hugging Face checkpoints are read)")
    state = load_file(str(weights))
    if not any(k.startswith("cls.predictions.") for k in state):
        raise ValueError(
            f"{str(directory)!r} has no MLM head (cls.predictions.*), e.g. a sentence-transformers encoder: "
            "fill-mask needs BertForMaskedLM or BertForPreTraining weights"
        )
    return load_hf_bert_state(Bert(bert_config_from_hf(config)), state).eval()


def load_masked_lm(directory: str | Path) -> tuple[Bert, WordPiece]:
    """A BERT with its MLM head and its tokenizer, from our model directory or a Hugging Face one."""
    directory = Path(directory)
    path = directory / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is missing: {str(directory)!r} is not a model directory")
    config = json.loads(path.read_text(encoding="utf-8"))
    model = _load_hf(directory, config) if "hidden_size" in config else Bert.from_pretrained(directory)
    return model, WordPiece.load(directory)


@torch.no_grad()
def fill_mask(model: Bert, tokenizer: WordPiece, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text`` (left to right), the ``top_k`` (token, probability) pairs."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    ids, types = tokenizer.single(tokenizer.encode(text), model.config.max_len)
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    if not positions:
        raise ValueError(f"no [MASK] token in {text!r} (within the first {model.config.max_len - 2} tokens)")
    model.eval()
    device = next(model.parameters()).device
    hidden = model(torch.tensor([ids], device=device), torch.tensor([types], device=device))  # (1, T, D)
    probs = model.mlm_head(hidden[0, positions]).float().softmax(-1)  # (M, D) -> (M, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (M, K)
    return [
        [(tokenizer.id_to_token(i), p) for i, p in zip(row_ids.tolist(), row_p.tolist())]
        for row_ids, row_p in zip(top.indices, top.values)
    ]
