"""The JSON of OpenAI's answers: a completion and a chat completion, whole and as server-sent-event chunks.

    data: {"id": "chatcmpl-…", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}, …}]}

    data: {… "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

    data: [DONE]

A chat stream opens with a chunk whose delta holds the role, then one chunk for each piece of text, then one with the
``finish_reason`` (and, with ``stream_options.include_usage``, a last one with empty choices and the ``usage``), then
``[DONE]``; a completion stream has ``choices[0].text`` in place of the delta. Shapes only: the values come from
:class:`tformer.serve.model.Outcome`.

Dimension legend: none (JSON).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

__all__ = ["Answer", "event", "DONE", "models_list"]

DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    """One server-sent event: ``data: {json}`` and a blank line."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def models_list(name: str, created: int) -> dict[str, Any]:
    """GET /v1/models: the one model served."""
    return {"object": "list", "data": [model_card(name, created)]}


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "tformer"}


class Answer:
    """The answers to one request of /v1/completions (``chat=False``) or /v1/chat/completions (``chat=True``)."""

    def __init__(self, model: str, chat: bool, include_usage: bool = False) -> None:
        self.model, self.chat, self.include_usage = model, chat, include_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, outcome: Any) -> dict[str, Any]:
        """The answer of a request that did not stream: the text, why it ended, the token counts."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": outcome.text}
        else:
            choice["text"] = outcome.text
        choice.update(logprobs=None, finish_reason=outcome.finish_reason)
        kind = "chat.completion" if self.chat else "text_completion"
        return {
            **self._head(kind),
            "choices": [choice],
            "usage": usage(outcome.prompt_tokens, outcome.completion_tokens),
        }

    def chunk(self, text: str | None, finish_reason: str | None = None, role: bool = False) -> dict[str, Any]:
        """A stream chunk: a piece of text (None: none, in the last chunk), the finish reason in the last one; the
        role in a chat stream's first one."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            delta: dict[str, str] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
        choice.update(logprobs=None, finish_reason=finish_reason)
        chunk = {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [choice]}
        if self.include_usage:  # as OpenAI's: each chunk says "usage": null, the last one (usage_chunk) the counts
            chunk["usage"] = None
        return chunk

    def usage_chunk(self, outcome: Any) -> dict[str, Any]:
        """The last chunk of a stream asked with ``stream_options: {"include_usage": true}``."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(kind), "choices": [], "usage": usage(outcome.prompt_tokens, outcome.completion_tokens)}
