"""Decoding, one step at a time, for inspection: each step's fed tokens, its pick and the top-k behind it.

:func:`greedy_steps` runs the decoding loop of :mod:`tformer.generation` (prefill, then one token per step over
the KV cache), so the numbers are the ones generation uses; :func:`top_k_probs` turns one row of logits into (token, id, p).

Dimension legend: S source length, T tokens fed, V vocabulary size.
"""

from __future__ import annotations

import torch

from tformer.generation import LMDecoder, Seq2SeqDecoder, decode_n, greedy, until
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
    if isinstance(ids, str):
        raise TypeError(
            f"{name} takes token ids, got the text {ids[:40]!r}: encode it first (tformer.load(DIR).encode(text), "
            "or the model's tokenizer)"
        )
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]  # (T,) → (1, T)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"{name} must be one sequence of ids, shape (T,) or (1, T), got {tuple(ids.shape)}")
    return ids


@torch.no_grad()
def greedy_steps(
    model, ids, max_new_tokens: int, vocab=None, k: int = 5, eos_id: int | None = None, start_id: int | None = None
) -> list[dict]:
    """Greedy decoding with the KV cache, one dict per step: the fed tokens, the pick and its top-k.

    Seq2seq: ``ids`` is the source; decoding starts from ``start_id`` (default <sos> = 2; a Marian's <pad>) and stops
    at ``eos_id`` (default <eos> = 3).
    GPT: ``ids`` is the prompt; it stops at ``eos_id`` if given, or at the context length.
    The steps are the decoding loop's (:func:`tformer.generation.decode_n`, greedy), run in eval mode.
    """
    if model.model_type not in ("seq2seq", "gpt"):
        raise TypeError(f"greedy generation needs a seq2seq or GPT model, got {type(model).__name__}")
    ids, was_training = as_ids(ids, "ids"), model.training
    steps: list[dict] = []
    start_id = SOS if start_id is None else start_id
    fed = [start_id] if model.model_type == "seq2seq" else ids[0].tolist()  # what the next step feeds

    def pick(logits: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
        """The greedy choice, written down with the top-k of the logits it was made from."""
        choice = greedy(logits)  # (1,)
        token = int(choice[0])
        prob = float(torch.softmax(logits[0].double(), dim=-1)[token])  # as top_k_probs computes it
        tokens = [token_text(vocab, i) for i in fed]
        top = top_k_probs(logits[0], vocab, k)
        steps.append(
            dict(step=len(steps) + 1, fed=tokens, token=token_text(vocab, token), id=token, prob=prob, candidates=top)
        )
        fed[:] = [token]  # (the cache holds everything before)
        return choice

    try:
        model.eval()
        decoder: LMDecoder | Seq2SeqDecoder
        if model.model_type == "seq2seq":
            eos_id = EOS if eos_id is None else eos_id
            decoder, inputs, limit = Seq2SeqDecoder(model, start_id), ids, model.config.max_len
        else:
            decoder, inputs, limit = LMDecoder(model), ids.tolist(), model.config.max_len - ids.shape[1]
        n = min(max_new_tokens, limit)
        if n > 0:
            logits, state = decoder.prefill(inputs, n)
            decode_n(decoder, state, logits, n, pick, None if eos_id is None else until(eos_id))
    finally:
        model.train(was_training)
    return steps
