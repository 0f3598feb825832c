"""Solutions to the exercises of lesson 7, a GPT.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def top_k_probs(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The next-token distribution (V,) after top-k: the softmax of the k largest
    logits, 0 everywhere else."""
    values, ids = logits.float().topk(min(k, logits.shape[-1]))
    probs = torch.zeros(logits.shape[-1])
    probs[ids] = values.softmax(-1)
    return probs


def nucleus(probs: torch.Tensor, p: float) -> list[int]:
    """The token ids top-p keeps, sorted: the most probable tokens, in order, until
    their probabilities add up to at least ``p`` (the first one always)."""
    ordered, ids = probs.sort(descending=True)
    before = ordered.cumsum(-1) - ordered  # the mass of the tokens ranked above each
    keep = before < p
    keep[0] = True
    return sorted(ids[keep].tolist())


@torch.no_grad()
def greedy_with_cache(model, prompt_ids: list[int], n: int) -> list[int]:
    """``n`` greedy ids after ``prompt_ids``: the prompt through the model once (the
    prefill), then one new token per call, the keys and values kept in the cache."""
    cache = model.new_cache()
    logits = model(torch.tensor([prompt_ids]), cache=cache)[0, -1]  # (V,)
    out = [int(logits.argmax())]
    while len(out) < n:
        logits = model(torch.tensor([[out[-1]]]), cache=cache)[0, -1]
        out.append(int(logits.argmax()))
    return out
