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
from .live import LiveServer
from .record import write_record

__all__ = ["serve"]


def _meta(engine, policy, limits, model: str) -> dict:
    """What served the record (its sidecar): a replay needs the policy and the limits, a reader the machine."""
    lm = engine.lm
    # The knobs the policy was built with (PolicyConfig's fields), as predict rebuilds it from them.
    knobs = {f.name: vars(policy)[f.name] for f in fields(PolicyConfig) if f.name in vars(policy)}
    return {"model": model, "model_source": lm.source, "random_weights": lm.random_weights, "device": lm.device,
            "dtype": lm.dtype, "threads": lm.threads, "policy": policy.name, "policy_knobs": knobs,
            "policy_repr": policy.describe(), "kv_budget_tokens": limits.kv_budget_tokens,
            "context_len": limits.context_len}


def serve(engine, policy, limits, model: str, host: str = "127.0.0.1", port: int = 8000, max_queue: int | None = None,
          record: str | None = None, drain_timeout: float = 30.0, log_level: str = "warning", stop_errors: tuple = (),
          explain=None) -> int:
    import uvicorn

    live = LiveServer(engine, policy, limits, stop_errors=stop_errors, explain=explain)
    app = make_app(live, AppConfig(model, max_queue))

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # SIGTERM / SIGINT: nothing new from here on
            live.closing = True
            # The policy hears "nobody else is coming" now, so a bus waiting for company leaves with
            # who is aboard while uvicorn waits for the streams. (From a thread: a signal handler may
            # have interrupted this very thread inside the inbox's lock.)
            threading.Thread(target=live.inbox.close, name="drain").start()
            super().handle_exit(sig, frame)
            # uvicorn raises the signal again once it has stopped, which would kill the process before
            # the record is written: the drain is the answer to the signal, and the exit code is ours.
            self._captured_signals.clear()

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=int(max(1, drain_timeout)),
                            lifespan="off", access_log=False)
    server = _Server(config)
    live.start()
    lm = engine.lm
    print(f"realrun serve: {model} ({lm.device}, {lm.dtype}, {lm.threads} threads), policy {policy.describe()}; "
          f"listening on http://{host}:{port} (live view: /dashboard, metrics: /metrics); "
          "SIGTERM or Ctrl-C drains and stops", file=sys.stderr, flush=True)
    server.run()  # returns once the drain has let every connection finish, or cut those left at its end
    # A second SIGTERM (a supervisor that repeats itself) must not kill the record half-way; a second
    # Ctrl-C still does, as a person pressing it twice means.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    live.closing = True
    for rid in list(live.streams):  # streams uvicorn cut at the drain's end: their rows go now
        live.withdraw(rid, f"cut: still running {drain_timeout:g} s after the server was told to stop")
    drained = live.shutdown(timeout=drain_timeout)
    if not drained:
        print(f"realrun serve: the engine did not finish within {drain_timeout:g} s of the drain", file=sys.stderr)
        return 1
    if live.error is not None:
        print(f"realrun serve: error: the engine stopped: {live.error}", file=sys.stderr)
    records = live.records()
    n = 0 if records is None else len(records)
    done = 0 if records is None else records.completed
    print(f"realrun serve: stopped: {n} requests admitted, {done} served to their end, "
          f"{live.tokens_total} tokens generated", file=sys.stderr)
    if record is not None and records is not None:
        path = write_record(records, record, _meta(engine, policy, limits, model))
        print(f"realrun serve: wrote the record to {path} (replay: python -m batchsim run --trace {path})",
              file=sys.stderr)
    return 0 if live.error is None else 1
