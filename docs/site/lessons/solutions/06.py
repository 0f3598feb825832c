"""Solutions to the exercises of lesson 6, translation.

tests/test_lessons.py checks them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import torch


def masked_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, pad_id: int
) -> torch.Tensor:
    """Mean of −log p(label) over the positions whose label is not ``pad_id``:
    ``F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=pad_id)``
    without ``ignore_index``. ``logits`` (B, T, V), ``labels`` (B, T)."""
    log_p = logits.log_softmax(-1)  # (B, T, V)
    real = labels != pad_id  # (B, T)
    safe = labels.masked_fill(~real, 0)  # any valid id where the label is padding
    picked = log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return -picked[real].mean()


def beam_search_toy(
    next_probs: Callable[[tuple[str, ...]], dict[str, float]],
    beam_size: int,
    steps: int,
) -> tuple[tuple[str, ...], float]:
    """Keep the ``beam_size`` most probable prefixes at each of ``steps`` steps;
    return the most probable sequence and its probability."""
    beams: list[tuple[tuple[str, ...], float]] = [((), 1.0)]
    for _ in range(steps):
        candidates = [
            (words + (word,), p * q)
            for words, p in beams
            for word, q in next_probs(words).items()
        ]
        beams = sorted(candidates, key=lambda c: -c[1])[:beam_size]
    return beams[0]


def corpus_bleu(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """BLEU (0-100) of word-split sentences against one reference each: modified
    n-gram precisions for n = 1..4 over the whole corpus, their geometric mean,
    times the brevity penalty. 0 when some precision is 0."""
    matches, totals = [0] * 4, [0] * 4
    hyp_len = sum(len(h) for h in hypotheses)
    ref_len = sum(len(r) for r in references)
    for h, r in zip(hypotheses, references):
        for n in range(1, 5):
            h_grams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            r_grams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, r_grams[g]) for g, c in h_grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    brevity = min(1.0, math.exp(1 - ref_len / hyp_len))
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    return 100 * brevity * math.exp(log_precision)
