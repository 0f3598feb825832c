"""Solutions to the exercises of lesson 5, the decoder step by step.

tests/test_lessons.py checks them."""

from __future__ import annotations

import torch


def layer_norm_by_hand(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dimension: mean 0 and variance 1 (the biased variance,
    as nn.LayerNorm uses), then × γ (``weight``) + β (``bias``)."""
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


@torch.no_grad()
def greedy_translate(
    model, src_ids: list[int], sos_id: int, eos_id: int, max_len: int = 10
) -> list[int]:
    """Greedy decoding: encode once, then feed <sos> + the words so far and append the
    most probable next word, until <eos> (kept in the result) or ``max_len`` words."""
    memory = model.encode(torch.tensor([src_ids]))  # (1, S, D)
    out = [sos_id]
    for _ in range(max_len):
        logits = model.decode(torch.tensor([out]), memory)  # (1, t, V)
        out.append(int(logits[0, -1].argmax()))
        if out[-1] == eos_id:
            break
    return out[1:]


def top_k_words(
    logits: torch.Tensor, vocab: list[str], k: int
) -> list[tuple[str, float]]:
    """The k most probable words of one row of logits with their probabilities,
    the most probable first."""
    probs = torch.softmax(logits.float(), dim=-1)
    values, indices = probs.topk(k)
    return [(vocab[i], float(p)) for p, i in zip(values.tolist(), indices.tolist())]
