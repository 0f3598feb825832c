"""Autoregressive generation, outside the models: greedy, sampling and beam search.

Small pure pieces: logit processors (repetition penalty → temperature → top-k → top-p), then a
choice (argmax, or a draw with a seeded ``torch.Generator``). The loops feed one new position at
a time and keep keys/values in a :class:`~tformer.nn.cache.KVCache`, so each step costs one position.

The processors keep the distribution a distribution whatever the settings: they compute in float32, the most
likely token always survives (top-k and top-p keep at least it), and no value can overflow into inf or NaN (see
:func:`process_logits`), so a draw never fails. Sizes are bounded where a bad value would cost without end:
``beam_size`` ≤ :data:`MAX_BEAM`, ``|length_penalty|`` ≤ :data:`MAX_LENGTH_PENALTY`, ``max_new_tokens`` ≤
:data:`MAX_NEW_TOKENS`.

* :func:`translate_ids` — encoder–decoder: encode the source once, then decode step by step.
* :func:`beam_search` — encoder–decoder beam search with a length penalty.
* :func:`generate_lm` — decoder-only: prompts of different lengths are left-padded; positions
  count real tokens only, so a batch gives the same tokens as one prompt at a time.

Each of the three first applies :func:`tformer.fast.speed_up` to the model, in place (its decoding fast paths:
the weight layouts of :class:`tformer.fast.linear.Linear`; same numbers to float rounding); ``fast=False``
leaves the model plain.

Dimension legend: B batch, K beams, S source length, T generated length, V vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from tformer.checks import check_positive_int
from tformer.fast import speed_up
from tformer.nn.masks import padding_mask

__all__ = [
    "MAX_BEAM",
    "MAX_LENGTH_PENALTY",
    "MAX_NEW_TOKENS",
    "MIN_TEMPERATURE",
    "MAX_TEMPERATURE",
    "SamplingConfig",
    "apply_repetition_penalty",
    "top_k_filter",
    "top_p_filter",
    "process_logits",
    "choose_next",
    "translate_ids",
    "BeamCandidate",
    "beam_search",
    "generate_lm",
]


MAX_BEAM = 64  # beams per source: each costs a row of the cache and of every step's (B·K, V) logits
MAX_LENGTH_PENALTY = 10.0  # |length_penalty|: length ** 10 is far past any useful ranking, and stays finite
MAX_NEW_TOKENS = 100_000  # generate_lm: past the context the window slides, so only this bounds a run
MIN_TEMPERATURE = 1e-30  # temperatures below it divide as this (float32 keeps it exact; see process_logits)
MAX_TEMPERATURE = 1e30  # and above it as this (float32 would round 1e39 to inf, and -inf / inf is NaN)
_FLOAT32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen. ``do_sample=False`` is greedy (argmax).

    ``temperature`` is any finite number > 0: as it goes to 0 sampling becomes greedy, and a temperature below
    :data:`MIN_TEMPERATURE` divides as that one, which is greedy already (the top token takes all the probability,
    shared only with logits within ~1e-28 of it: exact ties); one above :data:`MAX_TEMPERATURE` divides as that one,
    which is uniform already over the tokens that are not at −∞.
    ``top_k`` ≥ 1, ``top_p`` in (0, 1]: both keep the most likely token whatever their value.
    ``repetition_penalty`` is any finite number > 0; the penalized logits are clamped to float32's range.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not _finite_number(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if self.top_k is not None and (
            not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be an integer >= 1 (or None), got {self.top_k!r}")
        if self.top_p is not None and (not _finite_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (or None), got {self.top_p!r}")
        if not _finite_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty!r}")


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def apply_repetition_penalty(logits: torch.Tensor, previous: torch.Tensor, penalty: float) -> torch.Tensor:
    """Divide positive (multiply negative) logits of tokens already in ``previous`` (B, T) by ``penalty`` (CTRL).

    Computed in float64 (a penalty of 1e-300 or 1e300 stays itself, not 0 or inf in float32) and clamped to
    float32's finite range: a penalty of 1e-40 makes a seen token the most likely one (as asked) instead of an
    inf that would turn the softmax into NaN."""
    if penalty == 1.0 or previous.numel() == 0:
        return logits
    seen = torch.gather(logits, 1, previous).double()  # (B, T)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty).clamp(-_FLOAT32_MAX, _FLOAT32_MAX)
    return logits.scatter(1, previous, seen.to(logits.dtype))


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits per row, set the rest to −∞."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability reaches ``p``.

    The most likely token is always kept, however small ``p`` (1e-300 is 0 in float32, which would keep none)."""
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # (B, V)
    probs = sorted_logits.softmax(-1)  # (B, V)
    remove_sorted = probs.cumsum(-1) - probs >= p  # mass before this token already reaches p
    remove_sorted[..., 0] = False  # the top token stays
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def process_logits(logits: torch.Tensor, config: SamplingConfig, previous: torch.Tensor | None = None) -> torch.Tensor:
    """repetition penalty → temperature → top-k → top-p, on (B, V) logits, in float32.

    Sampling shifts each row so that its largest logit is 0 before dividing by the temperature: softmax does not
    see the shift, and no quotient can overflow (the top token stays at 0, the others go to −∞ at worst), so a
    temperature of 1e-45 is greedy instead of a row of NaN. A +inf logit counts as float32's largest number.
    Every row keeps at least its top token with a finite value, so ``softmax`` is a distribution.
    """
    logits = logits.float().clamp(max=_FLOAT32_MAX)  # (B, V); NaN stays NaN (choose_next names it)
    if previous is not None:
        logits = apply_repetition_penalty(logits, previous, config.repetition_penalty)
    if not config.do_sample:
        return logits
    top = logits.amax(-1, keepdim=True)  # (B, 1)
    temperature = min(max(config.temperature, MIN_TEMPERATURE), MAX_TEMPERATURE)
    logits = (logits - top) / temperature  # (B, V) ≤ 0, the top at 0
    if config.top_k is not None:
        logits = top_k_filter(logits, config.top_k)
    if config.top_p is not None:
        logits = top_p_filter(logits, config.top_p)
    return logits


def choose_next(
    logits: torch.Tensor,
    config: SamplingConfig,
    generator: torch.Generator | None = None,
    previous: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, V) logits of the last position → (B,) next token ids.

    A row of NaN logits (weights or activations that overflowed) cannot be sampled: a ``ValueError`` says so."""
    logits = process_logits(logits, config, previous)
    if not config.do_sample:
        return logits.argmax(-1)
    try:
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
    except RuntimeError:  # checked only on failure: no extra device sync per step
        if bool(torch.isnan(logits).any()):
            raise ValueError(
                "the model's next-token logits are NaN (non-finite activations: in float16 try float32)"
            ) from None
        raise


@torch.inference_mode()
def translate_ids(
    model,
    src: torch.Tensor,
    sos_id: int,
    eos_id: int,
    max_len: int = 128,
    sampling: SamplingConfig = SamplingConfig(),
    generator: torch.Generator | None = None,
    fast: bool = True,
) -> list[list[int]]:
    """Greedy (or sampled) decoding for a batch of sources ``src`` (B, S); returns ids without <sos>/<eos>.

    A source leaves the batch when it reaches <eos>: later steps decode, and keep in the cache, only the
    sources still running (R of them).
    """
    check_positive_int(max_len, "max_len")
    if fast:
        speed_up(model)
    memory_mask = _source_mask(src, model.config.pad_id)  # (B, 1, 1, S), or None
    memory = model.encode(src, memory_mask)  # (B, S, D)
    cache = model.new_cache(max_len + 1)
    tokens = torch.full(
        (src.shape[0], 1), sos_id, dtype=torch.long, device=src.device
    )  # (R, 1): <sos>, then the ids so far
    running = list(range(src.shape[0]))  # the source of each running row
    out: list[list[int]] = [[] for _ in running]
    for _ in range(max_len):
        logits = model.decode(tokens[:, -1:], memory, memory_mask, cache)[:, -1]  # (R, V)
        nxt = choose_next(logits, sampling, generator, tokens[:, 1:])  # (R,)
        ids = nxt.tolist()  # one device → host copy per step
        keep = [row for row, tok in enumerate(ids) if tok != eos_id]
        for row in keep:
            out[running[row]].append(ids[row])
        if not keep:
            break
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (R, 1 + t)
        if len(keep) < len(running):  # finished sources leave the batch, the cache and the memory
            index = torch.tensor(keep, device=src.device)
            running = [running[row] for row in keep]
            tokens, memory = tokens[index], memory[index]  # (R', 1 + t), (R', S, D)
            memory_mask = None if memory_mask is None else memory_mask[index]  # (R', 1, 1, S)
            cache.reorder(index)
    return out


class BeamCandidate(NamedTuple):
    """One of the 2K continuations a beam-search step ranked, as ``beam_search(on_step=...)`` reports it."""

    beam: int  # the beam it continues: its slot at the previous step (0 at step 1, the <sos> root)
    token: int
    logp: float  # total log-probability of the hypothesis, this token included
    status: str  # "alive" (the next step's beam ``slot``), "finished" (a hypothesis) or "pruned"
    slot: int | None  # alive: its beam slot from now on; else None
    score: float | None  # finished: logp / length ** length_penalty; else None


def _candidates(on_step) -> list[BeamCandidate] | None:
    return [] if on_step is not None else None


def _source_mask(src: torch.Tensor, pad_id: int) -> torch.Tensor | None:
    """The source padding mask, or None when it hides nothing (then no layer checks it again at every step)."""
    mask = padding_mask(src, pad_id)  # (B, 1, 1, S)
    return None if bool(mask.all()) else mask


@torch.inference_mode()
def beam_search(
    model,
    src: torch.Tensor,
    sos_id: int,
    eos_id: int,
    beam_size: int = 5,
    max_len: int = 128,
    length_penalty: float = 1.0,
    fast: bool = True,
    on_step: Callable[[int, int, list[BeamCandidate]], None] | None = None,
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
    A done source leaves the batch, its beams, cache rows and memory with it. ``model.decode`` gets the memory
    of the B sources still running and their B·K beam rows (B at the first step, when the K beams of a source
    are all the same): rows i·K to i·K + K − 1 belong to source i.

    ``on_step(step, source, candidates)``, if given, is called after each step for each source still running, with
    the step's ranked candidates (:class:`BeamCandidate`): which became beams, which finished, which were pruned
    (``tformer explore`` draws the search tree from it); it only watches, the search is the same with or without it.
    """
    check_positive_int(max_len, "max_len")
    check_positive_int(beam_size, "beam_size")
    if beam_size > MAX_BEAM:
        raise ValueError(f"beam_size must be at most {MAX_BEAM} (generation.MAX_BEAM), got {beam_size}")
    if not _finite_number(length_penalty) or abs(length_penalty) > MAX_LENGTH_PENALTY:
        raise ValueError(
            f"length_penalty must be in [-{MAX_LENGTH_PENALTY:g}, {MAX_LENGTH_PENALTY:g}], got {length_penalty!r}"
        )
    if fast:
        speed_up(model)
    b, k, device = src.shape[0], beam_size, src.device
    memory_mask = _source_mask(src, model.config.pad_id)  # (B, 1, 1, S), or None
    # each source once: the K beams of source i (rows i·K … i·K + K − 1) share its memory, and cross-attention
    # computes, caches and reads its keys/values once for all of them (tformer.nn.attention.MultiHeadAttention)
    memory = model.encode(src, memory_mask)  # (B, S, D)
    cache = model.new_cache(max_len + 1)
    # The model needs only each beam's last token; the histories and the bookkeeping below live on the CPU as
    # plain lists, so a step moves the 2K best candidates of every source off the device ONCE (not per source).
    # The first step feeds one row per source: its K beams would all be the same <sos>. The reorder after it
    # copies each source's row into its K beam rows, and every later step feeds R = K rows per source.
    last = torch.full((b, 1), sos_id, dtype=torch.long, device=device)  # (B·R, 1), R = 1
    history: list[list[int]] = [[] for _ in range(b)]  # tokens after <sos>, per row
    scores = torch.zeros(b, 1, device=device)  # (B, R) the rows' total log-probabilities
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]  # per source, all B of them
    sources = list(range(b))  # the running sources, in batch order (b of them)
    for step in range(1, max_len + 1):
        logits = model.decode(last, memory, memory_mask, cache)[:, -1].float()  # (B·R, V), a fresh tensor
        r, vocab = scores.shape[1], logits.shape[-1]
        # log-probabilities, then every candidate's total score, written over the logits: two fewer (B·R, V)
        # tensors of fresh memory per step
        logp = logits.sub_(torch.logsumexp(logits, -1, keepdim=True))  # log_softmax
        cand = logp.view(b, r, vocab).add_(scores[:, :, None]).view(b, r * vocab)  # (B, R·V)
        top_scores, top_idx = cand.topk(min(2 * k, r * vocab), dim=-1)  # (B, 2K)
        top_scores, top_idx = top_scores.tolist(), top_idx.tolist()  # one device → host copy per step
        new_scores = [[float("-inf")] * k for _ in range(b)]
        new_rows = [[i * r] * k for i in range(b)]  # a dead beam (no live candidate left) reads row i·R at score −inf
        new_tokens = [[eos_id] * k for _ in range(b)]
        for i, source in enumerate(sources):
            slot, seen = 0, _candidates(on_step)  # seen: this step's candidates, reported to on_step
            for rank, (score, flat) in enumerate(zip(top_scores[i], top_idx[i])):
                if score == float("-inf"):
                    break
                beam, tok = divmod(flat, vocab)
                if tok == eos_id or step == max_len:  # at the length limit every candidate ends
                    if rank < k:  # only the K best candidates may finish (a source open at this step takes them all)
                        hyp = history[i * r + beam] + ([] if tok == eos_id else [tok])
                        finished[source].append((score / (step**length_penalty), hyp))
                        if seen is not None:
                            seen.append(BeamCandidate(beam, tok, score, "finished", None, finished[source][-1][0]))
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
            if on_step is not None and seen is not None:
                on_step(step, source, seen)
            if 0 < slot < k:  # fewer live candidates than beams: pad with dead copies of the first
                new_rows[i][slot:] = [new_rows[i][0]] * (k - slot)
        keep = [i for i, source in enumerate(sources) if len(finished[source]) < k]  # the sources still running
        if step == max_len or not keep:
            break
        rows = [row for i in keep for row in new_rows[i]]  # (B·K,) the row each new beam continues
        flat_tokens = [t for i in keep for t in new_tokens[i]]
        history = [history[row] + [t] for row, t in zip(rows, flat_tokens)]
        last = torch.tensor(flat_tokens, dtype=torch.long, device=device)[:, None]  # (B·K, 1)
        scores = torch.tensor([new_scores[i] for i in keep], device=device)  # (B, K)
        if len(keep) == b:  # a beam's row stays within its source: the per-source cross-attention cache stays
            cache.reorder(torch.tensor(rows, device=device), cross=False)
        else:  # done sources leave the batch: their beams, their cross-attention cache rows, their memory
            kept = torch.tensor(keep, device=device)
            cache.reorder(torch.tensor(rows, device=device), cross=kept)
            memory = memory.index_select(0, kept)  # (B, S, D)
            memory_mask = None if memory_mask is None else memory_mask.index_select(0, kept)  # (B, 1, 1, S)
            sources, b = [sources[i] for i in keep], len(keep)
    return [max(f, key=lambda x: x[0])[1] if f else [] for f in finished]


@torch.inference_mode()
def generate_lm(
    model,
    prompts: list[list[int]] | torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig = SamplingConfig(),
    eos_id: int | None = None,
    pad_id: int = 0,
    seed: int | None = None,
    on_token=None,
    stop_ids: Sequence[int] = (),
    stop=None,
    fast: bool = True,
) -> list[list[int]]:
    """Continue each prompt of a decoder-only model; returns the new ids (up to the stopping token, included).

    Prompts are left-padded into one batch; ``attention_mask`` hides the padding and positions
    count real tokens only, so a batch gives the same tokens as one prompt at a time (while the
    text fits the model's context). ``on_token(step, ids)`` is called with the (B,) new ids for
    streaming. A row ends at ``eos_id`` or any of ``stop_ids``, or when ``stop(step, ids)``
    (called after ``on_token``) returns True for it (a (B,) list or tensor of bools; e.g. a stop
    string seen in the decoded text). A finished row leaves the batch and the cache (later steps decode
    only the rows still running); the callbacks still get (B,) ids, ``eos_id`` (or ``pad_id``) for it.

    Past the model's context (``config.max_len``) the window slides: the cache is rebuilt from the last ¾ of the
    context, with positions counted from the window's start (as in training). So nothing but ``max_new_tokens``
    ends a run that meets no stopping token: it is at most :data:`MAX_NEW_TOKENS`.
    """
    check_positive_int(max_new_tokens, "max_new_tokens")
    if max_new_tokens > MAX_NEW_TOKENS:
        raise ValueError(
            f"max_new_tokens must be at most {MAX_NEW_TOKENS:,} (generation.MAX_NEW_TOKENS), got {max_new_tokens:,}"
        )
    if fast:
        speed_up(model)
    if isinstance(prompts, torch.Tensor):  # a (B, T) batch of equal-length prompts, as HF's input_ids
        if prompts.dim() != 2:
            raise ValueError(f"prompts as a tensor must have shape (B, T), got {tuple(prompts.shape)}")
        prompts = prompts.tolist()
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists (or a (B, T) tensor)")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    limit = getattr(getattr(model, "config", None), "max_len", None) or 1 << 30
    prompts = [p[-(limit - 1) :] if limit > 1 else p[-1:] for p in prompts]  # leave room for one new token
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (longest - len(p)) + p for p in prompts], device=device)  # (B, T0)
    attention = positions = None  # prompts of one length: no padding to hide, positions 0, 1, 2, ...
    if any(len(p) < longest for p in prompts):
        attention = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=device).bool()
        positions = (attention.long().cumsum(-1) - 1).clamp(min=0)  # (B, T0) real tokens count from 0
    cache = model.new_cache(min(longest + max_new_tokens, limit))
    logits = model(ids, attention_mask=attention, positions=positions, cache=cache, logits_to_keep=1)[:, -1]  # (B, V)
    # the repetition penalty sees left padding as the row's first real token (already seen: no effect)
    history = torch.tensor([[p[0]] * (longest - len(p)) + p for p in prompts], device=device)  # (B, T0)
    ends = set(stop_ids) | ({eos_id} if eos_id is not None else set())
    filler = eos_id if eos_id is not None else pad_id
    running = list(range(len(prompts)))  # the prompt of each row still in the batch (R of them)
    steps: list[tuple[list[int], torch.Tensor]] = []  # per step: the running rows and their (R,) new ids
    for step in range(max_new_tokens):
        nxt = choose_next(logits, sampling, generator, history)  # (R,)
        steps.append((running, nxt))
        if on_token is not None or stop is not None:  # the callbacks see every prompt's row: (B,)
            batch_ids = (
                nxt
                if len(running) == len(prompts)
                else torch.full((len(prompts),), filler, dtype=nxt.dtype, device=device).index_copy_(
                    0, torch.tensor(running, device=device), nxt
                )
            )
        if on_token is not None:
            on_token(step, batch_ids)
        if ends or stop is not None:  # with neither, no row can end early: nothing to check
            done = [t in ends for t in nxt.tolist()] if ends else [False] * len(running)
            if stop is not None:
                said = torch.as_tensor(stop(step, batch_ids), dtype=torch.bool).tolist()  # (B,)
                done = [d or said[row] for d, row in zip(done, running)]
            if all(done):
                break
            if any(done):  # finished rows leave the batch, the cache, the history and the masks
                staying = [i for i, d in enumerate(done) if not d]
                index = torch.tensor(staying, device=device)
                running, nxt, history = [running[i] for i in staying], nxt[index], history[index]
                attention = None if attention is None else attention[index]
                positions = None if positions is None else positions[index]
                cache.reorder(index)
        if step == max_new_tokens - 1:
            break
        history = torch.cat([history, nxt[:, None]], 1)
        if attention is not None:
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], 1)  # (R, Tk + 1)
        if cache.length + 1 > limit:  # context full: slide the window and rebuild the cache
            keep = max(limit * 3 // 4, 1)
            window = history[:, -keep:]  # (R, keep)
            if attention is not None:
                attention = attention[:, -keep:]
                positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
            cache = model.new_cache(limit)
            logits = model(window, attention_mask=attention, positions=positions, cache=cache, logits_to_keep=1)[:, -1]
            positions = None if positions is None else positions[:, -1:]
            continue
        positions = None if positions is None else positions[:, -1:] + 1  # (R, 1); None: counted from the cache
        logits = model(nxt[:, None], attention_mask=attention, positions=positions, cache=cache)[:, -1]
    out: list[list[int]] = [[] for _ in prompts]
    for rows, ids in steps:  # a row's ids up to the token that ended it, included
        for row, token in zip(rows, ids.tolist()):
            out[row].append(token)
    return out
