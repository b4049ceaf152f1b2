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

__all__ = ["RequestError", "Completion", "parse_completion", "error_body", "chunk", "usage_chunk", "whole_response"]

#: Sampling fields accepted only at the value greedy decoding means (vllm bench serve sends some).
_NEUTRAL = {"temperature": 0, "repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "n": 1,
            "top_p": 1, "top_k": -1, "best_of": 1}


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx), ``param`` (the field), ``message`` (one line)."""

    def __init__(self, status: int, param: str | None, message: str, kind: str = "invalid_request_error") -> None:
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
            raise RequestError(400, "max_tokens", f"max_tokens must be at least 1, got {self.max_tokens}")


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


def _prompt_ids(body: dict, chat: bool, tokenizer, vocab: int) -> list[int]:
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise RequestError(400, "messages", f"messages must be a non-empty list of {{role, content}}, got {_show(msgs)}")
        parts = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not isinstance(m.get("role"), str):
                raise RequestError(400, f"messages[{i}]", f"messages[{i}] must be {{\"role\": str, \"content\": str}}, got {_show(m)}")
            parts.append(f"{m['role']}: {m['content']}\n")
        return [i for i in tokenizer.encode("".join(parts) + "assistant:") if 0 <= i < vocab]
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one, as some clients send a single prompt
    if isinstance(p, str):
        return [i for i in tokenizer.encode(p) if 0 <= i < vocab]
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise RequestError(400, "prompt", f"prompt token id {bad[0]} is outside the model's vocabulary of {vocab} ids")
        return list(p)
    if isinstance(p, list) and len(p) > 1:
        raise RequestError(400, "prompt", "one prompt per request: send a string or a list of token ids, not a batch")
    raise RequestError(400, "prompt", f"prompt must be a string or a list of token ids, got {_show(p)}")


def parse_completion(raw: bytes, chat: bool, served: str, tokenizer, vocab: int, context: int) -> Completion:
    """Read and check one request body against the model served (its name, vocabulary and context)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, None, f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, None, f"the body must be a JSON object, got {_show(body)}")
    model = body.get("model", served)
    if model != served:
        raise RequestError(404, "model", f"model {_show(model)} is not served here; this server serves {served!r}",
                           "NotFoundError")
    for name, neutral in _NEUTRAL.items():
        v = body.get(name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v != neutral):
            raise RequestError(400, name, f"{name} must be {neutral} (this server decodes greedily), got {_show(v)}")
    # Chat clients send OpenAI's newer name (vllm bench does); 16 is OpenAI's default for completions.
    field_ = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    mt = body.get(field_)
    mt = 16 if mt is None else mt
    if not isinstance(mt, int) or isinstance(mt, bool):
        raise RequestError(400, field_, f"{field_} must be a whole number, got {_show(mt)}")
    if mt < 1:
        raise RequestError(400, field_, f"{field_} must be at least 1, got {mt}")
    stream = _flag(body, "stream", False)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError(400, "stream_options", f"stream_options must be an object, got {_show(opts)}")
    ids = _prompt_ids(body, chat, tokenizer, vocab)
    if not ids:
        raise RequestError(400, "messages" if chat else "prompt", "the prompt holds no token this model knows")
    if len(ids) >= context:
        raise RequestError(400, "prompt", f"the prompt is {len(ids)} tokens; the model's context is {context}")
    if len(ids) + mt > context:
        raise RequestError(400, field_, f"{field_} {mt} with a prompt of {len(ids)} tokens passes the model's context "
                                        f"of {context} (at most {context - len(ids)} here)")
    return Completion(tuple(ids), mt, stream, bool(opts.get("include_usage", False)), _flag(body, "ignore_eos", False),
                      chat, served)


def chunk(req: Completion, rid: str, text: str, finish: str | None, first: bool) -> dict:
    """One streamed chunk: a piece of text, and the finish reason on the last."""
    base = {"id": rid, "created": int(time.time()), "model": req.model}
    if req.chat:
        delta = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {**base, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return {**base, "object": "text_completion", "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def usage_chunk(req: Completion, rid: str, completion_tokens: int) -> dict:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": req.model, "choices": [],
            "usage": _usage(len(req.prompt), completion_tokens)}


def whole_response(req: Completion, rid: str, text: str, finish: str, completion_tokens: int) -> dict:
    """The answer in one piece (``stream`` false)."""
    base = {"id": rid, "created": int(time.time()), "model": req.model, "usage": _usage(len(req.prompt), completion_tokens)}
    if req.chat:
        return {**base, "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}]}
    return {**base, "object": "text_completion",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
