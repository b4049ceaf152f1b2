"""Room-proof connections: no student's script can hold the class's sockets or stall its event loop.

uvicorn alone holds a connection forever while its headers dribble in, accepts connections until
the process runs out of file descriptors (and then logs a traceback per failed accept), and reads
a body of any size. Here, on uvicorn's own h11 protocol:

- ``max_connections``: at the cap, a new connection takes the place of the oldest one still waiting
  for its request's head (answered ``408``), so a script holding hundreds of half-sent requests
  cannot keep ``/health`` or anyone else out; when every connection is busy with a request, the new
  one is answered ``503`` with ``Retry-After`` and closed at once (uvicorn's ``limit_concurrency``
  answers only once a head has arrived, which a half-sent request never does);
- ``header_timeout``: a connection whose request head has not arrived this long after it opened (or
  after its last response) is answered ``408`` and closed (nginx's ``client_header_timeout``);
- ``raise_fd_limit``: the soft limit on open files is raised to the hard one at start-up, as
  ``vllm serve`` does, so the cap, not the system, decides when the room is full.

The body's own limits (size, time) are the app's (``app.read_body``), where the status can name
them.
"""

from __future__ import annotations

import json

__all__ = ["guarded_protocol", "raise_fd_limit", "connections_allowed", "BACKLOG"]

#: Descriptors kept for the process itself (the model's files, the record, threads' pipes, logging).
FD_RESERVE = 64
#: The listening socket's backlog. asyncio accepts up to this many connections in one go before any
#: of them is looked at (and a closed one's descriptor is freed a loop turn later), so the
#: descriptors open can pass the connection cap by twice this: the budget keeps that room (uvicorn's
#: 2048 would need 4096).
BACKLOG = 128


def connections_allowed(open_files: int) -> int:
    """The most connections that ``open_files`` descriptors hold without the accept ever failing."""
    return max(1, open_files - FD_RESERVE - 2 * BACKLOG)


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit (or 65,536, whichever is lower); the
    soft limit now."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def _reply(status: str, message: str, extra: str = "") -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "ServiceUnavailable"
                if status.startswith("503")
                else "invalid_request_error",
                "param": None,
                "code": int(status[:3]),
            }
        }
    ).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
        f"{len(body)}\r\n{extra}"
        "Connection: close\r\n\r\n"
    ).encode() + body


def guarded_protocol(max_connections: int, header_timeout: float):
    """uvicorn's h11 protocol with a cap on open connections and a time limit on each request's
    head."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    full = _reply(
        "503 Service Unavailable",
        f"the server has {max_connections} connections open (--max-connections): try again shortly",
        "Retry-After: 1\r\n",
    )
    late = _reply(
        "408 Request Timeout",
        f"the request's head did not arrive within {header_timeout:g} s (--header-timeout)",
    )

    class Guarded(H11Protocol):
        _timer = None
        _quiet = False  # the loop's handler for a failed accept installed (once per loop)

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if not Guarded._quiet:
                Guarded._quiet = True
                _quiet_accept_errors(self.loop)
            if len(self.connections) > max_connections:
                stalled = [
                    c
                    for c in self.connections
                    if isinstance(c, Guarded) and c is not self and c._stalled()
                ]
                if not stalled:
                    transport.write(full)
                    transport.close()
                    return
                # the oldest half-sent request goes
                min(stalled, key=lambda c: c._armed_at)._close(late)
            self._arm()

        def _arm(self) -> None:
            self._seen, self._armed_at = self.cycle, self.loop.time()
            self._timer = self.loop.call_later(header_timeout, self._head_late)

        def _stalled(self) -> bool:
            """No new request head since the timer was armed, and none being answered."""
            idle = self.cycle is None or self.cycle.response_complete
            return (
                self._timer is not None
                and self.cycle is self._seen
                and idle
                and not self.transport.is_closing()
            )

        def _close(self, reply: bytes) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.transport.write(reply)
            self.transport.close()

        def _head_late(self) -> None:
            if self._stalled():
                self._close(late)
            self._timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._timer is not None:
                self._timer.cancel()
            if not self.transport.is_closing():
                # the next request's head, on a kept-alive connection, has the same limit
                self._arm()

        def connection_lost(self, exc) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

    return Guarded


def _quiet_accept_errors(loop) -> None:
    """A failed accept (no descriptor left: the system's limit, below the cap) as one line every 10
    s, not a traceback per attempt (124,787 of them, 50 MB of log in 4 s, were seen); anything else
    as asyncio would."""
    import sys

    last = [-1e9]

    def handler(loop, context) -> None:
        if context.get("message", "").startswith("socket.accept() out of system resource"):
            if loop.time() - last[0] >= 10:
                last[0] = loop.time()
                print(
                    f"realrun serve: out of open files ({context.get('exception')}): new "
                    f"connections wait; "
                    "raise ulimit -n or lower --max-connections",
                    file=sys.stderr,
                    flush=True,
                )
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
