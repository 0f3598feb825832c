"""Streaming decoded text: print the tokens of a generation as they come, and stop at a stop string."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["TextStream"]


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
