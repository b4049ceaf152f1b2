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
from dataclasses import dataclass
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .live import LiveServer, Stream
from .metrics import prometheus_text
from .protocol import RequestError, chunk, error_body, parse_completion, usage_chunk, whole_response

__all__ = ["make_app", "AppConfig"]


@dataclass(frozen=True)
class AppConfig:
    """What the routes need beside the server: the name served, the queue's bound, the wait to suggest."""

    model: str
    max_queue: int | None = None
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a non-empty name, got {self.model!r}")
        if self.max_queue is not None and (not isinstance(self.max_queue, int) or self.max_queue < 0):
            raise ValueError(f"max_queue must be a whole number >= 0, got {self.max_queue!r}")


def _error(e: RequestError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=headers)


def _refusal(kind: str, message: str) -> RequestError:
    """A request the policy can never run is the client's to change (400); an engine that stopped is ours (503)."""
    if kind == "rejected":
        return RequestError(400, None, message)
    return RequestError(503, None, message, "ServiceUnavailable")


def _sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def make_app(server: LiveServer, cfg: AppConfig) -> Starlette:
    """The HTTP app: OpenAI's completion routes, models, health, metrics, the live state and its dashboard."""
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
        self.tok, self.vocab, self.context = server.lm.tokenizer, server.lm.vocab_size, server.lm.n_positions
        self.counter = iter(range(1 << 62))

    def text_of(self, t: int) -> str:
        return self.tok.decode([t])

    async def complete(self, request: Request, chat: bool) -> Response:
        server, cfg = self.server, self.cfg
        try:
            req = parse_completion(await request.body(), chat, cfg.model, self.tok, self.vocab, self.context)
        except RequestError as e:
            return _error(e)
        if server.closing or not server.alive:
            return _error(RequestError(503, None, "the server is shutting down", "ServiceUnavailable"),
                          {"Retry-After": str(cfg.retry_after_s)})
        if cfg.max_queue is not None and server.counts()[1] >= cfg.max_queue:
            return _error(RequestError(503, None, f"the queue is full ({cfg.max_queue} waiting): try again shortly",
                                       "ServiceUnavailable"), {"Retry-After": str(cfg.retry_after_s)})
        stream = Stream(asyncio.get_running_loop(), req.ignore_eos, req.max_tokens)
        try:
            rid = server.submit(list(req.prompt), req.max_tokens, stream)
        except RuntimeError as e:
            return _error(RequestError(503, None, str(e), "ServiceUnavailable"), {"Retry-After": str(cfg.retry_after_s)})
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{next(self.counter)}"
        # The policy's word first (it decides at its next step boundary): a request it can never run is
        # a 400 with its reason, not a stream that opens and fails.
        try:
            kind, value, _, _ = await stream.queue.get()
        except asyncio.CancelledError:
            server.withdraw(rid, "the client disconnected before its request was queued")
            raise
        if kind != "queued":
            return _error(_refusal(kind, value))
        if req.stream:
            return StreamingResponse(self._events(req, cid, rid, stream), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await self._whole(req, cid, rid, stream)

    async def _whole(self, req, cid: str, rid: int, stream: Stream) -> Response:
        toks: list[int] = []
        try:
            while True:
                kind, value, _, _ = await stream.queue.get()
                if kind == "token":
                    toks.append(value)
                elif kind == "end":
                    return JSONResponse(whole_response(req, cid, self.tok.decode(toks), value, len(toks)))
                else:
                    return _error(_refusal(kind, value))
        except asyncio.CancelledError:
            self.server.withdraw(rid, f"the client disconnected after {len(toks)} tokens")
            raise

    async def _events(self, req, cid: str, rid: int, stream: Stream):
        sent, done, held = 0, False, None  # held: the last token, sent with its finish reason
        try:
            while True:
                kind, value, _, last = await stream.queue.get()
                if kind == "token":
                    if last:
                        held = value
                        continue
                    yield _sse(chunk(req, cid, self.text_of(value), None, sent == 0))
                    sent += 1
                elif kind == "end":
                    yield _sse(chunk(req, cid, "" if held is None else self.text_of(held), value, sent == 0))
                    sent += held is not None
                    if req.include_usage:
                        yield _sse(usage_chunk(req, cid, sent))
                    yield "data: [DONE]\n\n"
                    done = True
                    return
                else:  # the engine stopped (after "queued", the policy no longer refuses)
                    yield _sse(error_body(_refusal(kind, value)))
                    yield "data: [DONE]\n\n"
                    done = True
                    return
        finally:
            if not done:  # the client went away (Starlette cancels this generator): free its row now
                self.server.withdraw(rid, f"the client disconnected after {sent} tokens")

    async def completions(self, request: Request) -> Response:
        return await self.complete(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.complete(request, chat=True)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.cfg.model, "object": "model", "owned_by": "realrun",
                                                          "max_model_len": self.context}]})

    async def health(self, request: Request) -> Response:
        if not self.server.alive:
            return PlainTextResponse("the engine has stopped", status_code=503)
        return PlainTextResponse("ok")

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(prometheus_text(self.server, self.cfg.model), media_type="text/plain; version=0.0.4")

    async def state(self, request: Request) -> Response:
        return JSONResponse(self.server.state(self.cfg.model))

    async def dashboard(self, request: Request) -> Response:
        page = resources.files("realrun.serve").joinpath("dashboard.html").read_text(encoding="utf-8")
        return HTMLResponse(page)


async def _not_found(request: Request, exc) -> Response:
    return _error(RequestError(404, None, f"no route {request.method} {request.url.path}", "NotFoundError"))


async def _wrong_method(request: Request, exc) -> Response:
    return _error(RequestError(405, None, f"{request.method} is not allowed on {request.url.path}"))
