"""From token-id pairs to padded tensors: teacher forcing and length-bucketed batches.

Teacher forcing (the notes' example, target "je vais bien"):

    decoder input  tgt_in  = <sos> je vais bien
    labels         tgt_out =       je vais bien <eos>

so position t of the decoder predicts token t+1 of the target. Batches group sentences of similar
length under a token budget, so little compute goes to padding.

Dimension legend: B batch, S source length, T target length (+1 for <sos>/<eos>).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from tformer.checks import yes_no
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_PAD as PAD
from tformer.tokens import TRANSLATION_SOS as SOS

__all__ = ["Batch", "make_batch", "token_budget_batches"]


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids, padded with <pad>
    tgt_in: torch.Tensor  # (B, T) <sos> + target
    tgt_out: torch.Tensor  # (B, T) target + <eos>; <pad> where tgt_in is padding
    pad: int = PAD  # the model's <pad> id (an Opus-MT model's is its last id)

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) target tokens: what the loss is averaged over."""
        return int((self.tgt_out != self.pad).sum())

    def to(self, device) -> Batch:
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.pad)


def _pad(rows: list[list[int]], pad: int = PAD) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def make_batch(pairs: list[tuple[list[int], list[int]]], pad: int = PAD, sos: int = SOS, eos: int = EOS) -> Batch:
    """Pad a list of (source ids, target ids) into a teacher-forcing :class:`Batch`; ``pad``, ``sos`` (the decoder's
    start) and ``eos``: tformer's ids unless the model has others (an Opus-MT model starts from its ``<pad>``)."""
    src = _pad([s for s, _ in pairs], pad)  # (B, S)
    tgt_in = _pad([[sos] + t for _, t in pairs], pad)  # (B, T)
    tgt_out = _pad([t + [eos] for _, t in pairs], pad)  # (B, T)
    return Batch(src, tgt_in, tgt_out, pad)


def token_budget_batches(
    pairs: list[tuple[list[int], list[int]]], batch_tokens: int, seed: int, shuffle: bool = True
) -> list[list[int]]:
    """Indices of ``pairs`` grouped into batches whose padded size (rows × longest side) ≤ ``batch_tokens``.

    Sentences are sorted by length (with a seeded random tie-break) so each batch holds similar
    lengths; the order of batches is shuffled with ``seed``. Same seed → same batches.
    """
    yes_no.check(shuffle, "shuffle")  # "no" is a true string: refused, not shuffled
    rng = random.Random(seed)
    noise = [rng.random() for _ in pairs] if shuffle else [0.0] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda i: (max(len(pairs[i][0]), len(pairs[i][1]) + 1), noise[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        size = max(len(pairs[i][0]), len(pairs[i][1]) + 1)
        if current and max(longest, size) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches
