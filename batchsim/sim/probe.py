"""Is there a Dask scheduler at this address? Asked with a plain socket, under one deadline.

``dask.distributed.Client(address, timeout=...)`` bounds the TCP connect, not the
handshake after it: a port that accepts and never answers (a stuck process, an HTTP
server waiting for its request) holds the client for minutes, and a stray service that
does answer (an SSH banner) has its first bytes read as a frame length, which Dask then
tries to allocate and reports as out of memory. So before the address goes to Dask we
ask it ourselves, the way Dask's own comm does: a Dask server speaks first, with a short
handshake frame whose first 8 bytes are its length (a little-endian uint64). No bytes
within the deadline, a closed connection, or a length no handshake has, and the address
is refused with one line that says which.
"""

from __future__ import annotations

import socket
import struct
import time

from ..core.errors import ConfigError

__all__ = ["probe_scheduler", "HANDSHAKE_MAX_BYTES"]

#: Dask's handshake is a few dozen bytes of msgpack; anything past this is not one.
HANDSHAKE_MAX_BYTES = 1 << 20


def _split(address: str) -> tuple[str, int]:
    host, _, port = address[len("tcp://") :].rpartition(":")
    return host.strip("[]"), int(port)


def probe_scheduler(address: str, timeout: float) -> None:
    """Raise ``ConfigError`` unless ``address`` (``tcp://HOST:PORT``) opens with a Dask handshake
    within ``timeout`` s."""
    host, port = _split(address)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        raise ConfigError(f"scheduler {address}: cannot connect within {timeout:g} s") from None
    except OSError as e:
        raise ConfigError(f"scheduler {address}: cannot connect ({e.strerror or e})") from None
    got = b""
    try:
        while len(got) < 8:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(8 - len(got))
            except TimeoutError:
                break
            except OSError as e:
                raise ConfigError(
                    f"scheduler {address}: the connection failed ({e.strerror or e})"
                ) from None
            if not chunk:
                raise ConfigError(
                    f"scheduler {address}: closed the connection without a Dask handshake"
                    + (f" (it sent {got!r})" if got else "")
                ) from None
            got += chunk
    finally:
        sock.close()
    if not got:
        raise ConfigError(
            f"scheduler {address}: no reply within {timeout:g} s: not a Dask scheduler (a Dask "
            "scheduler speaks first), or one too busy to answer"
        )
    if len(got) < 8:
        raise ConfigError(
            f"scheduler {address}: sent {got!r} and then nothing: not a Dask scheduler"
        )
    (length,) = struct.unpack("<Q", got)
    if not 0 < length <= HANDSHAKE_MAX_BYTES:
        raise ConfigError(
            f"scheduler {address}: does not speak Dask's protocol (it replied {got!r}): is it "
            "another service on that port?"
        )
