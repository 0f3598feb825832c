"""Chatting with a language model: a conversation laid out by the model's chat template, and the model's reply.

    model, tokenizer = tformer.lm.load("SmolLM2-135M-Instruct")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    answer = tformer.lm.reply(model, tokenizer, messages, 100, on_text=print)
    answer.text, answer.finish_reason              # 'The capital of France is Paris.', 'stop'
    messages.append({"role": "assistant", "content": answer.text})

The conversation is rendered by the tokenizer's chat template (:meth:`~tformer.tokenizers.Tokenizer.apply_chat_template`,
as ``transformers`` renders it) with the generation prompt, and encoded as ``transformers`` encodes it (no special
token added: the template writes them). The reply is generated as :func:`tformer.lm.generate` generates a
continuation, and ends at any of the tokenizer's end ids (a chat model's end of turn, ``<|im_end|>``, among them) or
a stop string, never showing the end token. A conversation longer than the context leaves room for the reply by
dropping its oldest turns (a leading system message is kept), and says how many messages went.

This module knows the tokenizer's chat template and the generation loop; it knows nothing about the command line or
the server (``tformer chat`` and ``tformer serve`` call it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from tformer import checks
from tformer.generation import SamplingConfig
from tformer.lm.stream import stream_ids
from tformer.text import check_texts
from tformer.tokenizers.chat_template import check_messages

__all__ = ["ChatReply", "chat_prompt_ids", "reply"]


@dataclasses.dataclass(frozen=True)
class ChatReply:
    """The model's turn: its ``text`` (without the end token); ``prompt_tokens``, the conversation's tokens it read;
    ``completion_tokens``, the tokens it generated (the end token included); ``finish_reason``, "stop" (an end token
    or a stop string) or "length" (``max_new_tokens`` reached); ``dropped``, how many of the oldest messages were
    left out to fit the context."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: Literal["stop", "length"]
    dropped: int = 0


def chat_prompt_ids(tokenizer, messages: Sequence[Mapping[str, Any]], max_tokens: int) -> tuple[list[int], int]:
    """The ids of ``messages`` in the tokenizer's chat template, ending with the generation prompt, in at most
    ``max_tokens``; and how many messages were dropped to fit: the oldest turns first, whole (a user message with the
    replies after it), never a leading system message nor the last message. When even those do not fit: ValueError."""
    checks.positive_int.check(max_tokens, "max_tokens")
    messages = check_messages(messages)
    head = messages[:1] if messages[0]["role"] == "system" else []
    turns = messages[len(head) :]
    dropped = 0
    while True:
        ids = tokenizer.apply_chat_template(head + turns, add_generation_prompt=True, tokenize=True)
        if len(ids) <= max_tokens:
            return ids, dropped
        if len(turns) <= 1:
            what = (
                "the system message and the last message alone take"
                if head and turns
                else "the last message alone takes"
            )
            raise ValueError(
                f"{what} {len(ids)} tokens in the chat template, more than the {max_tokens} the context leaves for "
                "them beside the tokens to generate: shorten it, or generate fewer tokens"
            )
        n = 1  # the oldest message, and what answered it: up to the next user message (the last one stays)
        while n < len(turns) - 1 and turns[n]["role"] != "user":
            n += 1
        turns, dropped = turns[n:], dropped + n


def reply(
    model,
    tokenizer,
    messages: Sequence[Mapping[str, Any]],
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    stop: Iterable[str] = (),
    seed: int | None = None,
    on_text: Callable[[str], None] | None = None,
    max_context: int | None = None,
) -> ChatReply:
    """The model's next turn after ``messages`` ([{"role": "user", "content": "Hi"}, ...]), at most
    ``max_new_tokens`` tokens; ``sampling``, ``stop``, ``seed``, ``on_text``: as :func:`tformer.lm.generate`'s
    (``on_text`` gets the text as it becomes safe to show). ``max_context``: the tokens the conversation and the
    reply may take together (default and at most: the model's context); the oldest turns are dropped to leave
    ``max_new_tokens`` of them to the reply (:func:`chat_prompt_ids`; ``dropped`` says how many messages went)."""
    checks.max_new_tokens.check(max_new_tokens, "max_new_tokens")  # the words of --max-new-tokens
    stop = check_texts(list(stop) if isinstance(stop, Iterable) and not isinstance(stop, str) else stop, "stop")
    context = model.config.max_len
    if max_context is not None:
        limit = checks.Number(int, 1, context, allowed=f"an integer in [1, {context}] (the model's context)")
        context = limit.check(max_context, "max_context")
    if max_new_tokens >= context:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} leaves no room for the conversation in a context of {context} tokens: "
            f"ask for fewer than {context}"
        )
    prompt_ids, dropped = chat_prompt_ids(tokenizer, messages, context - max_new_tokens)
    out = stream_ids(model, tokenizer, prompt_ids, max_new_tokens, sampling, stop, seed, on_text)
    return ChatReply(out.text, len(prompt_ids), len(out.ids), out.finish_reason, dropped)
