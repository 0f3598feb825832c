"""From token-id pairs to padded tensors: teacher forcing and length-bucketed batches.

Teacher forcing (the notes' example, target "je vais bien"):

    decoder input  tgt_in  = <sos> je vais bien
    labels         tgt_out =       je vais bien <eos>

so position t of the decoder predicts token t+1 of the target. Batches group sentences of similar
length under a token budget, so little compute goes to padding.

:class:`EncodedPairs` holds encoded pairs as numpy arrays over a stream of ids (memory-mapped shards from
:func:`tformer.data.prepare_pairs`, or ids in memory): no Python object per pair. :func:`budget_batches` groups them
from their lengths alone (the same batches :func:`token_budget_batches` makes of lists, for the same seed), and
:meth:`EncodedPairs.batch` builds a batch's tensors only when it is trained on.

Dimension legend: B batch, S source length, T target length (+1 for <sos>/<eos>).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from tformer.checks import yes_no
from tformer.data import TokenStream
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_PAD as PAD
from tformer.tokens import TRANSLATION_SOS as SOS

__all__ = ["Batch", "make_batch", "token_budget_batches", "budget_batches", "EncodedPairs"]


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids, padded with <pad>
    tgt_in: torch.Tensor  # (B, T) <sos> + target
    tgt_out: torch.Tensor  # (B, T) target + <eos>; <pad> where tgt_in is padding
    pad: int = PAD  # the model's <pad> id (an Opus-MT model's is its last id)
    tokens: int | None = None  # n_tokens, counted where the batch was made (on the host: no read of a device)
    # whether any source / decoder-input row holds <pad> (after <sos>), found where the batch was made; passed to the
    # model so that it does not read its masks off the device (None: unknown, the model reads them)
    padded: tuple[bool, bool] | None = None

    @property
    def n_tokens(self) -> int:
        """Real (non-pad) target tokens: what the loss is averaged over."""
        return self.tokens if self.tokens is not None else int((self.tgt_out != self.pad).sum())

    def forward_args(self) -> dict:
        """What the model's forward takes besides the ids: ``src_padded`` and ``tgt_padded`` where they are known."""
        return {} if self.padded is None else {"src_padded": self.padded[0], "tgt_padded": self.padded[1]}

    def to(self, device) -> Batch:
        moved = (self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))
        return Batch(*moved, self.pad, self.n_tokens, self.padded)

    def pin_memory(self) -> Batch:
        """The tensors in pinned memory (the Trainer's feed, on a machine with a GPU)."""
        pinned = (self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory())
        return Batch(*pinned, self.pad, self.n_tokens, self.padded)


def _padded(src: np.ndarray | torch.Tensor, tgt_in: np.ndarray | torch.Tensor, pad: int) -> tuple[bool, bool]:
    """Whether the host-side ``src`` / ``tgt_in`` hold ``pad`` (the decoder's start may be the pad id: not counted),
    as the model's padding masks would say."""
    return bool((src == pad).any()), bool((tgt_in[:, 1:] == pad).any())


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
    return Batch(src, tgt_in, tgt_out, pad, int((tgt_out != pad).sum()), _padded(src, tgt_in, pad))


def token_budget_batches(
    pairs: list[tuple[list[int], list[int]]], batch_tokens: int, seed: int, shuffle: bool = True
) -> list[list[int]]:
    """Indices of ``pairs`` grouped into batches whose padded size (rows × longest side) ≤ ``batch_tokens``.

    Sentences are sorted by length (with a seeded random tie-break) so each batch holds similar
    lengths; the order of batches is shuffled with ``seed``. Same seed → same batches (:func:`budget_batches`
    of the pairs' lengths).
    """
    sizes = np.fromiter((max(len(s), len(t) + 1) for s, t in pairs), dtype=np.int64, count=len(pairs))
    return [b.tolist() for b in budget_batches(sizes, batch_tokens, seed, shuffle)]


def budget_batches(sizes: np.ndarray, batch_tokens: int, seed: int, shuffle: bool = True) -> list[np.ndarray]:
    """Indices (int64 arrays) of the pairs whose ``sizes`` (N,) (each ``max(source length, target length + 1)``) are
    given, grouped into batches whose padded size (rows × longest) ≤ ``batch_tokens`` (a longer pair alone).

    Sorted by size with a tie-break drawn from ``random.Random(seed)`` (numpy draws the same numbers from the same
    Mersenne Twister), cut greedily, the batches shuffled by the same generator: exactly the batches the loop over a
    list of pairs made before, from arrays alone."""
    yes_no.check(shuffle, "shuffle")  # "no" is a true string: refused, not shuffled
    sizes = np.asarray(sizes)
    sizes = sizes if sizes.dtype.kind in "iu" else sizes.astype(np.int64)  # int32 sizes stay int32 (memory)
    rng = random.Random(seed)
    noise = _draws(rng, len(sizes)) if shuffle else np.zeros(len(sizes))
    order = np.lexsort((noise, sizes))  # by size, then the draw (stable: by index when none)
    ordered = sizes[order]
    batches: list[np.ndarray] = []
    start, n = 0, len(sizes)
    while start < n:
        # sizes grow along the order: a batch of k rows is k × its last size, which grows with k
        window = ordered[start : start + batch_tokens // int(ordered[start])]
        fits = int(np.searchsorted(window * np.arange(1, len(window) + 1), batch_tokens, side="right"))
        count = max(fits, 1)
        batches.append(order[start : start + count])
        start += count
    if shuffle:
        rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


def _draws(rng: random.Random, n: int) -> np.ndarray:
    """``[rng.random() for _ in range(n)]`` as an array, drawn by numpy from ``rng``'s state, ``rng`` moved past them."""
    version, internal, gauss = rng.getstate()
    twister = np.random.RandomState()
    twister.set_state(("MT19937", np.asarray(internal[:-1], dtype=np.uint32), internal[-1], 0, 0.0))
    out = twister.random_sample(n)
    state = twister.get_state(legacy=False)["state"]
    rng.setstate((version, (*state["key"].tolist(), int(state["pos"])), gauss))
    return out


class EncodedPairs:
    """Encoded (source, target) pairs, N of them: their ids in a :class:`~tformer.data.TokenStream` (memory-mapped
    shards, or an array), each pair's source ids then its target ids; where each pair starts (N,) int64 and its two
    lengths (N,) int32. A batch reads at most ``limit`` ids of each side (:meth:`cut`: the model's positions)."""

    def __init__(
        self,
        stream: TokenStream,
        src_at: np.ndarray,
        src_len: np.ndarray,
        tgt_len: np.ndarray,
        limit: int | None = None,
    ) -> None:
        self.stream, self.limit = stream, limit
        self.src_at = np.asarray(src_at, dtype=np.int64)
        self.src_len, self.tgt_len = np.asarray(src_len, dtype=np.int32), np.asarray(tgt_len, dtype=np.int32)

    @classmethod
    def of(cls, pairs: list[tuple[list[int], list[int]]]) -> EncodedPairs:
        """Pairs of id lists, in memory."""
        src_len = np.fromiter((len(s) for s, _ in pairs), dtype=np.int32, count=len(pairs))
        tgt_len = np.fromiter((len(t) for _, t in pairs), dtype=np.int32, count=len(pairs))
        src_at = np.cumsum(src_len + tgt_len, dtype=np.int64) - src_len - tgt_len
        flat = [i for s, t in pairs for i in (*s, *t)]
        return cls(TokenStream.of(flat), src_at, src_len, tgt_len)

    def __len__(self) -> int:
        return len(self.src_at)

    def select(self, indices) -> EncodedPairs:
        """The pairs ``indices`` (an int array), in that order."""
        i = np.asarray(indices, dtype=np.int64)
        return EncodedPairs(self.stream, self.src_at[i], self.src_len[i], self.tgt_len[i], self.limit)

    def cut(self, limit: int) -> EncodedPairs:
        """The pairs with ids on both sides, each side read to its first ``limit`` ids (the model's positions); the
        arrays are shared when no pair is dropped."""
        kept = np.flatnonzero((self.src_len > 0) & (self.tgt_len > 0))
        pairs = self if len(kept) == len(self) else self.select(kept)
        limit = limit if self.limit is None else min(limit, self.limit)
        return EncodedPairs(pairs.stream, pairs.src_at, pairs.src_len, pairs.tgt_len, limit)

    def lengths(self, indices=None) -> tuple[np.ndarray, np.ndarray]:
        """The source and target lengths a batch reads (each side cut to ``limit``) of the pairs ``indices`` (all)."""
        src, tgt = (self.src_len, self.tgt_len) if indices is None else (self.src_len[indices], self.tgt_len[indices])
        if self.limit is None:
            return src, tgt
        return np.minimum(src, self.limit), np.minimum(tgt, self.limit)

    def sizes(self) -> np.ndarray:
        """Each pair's padded length in a batch: ``max(source, target + 1)`` (N,)."""
        src, tgt = self.lengths()
        return np.maximum(src, tgt + 1)

    def target_tokens(self, indices) -> int:
        """The real target tokens of the pairs ``indices`` (each target + its <eos>): a batch's ``n_tokens``."""
        _, tgt = self.lengths(np.asarray(indices, dtype=np.int64))
        return int(tgt.sum(dtype=np.int64)) + len(tgt)

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        """Pair ``i``'s ids (as cut)."""
        src_len, tgt_len = self.lengths(np.asarray([i]))
        s, t = int(self.src_at[i]), int(self.src_at[i] + self.src_len[i])
        return self.stream.read(s, s + int(src_len[0])).tolist(), self.stream.read(t, t + int(tgt_len[0])).tolist()

    def batch(self, indices, pad: int = PAD, sos: int = SOS, eos: int = EOS) -> Batch:
        """The teacher-forcing :class:`Batch` of the pairs ``indices`` (as :func:`make_batch` pads them), read now."""
        i = np.asarray(indices, dtype=np.int64)
        src_len, tgt_len = self.lengths(i)
        src_at = self.src_at[i]
        tgt_at = src_at + self.src_len[i]  # the target follows the whole source
        src = np.full((len(i), int(src_len.max())), pad, dtype=np.int64)  # (B, S)
        tgt_in = np.full((len(i), int(tgt_len.max()) + 1), pad, dtype=np.int64)  # (B, T)
        tgt_out = tgt_in.copy()
        for row, (a, b, s, t) in enumerate(zip(src_at.tolist(), tgt_at.tolist(), src_len.tolist(), tgt_len.tolist())):
            src[row, :s] = self.stream.read(a, a + s)
            target = self.stream.read(b, b + t)
            tgt_in[row, 0], tgt_in[row, 1 : t + 1] = sos, target
            tgt_out[row, :t], tgt_out[row, t] = target, eos
        tokens = int((tgt_out != pad).sum())  # counted here, on the host, not by the training step
        tensors = torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)
        return Batch(*tensors, pad, tokens, _padded(src, tgt_in, pad))
