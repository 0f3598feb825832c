"""Samplers: how the next token is chosen from a row of logits, as small pure functions.

Logit processors (repetition penalty → temperature → top-k → top-p, :func:`process_logits`), then a choice:
:func:`greedy` (argmax) or :func:`sample` (a draw with a seeded ``torch.Generator``); :func:`choose_next` is the two
together for a :class:`SamplingConfig`, and :func:`sampler` the same as the one-argument-pair function the decoding
loop takes (:func:`tformer.generation.loop.decode_n`). None of them changes its inputs; given the same logits (and a
generator in the same state) they give the same ids.

The processors keep the distribution a distribution whatever the settings: they compute in float32, the most
likely token always survives (top-k and top-p keep at least it), and no value can overflow into inf or NaN (see
:func:`process_logits`), so a draw never fails.

Dimension legend: B rows (sequences, or beams), T tokens seen, V vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tformer import checks

__all__ = [
    "MIN_TEMPERATURE",
    "MAX_TEMPERATURE",
    "SamplingConfig",
    "GREEDY",
    "Sampler",
    "apply_repetition_penalty",
    "top_k_filter",
    "top_p_filter",
    "process_logits",
    "greedy",
    "sample",
    "choose_next",
    "sampler",
    "check_sampling",
]

MIN_TEMPERATURE = 1e-30  # temperatures below it divide as this (float32 keeps it exact; see process_logits)
MAX_TEMPERATURE = 1e30  # and above it as this (float32 would round 1e39 to inf, and -inf / inf is NaN)
_FLOAT32_MAX = torch.finfo(torch.float32).max

# (B, V) logits of the last position, (B, T) the tokens each row has seen → (B,) the next ids
Sampler = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


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
        checks.check_yes_no_fields(self)  # do_sample="no" is a true string: refused, not sampled with
        if not is_finite_number(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if self.top_k is not None and (
            not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be an integer >= 1 (or None), got {self.top_k!r}")
        if self.top_p is not None and (not is_finite_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (or None), got {self.top_p!r}")
        if not is_finite_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty!r}")


def check_sampling(sampling: object, seed: object) -> None:
    """A decoding entry point's ``sampling`` (a :class:`SamplingConfig` or None) and ``seed`` (None or an integer in
    [0, 2**32 - 1], ``--seed``'s bound); else a ``ValueError`` naming the parameter."""
    if sampling is not None and not isinstance(sampling, SamplingConfig):
        got = f"{type(sampling).__name__} {sampling!r:.40}"
        raise checks.BadValue(f"sampling must be a SamplingConfig or None, got {got}")
    if seed is not None:
        checks.seed.check(seed, "seed")


def is_finite_number(value) -> bool:
    """Whether ``value`` is an int or a float (not a bool), and finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


GREEDY = SamplingConfig()  # the default: argmax, no penalty


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


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """(B, V) logits → (B,) the most likely ids (the first of a tie)."""
    return logits.argmax(-1)


def sample(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, V) processed logits → (B,) ids drawn from their softmax with ``generator``.

    A row of NaN logits (weights or activations that overflowed) cannot be sampled: a ``ValueError`` says so."""
    try:
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
    except RuntimeError:  # checked only on failure: no extra device sync per step
        if bool(torch.isnan(logits).any()):
            raise ValueError(
                "the model's next-token logits are NaN (non-finite activations: in float16 try float32)"
            ) from None
        raise


def choose_next(
    logits: torch.Tensor,
    config: SamplingConfig,
    generator: torch.Generator | None = None,
    previous: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, V) logits of the last position → (B,) next token ids: :func:`process_logits`, then :func:`greedy` or
    :func:`sample` as ``config`` says. ``previous`` (B, T): the tokens each row has seen (the repetition penalty's)."""
    logits = process_logits(logits, config, previous)
    return sample(logits, generator) if config.do_sample else greedy(logits)


def sampler(config: SamplingConfig = GREEDY, generator: torch.Generator | None = None) -> Sampler:
    """:func:`choose_next` with ``config`` and ``generator`` fixed: ``(logits, previous) → ids``, the choice that
    :func:`tformer.generation.loop.decode_n` makes at each step."""

    def choose(logits: torch.Tensor, previous: torch.Tensor | None = None) -> torch.Tensor:
        return choose_next(logits, config, generator, previous)

    return choose
