"""One request, streamed: what it asks for, and what the client saw arrive, and when.

A request to an OpenAI-compatible server comes back as server-sent events, one line
``data: {...}`` per chunk, ending with ``data: [DONE]``. The client stamps each chunk with
``time.perf_counter()`` as it arrives: the first chunk that carries a token gives the time to
first token, the gaps between later ones the inter-token latencies. A chunk may carry
several tokens (a server that batches its writes), so the token count comes from the last
chunk's ``usage.completion_tokens`` when the server sends one, as ``vllm bench serve`` counts.

A failure (an HTTP error, a dropped connection, an error event in the stream, a timeout)
is a result too, with its message, never an exception: a load test counts what failed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchsim.core.errors import ConfigError, check_int_at_least
from batchsim.core.workload import Request, seeded_prompt

__all__ = [
    "RequestResult",
    "prompt_for",
    "payload_for",
    "stream_one",
    "error_text",
    "connect_reason",
    "CHAT",
    "COMPLETIONS",
]

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
# Short English words that GPT-2's tokenizer (and Llama's) reads as one token each, with the space
# before them: a chat message must be text, and this keeps its length close to the workload's.
_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "was",
    "for",
    "on",
    "as",
    "with",
    "be",
    "at",
    "by",
)


@dataclass(frozen=True)
class RequestResult:
    """What one request measured, in seconds from the moment it was sent (``start``, from the run's
    start).

    ``arrival`` is when the workload said it should be sent; ``start - arrival`` is the client's own
    lag (the wait for ``--max-concurrency``, or an event loop that fell behind).
    """

    id: int
    arrival: float
    start: float
    prompt_len: int
    max_tokens: int
    success: bool
    output_tokens: int = 0
    ttft: float | None = None
    itl: tuple[float, ...] = ()
    latency: float | None = None
    status: int | None = None
    error: str = ""

    def __post_init__(self) -> None:
        check_int_at_least("id", self.id, 0)
        check_int_at_least("output_tokens", self.output_tokens, 0)
        if self.success and (self.ttft is None or self.latency is None or self.error):
            raise ConfigError(
                f"request {self.id}: a success needs a ttft and a latency and no error, got ttft "
                f"{self.ttft!r}, latency {self.latency!r}, error {self.error!r}"
            )
        if not self.success and not self.error:
            raise ConfigError(f"request {self.id}: a failure needs its message")

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first, as vLLM defines it (None below two tokens)."""
        if not self.success or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def prompt_for(req: Request, seed: int, chat: bool, text: str | None = None) -> list[int] | str:
    """The prompt a request sends: ``text`` when given, else the request's own text, else
    ``prompt_tokens`` ids seeded from (seed, request id).

    The ids are ``batchsim.core.workload.seeded_prompt``'s, as ``realrun.engine.inputs.prompt_ids``
    draws them (so a server of ours sees the prompt its own runs use). A chat message must be text,
    so there the ids pick one-token words instead."""
    if text is not None:
        return text
    if req.text:
        return req.text
    ids = seeded_prompt(seed, req.id, req.prompt_tokens)
    if chat:
        return " ".join(_WORDS[i % len(_WORDS)] for i in ids)
    return ids


def payload_for(req: Request, model: str, endpoint: str, prompt: list[int] | str) -> dict[str, Any]:
    """The JSON body: exactly the workload's output length (``ignore_eos``, vLLM's extension, so an
    early end-of-text does not shorten the answer), greedy, streamed, with usage in the last
    chunk."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": int(req.output_tokens),
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
        # OpenAI's current name, which vllm bench sends; max_tokens stays for servers that predate
        # it.
        body["max_completion_tokens"] = int(req.output_tokens)
    else:
        body["prompt"] = prompt
    return body


def error_text(status: int | None, body: bytes | str) -> str:
    """An error response as one line: the OpenAI shape ``{"error": {"message": ...}}`` when it is
    that."""
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    message = raw.strip()
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            err = err.get("message") or err.get("detail") or err
        message = err if isinstance(err, str) else json.dumps(err)
    message = " ".join(message.split())[:300] or "(empty body)"
    return message if status is None else f"HTTP {status}: {message}"


def _token_chunk(choice: dict, chat: bool) -> bool:
    """Whether a chunk's choice carries output. A token may detokenize to "" (half a UTF-8
    character), so empty text still counts; but a chat's opening role announcement and a bare
    closing chunk with only a finish_reason carry none."""
    if choice.get("token_ids"):
        return True
    part = (choice.get("delta") or {}) if chat else choice
    text = part.get("content" if chat else "text")
    if not isinstance(text, str):
        return False
    return bool(text) or not (choice.get("finish_reason") or part.get("role"))


@dataclass
class _Seen:
    """What has arrived so far; filled as the stream comes in, so a timeout keeps what came before
    it."""

    # perf_counter of each chunk that carried output
    stamps: list[float] = field(default_factory=list)
    status: int | None = None
    usage: dict = field(default_factory=dict)
    error: str = ""


async def stream_one(
    client, url: str, body: dict[str, Any], req: Request, t0: float, chat: bool, timeout: float
) -> RequestResult:
    """Send one request now and read its stream to the end (or ``timeout`` seconds)."""
    st = time.perf_counter()
    seen = _Seen()
    try:
        await asyncio.wait_for(_read(client, url, body, chat, seen), timeout)
    except asyncio.TimeoutError:  # noqa: UP041 - on Python 3.10 (requires-python) it is not the builtin TimeoutError
        seen.error = seen.error or f"timed out after {timeout:g} s"
    except Exception as e:  # noqa: BLE001 (a dropped connection is a failed request, not a crash)
        seen.error = seen.error or connect_reason(e)
    tokens, prompt_len = seen.usage.get("completion_tokens"), seen.usage.get("prompt_tokens")
    tokens = tokens if _count(tokens) else len(seen.stamps)
    common = dict(
        id=int(req.id),
        arrival=float(req.arrival),
        start=st - t0,
        prompt_len=prompt_len if _count(prompt_len) else int(req.prompt_tokens),
        max_tokens=int(req.output_tokens),
        status=seen.status,
    )
    error = seen.error or ("" if seen.stamps else "the stream ended before any token")
    if error:
        return RequestResult(success=False, error=error, output_tokens=len(seen.stamps), **common)
    # The end is the last token, not the [DONE] after the usage chunk, as vllm bench times it.
    return RequestResult(
        success=True,
        output_tokens=tokens,
        ttft=seen.stamps[0] - st,
        itl=tuple(np.diff(seen.stamps).tolist()),
        latency=seen.stamps[-1] - st,
        **common,
    )


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


async def _read(client, url: str, body: dict[str, Any], chat: bool, seen: _Seen) -> None:
    async with client.stream("POST", url, json=body) as resp:
        seen.status = resp.status_code
        if resp.status_code != 200:
            seen.error = error_text(resp.status_code, await resp.aread())
            return
        async for line in resp.aiter_lines():
            now = time.perf_counter()
            if not line.startswith("data:"):
                continue  # blank separators, ": ping" comments, event: names
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                seen.error = f"not JSON in the stream: {data[:80]!r}"
                return
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                seen.error = error_text(None, json.dumps(chunk))
                return
            choices = chunk.get("choices") or []
            if choices and isinstance(choices[0], dict) and _token_chunk(choices[0], chat):
                seen.stamps.append(now)
            if isinstance(chunk.get("usage"), dict):
                seen.usage = chunk["usage"]


def connect_reason(e: BaseException) -> str:
    """Why a connection failed, in words ("connection refused"), not an exception's repr."""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    text = str(e).strip()
    if "refused" in text.lower() or "all connection attempts failed" in text.lower():
        return "connection refused"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
