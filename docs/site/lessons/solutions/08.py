"""Solutions to the exercises of lesson 8, BERT.

tests/test_lessons.py checks them."""

from __future__ import annotations

import random

import torch

IGNORE = -100  # the label of a position that was not picked


def mlm_mask(
    ids: torch.Tensor,
    maskable: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ``ids`` (B, T): 15% of the ``maskable`` positions picked; of
    those, 80% become ``mask_id``, 10% a random id, 10% stay. Returns the new ids and
    the labels (the original id where picked, IGNORE elsewhere)."""
    picked = (torch.rand(ids.shape, generator=generator) < 0.15) & maskable
    labels = torch.where(picked, ids, torch.full_like(ids, IGNORE))
    roll = torch.rand(ids.shape, generator=generator)  # one draw decides the three cases
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    new = torch.where(picked & (roll < 0.8), torch.full_like(ids, mask_id), ids)
    new = torch.where(picked & (roll >= 0.8) & (roll < 0.9), random_ids, new)
    return new, labels


def nsp_examples(sentences: list[str], seed: int = 0) -> list[tuple[str, str, int]]:
    """(A, B, label) for each sentence A with a successor in the document: B is the
    successor (label 0) or, with probability ½, another sentence that is neither A
    nor its successor (label 1). Needs at least 3 sentences."""
    if len(sentences) < 3:
        raise ValueError("NSP needs at least 3 sentences")
    rng = random.Random(seed)
    examples = []
    for i in range(len(sentences) - 1):
        if rng.random() < 0.5:
            examples.append((sentences[i], sentences[i + 1], 0))
        else:
            others = [j for j in range(len(sentences)) if j not in (i, i + 1)]
            examples.append((sentences[i], sentences[rng.choice(others)], 1))
    return examples


def most_similar(encoder, query: str, candidates: list[str]) -> str:
    """The candidate whose sentence embedding has the largest cosine similarity with
    the query's (the embeddings have length 1: the dot product is the cosine)."""
    embeddings = encoder.encode([query, *candidates])  # (1 + N, D)
    scores = embeddings[1:] @ embeddings[0]  # (N,)
    return candidates[int(scores.argmax())]
