"""The decoding loop, once for every family and every way of choosing: prefill, decode one token, decode n tokens.

gpt-fast splits generation into ``prefill``, ``decode_one_token`` and ``decode_n_tokens``; this module does the same
over a :class:`~tformer.nn.cache.KVCache`. A family takes part through a small adapter, a *decoder*:

* ``decoder.prefill(inputs, new_tokens) -> (logits, state)`` reads what the rows start from (a batch of prompts;
  a batch of sources, encoded once, then the start token) and gives the (R, V) logits of the first new token;
* ``decoder.step(ids, state) -> logits`` feeds one token per row, (R,), and gives the next (R, V) logits.

The ``state`` holds what the rows carry from step to step: the KV cache, the tokens each row has seen (what a
repetition penalty looks at), and the family's own rows (masks and positions; the encoder's memory), with
``state.keep(rows)`` to go on with some of the rows only. :class:`LMDecoder` is the decoder-only family's
(:class:`~tformer.models.gpt.GPT`, and the Hugging Face decoders it loads), :class:`Seq2SeqDecoder` the
encoder–decoder's (:class:`~tformer.models.seq2seq.Seq2SeqTransformer`).

On those, :func:`decode_one` and :func:`decode_n` are the loop. Greedy decoding and sampling are :func:`decode_n`
with a sampler (:mod:`tformer.generation.samplers`); beam search (:mod:`tformer.generation.beam`) ranks its beams
between :func:`decode_one` calls; the explorer's and ``tformer trace``'s step-by-step decoding is :func:`decode_n`
with a sampler that also writes down the logits it saw.

A decoder runs the kernels the model has (:func:`tformer.fast.speed_up` chooses the fast ones, and
:func:`tformer.load` applies it) and changes nothing in the model. What it keeps for speed is its own: the KV cache
in its state, and the layouts of the weights its steps read in ``decoder.weights`` (a
:class:`~tformer.fast.linear.DecodingWeights`, made with the decoder and gone with it; or the caller's, ``decoding=``,
kept over several calls while the weights do not change: :meth:`tformer.translation.Translator.translate` keeps one
for all its batches).

Dimension legend: B batch, R rows still running, S source length, T tokens seen, Tk key positions, V vocabulary
size, D model dim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from tformer.checks import unless_all_real
from tformer.fast.linear import DecodingWeights, decoding_step
from tformer.generation.samplers import Sampler
from tformer.nn.cache import KVCache
from tformer.nn.masks import padding_mask

__all__ = [
    "State",
    "Decoder",
    "Ends",
    "LMState",
    "LMDecoder",
    "Seq2SeqState",
    "Seq2SeqDecoder",
    "decode_one",
    "decode_n",
    "until",
    "check_decoding",
]

# (step, the batch row of each running row, their (R,) new ids) → which rows end with this token (None: none)
Ends = Callable[[int, list[int], torch.Tensor], Sequence[bool] | None]


class State(Protocol):
    """What the rows carry between steps (their KV cache among them, which only their decoder reads)."""

    tokens: torch.Tensor  # (R, T) the tokens each row has seen

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with rows ``rows`` (R',) only, in that order."""


class Decoder(Protocol):
    """One family's prefill and step (see the module docstring), and the weight layouts its steps read."""

    weights: DecodingWeights

    def prefill(self, inputs, new_tokens: int) -> tuple[torch.Tensor, State]: ...

    def step(self, ids: torch.Tensor, state) -> torch.Tensor: ...


def check_decoding(decoding: object) -> None:
    """A decoding function's ``decoding``: None or a :class:`~tformer.fast.linear.DecodingWeights`; else one line."""
    if decoding is not None and not isinstance(decoding, DecodingWeights):
        raise TypeError(
            f"decoding must be None or a tformer.fast.linear.DecodingWeights (the weight layouts of an earlier call), "
            f"got {type(decoding).__name__}"
        )


def decode_one(decoder: Decoder, state: State, ids: torch.Tensor) -> torch.Tensor:
    """Feed ``ids`` (R,), one new token per row; returns the (R, V) logits of the position after it. (A decoding
    step for the fast layers, in the decoder's weight layouts: :func:`tformer.fast.linear.decoding_step`.)"""
    with decoding_step(decoder.weights):
        return decoder.step(ids, state)


def decode_n(
    decoder: Decoder, state: State, logits: torch.Tensor, n: int, choose: Sampler, ends: Ends | None = None
) -> list[list[int]]:
    """Choose and feed up to ``n`` new tokens per row, from ``logits`` (R, V) (the prefill's); returns each row's new
    ids, up to the token that ended it (included).

    Each step, ``choose(logits, state.tokens)`` gives the rows' next ids and ``ends(step, rows, ids)`` says which
    rows end with them (``rows``: the batch row of each running row). A row that ends leaves the batch and the
    state: later steps decode only the rows still running. After the ``n``-th choice nothing more is decoded.
    """
    batch = logits.shape[0]
    rows = list(range(batch))  # the batch row of each running row
    steps: list[tuple[list[int], torch.Tensor]] = []  # per step: the running rows and their (R,) new ids
    for step in range(n):
        ids = choose(logits, state.tokens)  # (R,)
        steps.append((rows, ids))
        done = ends(step, rows, ids) if ends is not None else None
        if done is not None and any(done):
            if all(done):
                break
            staying = [i for i, d in enumerate(done) if not d]
            index = torch.tensor(staying, device=ids.device)
            rows, ids = [rows[i] for i in staying], ids[index]
            state.keep(index)
        if step == n - 1:
            break
        logits = decode_one(decoder, state, ids)
    out: list[list[int]] = [[] for _ in range(batch)]
    for running, ids in steps:  # one device → host copy per step, after the loop
        for row, token in zip(running, ids.tolist()):
            out[row].append(token)
    return out


def until(*end_ids: int) -> Ends:
    """``ends`` for :func:`decode_n`: a row ends at any of ``end_ids``."""
    ends = set(end_ids)
    return lambda step, rows, ids: [token in ends for token in ids.tolist()]


# ---------------------------------------------------------------------------------------------- decoder-only


@dataclass
class LMState:
    """The rows of a decoder-only model: its cache, the tokens seen, and the masks of a left-padded batch."""

    cache: KVCache
    tokens: torch.Tensor  # (R, T) the prompt (its left padding reads as its first token), then every token fed
    attention: torch.Tensor | None  # (R, Tk) True = a real token; None: no row is padded
    positions: torch.Tensor | None  # (R, 1) the position of each row's last token; None: counted from the cache

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.reorder(rows)
        self.tokens = self.tokens[rows]
        self.attention = None if self.attention is None else self.attention[rows]
        self.positions = None if self.positions is None else self.positions[rows]


class LMDecoder:
    """A decoder-only model (``model(ids, attention_mask, positions, cache, logits_to_keep)``) as a decoder.

    Prompts of different lengths are left-padded with ``pad_id``; the attention mask hides the padding and
    positions count real tokens only, so a batch gives the same tokens as one prompt at a time (while the text fits
    the context). Past the model's context (``config.max_len``) the window slides: the cache is rebuilt from the
    last ¾ of the context, with positions counted from the window's start (as in training)."""

    def __init__(self, model: nn.Module, pad_id: int = 0, decoding: DecodingWeights | None = None) -> None:
        self.model: Any = model  # a GPT, or any module called the same way
        self.weights = DecodingWeights() if decoding is None else decoding
        self.pad_id = pad_id
        self.limit: int = getattr(getattr(model, "config", None), "max_len", None) or 1 << 30

    def prefill(self, prompts: list[list[int]], new_tokens: int) -> tuple[torch.Tensor, LMState]:
        """Run the prompts (each cut to its last ``max_len − 1`` tokens: room for one new token) into a new cache;
        returns the (B, V) logits of the first new token."""
        device = next(self.model.parameters()).device
        prompts = [p[-(self.limit - 1) :] if self.limit > 1 else p[-1:] for p in prompts]
        longest = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (longest - len(p)) + p for p in prompts], device=device)  # (B, T0)
        attention = positions = None  # prompts of one length: no padding to hide, positions 0, 1, 2, ...
        if any(len(p) < longest for p in prompts):
            attention = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=device).bool()
            positions = (attention.long().cumsum(-1) - 1).clamp(min=0)  # (B, T0) real tokens count from 0
        cache = self.model.new_cache(min(longest + new_tokens, self.limit))
        logits = self.model(ids, attention_mask=attention, positions=positions, cache=cache, logits_to_keep=1)
        # the repetition penalty sees left padding as the row's first real token (already seen: no effect)
        tokens = torch.tensor([[p[0]] * (longest - len(p)) + p for p in prompts], device=device)  # (B, T0)
        last = None if positions is None else positions[:, -1:]  # (B, 1)
        return logits[:, -1], LMState(cache, tokens, attention, last)

    def step(self, ids: torch.Tensor, state: LMState) -> torch.Tensor:
        """Feed ``ids`` (R,); returns (R, V) logits."""
        state.tokens = torch.cat([state.tokens, ids[:, None]], 1)  # (R, T + 1)
        if state.attention is not None:
            state.attention = torch.cat([state.attention, torch.ones_like(state.attention[:, :1])], 1)  # (R, Tk + 1)
        if state.cache.length + 1 > self.limit:
            return self._slide(state)
        state.positions = None if state.positions is None else state.positions + 1  # (R, 1)
        logits = self.model(ids[:, None], attention_mask=state.attention, positions=state.positions, cache=state.cache)
        return logits[:, -1]

    def _slide(self, state: LMState) -> torch.Tensor:
        """The context is full: rebuild the cache from the last ¾ of it, positions counted from the window's start."""
        keep = max(self.limit * 3 // 4, 1)
        window = state.tokens[:, -keep:]  # (R, keep)
        positions = None
        if state.attention is not None:
            state.attention = state.attention[:, -keep:]
            positions = (state.attention.long().cumsum(-1) - 1).clamp(min=0)  # (R, keep)
        state.cache = self.model.new_cache(self.limit)
        logits = self.model(
            window, attention_mask=state.attention, positions=positions, cache=state.cache, logits_to_keep=1
        )
        state.positions = None if positions is None else positions[:, -1:]
        return logits[:, -1]


# ------------------------------------------------------------------------------------------- encoder–decoder


@dataclass
class Seq2SeqState:
    """The rows of an encoder–decoder: its cache, the tokens fed after the start token, the encoder's memory."""

    cache: KVCache
    tokens: torch.Tensor  # (R, T) the tokens fed after the start token
    memory: torch.Tensor  # (R, S, D), or one row per source serving its R / B consecutive rows (beams)
    memory_mask: torch.Tensor | None  # (R or B, 1, 1, S); None where no source is padded

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with rows ``rows``, each with its own memory row."""
        self.follow(rows, rows)

    def follow(self, rows: torch.Tensor, sources: torch.Tensor | None) -> None:
        """Beam search: new row i continues row ``rows[i]``; ``sources``: the memory rows kept (None: all of them,
        each row still serving the rows of its source, whose cross-attention keys/values stay as they are)."""
        self.cache.reorder(rows, cross=False if sources is None else sources)
        self.tokens = self.tokens.index_select(0, rows)
        if sources is not None:
            self.memory = self.memory.index_select(0, sources)  # (B', S, D)
            self.memory_mask = None if self.memory_mask is None else self.memory_mask.index_select(0, sources)


class Seq2SeqDecoder:
    """An encoder–decoder (``model.encode``, ``model.decode``) as a decoder: the prefill encodes each source once and
    feeds ``start_id``."""

    def __init__(self, model: nn.Module, start_id: int, decoding: DecodingWeights | None = None) -> None:
        self.model: Any = model  # a Seq2SeqTransformer, or one with its encode/decode
        self.weights = DecodingWeights() if decoding is None else decoding
        self.start_id = start_id

    def prefill(self, src: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, Seq2SeqState]:
        """Encode ``src`` (B, S) and feed the start token; returns the (B, V) logits of the first new token."""
        memory_mask = source_mask(src, self.model.config.pad_id)  # (B, 1, 1, S), or None
        memory = self.model.encode(src, memory_mask)  # (B, S, D)
        cache = self.model.new_cache(new_tokens + 1)
        state = Seq2SeqState(cache, src.new_empty(src.shape[0], 0), memory, memory_mask)
        start = torch.full((src.shape[0], 1), self.start_id, dtype=torch.long, device=src.device)  # (B, 1)
        return self.model.decode(start, memory, memory_mask, cache)[:, -1], state

    def step(self, ids: torch.Tensor, state: Seq2SeqState) -> torch.Tensor:
        """Feed ``ids`` (R,); returns (R, V) logits."""
        state.tokens = torch.cat([state.tokens, ids[:, None]], 1)  # (R, T + 1)
        return self.model.decode(ids[:, None], state.memory, state.memory_mask, state.cache)[:, -1]


def check_translation(model: nn.Module, src: object, sos_id: object, max_len: int) -> int:
    """A translator's decoding call, before anything runs: ``src`` a (B, S) tensor of ids, ``sos_id`` a target id;
    returns ``max_len`` within the decoder's positions (a longer one failed there, mid-way, naming the positional
    table; as a bound on tokens that usually end sooner, it stays one)."""
    config: Any = model.config
    if not isinstance(src, torch.Tensor) or src.dim() != 2:
        got = f"shape {tuple(src.shape)}" if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be a (B, S) tensor of token ids (one row per source), got {got}")
    vocab, positions = getattr(config, "tgt_vocab_size", 1 << 62), getattr(config, "max_len", 1 << 62)  # (toys)
    if not isinstance(sos_id, int) or isinstance(sos_id, bool) or not 0 <= sos_id < vocab:
        raise ValueError(f"sos_id must be a target token id in [0, {vocab}), got {sos_id!r}")
    return min(max_len, positions)


def source_mask(src: torch.Tensor, pad_id: int) -> torch.Tensor | None:
    """The source padding mask, or None when it hides nothing (then no layer checks it again at every step)."""
    return unless_all_real(padding_mask(src, pad_id))  # (B, 1, 1, S)
