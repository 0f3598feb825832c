"""The listening socket of tformer's two local servers (``tformer explore``, ``tformer serve``), made before uvicorn
starts, so that a port that is taken is one line and a page or client opened on the URL finds the server."""

from __future__ import annotations

import errno
import socket

__all__ = ["listen"]


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: any free port) and listening; else an OSError saying what to do. An empty
    ``host`` (which would bind every interface unsaid) is a ValueError."""
    if not host.strip():
        raise ValueError(f"--host {host!r} is empty: give an address (127.0.0.1: this machine only; 0.0.0.0: all)")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        taken = err.errno in (errno.EADDRINUSE, errno.EACCES)  # else the address: not this machine's, or no name
        remedy = "choose another --port (0 = any free one)" if taken else "give --host an address of this machine"
        raise OSError(f"cannot listen on {host}:{port} ({err.strerror or err}): {remedy}") from None
    return sock
