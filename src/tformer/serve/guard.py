"""What ``tformer serve`` refuses before a request reaches the model: a foreign ``Host``, a cross-origin request, a
missing or wrong API key (ASGI middleware around the app, :class:`Guard`).

* ``Host``: on a loopback address (:data:`LOOPBACK`), a request must name this machine (``localhost``,
  ``127.0.0.1``, ``[::1]``) or one of the names the user allowed (``--allowed-host``: a reverse proxy or a container
  that forwards its own name), so that a web page cannot reach the server through DNS rebinding. On any other
  address the server answers whatever name reached it.
* ``Origin``: a browser's cross-origin request is refused everywhere (no CORS header is ever sent).
* ``api_key``: every request must carry ``Authorization: Bearer KEY``, compared in constant time
  (``hmac.compare_digest``), else 401.

Dimension legend: none (HTTP).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from starlette.responses import JSONResponse

from tformer.serve.protocol import APIError

__all__ = ["LOOPBACK", "Guard", "host_name"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_THIS_MACHINE = ("127.0.0.1", "localhost", "[::1]")  # as a Host header names them


def host_name(host: str) -> str:
    """The name in a ``Host`` header (or an ``--allowed-host``), as DNS reads it: no port, lower case, no final dot."""
    return (host.rsplit(":", 1)[0] if not host.endswith("]") else host).lower().removesuffix(".")


class Guard:
    """ASGI middleware: refuse a foreign ``Host`` (on a loopback address), a cross-origin request, a missing or
    wrong API key, before anything else runs."""

    def __init__(self, app: Any, loopback: bool, api_key: str | None, allowed_hosts: Iterable[str] = ()) -> None:
        self.app, self.loopback = app, loopback
        self.key = api_key.encode("utf-8") if api_key else None
        self.hosts = {*_THIS_MACHINE, *map(host_name, allowed_hosts)}

    def refusal(self, headers: dict[str, str]) -> APIError | None:
        host, origin = headers.get("host", ""), headers.get("origin")
        if self.loopback and host_name(host) not in self.hosts:
            return APIError(
                f"Host {host!r} is not this server's (it serves on a loopback address; tformer serve --allowed-host "
                "NAME accepts a name of your own)",
                400,
            )
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return APIError(f"Origin {origin!r}: cross-origin requests are refused", 403, code="cross_origin")
        if self.key is not None:
            given = headers.get("authorization", "")
            token = given[7:].strip().encode("utf-8") if given[:7].lower() == "bearer " else b""
            if not hmac.compare_digest(token, self.key):
                why = "incorrect API key provided" if token else "no API key provided"
                return APIError(
                    f"{why}: send Authorization: Bearer KEY (the server's --api-key)", 401, code="invalid_api_key"
                )
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            refused = self.refusal(headers)
            if refused is not None:
                auth = {"www-authenticate": "Bearer"} if refused.status == 401 else None
                await JSONResponse(refused.body(), status_code=refused.status, headers=auth)(scope, receive, send)
                return
        await self.app(scope, receive, send)
