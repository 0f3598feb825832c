"""Decoding with a static KV cache and a compiled step: the loop of :mod:`tformer.generation.loop`, with every decoding
step of the same shapes, so that ``torch.compile`` compiles the step once and replays it (on a GPU with
``mode="reduce-overhead"``: a CUDA graph, all of a step's kernels launched as one).

:class:`StaticLMDecoder` and :class:`StaticSeq2SeqDecoder` are decoders as the loop's (``prefill``, ``step``), so
greedy decoding, sampling and beam search run on them unchanged (:func:`~tformer.generation.loop.decode_n`,
:func:`~tformer.generation.beam.beam_search`). What differs from :class:`~tformer.generation.loop.LMDecoder` and
:class:`~tformer.generation.loop.Seq2SeqDecoder`:

* the cache is a :class:`~tformer.generation.static_cache.StaticKVCache`: fixed buffers written in place at a position kept
  on the device, attended to whole under a mask (gpt-fast's ``KVCache``, Hugging Face's ``StaticCache``);
* the cache keeps its rows: a row that finishes (a source that beam search is done with) stays in the batch, fed a
  filler token, and its logits are left out. The loop sees the (R, V) logits of the rows still running, as with the
  dynamic cache, so a sampler draws the same numbers from the same generator;
* only the one-token step is compiled (``compile``); the prefill, whose length varies, runs as written;
* greedy decoding and sampling without a repetition penalty choose the token inside that step too
  (:mod:`tformer.generation.on_device`: ``token_step``), and the host reads the tokens every ``READ_EVERY`` (16) steps; the
  repetition penalty and beam search choose on the host, as the loop does (``step``).

The tokens are the dynamic cache's (the masked keys add exactly 0 to each softmax; the sums may round differently in
the last bit), and ``tests/test_static_decoding.py`` checks it for every family, compiled and not.

``compile`` (the decoding functions' argument) is ``True`` for :func:`compile_step`'s choice, or a function that
compiles the step function it is given: ``functools.partial(torch.compile, backend="aot_eager", fullgraph=True)``,
or ``lambda step: step`` for the static cache without compiling.

Dimension legend: B rows of the cache (sequences, or sources × beams), R rows still running, T tokens seen, C
capacity (slots), S source length, D model dim, V vocabulary size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tformer.checks import check_length, compile_option
from tformer.fast.linear import DecodingWeights
from tformer.generation.loop import source_mask
from tformer.generation.on_device import TokenStep, choose_on_device
from tformer.generation.samplers import SamplingConfig
from tformer.generation.static_cache import StaticCaches, StaticKVCache

__all__ = [
    "Compile",
    "compile_step",
    "lm_capacity",
    "StaticLMState",
    "StaticLMDecoder",
    "StaticSeq2SeqState",
    "StaticSeq2SeqDecoder",
]

Compile = Callable[[Callable[..., Any]], Callable[..., Any]]  # a step function → its compiled form
SLOTS = 64  # a decoder-only cache's capacity is a multiple of this (or the context): prompts of similar lengths share
# one compiled step


def lm_capacity(longest: int, new_tokens: int, limit: int) -> int:
    """The slots of a decoder-only static cache: the longest prompt and the new tokens, rounded up to :data:`SLOTS`,
    at most ``limit`` (the context; past it the window slides, in the same buffers)."""
    return min(-(-(longest + new_tokens) // SLOTS) * SLOTS, limit)


def compile_step(compile: bool | Compile, device: torch.device) -> Compile:
    """What compiles the step: ``True`` → ``torch.compile``, with ``mode="reduce-overhead"`` on a CUDA device (the
    step captured as a CUDA graph and replayed), the default mode elsewhere; a function: that function."""
    compile_option.check(compile, "compile")  # "no" is a true string: refused, not compiled
    if callable(compile):
        return compile
    mode = "reduce-overhead" if device.type == "cuda" else None
    return lambda step: _compiled(step, mode)


@functools.cache
def _compiled(step: Callable[..., Any], mode: str | None) -> Callable[..., Any]:
    """``torch.compile(step, mode=mode)``, made once: the next decoding call finds its compiled graphs (a new
    ``torch.compile`` would be a new backend, and compile again)."""
    return torch.compile(step, mode=mode)


def _lm_step(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor, cache: StaticKVCache) -> torch.Tensor:
    """One token per row of the cache: ``ids`` (B, 1) at ``positions`` (B, 1) → the next (B, V) logits."""
    return model(ids, positions=positions, cache=cache)[:, -1]


def _seq2seq_step(
    model: Any, ids: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None, cache: StaticKVCache
) -> torch.Tensor:
    """One token per row of the cache: ``ids`` (B, 1) → the next (B, V) logits."""
    return model.decode(ids, memory, memory_mask, cache)[:, -1]


def _lm_token(
    model: nn.Module,
    logits: torch.Tensor,
    uniforms: torch.Tensor | None,
    sampling: SamplingConfig,
    positions: torch.Tensor,
    cache: StaticKVCache,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A whole token on the device (:mod:`tformer.generation.on_device`): the (B,) ids chosen from ``logits`` (B, V),
    fed at ``positions`` + 1 (B, 1); returns them, the next (B, V) logits and the new positions."""
    ids = choose_on_device(logits, sampling, uniforms)
    positions = positions + 1
    return ids, model(ids[:, None], positions=positions, cache=cache)[:, -1], positions


def _seq2seq_token(
    model: Any,
    logits: torch.Tensor,
    uniforms: torch.Tensor | None,
    sampling: SamplingConfig,
    memory: torch.Tensor,
    memory_mask: torch.Tensor | None,
    cache: StaticKVCache,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole token on the device: the (B,) ids chosen from ``logits`` (B, V) and fed; returns them and the next
    (B, V) logits."""
    ids = choose_on_device(logits, sampling, uniforms)
    return ids, model.decode(ids[:, None], memory, memory_mask, cache)[:, -1]


def _fresh(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The running ``rows`` of a step's (B, V) logits, as a new tensor (R, V): a CUDA graph's outputs are overwritten
    by its next replay."""
    return logits.index_select(0, rows)


# ---------------------------------------------------------------------------------------------- decoder-only


@dataclass
class StaticLMState:
    """The rows of a decoder-only model on a static cache (see :class:`~tformer.generation.loop.LMState`)."""

    cache: StaticKVCache
    tokens: torch.Tensor  # (R, T) the running rows' tokens seen (the repetition penalty's), as LMState's
    rows: torch.Tensor  # (R,) the cache row of each running row
    history: torch.Tensor  # (B, T) every cache row's tokens, a finished row's fillers included (a slide reads them)
    attention: torch.Tensor | None  # (B, T) True = a real token; None: no row is padded
    positions: torch.Tensor  # (B, 1) the position of each cache row's last token
    length: int  # slots written (counted on the host too: when the context is full, the window slides)

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with running rows ``rows`` only; the cache keeps every row (its shapes stay)."""
        self.tokens = self.tokens[rows]
        self.rows = self.rows[rows]


class StaticLMDecoder:
    """:class:`~tformer.generation.loop.LMDecoder` on a static cache with a compiled step (see the module docstring).

    The cache holds the longest prompt and the new tokens, rounded up to :data:`SLOTS` (at most the context). Past
    the context the window slides as in :class:`~tformer.generation.loop.LMDecoder`: the prefill runs again on the
    last ¾ of it, into the same buffers."""

    def __init__(
        self,
        model: nn.Module,
        pad_id: int = 0,
        compile: bool | Compile = True,
        decoding: DecodingWeights | None = None,
        caches: StaticCaches | None = None,
    ) -> None:
        self.model: Any = model  # a GPT, or any module called the same way
        self.caches = StaticCaches() if caches is None else caches  # a caller's: reused across its calls
        self.weights = (
            DecodingWeights() if decoding is None else decoding
        )  # unread inside the compiled step (F.linear there), read by an eager one
        self.pad_id = pad_id
        self.limit: int = getattr(getattr(model, "config", None), "max_len", None) or 1 << 30
        self.device = next(model.parameters()).device
        self._step = compile_step(compile, self.device)(_lm_step)
        self._token = compile_step(compile, self.device)(_lm_token)

    def prefill(self, prompts: list[list[int]], new_tokens: int) -> tuple[torch.Tensor, StaticLMState]:
        """Run the prompts (each cut to its last ``max_len − 1`` tokens) into a new static cache; returns the (B, V)
        logits of the first new token."""
        prompts = [p[-(self.limit - 1) :] if self.limit > 1 else p[-1:] for p in prompts]
        longest, b = max(len(p) for p in prompts), len(prompts)
        ids = torch.tensor([[self.pad_id] * (longest - len(p)) + p for p in prompts], device=self.device)  # (B, T0)
        attention = positions = None  # prompts of one length: no padding to hide, positions 0, 1, 2, ...
        if any(len(p) < longest for p in prompts):
            attention = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=self.device)
            attention = attention.bool()  # (B, T0)
            positions = (attention.long().cumsum(-1) - 1).clamp(min=0)  # (B, T0) real tokens count from 0
        capacity = lm_capacity(longest, new_tokens, self.limit)
        cache = self.caches.get(self.model, b, capacity)
        logits = self.model(ids, attention_mask=attention, positions=positions, cache=cache, logits_to_keep=1)
        tokens = torch.tensor([[p[0]] * (longest - len(p)) + p for p in prompts], device=self.device)  # (B, T0)
        last = (
            positions[:, -1:].contiguous()
            if positions is not None
            else torch.full((b, 1), longest - 1, device=self.device)
        )
        rows = torch.arange(b, device=self.device)
        return logits[:, -1], StaticLMState(cache, tokens, rows, tokens, attention, last, longest)

    def step(self, ids: torch.Tensor, state: StaticLMState) -> torch.Tensor:
        """Feed ``ids`` (R,) to the running rows (a filler to the others); returns their (R, V) logits."""
        state.tokens = torch.cat([state.tokens, ids[:, None]], 1)  # (R, T + 1)
        fed = state.history.new_full(state.history.shape[:1], self.pad_id).index_copy_(0, state.rows, ids)  # (B,)
        state.history = torch.cat([state.history, fed[:, None]], 1)  # (B, T + 1)
        if state.attention is not None:
            state.attention = torch.cat([state.attention, torch.ones_like(state.attention[:, :1])], 1)  # (B, T + 1)
        if state.length + 1 > self.limit:
            return _fresh(self._slide(state), state.rows)
        state.positions = state.positions + 1  # (B, 1)
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are done with
        logits = self._step(self.model, fed[:, None], state.positions, state.cache)  # (B, V)
        state.length += 1
        return _fresh(logits, state.rows)

    def slides(self, prompts: list[list[int]], new_tokens: int) -> bool:
        """Whether ``new_tokens`` after ``prompts`` would pass the context (the window then slides)."""
        longest = max(min(len(p), max(self.limit - 1, 1)) for p in prompts)
        return longest + new_tokens - 1 > self.limit

    def token_step(self, state: StaticLMState, sampling: SamplingConfig) -> TokenStep:
        """The whole one-token step on the device, for :func:`~tformer.generation.on_device.decode_n_on_device`: every
        cache row chooses with ``sampling`` and is fed its choice (the window must not slide: :meth:`slides`)."""

        def step(logits: torch.Tensor, uniforms: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            ids, logits, positions = self._token(self.model, logits, uniforms, sampling, state.positions, state.cache)
            state.length += 1
            state.positions = positions.clone()  # (a CUDA graph's outputs are overwritten by its next replay)
            return ids.clone(), logits.clone()

        return step

    def _slide(self, state: StaticLMState) -> torch.Tensor:
        """The context is full: the prefill again on its last ¾, positions counted from the window's start."""
        keep = max(self.limit * 3 // 4, 1)
        window = state.history[:, -keep:]  # (B, keep)
        positions = None
        if state.attention is not None:
            state.attention = state.attention[:, -keep:]
            positions = (state.attention.long().cumsum(-1) - 1).clamp(min=0)  # (B, keep)
        state.cache.reset()
        logits = self.model(
            window, attention_mask=state.attention, positions=positions, cache=state.cache, logits_to_keep=1
        )
        b = window.shape[0]
        state.positions = positions[:, -1:] if positions is not None else window.new_full((b, 1), keep - 1)
        state.length = keep
        return logits[:, -1]  # (B, V)


# ------------------------------------------------------------------------------------------- encoder–decoder


@dataclass
class StaticSeq2SeqState:
    """The rows of an encoder–decoder on a static cache (see :class:`~tformer.generation.loop.Seq2SeqState`); the
    cache has K rows per source (beam search's beams; K = 1 otherwise), row i·K + j the j-th of source i."""

    cache: StaticKVCache
    tokens: torch.Tensor  # (R, T) the running rows' tokens fed after the start token
    memory: torch.Tensor  # (B, S, D) the encoder's output, K rows per source
    memory_mask: torch.Tensor | None  # (B, 1, 1, S); None where no source is padded
    rows: torch.Tensor  # (R,) the cache row of each running row
    sources: list[int]  # the sources still running, in batch order
    beams: int  # K: cache rows per source
    length: int  # slots written

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with running rows ``rows``, each with its own source."""
        self.follow(rows, rows)

    def follow(self, rows: torch.Tensor, sources: torch.Tensor | None) -> None:
        """Beam search: new running row i continues running row ``rows[i]``, the rows of each source kept (``sources``,
        None: all of them) taking its K cache rows in order. The cache rows are copied in place where they change."""
        old, picked = self.rows.tolist(), rows.tolist()
        if sources is not None:
            self.sources = [self.sources[i] for i in sources.tolist()]
        per_source = len(picked) // len(self.sources)
        new = [s * self.beams + j for s in self.sources for j in range(per_source)]
        order = list(range(self.memory.shape[0]))  # cache row i takes row order[i]
        for target, row in zip(new, picked):
            order[target] = old[row]
        if order != list(range(self.memory.shape[0])):
            self.cache.reorder(torch.tensor(order, device=self.rows.device), self.length)
        self.tokens = self.tokens.index_select(0, rows)
        self.rows = torch.tensor(new, device=self.rows.device)


class StaticSeq2SeqDecoder:
    """:class:`~tformer.generation.loop.Seq2SeqDecoder` on a static cache with a compiled step; ``beams``: cache rows
    per source (beam search's K), the memory repeated for each."""

    def __init__(
        self,
        model: nn.Module,
        start_id: int,
        compile: bool | Compile = True,
        beams: int = 1,
        decoding: DecodingWeights | None = None,
        caches: StaticCaches | None = None,
    ) -> None:
        self.model: Any = model  # a Seq2SeqTransformer, or one with its encode/decode
        self.caches = StaticCaches() if caches is None else caches  # a caller's: reused across its calls
        self.weights = (
            DecodingWeights() if decoding is None else decoding
        )  # unread inside the compiled step (F.linear there), read by an eager one
        self.start_id, self.beams = start_id, beams
        self.device = next(model.parameters()).device
        self._step = compile_step(compile, self.device)(_seq2seq_step)
        self._token = compile_step(compile, self.device)(_seq2seq_token)

    def prefill(self, src: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, StaticSeq2SeqState]:
        """Encode ``src`` (B, S) and feed the start token to every cache row; returns the (B, V) logits of the first
        new token (one row per source)."""
        k, limit = self.beams, self.model.config.max_len
        memory_mask = source_mask(src, self.model.config.pad_id)  # (B, 1, 1, S), or None
        memory = self.model.encode(src, memory_mask).repeat_interleave(k, 0)  # (B·K, S, D)
        memory_mask = None if memory_mask is None else memory_mask.repeat_interleave(k, 0)  # (B·K, 1, 1, S)
        cache = self.caches.get(self.model, memory.shape[0], min(new_tokens + 1, limit))
        start = torch.full((memory.shape[0], 1), self.start_id, dtype=torch.long, device=src.device)  # (B·K, 1)
        logits = self.model.decode(start, memory, memory_mask, cache)[:, -1]  # (B·K, V); the cross-attention K/V
        rows = torch.arange(src.shape[0], device=src.device) * k  # (B,) each source's first row
        state = StaticSeq2SeqState(
            cache, src.new_empty(src.shape[0], 0), memory, memory_mask, rows, list(range(src.shape[0])), k, 1
        )
        return _fresh(logits, rows), state

    def step(self, ids: torch.Tensor, state: StaticSeq2SeqState) -> torch.Tensor:
        """Feed ``ids`` (R,) to the running rows (the start token to the others); returns their (R, V) logits."""
        check_length(state.length + 1, state.cache.capacity, "tgt")  # (the capacity is max_len where it is short)
        state.tokens = torch.cat([state.tokens, ids[:, None]], 1)  # (R, T + 1)
        fed = torch.full((state.memory.shape[0],), self.start_id, dtype=ids.dtype, device=ids.device)
        fed.index_copy_(0, state.rows, ids)  # (B,)
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        logits = self._step(self.model, fed[:, None], state.memory, state.memory_mask, state.cache)  # (B, V)
        state.length += 1
        return _fresh(logits, state.rows)

    def token_step(self, state: StaticSeq2SeqState, sampling: SamplingConfig) -> TokenStep:
        """The whole one-token step on the device (one cache row per source), for
        :func:`~tformer.generation.on_device.decode_n_on_device`."""

        def step(logits: torch.Tensor, uniforms: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            check_length(state.length + 1, state.cache.capacity, "tgt")
            ids, logits = self._token(
                self.model, logits, uniforms, sampling, state.memory, state.memory_mask, state.cache
            )
            state.length += 1
            return ids.clone(), logits.clone()  # (a CUDA graph's outputs are overwritten by its next replay)

        return step
