"""The OpenAI wire format: a request body read and checked into a small dataclass, and the error every refusal answers.

    {"error": {"message": "temperature must be a number in [0, 2], got 3", "type": "invalid_request_error",
               "param": "temperature", "code": null}}

Each field is checked where it is read, with a message that names it, what it got and what is allowed; a field
OpenAI defines that this server cannot honour (``n`` > 1, ``logprobs``, ``tools``, a penalty) is refused, never
ignored, and so is a field OpenAI does not define (as OpenAI does: "Unrecognized request argument"). ``null`` is
the same as leaving a field out. Only the event loop's cheap work is done here (JSON, types, UTF-8); what needs the
tokenizer (the prompt's length in tokens) is checked by the worker (:mod:`tformer.serve.model`).

Dimension legend: none (JSON).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from tformer.generation import SamplingConfig
from tformer.text import check_text

__all__ = [
    "APIError",
    "Options",
    "CompletionRequest",
    "ChatRequest",
    "TranslateRequest",
    "parse_json",
    "completion_request",
    "chat_request",
    "translate_request",
    "MAX_BODY",
]

MAX_BODY = 1 << 20  # bytes of one request body (1 MiB): far more than any context this toolkit's models read
MAX_STOP = 4  # stop strings, as OpenAI allows
MAX_TEXTS = 128  # texts of one /v1/translate request
MAX_BEAM = 16
ROLES = ("system", "developer", "user", "assistant")  # developer: OpenAI's newer name of system, read as system


class APIError(Exception):
    """A refused request: its HTTP status and OpenAI's error object (message, type, param, code)."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def body(self) -> dict[str, Any]:
        message = str(self).splitlines()[0] if str(self) else "bad request"
        return {"error": {"message": message, "type": self.kind, "param": self.param, "code": self.code}}


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:40] + "…"


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; anything else is a 400 saying why."""
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise APIError(f"the request body is not UTF-8 (byte {body[err.start]:#04x} at position {err.start})") from None
    except RecursionError:  # Python's parser recurses: a body of 100,000 "[" is refused, not a crash
        raise APIError("the request body's JSON nests too deep") from None
    except ValueError as err:  # JSONDecodeError; an integer of more than 4300 digits
        raise APIError(f"the request body is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise APIError(f"the request body must be a JSON object, got {_shown(value)}")
    return value


class _Fields:
    """A request body's fields, taken one by one (each checked); :meth:`done` refuses the ones left over."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = {k: v for k, v in body.items() if v is not None}  # null = absent, as OpenAI reads it

    def take(self, name: str) -> Any:
        return self.body.pop(name, None)

    def number(self, name: str, default: Any, low: float, high: float | None = None, whole: bool = False) -> Any:
        """A number in [low, high] (no ``high``: at least ``low``), an integer if ``whole``; absent: ``default``."""
        value = self.take(name)
        if value is None:
            return default
        kind = "an integer" if whole else "a number"
        allowed = f"{kind} in [{low}, {high}]" if high is not None else f"{kind} >= {low}"
        high = math.inf if high is None else high
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if whole:
            ok = ok and (isinstance(value, int) or float(value).is_integer())
        if not ok or not low <= value <= high:
            raise APIError(f"{name} must be {allowed}, got {_shown(value)}", param=name)
        return int(value) if whole else float(value)

    def flag(self, name: str) -> bool:
        value = self.take(name)
        if value is not None and not isinstance(value, bool):
            raise APIError(f"{name} must be true or false, got {_shown(value)}", param=name)
        return bool(value)

    def text(self, value: Any, name: str, nul: bool = False) -> str:
        if not isinstance(value, str):
            raise APIError(f"{name} must be a string, got {_shown(value)}", param=name)
        try:
            return check_text(value, name, nul)  # no lone surrogate (a JSON "\ud800"), no NUL (nul: allowed)
        except ValueError as err:
            raise APIError(str(err), param=name) from None

    def only(self, name: str, allowed: Any, why: str) -> None:
        """A field OpenAI defines that this server honours at one value only (``n``: 1)."""
        value = self.take(name)
        if value is not None and not any(
            value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed
        ):
            raise APIError(f"{name} {_shown(value)} is not supported: {why}", param=name, code="unsupported_value")

    def done(self) -> None:
        if self.body:
            name = sorted(self.body)[0]
            raise APIError(f"unrecognized request argument supplied: {name}", param=name, code="unknown_parameter")


def check_model(fields: _Fields, model_id: str, required: bool = True) -> None:
    """The ``model`` field names the model served (OpenAI requires it; a wrong one is a 404, as OpenAI's)."""
    model = fields.take("model")
    if model is None:
        if required:
            raise APIError(f"you must provide a model parameter (this server's: {model_id!r})", param="model")
        return
    if model != model_id:
        raise APIError(
            f"the model {_shown(model)} does not exist: this server serves {model_id!r} (GET /v1/models)",
            404,
            "model",
            "model_not_found",
        )


STREAM_OPTIONS = {"include_usage", "include_obfuscation"}


@dataclass(frozen=True)
class Options:
    """What a completion or a chat completion asks of the generation: its length, sampling, stops and shape."""

    max_tokens: int | None  # None: the endpoint's default (capped by the server's limit and the context)
    temperature: float  # 0: greedy
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage

    def sampling(self) -> SamplingConfig:
        if self.temperature == 0 or self.top_p == 0:  # OpenAI takes top_p 0: the most likely token alone
            return SamplingConfig()  # greedy: argmax
        return SamplingConfig(True, self.temperature, None, self.top_p if self.top_p < 1 else None)


def _options(fields: _Fields, max_tokens_names: tuple[str, ...]) -> Options:
    max_tokens = None
    for name in max_tokens_names:  # chat: max_completion_tokens is max_tokens' newer name
        max_tokens = fields.number(name, max_tokens, 1, whole=True)  # then capped (tformer.serve.model)
    temperature = fields.number("temperature", 1.0, 0, 2)
    top_p = fields.number("top_p", 1.0, 0, 1)
    # OpenAI takes any 64-bit integer; tformer's generators take --seed's 32 bits: the seed modulo 2**32 (the same
    # text for the same seed, and a seed below 2**32 gives what tformer generate --seed gives)
    seed = fields.number("seed", None, -(2**63), 2**64 - 1, whole=True)
    seed = None if seed is None else seed % 2**32
    stop = fields.take("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or len(stops) > MAX_STOP:
        raise APIError(
            f"stop must be a string or a list of at most {MAX_STOP} strings, got {_shown(stop)}", param="stop"
        )
    stops = [fields.text(s, f"stop[{i}]" if isinstance(stop, list) else "stop") for i, s in enumerate(stops)]
    if any(not s for s in stops):
        raise APIError("stop strings must not be empty", param="stop")
    stream = fields.flag("stream")
    include_usage = False
    stream_options = fields.take("stream_options")
    if stream_options is not None:
        # include_obfuscation (newer SDKs): padding against a side channel over the network, nothing to do here
        if not stream or not isinstance(stream_options, dict) or set(stream_options) - STREAM_OPTIONS:
            raise APIError(
                f'stream_options must be {{"include_usage": bool}} with stream true, got {_shown(stream_options)}',
                param="stream_options",
            )
        include_usage = stream_options.get("include_usage") is True
    fields.only("n", (1,), "this server answers one choice per request (n = 1)")
    for name in ("presence_penalty", "frequency_penalty"):
        fields.only(name, (0,), "penalties are not implemented (0 only)")
    fields.only("logit_bias", ({},), "logit_bias is not implemented")
    fields.only("logprobs", (False,), "log-probabilities are not returned")
    fields.only("top_logprobs", (0,), "log-probabilities are not returned")
    fields.take("user")  # an end-user id for abuse tracking: nothing to do here
    return Options(max_tokens, temperature, top_p, tuple(stops), seed, stream, include_usage)


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str
    options: Options


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]  # [{"role", "content"}], contents as plain strings
    options: Options


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    single: bool  # "text" was one string (the answer has one translation, in a list all the same)
    beam: int
    max_new_tokens: int | None


def completion_request(body: dict[str, Any], model_id: str) -> CompletionRequest:
    """POST /v1/completions: one prompt (a string, or a list of one string)."""
    fields = _Fields(body)
    check_model(fields, model_id)
    prompt = fields.take("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        why = "send the text: token ids are not taken" if prompt and not isinstance(prompt[0], str) else "one prompt"
        raise APIError(f"prompt must be a string, got {_shown(prompt)} ({why} per request)", param="prompt")
    prompt = fields.text("" if prompt is None else prompt, "prompt")
    options = _options(fields, ("max_tokens",))
    fields.only("echo", (False,), "the prompt is not echoed")
    fields.only("best_of", (1,), "one candidate per request")
    fields.only("suffix", ("",), "insertion (a suffix) is not implemented")
    fields.done()
    return CompletionRequest(prompt, options)


def _content(value: Any, where: str, fields: _Fields, nul: bool = False) -> str:
    """A message's content: a string, or a list of ``{"type": "text", "text": ...}`` parts (joined); ``nul``: an
    assistant's, which may hold the NUL its model generated."""
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise APIError(
                    f'{where}[{i}] must be a text part {{"type": "text", "text": ...}} (this model reads text '
                    f"only), got {_shown(part)}",
                    param="messages",
                )
            parts.append(part["text"])
        value = "".join(parts)
    return fields.text(value, where, nul)


def chat_request(body: dict[str, Any], model_id: str) -> ChatRequest:
    """POST /v1/chat/completions: a non-empty list of ``{"role", "content"}`` messages."""
    fields = _Fields(body)
    check_model(fields, model_id)
    raw = fields.take("messages")
    if not isinstance(raw, list) or not raw:
        raise APIError(f"messages must be a non-empty list of messages, got {_shown(raw)}", param="messages")
    messages = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or message.get("role") not in ROLES or "content" not in message:
            raise APIError(
                f'messages[{i}] must be {{"role": one of {", ".join(ROLES)}, "content": text}}, got {_shown(message)}',
                param="messages",
            )
        # null = absent, as OpenAI reads it: a reply sent back as the client library dumps it ("refusal": null, ...)
        extra = sorted(k for k in set(message) - {"role", "content", "name"} if message[k] not in (None, []))
        if extra:
            raise APIError(f"messages[{i}] has {extra[0]!r}, which this server does not take", param="messages")
        role = "system" if message["role"] == "developer" else message["role"]
        messages.append(
            {
                "role": role,
                "content": _content(message["content"], f"messages[{i}].content", fields, role == "assistant"),
            }
        )
    options = _options(fields, ("max_tokens", "max_completion_tokens"))
    off = "none" in (fields.body.get("tool_choice"), fields.body.get("function_call"))  # tools sent, turned off
    for name in ("tools", "functions"):
        if off:
            fields.take(name)
        else:
            fields.only(name, ([],), "tool calls are not implemented")
    for name in ("tool_choice", "function_call"):
        fields.only(name, ("none",), "tool calls are not implemented")
    fields.only("response_format", ({"type": "text"},), "the answer is plain text")
    fields.take("parallel_tool_calls")  # no tools, so nothing to run in parallel
    for name in ("store", "metadata", "service_tier"):  # OpenAI's own bookkeeping and billing: nothing to do here
        fields.take(name)
    fields.only("modalities", (["text"],), "the answer is text")
    fields.only("reasoning_effort", (), "this model answers without a reasoning step")
    fields.done()
    return ChatRequest(messages, options)


def translate_request(body: dict[str, Any], model_id: str) -> TranslateRequest:
    """POST /v1/translate: ``{"text": str | [str], "beam"?, "max_new_tokens"?, "model"?}``; ``max_new_tokens`` is
    capped by the server's limit, as a completion's ``max_tokens`` is (:func:`tformer.serve.model.translate`)."""
    fields = _Fields(body)
    check_model(fields, model_id, required=False)
    text = fields.take("text")
    single = isinstance(text, str)
    texts = [text] if single else text
    if not isinstance(texts, list) or not texts or len(texts) > MAX_TEXTS:
        raise APIError(f"text must be a string or a list of 1 to {MAX_TEXTS} strings, got {_shown(text)}", param="text")
    texts = [fields.text(t, "text" if single else f"text[{i}]") for i, t in enumerate(texts)]
    beam = fields.number("beam", 1, 1, MAX_BEAM, whole=True)
    limit = fields.number("max_new_tokens", None, 1, whole=True)  # then capped
    fields.done()
    return TranslateRequest(texts, single, beam, limit)
