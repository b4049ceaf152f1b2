"""Running the server: the engine thread, uvicorn in front, and a clean stop.

SIGTERM (or Ctrl-C) is a drain, not a kill: the server stops admitting (new requests get a
503, and uvicorn closes its socket), requests already admitted run to their end for up to
``drain_timeout`` seconds, the engine thread finishes, the record is written, and the
process exits 0. A stream still open when the drain times out is cut, and its request is
recorded with the reason.
"""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import fields

from batchsim.core.config import PolicyConfig

from .app import AppConfig, make_app
from .guard import BACKLOG, connections_allowed, guarded_protocol, raise_fd_limit
from .live import LiveServer
from .record import write_with_fallback

#: Seconds past the drain for the cut to reach a pass boundary and each stream to end; then uvicorn
#: cuts.
_GRACE_S = 10

__all__ = ["serve"]


def _meta(engine, policy, limits, model: str) -> dict:
    """What served the record (its sidecar): a replay needs the policy and the limits, a reader the
    machine."""
    lm = engine.lm
    # The knobs the policy was built with (PolicyConfig's fields), as predict rebuilds it from them.
    knobs = {f.name: vars(policy)[f.name] for f in fields(PolicyConfig) if f.name in vars(policy)}
    return {
        "model": model,
        "model_source": lm.source,
        "random_weights": lm.random_weights,
        "device": lm.device,
        "dtype": lm.dtype,
        "threads": lm.threads,
        "policy": policy.name,
        "policy_knobs": knobs,
        "policy_repr": policy.describe(),
        "kv_budget_tokens": limits.kv_budget_tokens,
        "context_len": limits.context_len,
    }


def serve(
    engine,
    policy,
    limits,
    model: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_queue: int | None = None,
    record: str | None = None,
    drain_timeout: float = 30.0,
    log_level: str = "warning",
    stop_errors: tuple = (),
    explain=None,
    sock=None,
    max_connections: int = 1000,
    header_timeout: float = 10.0,
    **room,
) -> int:
    """Serve until SIGTERM or Ctrl-C, on ``sock`` (bound beforehand, ``listen.bind``) or else
    ``host:port``. ``max_connections`` and ``header_timeout``: ``guard``; ``room``: the rest of
    ``AppConfig``'s limits."""
    import uvicorn

    fds = raise_fd_limit()
    if connections_allowed(fds) < max_connections:
        print(
            f"realrun serve: note: this process may open {fds} files (ulimit -n), so at most "
            f"{connections_allowed(fds)} connections, not --max-connections {max_connections}",
            file=sys.stderr,
        )
        max_connections = connections_allowed(fds)

    live = LiveServer(engine, policy, limits, stop_errors=stop_errors, explain=explain)
    app = make_app(live, AppConfig(model, max_queue, **room))

    cut = f"cut: still running {drain_timeout:g} s after the server was told to stop"
    timer = threading.Timer(drain_timeout, live.cut, args=(cut,))
    timer.daemon = True

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # SIGTERM / SIGINT: nothing new from here on
            live.closing = True
            # The policy hears "nobody else is coming" now, so a bus waiting for company leaves with
            # who is aboard while uvicorn waits for the streams. (From a thread: a signal handler
            # may have interrupted this very thread inside the inbox's lock.)
            threading.Thread(target=live.inbox.close, name="drain").start()
            if not timer.is_alive() and live.cut_reason is None:
                # the drain's end: what still runs is cut at a pass boundary (LiveServer.cut)
                timer.start()
            super().handle_exit(sig, frame)
            # uvicorn raises the signal again once it has stopped, which would kill the process
            # before the record is written: the drain is the answer to the signal, and the exit code
            # is ours.
            self._captured_signals.clear()

    # uvicorn's own cut (it cancels the connections' tasks) is the last resort only: ours comes
    # first and ends each stream with its reason, so uvicorn waits for a few seconds more than the
    # drain.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_protocol(max_connections, header_timeout),
        timeout_graceful_shutdown=int(drain_timeout) + _GRACE_S,
        lifespan="off",
        access_log=False,
        backlog=BACKLOG,
    )
    server = _Server(config)
    live.start()
    lm = engine.lm
    if sock is not None:
        port = sock.getsockname()[1]  # --port 0: the port the system chose
    print(
        f"realrun serve: {model} ({lm.device}, {lm.dtype}, {lm.threads} threads), policy "
        f"{policy.describe()}; listening on http://{host}:{port} (live view: /dashboard, metrics: "
        f"/metrics); "
        "SIGTERM or Ctrl-C drains and stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        # returns once every connection has finished: ended, left, or cut at the drain's end
        server.run(sockets=None if sock is None else [sock])
    finally:
        # A second SIGTERM (a supervisor that repeats itself) must not kill the record half-way; a
        # second Ctrl-C still does, as a person pressing it twice means.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        timer.cancel()
        if live.cut_reason is None and (live.streams or not server.started):
            live.cut(cut if server.started else "cut: the server stopped")
        live.closing = True
    drained = live.shutdown(timeout=_GRACE_S + drain_timeout)
    # one pass outlasted the grace: the record cannot be read while the engine writes it
    if not drained:
        print(
            f"realrun serve: error: the engine did not stop within {_GRACE_S + drain_timeout:g} s "
            f"of the drain's "
            "end (one forward pass still running); no record written",
            file=sys.stderr,
        )
        return 1
    if live.error is not None:
        print(f"realrun serve: error: the engine stopped: {live.error}", file=sys.stderr)
    records = live.records()
    n = 0 if records is None else len(records)
    done = 0 if records is None else records.completed
    print(
        f"realrun serve: stopped: {n} requests admitted, {done} served to their end, "
        f"{live.tokens_total} tokens generated",
        file=sys.stderr,
    )
    if record is not None and records is not None:
        path, why = write_with_fallback(
            records, record, _meta(engine, policy, limits, model), live.refused, live.clients
        )
        if why:
            print(
                f"realrun serve: could not write the record to {record} ({why}); wrote it to "
                f"{path} instead",
                file=sys.stderr,
            )
        print(
            f"realrun serve: wrote the record to {path} (replay: python -m batchsim run --trace "
            f"{path})",
            file=sys.stderr,
        )
    return 0 if live.error is None else 1
