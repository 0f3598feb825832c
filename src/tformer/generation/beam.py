"""Beam search for an encoder–decoder, on the decoding loop's prefill and step (:mod:`tformer.generation.loop`).

Where greedy decoding and sampling keep one continuation per row, beam search keeps the K best of every source and
ranks their 2K best continuations after each step; the steps themselves are the same :class:`Seq2SeqDecoder`
prefill and :func:`decode_one` calls. Sizes are bounded where a bad value would cost without end:
``beam_size`` ≤ :data:`MAX_BEAM`, ``|length_penalty|`` ≤ :data:`MAX_LENGTH_PENALTY`.

Dimension legend: B sources still running, K beams, R rows per source (1 at the first step, then K), V vocabulary
size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from tformer.checks import check_positive_int, compile_option
from tformer.fast.linear import DecodingWeights
from tformer.generation.cache_size import check_kv_cache
from tformer.generation.loop import Seq2SeqDecoder, check_decoding, check_translation, decode_one
from tformer.generation.samplers import is_finite_number
from tformer.generation.static import Compile, StaticSeq2SeqDecoder
from tformer.generation.static_cache import StaticCaches

__all__ = ["MAX_BEAM", "MAX_LENGTH_PENALTY", "BeamCandidate", "beam_search"]

MAX_BEAM = 64  # beams per source: each costs a row of the cache and of every step's (B·K, V) logits
MAX_LENGTH_PENALTY = 10.0  # |length_penalty|: length ** 10 is far past any useful ranking, and stays finite


class BeamCandidate(NamedTuple):
    """One of the 2K continuations a beam-search step ranked, as ``beam_search(on_step=...)`` reports it."""

    beam: int  # the beam it continues: its slot at the previous step (0 at step 1, the <sos> root)
    token: int
    logp: float  # total log-probability of the hypothesis, this token included
    status: str  # "alive" (the next step's beam ``slot``), "finished" (a hypothesis) or "pruned"
    slot: int | None  # alive: its beam slot from now on; else None
    score: float | None  # finished: logp / length ** length_penalty; else None


def _check(beam_size: int, max_len: int, length_penalty: float, compile: bool | Compile) -> None:
    compile_option.check(compile, "compile")
    check_positive_int(max_len, "max_len")
    check_positive_int(beam_size, "beam_size")
    if beam_size > MAX_BEAM:
        raise ValueError(f"beam_size must be at most {MAX_BEAM} (generation.MAX_BEAM), got {beam_size}")
    if not is_finite_number(length_penalty) or abs(length_penalty) > MAX_LENGTH_PENALTY:
        raise ValueError(
            f"length_penalty must be in [-{MAX_LENGTH_PENALTY:g}, {MAX_LENGTH_PENALTY:g}], got {length_penalty!r}"
        )


@torch.inference_mode()
def beam_search(
    model,
    src: torch.Tensor,
    sos_id: int,
    eos_id: int,
    beam_size: int = 5,
    max_len: int = 128,
    length_penalty: float = 1.0,
    on_step: Callable[[int, int, list[BeamCandidate]], None] | None = None,
    compile: bool | Compile = False,
    decoding: DecodingWeights | None = None,
    caches: StaticCaches | None = None,
) -> list[list[int]]:
    """Beam search for a batch of sources ``src`` (B, S); returns the best ids per source.

    A finished hypothesis scores ``sum(log p) / length ** length_penalty`` (length counts the
    tokens after <sos>, <eos> included; ``|length_penalty|`` ≤ :data:`MAX_LENGTH_PENALTY`, ``beam_size`` ≤
    :data:`MAX_BEAM`). Each step ranks the 2K best continuations of all beams;
    an <eos> among the first K finishes a hypothesis, the best K others stay live. A source is done
    when it has ``beam_size`` finished hypotheses (those that finish in the same step all count);
    at step ``max_len`` the first K continuations all finish, <eos> or not. These are the
    semantics of Hugging Face ``generate(num_beams=K, length_penalty=…, early_stopping=True)``;
    ``tests/test_interop_marian.py`` checks that both give the same translations for the same weights.
    A done source leaves the batch, its beams, cache rows and memory with it. The decoder gets the memory
    of the B sources still running and their B·K beam rows (B at the first step, when the K beams of a source
    are all the same): rows i·K to i·K + K − 1 belong to source i.

    ``on_step(step, source, candidates)``, if given, is called after each step for each source still running, with
    the step's ranked candidates (:class:`BeamCandidate`): which became beams, which finished, which were pruned
    (``tformer explore`` draws the search tree from it); it only watches, the search is the same with or without it.
    The model decodes with its own kernels (:class:`~tformer.generation.loop.Seq2SeqDecoder`); ``decoding``: as
    :func:`~tformer.generation.generate.translate_ids`'s. ``compile=True``
    searches the same beams on a static KV cache of B·K rows (a done source's rows go on, unread), its one-token step
    compiled once (:class:`~tformer.generation.static.StaticSeq2SeqDecoder`); ``caches``: as
    :func:`~tformer.generation.generate.generate_lm`'s.
    """
    _check(beam_size, max_len, length_penalty, compile)
    max_len = check_translation(model, src, sos_id, max_len)
    check_decoding(decoding)
    b, k, device = src.shape[0], beam_size, src.device
    what = f"{b} source(s) x beam_size={k} x {max_len} new tokens"
    check_kv_cache(model, b * k, max_len + 1, what, source_len=src.shape[1], static=bool(compile))
    decoder: Seq2SeqDecoder | StaticSeq2SeqDecoder = (
        StaticSeq2SeqDecoder(model, sos_id, compile, beams=k, decoding=decoding, caches=caches)
        if compile
        else Seq2SeqDecoder(model, sos_id, decoding)
    )
    # each source once: the K beams of source i (rows i·K … i·K + K − 1) share its memory, and cross-attention
    # computes, caches and reads its keys/values once for all of them (tformer.fast.attention)
    logits, state = decoder.prefill(src, max_len)  # (B, V): one row per source, its K beams would all be <sos>
    # The model needs only each beam's last token; the histories and the bookkeeping live on the CPU as plain
    # lists (_Search), so a step moves the 2K best candidates of every source off the device ONCE (not per source).
    # The first step's rows are the B sources; the reorder after it copies each source's row into its K beam rows,
    # and every later step feeds R = K rows per source.
    history: list[list[int]] = [[] for _ in range(b)]  # tokens after <sos>, per row
    search = _Search(k, max_len, eos_id, length_penalty, on_step, history, [[] for _ in range(b)], list(range(b)))
    scores = torch.zeros(b, 1, device=device)  # (B, R) the rows' total log-probabilities
    for step in range(1, max_len + 1):
        r, vocab = scores.shape[1], logits.shape[-1]
        # log-probabilities, then every candidate's total score, written over the logits: two fewer (B·R, V)
        # tensors of fresh memory per step
        logits = logits.float()
        logp = logits.sub_(torch.logsumexp(logits, -1, keepdim=True))  # log_softmax
        cand = logp.view(b, r, vocab).add_(scores[:, :, None]).view(b, r * vocab)  # (B, R·V)
        top_scores, top_idx = cand.topk(min(2 * k, r * vocab), dim=-1)  # (B, 2K)
        new_scores, new_rows, new_tokens = search.rank(step, top_scores.tolist(), top_idx.tolist(), r, vocab)
        keep = [i for i, source in enumerate(search.sources) if len(search.finished[source]) < k]  # still running
        if step == max_len or not keep:
            break
        rows = [row for i in keep for row in new_rows[i]]  # (B·K,) the row each new beam continues
        flat_tokens = [t for i in keep for t in new_tokens[i]]
        search.history = [search.history[row] + [t] for row, t in zip(rows, flat_tokens)]
        scores = torch.tensor([new_scores[i] for i in keep], device=device)  # (B, K)
        # a beam's row stays within its source: while every source runs, the per-source memory and cross-attention
        # cache stay; done sources leave the batch with their beams, cross-attention cache rows and memory
        kept = None if len(keep) == b else torch.tensor(keep, device=device)
        state.follow(torch.tensor(rows, device=device), kept)
        if kept is not None:
            search.sources, b = [search.sources[i] for i in keep], len(keep)
        last = torch.tensor(flat_tokens, dtype=torch.long, device=device)  # (B·K,)
        logits = decode_one(decoder, state, last)  # (B·K, V), a fresh tensor
    return [max(f, key=lambda x: x[0])[1] if f else [] for f in search.finished]


@dataclass
class _Search:
    """A beam search's bookkeeping, on the CPU: the beams' histories, the finished hypotheses, the running sources."""

    k: int
    max_len: int
    eos_id: int
    length_penalty: float
    on_step: Callable[[int, int, list[BeamCandidate]], None] | None
    history: list[list[int]]  # tokens after <sos>, per row
    finished: list[list[tuple[float, list[int]]]]  # (score, tokens) per source, all of them
    sources: list[int]  # the running sources, in batch order

    def rank(
        self, step: int, top_scores: list[list[float]], top_idx: list[list[int]], r: int, vocab: int
    ) -> tuple[list[list[float]], list[list[int]], list[list[int]]]:
        """One step: per running source, its 2K best continuations (total log-probabilities, flat indices into its
        R·V candidates) become beams, finished hypotheses or pruned ones (reported to ``on_step``). Returns the new
        beams' scores, the rows they continue and their tokens, K per source."""
        b, k = len(self.sources), self.k
        new_scores = [[float("-inf")] * k for _ in range(b)]
        new_rows = [[i * r] * k for i in range(b)]  # a dead beam (no live candidate left) reads row i·R at score −inf
        new_tokens = [[self.eos_id] * k for _ in range(b)]
        for i, source in enumerate(self.sources):
            slot = 0
            seen: list[BeamCandidate] | None = [] if self.on_step is not None else None  # this step's, reported
            for rank, (score, flat) in enumerate(zip(top_scores[i], top_idx[i])):
                if score == float("-inf"):
                    break
                beam, tok = divmod(flat, vocab)
                if tok == self.eos_id or step == self.max_len:  # at the length limit every candidate ends
                    if rank < k:  # only the K best candidates may finish (a source open at this step takes them all)
                        hyp = self.history[i * r + beam] + ([] if tok == self.eos_id else [tok])
                        self.finished[source].append((score / (step**self.length_penalty), hyp))
                        if seen is not None:
                            seen.append(BeamCandidate(beam, tok, score, "finished", None, self.finished[source][-1][0]))
                    elif seen is not None:
                        seen.append(BeamCandidate(beam, tok, score, "pruned", None, None))
                    continue
                if slot == k:  # the beams are full: the rest is only reported
                    if seen is None:
                        break
                    seen.append(BeamCandidate(beam, tok, score, "pruned", None, None))
                    continue
                new_scores[i][slot], new_rows[i][slot], new_tokens[i][slot] = score, i * r + beam, tok
                if seen is not None:
                    seen.append(BeamCandidate(beam, tok, score, "alive", slot, None))
                slot += 1
            if self.on_step is not None and seen is not None:
                self.on_step(step, source, seen)
            if 0 < slot < k:  # fewer live candidates than beams: pad with dead copies of the first
                new_rows[i][slot:] = [new_rows[i][0]] * (k - slot)
        return new_scores, new_rows, new_tokens
