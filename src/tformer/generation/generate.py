"""Greedy decoding and sampling for the two generating families: :func:`generate_lm` (decoder-only) and
:func:`translate_ids` (encoder–decoder), each a prefill and :func:`~tformer.generation.loop.decode_n` with a sampler.

``max_new_tokens`` ≤ :data:`MAX_NEW_TOKENS`: past the context a decoder-only model's window slides, so nothing else
bounds a run that meets no stopping token.

Dimension legend: B batch, R rows still running, S source length, T prompt length, V vocabulary size.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import cast

import torch

from tformer import checks
from tformer.checks import check_positive_int
from tformer.fast.linear import DecodingWeights
from tformer.generation import on_device
from tformer.generation.cache_size import check_kv_cache
from tformer.generation.loop import (
    Decoder,
    Ends,
    LMDecoder,
    Seq2SeqDecoder,
    check_decoding,
    check_translation,
    decode_n,
    until,
)
from tformer.generation.samplers import GREEDY, SamplingConfig, check_sampling, sampler
from tformer.generation.static import (
    Compile,
    StaticLMDecoder,
    StaticLMState,
    StaticSeq2SeqDecoder,
    StaticSeq2SeqState,
    lm_capacity,
)
from tformer.generation.static_cache import StaticCaches

__all__ = ["MAX_NEW_TOKENS", "PromptCut", "generate_lm", "translate_ids", "seeded"]

MAX_NEW_TOKENS = 100_000  # generate_lm: past the context the window slides, so only this bounds a run


class PromptCut(UserWarning):
    """A prompt longer than the model's context holds with a new token: it is read from its last ``max_len − 1``
    tokens, as the window slides (``tformer generate`` says so in its own words)."""


def seeded(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (None: None, torch's global one draws)."""
    return torch.Generator(device=device).manual_seed(seed) if seed is not None else None


@torch.inference_mode()
def translate_ids(
    model,
    src: torch.Tensor,
    sos_id: int,
    eos_id: int,
    max_len: int = 128,
    sampling: SamplingConfig = GREEDY,
    generator: torch.Generator | None = None,
    compile: bool | Compile = False,
    decoding: DecodingWeights | None = None,
    caches: StaticCaches | None = None,
) -> list[list[int]]:
    """Greedy (or sampled) decoding for a batch of sources ``src`` (B, S); returns ids without <sos>/<eos>, at most
    ``max_len`` of them per source, and no more than the model's target positions (``config.max_len``).

    A source leaves the batch when it reaches <eos>: later steps decode, and keep in the cache, only the
    sources still running. The model decodes with its own kernels; ``decoding``: the weight layouts of an earlier call
    to read again (:class:`~tformer.fast.linear.DecodingWeights`; only while the weights have not changed), else new
    ones made for this call. ``compile=True`` decodes on a static KV cache with the one-token step compiled once
    (``torch.compile``; a CUDA graph on a GPU: see :mod:`tformer.generation.static`, which also says what else
    ``compile`` takes); the first batch pays the compile. The step chooses the token too and the host reads the tokens
    every ``READ_EVERY`` (16) steps (:mod:`tformer.generation.on_device`): greedy gives the same tokens; sampling draws
    from the same distribution with other random numbers than the uncompiled loop's for the same generator.
    """
    check_positive_int(max_len, "max_len")
    max_len = check_translation(model, src, sos_id, max_len)
    checks.compile_option.check(compile, "compile")
    check_decoding(decoding)
    rows, length = src.shape[0], src.shape[1]
    what = f"{rows} source(s) x {max_len} new tokens"
    check_kv_cache(model, rows, max_len + 1, what, source_len=length, static=bool(compile))
    decoder: Decoder = (
        StaticSeq2SeqDecoder(model, sos_id, compile, decoding=decoding, caches=caches)
        if compile
        else Seq2SeqDecoder(model, sos_id, decoding)
    )
    logits, state = decoder.prefill(src, max_len)
    if isinstance(decoder, StaticSeq2SeqDecoder) and on_device.applies(sampling):  # the token chosen on the device
        out = on_device.decode_n_on_device(
            decoder.token_step(cast(StaticSeq2SeqState, state), sampling),
            logits,
            max_len,
            sampling,
            generator,
            until(eos_id),
        )
    else:
        out = decode_n(decoder, state, logits, max_len, sampler(sampling, generator), until(eos_id))
    return [row[:-1] if row and row[-1] == eos_id else row for row in out]


_ANY_ID = checks.Number(int, allowed="an integer (a negative one ends no row)")


@torch.inference_mode()
def generate_lm(
    model,
    prompts: list[list[int]] | torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_id: int | None = None,
    pad_id: int = 0,
    seed: int | None = None,
    on_token=None,
    stop_ids: Sequence[int] = (),
    stop=None,
    compile: bool | Compile = False,
    decoding: DecodingWeights | None = None,
    caches: StaticCaches | None = None,
    attention_mask: torch.Tensor | None = None,
) -> list[list[int]]:
    """Continue each prompt of a decoder-only model; returns the new ids (up to the stopping token, included).

    ``prompts``: lists of ids, or a (B, T) tensor, every id of which is read as the prompt's unless
    ``attention_mask`` (B, T) says which (1/``True``: a token; 0: padding, on either side), as Hugging Face's
    ``generate(input_ids, attention_mask=...)`` reads a padded batch.

    Prompts are left-padded into one batch (:class:`~tformer.generation.loop.LMDecoder`), so a batch gives the same
    tokens as one prompt at a time (while the text fits the model's context); past the context the window slides.
    ``on_token(step, ids)`` is called with the (B,) new ids for streaming. A row ends at ``eos_id`` or any of
    ``stop_ids``, or when ``stop(step, ids)`` (called after ``on_token``) returns True for it (a (B,) list or tensor
    of bools; e.g. a stop string seen in the decoded text). A finished row leaves the batch and the cache (later
    steps decode only the rows still running); the callbacks still get (B,) ids, ``eos_id`` (or ``pad_id``) for it.
    ``seed`` seeds the sampling's generator. The model decodes with its own kernels; ``decoding``: as
    :func:`translate_ids`'s.

    ``compile=True`` decodes on a static KV cache, with the one-token step compiled once by ``torch.compile`` and
    replayed (on a CUDA device with ``mode="reduce-overhead"``: a CUDA graph), as gpt-fast's ``--compile`` and Hugging
    Face's ``cache_implementation="static"`` do. Greedy gives the same tokens. Without a repetition penalty, and while
    the text fits the context, the step chooses the token too and the host reads the tokens every ``READ_EVERY`` (16)
    steps (:mod:`tformer.generation.on_device`): ``on_token`` and ``stop`` are then called ``READ_EVERY`` steps at a
    time, and sampling draws from the same distribution with other random numbers than the uncompiled loop's for the
    same ``seed``. The first call pays the compilation (seconds); later calls with the same batch size and a similar
    length reuse it. A function in place of ``True`` compiles the step its own way (:mod:`tformer.generation.static`).
    ``caches``: a :class:`~tformer.generation.static_cache.StaticCaches` kept across calls, so that they reuse one
    cache per shape (neither compiled nor, on a GPU, recorded again); None: a new cache for this call.
    """
    checks.max_new_tokens.check(max_new_tokens, "max_new_tokens")  # [1, MAX_NEW_TOKENS], --max-new-tokens' words
    check_sampling(sampling, seed)
    checks.compile_option.check(compile, "compile")
    check_decoding(decoding)
    if eos_id is not None:  # a negative one is no token: the rows run to max_new_tokens (what benchmarks ask)
        _ANY_ID.check(eos_id, "eos_id")
    checks.non_negative_int.check(pad_id, "pad_id")
    prompts = _prompt_lists(prompts, model.config.vocab_size, attention_mask)
    longest = max(len(p) for p in prompts)
    what = f"{len(prompts)} prompt(s) of up to {longest} tokens + max_new_tokens={max_new_tokens}"
    static = bool(compile)  # a static cache keeps its whole capacity in every layer (tformer.generation.cache_size)
    limit = getattr(model.config, "max_len", None) or 1 << 30
    if longest >= limit:  # (LMDecoder.prefill keeps the last limit - 1: room for one new token)
        i = next(i for i, p in enumerate(prompts) if len(p) == longest)
        than = "as many as" if longest == limit else "more than"
        said = f"prompts[{i}] has {longest} tokens, {than} the model's context of {limit}"
        warnings.warn(PromptCut(f"{said}: it is read from its last {limit - 1} (room for one new token)"), stacklevel=3)
    positions = lm_capacity(longest, max_new_tokens, limit) if static else longest + max_new_tokens
    check_kv_cache(model, len(prompts), positions, what, static=static)  # before anything is allocated
    decoder: Decoder = (
        StaticLMDecoder(model, pad_id, compile, decoding, caches) if compile else LMDecoder(model, pad_id, decoding)
    )
    generator = seeded(seed, next(model.parameters()).device)
    end_ids = set(stop_ids) | ({eos_id} if eos_id is not None else set())
    ends = _lm_ends(len(prompts), end_ids, eos_id if eos_id is not None else pad_id, on_token, stop)
    logits, state = decoder.prefill(prompts, max_new_tokens)
    if (
        isinstance(decoder, StaticLMDecoder)
        and on_device.applies(sampling)
        and not decoder.slides(prompts, max_new_tokens)
    ):
        step = decoder.token_step(
            cast(StaticLMState, state), sampling
        )  # the token chosen on the device, read every READ_EVERY steps
        return on_device.decode_n_on_device(step, logits, max_new_tokens, sampling, generator, ends)
    return decode_n(decoder, state, logits, max_new_tokens, sampler(sampling, generator), ends)


def _prompt_lists(
    prompts: list[list[int]] | torch.Tensor, vocab_size: int, mask: torch.Tensor | None = None
) -> list[list[int]]:
    """The prompts as lists of ids: a (B, T) tensor (as Hugging Face's ``input_ids``; ``mask``, its
    ``attention_mask``, keeps the ids it marks) or a list of non-empty lists, each id in [0, ``vocab_size``);
    anything else (a text: ids come from a tokenizer) is a ``ValueError`` naming it."""
    if mask is not None and not isinstance(prompts, torch.Tensor):
        raise TypeError("attention_mask is for prompts given as a (B, T) tensor; lists of ids need none")
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2:
            raise ValueError(f"prompts as a tensor must have shape (B, T), got {tuple(prompts.shape)}")
        checks.check_ids(prompts, "prompts", vocab_size)  # integer ids in the vocabulary
        if mask is None:
            return prompts.tolist()
        if not isinstance(mask, torch.Tensor) or mask.shape != prompts.shape:
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"attention_mask must have the prompts' shape {tuple(prompts.shape)}, got {got}")
        if mask.is_floating_point() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("attention_mask must hold 1 (a token) or 0 (padding), as integers or booleans")
        kept = [[t for t, m in zip(row, keep) if m] for row, keep in zip(prompts.tolist(), mask.tolist())]
        empty = next((i for i, row in enumerate(kept) if not row), None)
        if empty is not None:
            raise checks.BadValue(f"attention_mask[{empty}] marks no token: each prompt needs at least one")
        return kept
    if isinstance(prompts, str) or (isinstance(prompts, list) and any(isinstance(p, str) for p in prompts)):
        raise TypeError(
            f"prompts must be token ids (a list of lists of ints, or a (B, T) tensor), got text {prompts!r:.40}: "
            "encode it with the model's tokenizer, or call tformer.lm.generate(model, tokenizer, text, ...)"
        )
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, (list, tuple)) for p in prompts):
        raise TypeError(f"prompts must be a non-empty list of token-id lists (or a (B, T) tensor), got {prompts!r:.60}")
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise checks.BadValue(f"prompts[{i}] is empty: each prompt needs at least one token id")
        ok = [isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in prompt]
        bad = None if all(ok) else prompt[ok.index(False)]
        if bad is not None:
            raise checks.BadValue(f"prompts[{i}] holds {bad!r}: token ids are integers in [0, {vocab_size})")
    return [list(p) for p in prompts]


def _lm_ends(batch: int, end_ids: set[int], filler: int, on_token, stop) -> Ends | None:
    """``ends`` for :func:`decode_n` from :func:`generate_lm`'s end ids and callbacks; ``filler`` stands for a
    finished row in the (B,) ids the callbacks get. None where there is nothing to call or check."""
    if not end_ids and on_token is None and stop is None:
        return None

    def ends(step: int, rows: list[int], ids: torch.Tensor) -> list[bool] | None:
        if on_token is not None or stop is not None:  # the callbacks see every prompt's row: (B,)
            everyone = ids if len(rows) == batch else _scatter(ids, rows, batch, filler)
        if on_token is not None:
            on_token(step, everyone)
        if not end_ids and stop is None:  # no row can end early: nothing to check
            return None
        done = [t in end_ids for t in ids.tolist()] if end_ids else [False] * len(rows)
        if stop is not None:
            said = torch.as_tensor(stop(step, everyone), dtype=torch.bool).tolist()  # (B,)
            done = [d or said[row] for d, row in zip(done, rows)]
        return done

    return ends


def _scatter(ids: torch.Tensor, rows: list[int], batch: int, filler: int) -> torch.Tensor:
    """(R,) ids of the running ``rows`` → (B,) ids, ``filler`` for the rows that ended."""
    everyone = torch.full((batch,), filler, dtype=ids.dtype, device=ids.device)
    return everyone.index_copy_(0, torch.tensor(rows, device=ids.device), ids)
