"""The HTTP server: a Starlette app with OpenAI's routes, run by uvicorn.

    GET  /v1/models             the one model (its id: the directory's name or --name)
    POST /v1/completions        a GPT: continue a prompt            (stream: server-sent events)
    POST /v1/chat/completions   a GPT with a chat template: reply   (stream: server-sent events)
    POST /v1/translate          a translator: {"text": str | [str]} -> {"translations": [...]}

Each request's body is read (refused with 413 past :data:`~tformer.serve.protocol.MAX_BODY`), checked
(:mod:`tformer.serve.protocol`), and its generation queued for the one worker thread (:mod:`tformer.serve.worker`;
503 when ``max_queue`` requests are waiting). A streamed answer's status is sent with its first token, so a request
the worker refuses (a prompt longer than the context) still gets its 400; a client that goes away cancels its
generation. Every refusal is OpenAI's error object with its status; an unexpected error is a 500 of the same
shape, its traceback on stderr. Each request ends with one line on stderr: method, path, status, seconds, tokens
and tokens/s.

Safety: served on 127.0.0.1 unless told otherwise; a foreign ``Host`` (on a loopback address), a cross-origin
request and a missing or wrong API key are refused before anything runs (:mod:`tformer.serve.guard`).

Dimension legend: none (HTTP).
"""

from __future__ import annotations

import asyncio
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, MutableMapping
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tformer.net import listen
from tformer.serve import model as work
from tformer.serve.answers import DONE, Answer, event, model_card, models_list
from tformer.serve.guard import LOOPBACK, Guard
from tformer.serve.model import Served
from tformer.serve.protocol import (
    MAX_BODY,
    APIError,
    ChatRequest,
    CompletionRequest,
    chat_request,
    completion_request,
    parse_json,
    translate_request,
)
from tformer.serve.worker import Job, Worker

__all__ = ["create_app", "listen", "server_for", "serve", "LOOPBACK"]

GONE = 499  # the status logged for a client that left before its answer (nginx's "client closed request")


def _say(line: str) -> None:
    print(f"tformer serve: {line}", file=sys.stderr, flush=True)


# 413: a body over the cap is not read to its end, so the connection closes after the answer; 503: the queue is full,
# and a client (the openai package's retries among them) may try again in a second
_ERROR_HEADERS = {413: {"connection": "close"}, 503: {"retry-after": "1"}}


def _error(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _bug(err: BaseException) -> JSONResponse:
    """A 500: the traceback on the server's stderr, the client a line asking for a report."""
    traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    return _error(_internal(err))


def _internal(err: BaseException) -> APIError:
    return APIError(
        f"internal error, a bug in tformer serve ({type(err).__name__}: {err}); please report it with the request "
        "and the traceback the server printed",
        500,
        kind="server_error",
    )


# the server is stopping (Ctrl-C, SIGTERM): a request running or waiting ends with this, at once
STOPPING = APIError(
    "the server is shutting down: this request was stopped; try again when it is back",
    503,
    code="server_shutting_down",
    kind="server_error",
)


def _refusal(err: BaseException) -> APIError | None:
    """The request's own mistake found by the worker (an APIError, or the library's ValueError); None for a bug."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, ValueError):
        return APIError(str(err))
    return None


async def _read_body(request: Request) -> bytes:
    """The body, read chunk by chunk and refused (413) as soon as it passes :data:`MAX_BODY`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise APIError(f"the request body has {int(declared)} bytes, at most {MAX_BODY}", 413, code="body_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise APIError(f"the request body has more than {MAX_BODY} bytes", 413, code="body_too_large")
    return bytes(body)


async def _watch(receive: Callable, job: Job) -> None:
    """Cancel ``job`` when its client disconnects (run beside the request until its answer is sent)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    job.cancel()


def _note(scope: MutableMapping[str, Any], **values: Any) -> None:
    """What the request's log line says besides its status: ``tokens``, ``generating`` (their seconds), ``gone``."""
    scope.setdefault("state", {}).update(values)


class _EventStream(Response):
    """A streamed answer: 200, then a server-sent event for each piece of text the worker sends, then ``[DONE]``."""

    def __init__(self, job: Job, first: tuple[str, Any], answer: Answer, watcher: asyncio.Task):
        self.job, self.first, self.answer, self.watcher = job, first, answer, watcher

    async def __call__(self, scope, receive, send) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async for data in self._events(scope):
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:  # also when sending failed: the client has gone, the generation stops
            self.watcher.cancel()
            self.job.cancel()

    async def _events(self, scope: dict):
        answer, (kind, value) = self.answer, self.first
        if answer.chat:
            yield event(answer.chunk("", role=True))
        while kind == "text":
            if value:
                yield event(answer.chunk(value))
            kind, value = await self.job.events.get()
        if kind == "end":
            _note(scope, tokens=value.completion_tokens, generating=self.job.seconds)
            yield event(answer.chunk(None, value.finish_reason))
            if answer.include_usage:
                yield event(answer.usage_chunk(value))
            yield DONE
        elif kind == "stopped":  # the server is stopping: the stream ends on that error, not cut off
            yield event(STOPPING.body())
        elif kind == "error":  # after the status was sent: the error as an event, as OpenAI's streams end on one
            refused = _refusal(value)
            if refused is None:
                traceback.print_exception(type(value), value, value.__traceback__, file=sys.stderr)
            yield event((refused or _internal(value)).body())
        else:
            _note(scope, gone=True)


def create_app(
    served: Served,
    worker: Worker,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    log: Callable[[str], None] = _say,
    allowed_hosts: tuple[str, ...] = (),
) -> Any:
    """The ASGI app serving ``served`` with ``worker``, bound on ``host`` (its loopback check, which also accepts
    ``allowed_hosts``), behind ``api_key``."""
    created = int(time.time())

    def offered(endpoint: str) -> None:
        """The endpoint is the model's: completions for a GPT (chat if it has a template), translate for a translator."""
        if endpoint == "translate" and served.family != "seq2seq":
            raise APIError(
                f"{served.name} is a language model: POST /v1/completions or /v1/chat/completions; /v1/translate is "
                "for translators",
                404,
                code="unsupported_endpoint",
            )
        if endpoint != "translate" and served.family != "gpt":
            raise APIError(
                f'{served.name} is a translator: POST /v1/translate {{"text": ...}}; /v1/{endpoint} is for language '
                "models",
                404,
                code="unsupported_endpoint",
            )
        if endpoint == "chat/completions" and served.chat_template is None:
            raise APIError(
                f"{served.name} has no chat template (no chat_template in tokenizer_config.json, no "
                "chat_template.jinja): use POST /v1/completions with a prompt",
                400,
                code="no_chat_template",
            )

    async def queued(request: Request, job: Job, stream: bool, answer: Answer | None):
        """Queue ``job`` and answer with its outcome: JSON, or a stream of events from its first token on."""
        try:
            worker.submit(job)
        except queue.Full:
            raise APIError(
                f"the server is busy: {worker.max_queue} requests are waiting already (tformer serve --max-queue); "
                "try again later",
                503,
                code="queue_full",
                kind="server_error",
            ) from None
        watcher = asyncio.create_task(_watch(request.receive, job))
        handed = False
        try:
            kind, value = await job.events.get()
            if stream and kind in ("text", "end"):
                assert answer is not None
                handed = True
                return _EventStream(job, (kind, value), answer, watcher)
            while kind == "text":
                kind, value = await job.events.get()
            if kind == "cancelled":
                _note(request.scope, gone=True)
                return Response(status_code=GONE)
            if kind == "stopped":
                return _error(STOPPING, _ERROR_HEADERS[503])
            if kind == "error":
                refused = _refusal(value)
                return _error(refused) if refused is not None else _bug(value)
            if answer is None:
                return value
            _note(request.scope, tokens=value.completion_tokens, generating=job.seconds)
            return JSONResponse(answer.whole(value))
        finally:
            if not handed:
                watcher.cancel()
                job.cancel()

    async def generate(request: Request, endpoint: str) -> Response:
        offered(endpoint)
        body = parse_json(await _read_body(request))
        chat = endpoint == "chat/completions"
        parsed: ChatRequest | CompletionRequest
        if chat:
            parsed = chat_request(body, served.name)
            run = partial(work.chat, served, parsed)
        else:
            parsed = completion_request(body, served.name)
            run = partial(work.complete, served, parsed)
            _note(request.scope, unknown=served.tokenizer.lacks(parsed.prompt))  # read as <unk>: said, as generate does
        job, options = Job(run, asyncio.get_running_loop()), parsed.options
        return await queued(request, job, options.stream, Answer(served.name, chat, options.include_usage))

    async def translate(request: Request) -> Response:
        offered("translate")
        parsed = translate_request(parse_json(await _read_body(request)), served.name)
        job = Job(partial(work.translate, served, parsed), asyncio.get_running_loop())
        answer = await queued(request, job, False, None)
        if isinstance(answer, Response):
            return answer
        texts, notes = answer
        return JSONResponse({"object": "translation", "model": served.name, "translations": texts, "warnings": notes})

    async def models(request: Request) -> Response:
        return JSONResponse(models_list(served.name, created))

    async def one_model(request: Request) -> Response:
        name = request.path_params["name"]
        if not name:  # /v1/models/: the list, as /v1/models
            return await models(request)
        if name != served.name:
            raise APIError(
                f"the model {name!r} does not exist: this server serves {served.name!r}",
                404,
                "model",
                "model_not_found",
            )
        return JSONResponse(model_card(served.name, created))

    def endpoint(handler: Callable) -> Callable:
        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except APIError as err:
                return _error(err, _ERROR_HEADERS.get(err.status))
            except ClientDisconnect:  # gone while its body was read
                return Response(status_code=GONE)
            except Exception as err:  # anything else is tformer's bug, not the request's
                return _bug(err)

        return answer

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        what = "no such route" if status == 404 else "method not allowed"
        routes = "GET /v1/models, POST /v1/completions, /v1/chat/completions, /v1/translate"
        return _error(APIError(f"{what}: {request.method} {request.url.path} (this server: {routes})", status))

    routes = [
        Route("/v1/models", endpoint(models), methods=["GET"]),
        Route("/v1/models/{name:path}", endpoint(one_model), methods=["GET"]),
        Route("/v1/completions", endpoint(partial(generate, endpoint="completions")), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(partial(generate, endpoint="chat/completions")), methods=["POST"]),
        Route("/v1/translate", endpoint(translate), methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    return _Logged(Guard(app, host in LOOPBACK, api_key, allowed_hosts), log)


class _Logged:
    """ASGI middleware: one line per request once its answer is sent (a stream: at its end)."""

    def __init__(self, app: Any, log: Callable[[str], None]) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [GONE]
        state = scope.setdefault("state", {})

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - start
            line = f"{scope['method']} {scope['path']} {status[0]} {seconds:.2f} s"
            tokens, generating = state.get("tokens"), state.get("generating") or seconds
            if tokens is not None:  # the rate of the generation, not of its wait in the queue
                line += (
                    f" ({generating:.2f} s generating) {tokens} tokens {tokens / max(generating, 1e-9):.1f} tokens/s"
                )
            if state.get("gone"):
                line += " client gone: its generation stopped"
            if unknown := state.get("unknown"):
                line += (f"; note: the prompt has {len(unknown)} character(s) the vocabulary lacks "
                         f"({' '.join(unknown[:10])}): each read as <unk>")  # fmt: skip
            self.log(line)


def server_for(app: Any, worker: Worker) -> Any:
    """The uvicorn server of ``app``: when it stops (Ctrl-C, SIGTERM), ``worker`` stops every request first, so each
    ends at once with a 503 (a stream with that error as its last event) instead of being cut off at the end of
    uvicorn's graceful wait."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            worker.stop()
            await super().shutdown(sockets)

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=3)
    return Server(config)


class _Terminated(Exception):
    """SIGTERM, as uvicorn raises it again once it has shut down (else the default action ends the process at once,
    exit 143, before the worker is closed and the stop is said)."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def serve(
    served: Served,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_queue: int = 64,
    on_ready: Callable[[str], None] | None = None,
    log: Callable[[str], None] = _say,
    sock: socket.socket | None = None,
    allowed_hosts: tuple[str, ...] = (),
) -> None:
    """Serve ``served`` on ``host:port`` until Ctrl-C or SIGTERM (either a clean stop: this returns);
    ``on_ready(base_url)`` once the socket listens. ``sock``: one
    :func:`listen` made for ``host:port`` already (``tformer serve`` makes it before the model loads: a taken port is
    said at once, not after a minute of loading). ``allowed_hosts``: names a loopback server answers besides its own."""
    sock = listen(host, port) if sock is None else sock
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    worker = Worker(max_queue)
    app = create_app(served, worker, host, api_key, log, allowed_hosts)
    server = server_for(app, worker)
    if on_ready is not None:
        on_ready(f"http://{shown}:{port}/v1")
    main = threading.current_thread() is threading.main_thread()  # where signal handlers can be set
    before = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):  # uvicorn shuts down on the signal, then raises it again: the stop
        pass
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
        worker.close()
        sock.close()
