"""Open-loop load: every request leaves at its own arrival time, whatever the server is doing.

A closed-loop client (send, wait for the answer, send the next) can never overload a server:
when the server slows down, so does the client, and the queue that a real crowd would build
never forms. An open-loop client is the crowd: the workload says when each request arrives
(batchsim's arrival processes and traces, the same ``Workload`` the simulator and the real
runner use), and the request is sent then, on its own task, while earlier ones still stream.
``max_concurrency`` is the one exception, and it is the user's: a cap on requests in flight,
beyond which an arrival waits on the client (its ``start`` is later than its ``arrival``).

Ctrl-C stops the load: the requests still streaming are dropped, and the report holds every
request that finished, with ``interrupted`` set.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from batchsim.core.errors import (
    MAX_SECONDS,
    ConfigError,
    check_at_most,
    check_int_at_least,
    check_positive,
    show,
)
from batchsim.core.workload import Workload

from .chatsize import chat_sizer
from .client import (
    CHAT,
    COMPLETIONS,
    RequestResult,
    connect_reason,
    error_text,
    payload_for,
    prompt_for,
    stream_one,
)
from .metrics import LoadReport

__all__ = ["LoadConfig", "run_load", "ENDPOINTS", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8000"
ENDPOINTS = (COMPLETIONS, CHAT)
#: Seconds to wait for GET /v1/models before saying the server is not there.
_PROBE_TIMEOUT = 10.0


def check_url(url) -> str:
    """``url`` as a base (``http://host:port``, no trailing ``/`` nor ``/v1``), or one ConfigError
    line."""
    bad = ConfigError(f"url must be http://HOST[:PORT] or https://HOST[:PORT], got {show(url)}")
    if not isinstance(url, str):
        raise bad
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (reading it checks it: http://h:x raises ValueError)
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise bad
    base = url.strip().rstrip("/")
    # The OpenAI client's base_url ends in /v1; here the endpoint brings it, so accept either
    # spelling.
    return base[: -len("/v1")] if base.endswith("/v1") else base


@dataclass(frozen=True)
class LoadConfig:
    """Where to send the load and how: checked before any request leaves."""

    url: str = DEFAULT_URL
    endpoint: str = COMPLETIONS
    model: str | None = None  # None: the first model the server lists at GET /v1/models
    max_concurrency: int | None = None
    timeout: float = 600.0
    prompt_text: str | None = None
    seed: int = 0
    api_key: str | None = (
        None  # sent as ``Authorization: Bearer KEY`` (``realrun serve --api-key``, ``vllm serve``)
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", check_url(self.url))
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(
                f"endpoint must be {' or '.join(ENDPOINTS)}, got {show(self.endpoint)}"
            )
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ConfigError(f"model must be a model name, got {show(self.model)}")
        if self.max_concurrency is not None:
            check_int_at_least("max_concurrency", self.max_concurrency, 1)
        check_positive("timeout", self.timeout)
        check_at_most("timeout", self.timeout, MAX_SECONDS, "a day")
        if self.prompt_text is not None and (
            not isinstance(self.prompt_text, str) or not self.prompt_text
        ):
            raise ConfigError(f"prompt_text must be some text, got {show(self.prompt_text)}")
        check_int_at_least("seed", self.seed, 0)
        if self.api_key is not None and (
            not isinstance(self.api_key, str)
            or not self.api_key.strip()
            or any(c in self.api_key for c in "\r\n")
        ):
            # A newline would end the header early: refused here, not as httpx's traceback.
            raise ConfigError("api_key must be a non-empty key on one line")

    @property
    def chat(self) -> bool:
        return self.endpoint == CHAT


@dataclass
class _State:
    """What the run has measured so far; read after Ctrl-C as well as after the last answer."""

    model: str | None = None
    t0: float | None = None
    end: float | None = None
    results: list[RequestResult] = field(default_factory=list)


def run_load(
    config: LoadConfig | str, workload: Workload, *, progress: bool = False, **options
) -> LoadReport:
    """Send ``workload`` open-loop to the server at ``config`` (a ``LoadConfig``, or its url with
    the other fields as keywords) and return what was measured. Bad input, or a server that cannot
    be reached, is a ConfigError before the first request; a failed request is a result, not an
    error."""
    import httpx  # here, not at import: `python -m realrun --help` needs no httpx

    if isinstance(config, str):
        config = LoadConfig(url=config, **options)
    elif options:
        raise TypeError(f"give options in the LoadConfig, not also as keywords: {sorted(options)}")
    state = _State()
    bar = _bar(len(workload)) if progress else None
    interrupted = False
    try:
        asyncio.run(_main(httpx, config, workload, state, bar))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar is not None:
            bar.close()
    end = state.end if state.end is not None else time.perf_counter()
    return LoadReport.of(
        config,
        workload,
        state.model,
        sorted(state.results, key=lambda r: r.id),
        end - state.t0 if state.t0 is not None else 0.0,
        interrupted,
    )


async def _main(httpx, cfg: LoadConfig, wl: Workload, state: _State, bar) -> None:
    # No pool limit of httpx's own (100 by default): it would be a silent max_concurrency.
    limits = httpx.Limits(
        max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency
    )
    headers = {"Authorization": f"Bearer {cfg.api_key.strip()}"} if cfg.api_key else None
    async with httpx.AsyncClient(
        limits=limits, timeout=httpx.Timeout(cfg.timeout), headers=headers
    ) as client:
        state.model = cfg.model or await _first_model(client, cfg.url)
        if cfg.model:
            await _first_model(client, cfg.url, required=False)  # only: is anything listening?
        sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        url = cfg.url + cfg.endpoint
        # A chat's words cut to --prompt-len tokens as the server counts them (``chatsize``), when
        # its tokenizer is at hand.
        sizer = chat_sizer(state.model) if cfg.chat and cfg.prompt_text is None else None
        running: set[asyncio.Task] = set()

        async def one(i: int) -> None:
            req = wl.request(i)
            prompt = prompt_for(req, cfg.seed, cfg.chat, cfg.prompt_text)
            if sizer is not None and not req.text:
                prompt = sizer(prompt, int(req.prompt_tokens))
            body = payload_for(req, state.model, cfg.endpoint, prompt)
            if sem is None:
                res = await stream_one(client, url, body, req, state.t0, cfg.chat, cfg.timeout)
            else:
                async with sem:
                    res = await stream_one(client, url, body, req, state.t0, cfg.chat, cfg.timeout)
            state.results.append(res)
            if bar is not None:
                bar.update(1)

        state.t0 = time.perf_counter()
        try:
            for i, at in enumerate(wl.arrivals.tolist()):
                delay = state.t0 + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(i))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.wait(set(running))
            state.end = time.perf_counter()
        finally:
            for task in running:  # Ctrl-C: drop what still streams, and let its connection close
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)


async def _first_model(client, base: str, required: bool = True) -> str | None:
    """The first model id the server lists; the same probe says whether a server is there at all."""
    try:
        resp = await client.get(base + "/v1/models", timeout=_PROBE_TIMEOUT)
    except Exception as e:  # noqa: BLE001 (every way of not reaching the server is one line)
        raise ConfigError(f"cannot connect to {base}: {connect_reason(e)}") from None
    if resp.status_code == 401:  # before any request leaves, not as 401s in every row of the table
        raise ConfigError(
            f"GET {base}/v1/models: 401, the server wants an API key: give --api-key KEY "
            "(the key its teacher gave, as `realrun serve --api-key` or `vllm serve --api-key` set "
            "it)"
        )
    if not required:
        return None
    try:
        ids = [m["id"] for m in resp.json()["data"]] if resp.status_code == 200 else []
    except (ValueError, KeyError, TypeError):
        ids = []
    if not ids or not isinstance(ids[0], str):
        why = (
            error_text(resp.status_code, resp.content)
            if resp.status_code != 200
            else "lists no model"
        )
        raise ConfigError(f"GET {base}/v1/models: {why}; give --model NAME")
    return ids[0]


def _bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="load", unit="req", leave=False)


def span_seconds(wl: Workload) -> float:
    """How long the arrivals alone last: the least a load run takes."""
    return float(wl.arrivals[-1]) if len(wl) and math.isfinite(float(wl.arrivals[-1])) else 0.0
