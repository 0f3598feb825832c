"""Autoregressive generation, outside the models: one decoding loop, shared by greedy, sampling and beam search.

* :mod:`.loop` — the loop: a family's decoder (:class:`LMDecoder`, :class:`Seq2SeqDecoder`) gives ``prefill`` and
  ``step`` over a :class:`~tformer.nn.cache.KVCache`; :func:`decode_one` feeds one token per row, :func:`decode_n`
  chooses and feeds up to n (finished rows leave the batch);
* :mod:`.samplers` — how the next token is chosen, as small pure functions: the logit processors (repetition
  penalty → temperature → top-k → top-p), :func:`greedy`, :func:`sample`, :func:`choose_next` for a
  :class:`SamplingConfig`;
* :mod:`.generate` — :func:`generate_lm` (decoder-only: prompts of different lengths in one batch) and
  :func:`translate_ids` (encoder–decoder: the source encoded once), each a prefill and :func:`decode_n`;
* :mod:`.beam` — :func:`beam_search` (encoder–decoder, with a length penalty), ranking its beams between
  :func:`decode_one` steps;
* :mod:`.static` — :class:`StaticLMDecoder` and :class:`StaticSeq2SeqDecoder`, the same decoders on a
  :class:`~tformer.generation.static_cache.StaticKVCache` with the one-token step compiled once (``compile=True`` in each
  function above; ``torch.compile``, a CUDA graph on a GPU): the same tokens.

The decoders run the kernels the model has: :func:`tformer.load` chooses the fast ones, a model built in Python runs
the reference ones until :func:`tformer.fast.speed_up` is applied to it. Decoding changes nothing in the model: the
KV cache and the weight layouts a call reads are that call's (:class:`~tformer.fast.linear.DecodingWeights`).

It knows nothing about tokenizers, files or the command line: ids in, ids out.
"""

from __future__ import annotations

from tformer.fast.linear import DecodingWeights
from tformer.generation.beam import MAX_BEAM, MAX_LENGTH_PENALTY, BeamCandidate, beam_search
from tformer.generation.generate import MAX_NEW_TOKENS, PromptCut, generate_lm, seeded, translate_ids
from tformer.generation.loop import LMDecoder, Seq2SeqDecoder, decode_n, decode_one, until
from tformer.generation.samplers import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    SamplingConfig,
    apply_repetition_penalty,
    choose_next,
    greedy,
    process_logits,
    sample,
    sampler,
    top_k_filter,
    top_p_filter,
)
from tformer.generation.static import StaticLMDecoder, StaticSeq2SeqDecoder

__all__ = [
    "DecodingWeights",
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
    "greedy",
    "sample",
    "choose_next",
    "sampler",
    "seeded",
    "LMDecoder",
    "Seq2SeqDecoder",
    "StaticLMDecoder",
    "StaticSeq2SeqDecoder",
    "decode_one",
    "decode_n",
    "until",
    "translate_ids",
    "BeamCandidate",
    "beam_search",
    "generate_lm",
    "PromptCut",
]
