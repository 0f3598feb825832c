"""The model a server serves, and the three kinds of work it does for requests: complete, chat, translate.

    served = Served.open("runs/shakespeare")     # a GPT: completions (and chat, if its tokenizer has a template)
    served = Served.open("runs/demo")            # a translator: /v1/translate
    outcome = complete(served, request, emit)    # in the worker thread; emit(text) as each token comes

Each function runs in the worker thread (:mod:`tformer.serve.worker`), the only thread that touches the model and
the tokenizer, and calls the library: :func:`tformer.lm.stream.stream_ids` (what :func:`tformer.lm.generate` runs),
:func:`tformer.lm.chat.reply`, :meth:`tformer.translation.Translator.translate`. The limits are applied here, where the tokenizer is: the prompt
must leave room for a new token in the model's context, ``max_tokens`` must fit the room it leaves, and is capped by
the server's limit (``finish_reason`` "length" says the cap was reached).

Dimension legend: none (text and counts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tformer.serve.protocol import APIError, ChatRequest, CompletionRequest, TranslateRequest

__all__ = ["Served", "Outcome", "complete", "chat", "translate", "DEFAULT_MAX_TOKENS"]

DEFAULT_MAX_TOKENS = 16  # a completion's max_tokens when the request gives none (OpenAI's); chat: the server's cap


@dataclass
class Served:
    """The one model of a server: a GPT (``model`` + ``tokenizer``) or a translator (``translator``)."""

    name: str  # the model id clients send and /v1/models lists
    family: str  # "gpt" | "seq2seq"
    describe: str  # "a GPT (a Hugging Face llama directory)"
    max_new_tokens: int  # the most tokens one request may generate
    model: Any = None
    tokenizer: Any = None
    translator: Any = None

    @classmethod
    def open(
        cls,
        directory: str | Path,
        name: str | None = None,
        device: str = "cpu",
        precision: str = "auto",
        fast: bool = True,
        max_new_tokens: int = 512,
    ) -> Served:
        """Load the model in ``directory`` (any GPT or translator :func:`tformer.load` reads) for inference."""
        from tformer.fast.precision import for_inference
        from tformer.loader import FAMILIES, detect

        kind = detect(directory, "--model")
        where = Path(directory).resolve()  # a run's best/ or last/ is served by the run's name
        name = name or (where.parent.name if where.name in ("best", "last") else where.name)
        if kind.family == "gpt":
            from tformer import lm

            model, tokenizer = lm.load(directory, device, flag="--model", fast=fast)
            model = for_inference(model, precision, "decoding", device, fast)
            return cls(name, "gpt", kind.describe(), max_new_tokens, model=model, tokenizer=tokenizer)
        if kind.family == "seq2seq":
            from tformer.translation import Translator

            translator = Translator.load(directory, device, flag="--model", fast=fast)
            translator.model = for_inference(translator.model, precision, "decoding", device, fast)
            return cls(name, "seq2seq", kind.describe(), max_new_tokens, translator=translator)
        raise ValueError(
            f"--model {str(directory)!r} holds {FAMILIES[kind.family]}: tformer serve serves a GPT (/v1/completions, "
            "/v1/chat/completions) or a translator (/v1/translate)"
        )

    @property
    def context(self) -> int:
        """The positions the model reads: prompt + generated tokens."""
        return int((self.model or self.translator.model).config.max_len)

    @property
    def chat_template(self) -> str | None:
        return getattr(self.tokenizer, "chat_template", None)


@dataclass(frozen=True)
class Outcome:
    """A finished generation: its text and its counts, as ``usage`` and ``finish_reason`` report them."""

    text: str
    prompt_tokens: int
    completion_tokens: int  # the end-of-text token included, as tformer.lm.chat.reply counts it
    finish_reason: str  # "stop" (the end of text or a stop string) | "length" (max_tokens or the context)


def _budget(served: Served, prompt_tokens: int, asked: int | None, default: int, param: str) -> int:
    """The tokens a request may generate: what it asked (else ``default``), at most the server's limit and the room
    the context leaves after the prompt. A prompt that leaves no room is a 400, and so is a ``max_tokens`` asked past
    that room, as OpenAI's and vLLM's (a default is fitted to it)."""
    room = served.context - prompt_tokens
    if room < 1 or (asked is not None and asked > room):
        more = f" and max_tokens asks for {asked} more" if room >= 1 else ""
        fix = f"ask for at most {room} tokens, or shorten the prompt" if room >= 1 else "shorten the prompt"
        raise APIError(
            f"this model's context is {served.context} tokens, prompt and completion together; the prompt is "
            f"{prompt_tokens} tokens long{more}: {fix}",
            param=param if room < 1 else "max_tokens",
            code="context_length_exceeded",
        )
    return min(asked or default, served.max_new_tokens, room)


def complete(served: Served, request: CompletionRequest, emit: Callable[[str], None]) -> Outcome:
    """POST /v1/completions: continue the prompt as :func:`tformer.lm.generate` does (its prompt ids, then
    :func:`tformer.lm.stream.stream_ids`, which also says how many tokens came and why they ended)."""
    from tformer.lm.stream import stream_ids

    tokenizer, options = served.tokenizer, request.options
    prompt_ids = tokenizer.encode(request.prompt, add_special_tokens=True) or [tokenizer.start_id]  # none: a new text
    budget = _budget(served, len(prompt_ids), options.max_tokens, DEFAULT_MAX_TOKENS, "prompt")
    sampling, stop, seed = options.sampling(), options.stop, options.seed
    out = stream_ids(served.model, tokenizer, prompt_ids, budget, sampling, stop, seed, emit)
    return Outcome(out.text, len(prompt_ids), len(out.ids), out.finish_reason)


def chat(served: Served, request: ChatRequest, emit: Callable[[str], None]) -> Outcome:
    """POST /v1/chat/completions: the model's next turn after ``messages``, laid out by its chat template, with
    :func:`tformer.lm.chat.reply`. The whole conversation must fit the context: no turn is dropped."""
    from tformer.lm.chat import reply

    tokenizer, options = served.tokenizer, request.options
    prompt_tokens = len(tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=True))
    budget = _budget(served, prompt_tokens, options.max_tokens, served.max_new_tokens, "messages")
    sampling, stop, seed = options.sampling(), options.stop, options.seed
    answer = reply(served.model, tokenizer, request.messages, budget, sampling, stop, seed, emit, served.context)
    if answer.dropped:  # the budget leaves the conversation room: a turn dropped would be a bug
        raise RuntimeError(f"tformer.lm.chat.reply dropped {answer.dropped} message(s) of a conversation that fits")
    return Outcome(answer.text, answer.prompt_tokens, answer.completion_tokens, answer.finish_reason)


def translate(served: Served, request: TranslateRequest, emit: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """POST /v1/translate: the translations of the texts (in one batch call of :meth:`Translator.translate`) and the
    warnings about texts longer than the model reads (translated from their first tokens) and translations cut by
    their length limit."""
    from tformer.translation.translator import CUTS, recording_cuts

    emit("")  # started
    limit = min(request.max_new_tokens or served.max_new_tokens, served.max_new_tokens)
    with recording_cuts() as caught:
        out = served.translator.translate(request.texts, beam=request.beam, max_new_tokens=limit)
    notes = [str(w.message) for w in caught if issubclass(w.category, CUTS)]
    return out, notes
