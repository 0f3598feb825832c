"""Decoding, one step at a time, for inspection: each step's fed tokens, its pick and the top-k behind it.

:func:`greedy_steps` runs the model's own cached decoding (``model.decode`` / ``model(x, cache=...)``), so
the numbers are the ones generation uses; :func:`top_k_probs` turns one row of logits into (token, id, p).

Dimension legend: S source length, T tokens fed, V vocabulary size.
"""

from __future__ import annotations

import torch

from tformer.tokens import TRANSLATION_EOS, TRANSLATION_SOS

__all__ = ["top_k_probs", "token_text", "as_ids", "greedy_steps"]

SOS, EOS = TRANSLATION_SOS, TRANSLATION_EOS


def top_k_probs(logits: torch.Tensor, vocab: list[str] | None = None, k: int = 5) -> list[tuple[str, int, float]]:
    """softmax(``logits`` (V,)) → the ``k`` most likely tokens as (token, id, probability), best first.

    >>> top_k_probs(torch.tensor([45., 40., 49.]), ["bien", "Je", "vais"], k=3)[0][0]
    'vais'
    """
    if logits.dim() != 1:
        raise ValueError(f"logits must have shape (V,), got {tuple(logits.shape)}")
    if k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    probs = torch.softmax(logits.double(), dim=-1)  # (V,)
    values, ids = probs.topk(min(k, probs.numel()))
    return [(token_text(vocab, int(i)), int(i), float(p)) for p, i in zip(values, ids)]


def token_text(vocab: list[str] | None, i: int) -> str:
    return vocab[i] if vocab is not None and 0 <= i < len(vocab) else str(i)


def as_ids(ids, name: str) -> torch.Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]  # (T,) → (1, T)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"{name} must be one sequence of ids, shape (T,) or (1, T), got {tuple(ids.shape)}")
    return ids


@torch.no_grad()
def greedy_steps(model, ids, max_new_tokens: int, vocab=None, k: int = 5, eos_id: int | None = None) -> list[dict]:
    """Greedy decoding with the KV cache, one dict per step: the fed tokens, the pick and its top-k.

    Seq2seq: ``ids`` is the source; decoding starts from <sos> and stops at ``eos_id`` (default <eos> = 3).
    GPT: ``ids`` is the prompt; it stops at ``eos_id`` if given, or at the context length.
    """
    if model.model_type not in ("seq2seq", "gpt"):
        raise TypeError(f"greedy generation needs a seq2seq or GPT model, got {type(model).__name__}")
    ids, cache, was_training, steps = as_ids(ids, "ids"), model.new_cache(), model.training, []
    try:
        model.eval()
        if model.model_type == "seq2seq":
            memory = model.encode(ids)  # (1, S, D), computed once
            step_fn = lambda x: model.decode(x, memory, cache=cache)  # noqa: E731
            fed, limit, eos_id = torch.tensor([[SOS]]), model.config.max_len, EOS if eos_id is None else eos_id
        else:
            step_fn = lambda x: model(x, cache=cache)  # noqa: E731
            fed, limit = ids, model.config.max_len - ids.shape[1]
        for step in range(min(max_new_tokens, limit)):
            top = top_k_probs(step_fn(fed)[0, -1], vocab, k)  # logits (V,) of the last position
            token, next_id, prob = top[0]
            fed_tokens = [token_text(vocab, int(i)) for i in fed[0]]
            steps.append(dict(step=step + 1, fed=fed_tokens, token=token, id=next_id, prob=prob, candidates=top))
            if next_id == eos_id:
                break
            fed = torch.tensor([[next_id]])  # (1, 1): the cache holds everything before
    finally:
        model.train(was_training)
    return steps
