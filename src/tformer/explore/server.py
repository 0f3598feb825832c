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

Dimension legend: none (HTTP).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tformer.explore.session import API_NAMES, Session

__all__ = ["create_app", "serve", "allowed_hosts", "static_dir", "MAX_BODY", "LOOPBACK", "PLACEHOLDER"]

MAX_BODY = 64 * 1024  # bytes of one request body
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


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message.splitlines()[0] if message else "bad request"}, status_code=status)


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
        size = int(request.headers.get("content-length") or 0)
        if size > MAX_BODY:
            return _error(f"the request body has {size} bytes, at most {MAX_BODY}")
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(f"the request body has {len(body)} bytes, at most {MAX_BODY}")
        try:
            params = json.loads(body or b"{}")
        except (ValueError, UnicodeDecodeError):
            return _error("the request body must be a JSON object")
        try:
            return JSONResponse(await run_in_threadpool(session.call, name, params))
        except ValueError as err:
            return _error(str(err))

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

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise OSError(
            f"cannot listen on {host}:{port} ({err.strerror or err}): choose another --port (0 = any free one)"
        ) from None
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
