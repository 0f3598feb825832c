"""Fill-mask: the MLM head's distribution at every ``[MASK]`` of a sentence.

    "the cat sat on the [MASK]." ─ [CLS] … [MASK] … [SEP] ─ Bert ─ hidden (1, T, D)
        ─ rows at the [MASK] positions (M, D) ─ MLM head ─ (M, V) ─ softmax ─ top-k per [MASK]

:func:`load_masked_lm` reads a directory written by ``tformer train bert`` (our ``config.json``) or a
Hugging Face BERT directory (``config.json`` with ``hidden_size``, ``model.safetensors`` holding the
``cls.predictions`` MLM head, ``tokenizer.json`` or ``vocab.txt``).

Dimension legend: T tokens, D model dim, V vocabulary, M number of [MASK] tokens, K top-k.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tformer.checks import read_json_object
from tformer.models.bert import Bert
from tformer.models.checkpoint import model_dir
from tformer.tokenizers import WordPieceTokenizer

__all__ = ["load_masked_lm", "fill_mask"]


def _load_hf(directory: Path) -> Bert:
    from tformer.hf.directory import bert_from_hf_dir, read_hf_bert_dir

    _, config, state = read_hf_bert_dir(directory)
    if not any(k.startswith("cls.predictions.") for k in state):
        raise ValueError(
            f"{str(directory)!r} has no MLM head (cls.predictions.*), e.g. a sentence-transformers encoder: "
            "fill-mask needs BertForMaskedLM or BertForPreTraining weights"
        )
    return bert_from_hf_dir(directory, config, state)


def load_masked_lm(directory: str | Path) -> tuple[Bert, WordPieceTokenizer]:
    """A BERT with its MLM head and its tokenizer, from our model directory (a training run's: its best model)
    or a Hugging Face one."""
    directory = model_dir(directory)
    path = directory / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is missing: {str(directory)!r} is not a model directory")
    config = read_json_object(path, "model config")
    hf = "hidden_size" in config
    model = _load_hf(directory) if hf else Bert.from_pretrained(directory)
    tokenizer = WordPieceTokenizer.load(directory)
    n, v = tokenizer.vocab_size, model.config.vocab_size
    if n > v or (n != v and not hf):  # a Hugging Face vocab_size may be padded above the tokenizer's
        name = "tokenizer.json" if (directory / "tokenizer.json").is_file() else "vocab.txt"
        raise ValueError(
            f"tokenizer file {str(directory / name)!r} has {n} tokens but the model's vocab_size is {v}: "
            "the tokenizer and the weights do not belong together"
        )
    return model, tokenizer


@torch.no_grad()
def fill_mask(model: Bert, tokenizer: WordPieceTokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text`` (left to right), the ``top_k`` (token, probability) pairs."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    ids = tokenizer.encode(text, add_special_tokens=True, max_length=model.config.max_len)  # [CLS] … [SEP]
    types = [0] * len(ids)
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    if not positions:
        raise ValueError(f"no [MASK] token in {text!r} (within the first {model.config.max_len - 2} tokens)")
    model.eval()
    device = next(model.parameters()).device
    hidden = model(torch.tensor([ids], device=device), torch.tensor([types], device=device))  # (1, T, D)
    probs = model.mlm_head(hidden[0, positions]).float().softmax(-1)  # (M, D) -> (M, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (M, K)
    return [
        [(tokenizer.id_to_token(i) or str(i), p) for i, p in zip(row_ids.tolist(), row_p.tolist())]
        for row_ids, row_p in zip(top.indices, top.values)
    ]
