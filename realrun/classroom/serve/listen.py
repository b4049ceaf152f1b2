"""The server's socket, bound before the model loads: a busy port or a bad host is the teacher's
typo.

uvicorn binds its own socket only once the model is loaded (tens of seconds for a real model), then
fails with an exit code of its own and a message naming no flag. Bound here first, the same check is
one line naming ``--host`` or ``--port`` and exit 2 before any work, and uvicorn serves on this very
socket (``uvicorn.Server.run(sockets=[...])``), so nobody can take the port in between.
"""

from __future__ import annotations

import errno
import socket

from batchsim.core.errors import ConfigError, show

__all__ = ["bind"]


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: any free one), or a ConfigError naming the
    flag."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(
            f"host {show(host)} is not an address or a name this machine can resolve ({e})"
        ) from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    # As uvicorn does: a port a stopped server left in TIME_WAIT is free to take again at once.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use (another server?): choose another --port"
            ) from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise ConfigError(
                f"port {port}: not allowed to listen on it (ports below 1024 need root)"
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"host {show(host)} is not an address of this machine (try 127.0.0.1 or 0.0.0.0)"
            ) from None
        raise ConfigError(
            f"host {show(host)} port {port} cannot be listened on: {e.strerror or e}"
        ) from None
    sock.set_inheritable(True)
    return sock
