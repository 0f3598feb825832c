"""Decoding whose one-token step stays on the device: choose the token, feed it, get the next logits, with the host
reading the tokens every :data:`READ_EVERY` steps instead of after each one (issue 48).

On a static cache (:mod:`tformer.generation.static`) the loop of :func:`~tformer.generation.loop.decode_n` reads each
step's ids back to the host to see whether a row has ended: on a GPU the host then waits for the device at every
token, and the next step cannot be queued behind the current one. Here the compiled step is the whole of a token:

    ids = choose(logits, uniforms)           greedy (argmax), or a draw by the inverse of the softmax's running sum
    logits = model(ids, positions + 1, cache)     the next (B, V) logits, every row of the cache

and the host queues :data:`READ_EVERY` of them, then reads their ids in one copy, applies the ends (end ids, the
``stop`` and ``on_token`` callbacks, step by step as :func:`~tformer.generation.loop.decode_n` would) and stops when
every row has ended. What that costs: up to ``READ_EVERY − 1`` steps decoded after the last row ended (thrown away),
and streaming (``on_token``) sees the tokens in groups of ``READ_EVERY``.

Sampling draws with uniforms taken from the caller's generator, ``READ_EVERY`` × B at a time, outside the step (the
graph holds no random state): ``ids = first i with cumsum(p)[i] > u · sum(p)``, the same distribution as
``torch.multinomial`` (``tests/test_on_device_decoding.py`` checks it), but other numbers than the host loop's for the
same seed. Greedy gives the host loop's tokens. The repetition penalty (which reads the tokens seen) and a
decoder-only context that would slide stay on the host loop (:func:`applies`).

Dimension legend: B rows of the cache, V vocabulary size, N = :data:`READ_EVERY`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tformer.generation.loop import Ends
from tformer.generation.samplers import SamplingConfig, process_logits

__all__ = ["READ_EVERY", "applies", "choose_on_device", "decode_n_on_device"]

READ_EVERY = 16  # steps queued on the device between two reads of their ids by the host

# (the (B, V) logits, the (B,) uniforms or None) → ((B,) ids chosen, (B, V) the logits after feeding them), each a
# tensor of its own (not a CUDA graph's output buffer, which the next replay overwrites)
TokenStep = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


def applies(sampling: SamplingConfig) -> bool:
    """Whether ``sampling`` can be chosen on the device: all of it but the repetition penalty (the tokens seen)."""
    return sampling.repetition_penalty == 1.0


def choose_on_device(logits: torch.Tensor, sampling: SamplingConfig, uniforms: torch.Tensor | None) -> torch.Tensor:
    """(B, V) logits → (B,) ids, with no host read: :func:`~tformer.generation.samplers.process_logits` (temperature,
    top-k, top-p), then the argmax, or the first token whose running sum of probabilities passes ``uniforms`` (B,)
    (each in [0, 1)) times the row's total."""
    logits = process_logits(logits, sampling)
    if not sampling.do_sample:
        return logits.argmax(-1)
    assert uniforms is not None
    cdf = logits.softmax(-1).cumsum(-1)  # (B, V)
    target = uniforms[:, None].to(cdf.dtype) * cdf[:, -1:]  # (B, 1)
    ids = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # (B,) first i with cdf[i] > target
    return ids.clamp(max=logits.shape[-1] - 1)  # (the rounding of the last sum)


def decode_n_on_device(
    step: TokenStep,
    logits: torch.Tensor,
    n: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    ends: Ends | None,
) -> list[list[int]]:
    """Up to ``n`` new tokens for each of the B rows of ``logits`` (the prefill's): ``step(logits, uniforms)`` chooses
    and feeds one token per row on the device; every :data:`READ_EVERY` steps the host reads their ids and applies
    ``ends`` as :func:`~tformer.generation.loop.decode_n` does (a row ends with the token that ended it, included),
    stopping once every row has ended. Returns each row's new ids."""
    batch = logits.shape[0]
    running = list(range(batch))
    out: list[list[int]] = [[] for _ in range(batch)]
    queued: list[torch.Tensor] = []  # (B,) ids of the steps not read yet
    uniforms = None
    for t in range(n):
        if sampling.do_sample and t % READ_EVERY == 0:  # the next READ_EVERY steps' draws, at once
            rows = (min(READ_EVERY, n - t), batch)
            uniforms = torch.rand(rows, generator=generator, device=logits.device)
        u = None if uniforms is None else uniforms[t % READ_EVERY]
        if t == n - 1:  # the last token is chosen, not fed
            queued.append(choose_on_device(logits, sampling, u))
        else:
            if logits.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are done with
            ids, logits = step(logits, u)  # (copies of the graph's outputs, which its next replay overwrites)
            queued.append(ids)
        if len(queued) == READ_EVERY or t == n - 1:
            first = t + 1 - len(queued)
            for offset, ids in enumerate(torch.stack(queued).tolist()):  # one read for the group
                running = _apply_ends(first + offset, ids, running, out, ends)
                if not running:
                    return out
            queued = []
    return out


def _apply_ends(step: int, ids: list[int], running: list[int], out: list[list[int]], ends: Ends | None) -> list[int]:
    """One step of the host loop's bookkeeping over (B,) ``ids``: each running row takes its id; those that ``ends``
    says end leave. Returns the rows still running."""
    mine = [ids[row] for row in running]
    for row, token in zip(running, mine):
        out[row].append(token)
    if ends is None:
        return running
    done = ends(step, running, torch.tensor(mine))
    if done is None:
        return running
    return [row for row, d in zip(running, done) if not d]
