"""OpenAI's completion and chat-completion requests, read and checked; the chunks sent back.

A bad request is a ``RequestError``: an HTTP status, the field at fault and one line saying
what is wrong with its value, sent as OpenAI's error object
(``{"error": {"message", "type", "param", "code"}}``) so any client shows it. Decoding is
greedy only: ``temperature`` may be absent or 0, and anything else is refused rather than
quietly served greedily, because a student comparing outputs must know what ran.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

__all__ = [
    "RequestError",
    "Completion",
    "parse_completion",
    "error_body",
    "chunk",
    "usage_chunk",
    "whole_response",
]

#: Sampling fields accepted only at the value greedy decoding means (vllm bench serve sends some).
_NEUTRAL = {
    "temperature": 0,
    "repetition_penalty": 1,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "n": 1,
    "top_p": 1,
    "top_k": -1,
    "best_of": 1,
    "min_p": 0,
}
#: What this server honours, on either route (``user`` and ``seed`` change nothing a greedy server
#: does).
_HONOURED = {"model", "max_tokens", "stream", "stream_options", "ignore_eos", "user", "seed"}
#: OpenAI's and vLLM's fields it does not honour, accepted only at the values that ask for nothing
#: (as clients send them by default: vllm bench serve sends ``logprobs: null``); any other value is
#: a 400 naming the field, since a client that asked for stop strings or log-probabilities must not
#: get an answer without.
_ABSENT = {
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "stop": (None, "", []),
    "stop_token_ids": (None, []),
    "logit_bias": (None, {}),
    "suffix": (None, ""),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "min_tokens": (None, 0),
    "store": (None, False),
    "metadata": (None, {}),
    "parallel_tool_calls": (None, False, True),
}
#: JSON nested deeper than this is refused before it is parsed (OpenAI's bodies nest four levels at
#: most).
MAX_DEPTH = 64


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx), ``param`` (the field), ``message`` (one
    line)."""

    def __init__(
        self, status: int, param: str | None, message: str, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.message, self.kind = status, param, message, kind


def error_body(e: RequestError) -> dict:
    return {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}}


@dataclass(frozen=True)
class Completion:
    """A checked request: the prompt as token ids, how many tokens to make, and how to send them."""

    prompt: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    ignore_eos: bool
    chat: bool
    model: str

    def __post_init__(self) -> None:
        if not self.prompt:
            raise RequestError(400, "prompt", "prompt is empty: it must hold at least one token")
        if self.max_tokens < 1:
            raise RequestError(
                400, "max_tokens", f"max_tokens must be at least 1, got {self.max_tokens}"
            )


def _show(v) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _flag(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(400, name, f"{name} must be true or false, got {_show(v)}")
    return v


def _content(i: int, m) -> str:
    """A message's text: ``content`` a string, or a list of text parts
    (``{"type": "text", "text": ...}``), as OpenAI's client and vllm bench serve send it."""
    c = m.get("content") if isinstance(m, dict) else None
    if (
        isinstance(c, list)
        and c
        and all(
            isinstance(x, dict) and x.get("type") == "text" and isinstance(x.get("text"), str)
            for x in c
        )
    ):
        return "".join(x["text"] for x in c)
    if not isinstance(c, str) or not isinstance(m.get("role"), str):
        raise RequestError(
            400,
            f"messages[{i}]",
            f'messages[{i}] must be {{"role": str, "content": str or a list of {{"type": "text", '
            f'"text": str}}}}, got {_show(m)}',
        )
    return c


def chat_text(messages: list[dict]) -> str:
    """The chat template this server applies (the same for every model: it is a teaching server, and
    the load generator sizes chat prompts through this very function)."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


def _prompt_ids(body: dict, chat: bool, tokenizer, vocab: int) -> list[int]:
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise RequestError(
                400,
                "messages",
                f"messages must be a non-empty list of {{role, content}}, got {_show(msgs)}",
            )
        text = chat_text(
            [{"content": _content(i, m), "role": m["role"]} for i, m in enumerate(msgs)]
        )
        return [i for i in tokenizer.encode(text) if 0 <= i < vocab]
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one, as some clients send a single prompt
    if isinstance(p, str):
        return [i for i in tokenizer.encode(p) if 0 <= i < vocab]
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise RequestError(
                400,
                "prompt",
                f"prompt token id {bad[0]} is outside the model's vocabulary of {vocab} ids",
            )
        return list(p)
    if isinstance(p, list) and len(p) > 1:
        raise RequestError(
            400,
            "prompt",
            "one prompt per request: send a string or a list of token ids, not a batch",
        )
    raise RequestError(
        400, "prompt", f"prompt must be a string or a list of token ids, got {_show(p)}"
    )


def parse_completion(
    raw: bytes, chat: bool, served: str, tokenizer, vocab: int, context: int
) -> Completion:
    """Read and check one request body against the model served (its name, vocabulary and
    context)."""
    body = read_json(raw)
    model = body.get("model", served)
    if model != served:
        raise RequestError(
            404,
            "model",
            f"model {_show(model)} is not served here; this server serves {served!r}",
            "NotFoundError",
        )
    for name, neutral in _NEUTRAL.items():
        v = body.get(name)
        if v is not None and (
            not isinstance(v, (int, float)) or isinstance(v, bool) or v != neutral
        ):
            raise RequestError(
                400,
                name,
                f"{name} must be {neutral} (this server decodes greedily), got {_show(v)}",
            )
    _check_fields(body, chat)
    # Chat clients send OpenAI's newer name (vllm bench does); 16 is OpenAI's default for
    # completions, and a chat without a limit runs to the context's end, as OpenAI's and vLLM's do
    # (filled in below).
    field_ = (
        "max_completion_tokens"
        if chat and body.get("max_completion_tokens") is not None
        else "max_tokens"
    )
    mt = body.get(field_)
    mt = (None if chat else 16) if mt is None else mt
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool)):
        raise RequestError(400, field_, f"{field_} must be a whole number, got {_show(mt)}")
    if mt is not None and mt < 1:
        raise RequestError(400, field_, f"{field_} must be at least 1, got {mt}")
    stream = _flag(body, "stream", False)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError(
            400, "stream_options", f"stream_options must be an object, got {_show(opts)}"
        )
    for k in opts:
        if k != "include_usage":
            raise RequestError(
                400,
                f"stream_options.{k}",
                f"stream_options.{k} is not honoured here (only include_usage)",
            )
    usage = opts.get("include_usage", False)
    if usage is not None and not isinstance(usage, bool):
        raise RequestError(
            400,
            "stream_options.include_usage",
            f"stream_options.include_usage must be true or false, got {_show(usage)}",
        )
    ids = _prompt_ids(body, chat, tokenizer, vocab)
    if not ids:
        raise RequestError(
            400, "messages" if chat else "prompt", "the prompt holds no token this model knows"
        )
    if len(ids) >= context:
        raise RequestError(
            400, "prompt", f"the prompt is {len(ids)} tokens; the model's context is {context}"
        )
    mt = context - len(ids) if mt is None else mt
    if len(ids) + mt > context:
        raise RequestError(
            400,
            field_,
            f"{field_} {mt} with a prompt of {len(ids)} tokens passes the model's context of "
            f"{context} (at most {context - len(ids)} here)",
        )
    return Completion(
        tuple(ids), mt, stream, bool(usage), _flag(body, "ignore_eos", False), chat, served
    )


def _depth(raw: bytes) -> int:
    """The deepest nesting of brackets in ``raw`` (those inside strings too: an over-count only
    refuses a body with 64 brackets in a row inside a string, which no client sends)."""
    deepest = level = 0
    for b in raw:
        if b in (0x5B, 0x7B):  # [ {
            level += 1
            deepest = max(deepest, level)
        elif b in (0x5D, 0x7D):
            level -= 1
    return deepest


def read_json(raw: bytes) -> dict:
    """The body as a JSON object, or a 400: not JSON, not an object, or nested past ``MAX_DEPTH``
    (Python's parser recurses once a level: 100,000 brackets were a RecursionError, a 500)."""
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        raise RequestError(400, None, f"the body nests JSON deeper than {MAX_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RequestError(400, None, f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, None, f"the body must be a JSON object, got {_show(body)}")
    return body


def _check_fields(body: dict, chat: bool) -> None:
    """Every field is one this server honours, or one it does not at the value that asks for
    nothing."""
    own = "messages" if chat else "prompt"
    for name, v in body.items():
        if (
            name in _HONOURED
            or name in _NEUTRAL
            or name == own
            or (chat and name == "max_completion_tokens")
        ):
            continue
        if name in _ABSENT:
            if any(v == ok and type(v) is type(ok) for ok in _ABSENT[name]):
                continue
            raise RequestError(
                400,
                name,
                f"{name} is not honoured by this server (greedy decoding, whole tokens), got "
                f"{_show(v)}: leave it out",
            )
        raise RequestError(
            400,
            name,
            f"{name} is not a field this server honours on /v1/{'chat/' if chat else ''}"
            "completions: leave it out",
        )


def chunk(req: Completion, rid: str, text: str, finish: str | None, first: bool) -> dict:
    """One streamed chunk: a piece of text, and the finish reason on the last."""
    base = {"id": rid, "created": int(time.time()), "model": req.model}
    if req.chat:
        delta = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    return {
        **base,
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }


def _usage(prompt: int, completion: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def usage_chunk(req: Completion, rid: str, completion_tokens: int) -> dict:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": req.model,
        "choices": [],
        "usage": _usage(len(req.prompt), completion_tokens),
    }


def whole_response(
    req: Completion, rid: str, text: str, finish: str, completion_tokens: int
) -> dict:
    """The answer in one piece (``stream`` false)."""
    base = {
        "id": rid,
        "created": int(time.time()),
        "model": req.model,
        "usage": _usage(len(req.prompt), completion_tokens),
    }
    if req.chat:
        return {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
        }
    return {
        **base,
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }
