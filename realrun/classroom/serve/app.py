"""The HTTP face of ``realrun serve``: OpenAI's routes on Starlette, the engine in its own thread.

Routes: ``POST /v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent
events ending ``data: [DONE]``, or whole), ``GET /v1/models``, ``/health``, ``/metrics``
(Prometheus text), ``/v1/state`` (what the live view draws) and ``/dashboard`` (the live view).

A request is checked before it reaches the engine (``protocol``); one the queue has no room
for is a 503 with ``Retry-After``. A client that disconnects mid-stream withdraws its request:
the policy drops its row and frees its blocks before the next step (a padded batch keeps the
row as padding until the batch ends, as ``generate()`` would).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from .clients import check_key, client_id
from .detok import IncrementalText
from .live import LiveServer, Stream
from .metrics import prometheus_text
from .protocol import RequestError, chunk, error_body, parse_completion, usage_chunk, whole_response

__all__ = ["make_app", "AppConfig"]


@dataclass(frozen=True)
class AppConfig:
    """What the routes need beside the server: the name served, the queue's bound, the wait to
    suggest."""

    model: str
    max_queue: int | None = None
    retry_after_s: int = 1
    max_body_bytes: int | None = None  # None: from the model's context (``body_cap``)
    body_timeout_s: float = 30.0
    api_key: str | None = None
    max_queue_per_client: int | None = None
    client_by: str = "address"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a non-empty name, got {self.model!r}")
        for name in ("max_queue", "max_body_bytes", "max_queue_per_client"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
        if not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be > 0, got {self.body_timeout_s!r}")
        if self.client_by not in ("address", "key"):
            raise ValueError(f"client_by must be address or key, got {self.client_by!r}")
        if self.api_key is not None and not (isinstance(self.api_key, str) and self.api_key):
            raise ValueError("api_key must be a non-empty string")


def body_cap(context: int) -> int:
    """The default largest body: 64 bytes per token of context (a prompt of token ids takes ~7 bytes
    a token, text ~4, JSON-escaped text up to 6 a character), and never under 1 MiB; a body past it
    could only hold a prompt the model refuses anyway, after reading and tokenising it for
    nothing."""
    return max(1 << 20, 64 * int(context))


async def read_body(request: Request, cap: int, timeout: float) -> bytes:
    """The body, or a 413 past ``cap`` bytes (from its Content-Length at once, else as it comes) or
    a 408 if it has not all come within ``timeout`` seconds (a client dribbling a byte every few
    seconds)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise RequestError(
            413,
            None,
            f"the body is {int(length)} bytes; this server takes at most {cap} (--max-body-bytes)",
        )

    async def chunks() -> bytes:
        got = bytearray()
        async for part in request.stream():
            got += part
            if len(got) > cap:
                raise RequestError(413, None, f"the body is over {cap} bytes (--max-body-bytes)")
        return bytes(got)

    try:
        return await asyncio.wait_for(chunks(), timeout)
    except TimeoutError:
        raise RequestError(
            408, None, f"the body did not all arrive within {timeout:g} s (--body-timeout)"
        ) from None


def _error(e: RequestError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=headers)


def _refusal(kind: str, message: str) -> RequestError:
    """A request the policy can never run is the client's to change (400); an engine that stopped is
    ours (503)."""
    if kind == "rejected":
        return RequestError(400, None, message)
    return RequestError(503, None, message, "ServiceUnavailable")


async def _hangup(request: Request, stream: Stream) -> None:
    """Tell ``stream``'s reader when the client hangs up (uvicorn answers ``receive`` with a
    disconnect once the body is read and the client has gone); cancelled when the response is
    complete."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    stream.queue.put_nowait(("gone", None, 0.0, False))


def _sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def make_app(server: LiveServer, cfg: AppConfig) -> Starlette:
    """The HTTP app: OpenAI's completion routes, models, health, metrics, the live state and its
    dashboard."""
    h = _Handlers(server, cfg)
    routes = [
        Route("/v1/completions", h.completions, methods=["POST"]),
        Route("/v1/chat/completions", h.chat_completions, methods=["POST"]),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/health", h.health, methods=["GET"]),
        Route("/metrics", h.metrics, methods=["GET"]),
        Route("/v1/state", h.state, methods=["GET"]),
        Route("/dashboard", h.dashboard, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _wrong_method})


class _Handlers:
    """The routes' handlers, over one live server and its settings."""

    def __init__(self, server: LiveServer, cfg: AppConfig) -> None:
        self.server, self.cfg = server, cfg
        self.tok, self.vocab, self.context = (
            server.lm.tokenizer,
            server.lm.vocab_size,
            server.lm.n_positions,
        )
        self.counter = iter(range(1 << 62))
        self.body_cap = cfg.max_body_bytes or body_cap(self.context)
        # /v1/models' "created": when this server started serving the model
        self.created = int(time.time())

    async def complete(self, request: Request, chat: bool) -> Response:
        server, cfg = self.server, self.cfg
        client = client_id(request, cfg.client_by)
        try:
            if cfg.api_key is not None:
                check_key(request, cfg.api_key)
            raw = await read_body(request, self.body_cap, cfg.body_timeout_s)
            # Tokenising a long prompt takes a while: in a worker thread, so no stream waits for it.
            req = await asyncio.to_thread(
                parse_completion, raw, chat, cfg.model, self.tok, self.vocab, self.context
            )
        except RequestError as e:
            return _error(e, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)
        busy = None
        if server.closing or not server.alive:
            busy = "the server is shutting down"
        elif cfg.max_queue is not None and server.counts()[1] >= cfg.max_queue:
            busy = f"the queue is full ({cfg.max_queue} waiting): try again shortly"
        elif (
            cfg.max_queue_per_client is not None
            and server.waiting_of(client) >= cfg.max_queue_per_client
        ):
            busy = (
                f"client {client} has {cfg.max_queue_per_client} requests waiting "
                f"(--max-queue-per-client): "
                "try again when one has started"
            )
        stream = Stream(asyncio.get_running_loop(), req.ignore_eos, req.max_tokens)
        if busy is None:
            try:
                rid = server.submit(list(req.prompt), req.max_tokens, stream, client)
            except RuntimeError as e:
                busy = str(e)
        if busy is not None:
            server.refuse(len(req.prompt), req.max_tokens, f"refused (503): {busy}", client)
            return _error(
                RequestError(503, None, busy, "ServiceUnavailable"),
                {"Retry-After": str(cfg.retry_after_s)},
            )
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{next(self.counter)}"
        # Whatever the response, a client that hangs up is heard at once (not at the next token it
        # would be sent): its request is withdrawn and its seat is free before the next step.
        watch = asyncio.ensure_future(_hangup(request, stream))
        try:
            # The policy's word first (it decides at its next step boundary): a request it can never
            # run is a 400 with its reason, not a stream that opens and fails.
            kind, value, _, _ = await stream.queue.get()
            if kind == "gone":
                server.withdraw(
                    rid, "cancelled: the client disconnected while its request was queued"
                )
                return Response(status_code=499)
            if kind != "queued":
                return _error(_refusal(kind, value))
            if req.stream:
                events, watch = self._events(req, cid, rid, stream, watch), None
                return StreamingResponse(
                    events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
                )
            return await self._whole(req, cid, rid, stream)
        except asyncio.CancelledError:
            server.withdraw(rid, "cancelled: the server cut the connection")
            raise
        finally:
            if watch is not None:
                watch.cancel()

    async def _whole(self, req, cid: str, rid: int, stream: Stream) -> Response:
        toks: list[int] = []
        # the very pieces a stream would send, so the two texts agree
        text = IncrementalText(self.tok)
        while True:
            kind, value, _, _ = await stream.queue.get()
            if kind == "token":
                toks.append(value)
                text.push(value)
            elif kind == "end":
                text.flush()
                return JSONResponse(whole_response(req, cid, text.text, value, len(toks)))
            elif kind == "gone":
                self.server.withdraw(
                    rid, f"cancelled: the client disconnected after {len(toks)} tokens"
                )
                # nobody reads it: nginx's code for a client that left
                return Response(status_code=499)
            else:
                return _error(_refusal(kind, value))

    async def _events(self, req, cid: str, rid: int, stream: Stream, watch: asyncio.Future):
        sent, done, held = 0, False, None  # held: the last token, sent with its finish reason
        # one chunk per token; a piece of a character waits for the rest
        text = IncrementalText(self.tok)
        try:
            while True:
                kind, value, _, last = await stream.queue.get()
                if kind == "token":
                    if last:
                        held = value
                        continue
                    yield _sse(chunk(req, cid, text.push(value), None, sent == 0))
                    sent += 1
                elif kind == "end":
                    last_piece = ("" if held is None else text.push(held)) + text.flush()
                    yield _sse(chunk(req, cid, last_piece, value, sent == 0))
                    sent += held is not None
                    if req.include_usage:
                        yield _sse(usage_chunk(req, cid, sent))
                    yield "data: [DONE]\n\n"
                    done = True
                    return
                elif kind == "gone":
                    return  # the finally withdraws it
                # the engine stopped, or the drain cut it (after "queued", the policy no longer
                # refuses)
                else:
                    yield _sse(error_body(_refusal(kind, value)))
                    yield "data: [DONE]\n\n"
                    done = True
                    return
        finally:
            watch.cancel()
            # the client went away (Starlette cancels this generator): free its row now
            if not done:
                self.server.withdraw(rid, f"cancelled: the client disconnected after {sent} tokens")

    async def completions(self, request: Request) -> Response:
        return await self.complete(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.complete(request, chat=True)

    async def models(self, request: Request) -> Response:
        if self.cfg.api_key is not None:
            try:
                check_key(request, self.cfg.api_key)
            except RequestError as e:
                return _error(e, {"WWW-Authenticate": "Bearer"})
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.cfg.model,
                        "object": "model",
                        "owned_by": "realrun",
                        "created": self.created,
                        "max_model_len": self.context,
                    }
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        if not self.server.alive:
            return PlainTextResponse("the engine has stopped", status_code=503)
        return PlainTextResponse("ok")

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(
            prometheus_text(self.server, self.cfg.model), media_type="text/plain; version=0.0.4"
        )

    async def state(self, request: Request) -> Response:
        return JSONResponse(self.server.state(self.cfg.model))

    async def dashboard(self, request: Request) -> Response:
        page = (
            resources.files("realrun.classroom.serve")
            .joinpath("dashboard.html")
            .read_text(encoding="utf-8")
        )
        return HTMLResponse(page)


async def _not_found(request: Request, exc) -> Response:
    return _error(
        RequestError(404, None, f"no route {request.method} {request.url.path}", "NotFoundError")
    )


async def _wrong_method(request: Request, exc) -> Response:
    return _error(RequestError(405, None, f"{request.method} is not allowed on {request.url.path}"))
