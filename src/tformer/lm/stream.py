"""Streaming decoded text: print the tokens of a generation as they come, and stop at a stop string.

:class:`TextStream` turns ids into the text that is safe to show; :func:`stream_ids` runs a language model from
prompt ids through one (what :func:`tformer.lm.generate` and :func:`tformer.lm.chat.reply` share).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Literal

from tformer.generation import SamplingConfig, generate_lm
from tformer.tokenizers import Continuation

__all__ = ["TextStream", "Streamed", "stream_ids"]


class TextStream:
    """Incremental decoding for streaming: ``push(id)`` returns the text that is now safe to print.

    Holds back a trailing incomplete UTF-8 character (byte-level BPE) and any tail that could be
    the start of a stop string; once a stop string appears, the text ends before it.
    """

    def __init__(self, tokenizer, stop: Iterable[str] = ()) -> None:
        self.tokenizer, self.stop_strings = tokenizer, [s for s in stop if s]
        self.ids: list[int] = []
        self.text, self.printed, self.stopped = "", 0, False

    def push(self, token_id: int) -> str:
        if self.stopped:
            return ""
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        hits = [text.find(s, max(self.printed - len(s), 0)) for s in self.stop_strings]
        hits = [h for h in hits if h >= 0]
        if hits:
            self.stopped, text = True, text[: min(hits)]
            safe = len(text)
        else:
            safe = len(text.rstrip("\ufffd"))
            tails = [
                k for s in self.stop_strings for k in range(1, min(len(s), safe + 1)) if text[:safe].endswith(s[:k])
            ]
            safe -= max(tails, default=0)  # a tail that may still grow into a stop string waits
        self.text = text
        out = text[self.printed : max(safe, self.printed)]
        self.printed = max(safe, self.printed)
        return out

    def flush(self) -> str:
        """The rest of the text (what was held back) once generation has ended."""
        out, self.printed = self.text[self.printed :], len(self.text)
        return out


@dataclasses.dataclass(frozen=True)
class Streamed:
    """What :func:`stream_ids` generated: the text shown, every new id (an end token or the one that completed a stop
    string included), and why it ended: "stop" (an end token or a stop string) or "length" (``max_new_tokens``)."""

    text: str
    ids: list[int]
    finish_reason: Literal["stop", "length"]


def stream_ids(
    model,
    tokenizer,
    prompt_ids: list[int],
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    stop: Iterable[str] = (),
    seed: int | None = None,
    on_text: Callable[[str], None] | None = None,
    compile: bool = False,
) -> Streamed:
    """Continue ``prompt_ids`` with ``model`` (:func:`~tformer.generation.generate_lm`), ending at any of the
    tokenizer's ``eos_ids`` or a ``stop`` string; ``on_text`` receives the text as it becomes safe to show (never an
    end token, nothing from a stop string on). The arguments are the caller's to check."""
    ends, pad = tokenizer.eos_ids, tokenizer.pad_id
    # a SentencePiece-style decoder may strip a leading space: decode the new ids after the prompt's, then cut
    stream = TextStream(Continuation(tokenizer, prompt_ids), stop)
    pieces: list[str] = []

    def emit(text: str) -> None:
        pieces.append(text)
        if on_text is not None:  # once per shown token (maybe ""), once more for what was held back
            on_text(text)

    def show(step, ids) -> None:
        if int(ids[0]) not in ends:  # the end of the text is not shown
            emit(stream.push(int(ids[0])))

    (new,) = generate_lm(
        model,
        [prompt_ids],
        max_new_tokens,
        sampling or SamplingConfig(),
        eos_id=ends[0] if ends else None,
        pad_id=pad if pad is not None else 0,  # only fills a batch's left padding, which the mask hides
        seed=seed,
        on_token=show,
        stop_ids=ends[1:],
        stop=lambda step, ids: [stream.stopped],
        compile=compile,
    )
    emit(stream.flush())
    ended = stream.stopped or (bool(new) and new[-1] in ends)
    return Streamed("".join(pieces), list(new), "stop" if ended else "length")
