"""The explorer's web server: a Starlette app serving the page (``static/``) and the JSON API of a :class:`Session`.

    POST /api/<name>   JSON body → JSON answer; a bad request is 400 {"error": "one line naming the field"}
    GET  /             the page (static/index.html); GET /<path> and /static/<path>: its files (js/app.js, ...)

Safety (a local tool that runs models must not be reachable from other web pages):

* a request whose ``Host`` is not the address served (``127.0.0.1:PORT``, ``localhost:PORT`` or the ``--host``
  given) is refused with 400: a page elsewhere cannot reach it through DNS rebinding;
* a request with an ``Origin`` that is not the served origin is refused with 400, and no CORS header is ever
  sent, so other sites' scripts cannot call the API;
* the browser never names a file: the model is chosen on the command line; request bodies are capped
  (:data:`MAX_BODY`) and so is every field (:mod:`tformer.explore.params`).

A request body is read as it streams in and refused with 413 as soon as it passes :data:`MAX_BODY` (a declared
``Content-Length`` over it: before a byte is read), so a large chunked body costs the server 64 KB, not its
size; the connection is then closed. JSON nested deeper than :data:`MAX_DEPTH` is refused before it is parsed
(Python's parser recurses). Every expected mistake is a 400 (413, 404) with ``{"error": "one line"}``; a 500
means a bug in tformer, and its error says so.

Dimension legend: none (HTTP).
"""

from __future__ import annotations

import json
import socket
import sys
import traceback
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tformer.explore.params import shown
from tformer.explore.session import API_NAMES, Session
from tformer.net import listen

__all__ = ["create_app", "serve", "allowed_hosts", "static_dir", "MAX_BODY", "MAX_DEPTH", "LOOPBACK", "PLACEHOLDER"]

MAX_BODY = 64 * 1024  # bytes of one request body
MAX_DEPTH = 32  # nesting of a request body's JSON (the API's own bodies are flat objects)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tformer explore</title></head>
<body><h1>tformer explore</h1>
<p>The page (static/index.html) is not installed; the API answers at <code>POST /api/&lt;name&gt;</code>.</p>
<pre id="info"></pre>
<script>
const embedded = document.getElementById("tformer-data");
const show = (x) => { document.getElementById("info").textContent = JSON.stringify(x, null, 1); };
if (embedded) show(JSON.parse(embedded.textContent).info);
else fetch("api/info", {method: "POST", body: "{}"}).then((r) => r.json()).then(show);
</script></body></html>
"""


def static_dir() -> Path:
    """The page's files, shipped in the package: ``tformer/explore/static``."""
    return Path(str(resources.files("tformer.explore"))) / "static"


def static_files(folder: Path) -> dict[str, Path]:
    """The page's files by their path under ``folder`` (``explore.css``, ``js/app.js``, ``js/views/forward.js``).

    The server serves these names and no others, and the export inlines them, so both see the same page."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def allowed_hosts(host: str, port: int) -> set[str]:
    """The ``Host`` header values accepted: the loopback names and the address given, with the port."""
    names = {"127.0.0.1", "localhost", host}
    if host in ("0.0.0.0", "::"):  # every interface: this machine's own names and addresses too
        names.add(socket.gethostname())
        try:
            names.update(socket.gethostbyname_ex(socket.gethostname())[2])
        except OSError:
            pass
    return {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names if n not in ("0.0.0.0", "::")}


def _error(message: str, status: int = 400, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": message.splitlines()[0] if message else "bad request"}, status_code=status, headers=headers
    )


class _Refused(Exception):
    """A request refused before it reaches the session: its one-line message and HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def _read_body(request: Request) -> bytes:
    """The body, read chunk by chunk and refused (413) as soon as it passes :data:`MAX_BODY`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise _Refused(f"the request body has {int(declared)} bytes, at most {MAX_BODY}", 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _Refused(f"the request body has more than {MAX_BODY} bytes", 413)
    return bytes(body)


def _nesting(text: str) -> int:
    """How deep the JSON in ``text`` nests lists and objects (brackets inside strings do not count); stops counting
    past :data:`MAX_DEPTH`, so that a hostile body costs one pass over 64 KB, never a deep recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
        elif c in "]}":
            depth -= 1
    return deepest


def _parse(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``); anything else is a :class:`_Refused` saying why."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _Refused(f"the request body is not UTF-8 (byte {body[err.start]:#04x} at position {err.start})") from None
    if _nesting(text) > MAX_DEPTH:
        raise _Refused(f"the request body's JSON nests deeper than {MAX_DEPTH} levels")
    try:
        params = json.loads(text) if text.strip() else {}
    except ValueError as err:  # JSONDecodeError; an integer of more than 4300 digits
        raise _Refused(f"the request body is not valid JSON: {err}") from None
    if not isinstance(params, dict):
        raise _Refused(f"the request body must be a JSON object, got {shown(params)}")
    return params


def _bug(err: Exception) -> JSONResponse:
    """A 500: the traceback goes to the terminal that runs the server, the page gets one line asking for a report."""
    traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    return _error(
        f"internal error, a bug in tformer explore ({type(err).__name__}: {err}); please report it with the "
        "request and the traceback the server printed",
        500,
    )


class _Guard:
    """ASGI middleware: refuse a foreign ``Host`` or ``Origin`` before anything else runs."""

    def __init__(self, app: Any, hosts: set[str]) -> None:
        self.app, self.hosts = app, hosts
        self.origins = {f"http://{h}" for h in hosts}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            host, origin = headers.get("host", ""), headers.get("origin")
            message = None
            if host not in self.hosts:
                message = f"Host {host!r} is not the address this explorer serves ({', '.join(sorted(self.hosts))})"
            elif origin is not None and origin not in self.origins:
                message = f"Origin {origin!r} may not use this explorer: cross-origin requests are refused"
            if message is not None:
                await _error(message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(session: Session, host: str = "127.0.0.1", port: int = 8765, static: Path | None = None) -> Any:
    """The ASGI app for ``session``, accepting requests addressed to ``host:port`` only."""
    folder = static if static is not None else static_dir()

    async def api(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in API_NAMES:
            return _error(f"no API named {name!r}; there are {', '.join(API_NAMES)}", 404)
        try:
            params = _parse(await _read_body(request))
        except _Refused as err:  # a body over the cap is not read to its end: close the connection after the answer
            return _error(str(err), err.status, {"connection": "close"} if err.status == 413 else None)
        except ClientDisconnect:  # nobody is left to answer
            return Response(status_code=400)
        try:
            answer = await run_in_threadpool(session.call, name, params)
        except ValueError as err:
            return _error(str(err))
        except Exception as err:  # anything else is tformer's bug, not the request's
            return _bug(err)
        try:
            return JSONResponse(answer)
        except Exception as err:  # a NaN or a lone surrogate in an answer: a bug too
            return _bug(err)

    async def index(request: Request) -> Response:
        page = folder / "index.html"
        return FileResponse(page) if page.is_file() else HTMLResponse(PLACEHOLDER)

    async def asset(request: Request) -> Response:
        name = request.path_params["file"]
        files = static_files(folder)
        if name not in files:  # only the shipped files, by their exact names: never a path built from the request
            return _error(f"no file {name!r}", 404)
        return FileResponse(files[name])

    routes = [
        Route("/api/{name}", api, methods=["POST"]),
        Route("/", index, methods=["GET"]),
        Route("/static/{file:path}", asset, methods=["GET"]),
        Route("/{file:path}", asset, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    return _Guard(app, allowed_hosts(host, port))


def serve(session: Session, host: str = "127.0.0.1", port: int = 8765, on_ready: Callable[[str], None] | None = None):
    """Serve ``session`` on ``host:port`` (0 = any free port) until Ctrl-C; ``on_ready(url)`` once it listens.

    The socket is bound (and listening) before ``on_ready``, so a browser opened there finds the server."""
    import uvicorn

    sock = listen(host, port)
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    app = create_app(session, host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    if on_ready is not None:
        on_ready(f"http://{shown}:{port}/")
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down on the first Ctrl-C, then raises it again: that is the stop
        pass
    finally:
        sock.close()
