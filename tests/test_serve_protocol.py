"""OpenAI's fields as ``realrun serve`` reads them (issue 37): nothing asked for is silently
ignored.

Checked on the parser (``parse_completion``) with the default model's byte tokenizer, and once on a
real server: a streamed answer's pieces add up to the same request's whole text, byte for byte.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from realrun.classroom.serve.detok import IncrementalText
from realrun.classroom.serve.protocol import RequestError, chat_text, parse_completion
from realrun.engine.model import ByteTokenizer

TOK = ByteTokenizer()
VOCAB, CONTEXT = 259, 1024


def _parse(body, chat=False):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_completion(raw, chat, "m", TOK, VOCAB, CONTEXT)


def _refused(body, chat=False) -> RequestError:
    with pytest.raises(RequestError) as e:
        _parse(body, chat)
    assert 400 <= e.value.status < 500
    return e.value


@pytest.mark.parametrize(
    "field,value",
    [
        ("stop", "\n"),
        ("stop", ["a"]),
        ("logprobs", 2),
        ("echo", True),
        ("logit_bias", {"5": 10}),
        ("suffix", "x"),
        ("stop_token_ids", [3]),
        ("best_of", 3),
        ("min_p", 0.1),
        ("guided_json", {}),
        ("frobnicate", 1),
    ],
)
def test_a_field_not_honoured_is_a_400_naming_it(field, value):
    e = _refused({"prompt": "hi", field: value})
    assert e.param == field and field in e.message


@pytest.mark.parametrize(
    "field,value",
    [
        ("stop", None),
        ("stop", []),
        ("logprobs", None),
        ("echo", False),
        ("logit_bias", {}),
        ("user", "ann"),
        ("seed", 7),
        ("temperature", 0),
    ],
)
def test_a_field_at_the_value_that_asks_for_nothing_is_accepted(field, value):
    assert _parse({"prompt": "hi", field: value}).max_tokens == 16


@pytest.mark.parametrize("value", ["no", 1, "true", []])
def test_include_usage_must_be_a_boolean(value):
    e = _refused({"prompt": "hi", "stream": True, "stream_options": {"include_usage": value}})
    assert e.param == "stream_options.include_usage"


def test_deeply_nested_json_is_a_400_not_a_recursion_error():
    e = _refused(b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert "deeper" in e.message
    assert _parse({"prompt": [[1, 2, 3]]}).prompt == (1, 2, 3)  # a batch of one still reads


def test_chat_content_may_be_a_list_of_text_parts_and_runs_to_the_context_by_default():
    parts = _parse(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}],
                }
            ]
        },
        chat=True,
    )
    plain = _parse({"messages": [{"role": "user", "content": "hello"}]}, chat=True)
    assert (
        parts.prompt
        == plain.prompt
        == tuple(TOK.encode(chat_text([{"role": "user", "content": "hello"}])))
    )
    # no max_tokens: to the context's end, as OpenAI
    assert plain.max_tokens == CONTEXT - len(plain.prompt)
    assert _parse({"prompt": "hello"}).max_tokens == 16  # a completion's default stays OpenAI's 16
    e = _refused(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        chat=True,
    )
    assert e.param == "messages[0]"


def test_pieces_of_a_split_character_add_up_to_the_whole_text():
    # two bytes no character begins with, as random weights print
    ids = TOK.encode("né 😀 ok") + [
        0xFF,
        0xFE,
    ]
    text = IncrementalText(TOK)
    pieces = [text.push(i) for i in ids] + [text.flush()]
    assert "".join(pieces) == text.text == TOK.decode(ids)
    assert "\ufffd" not in "".join(pieces[:-3])  # no character is ever sent in halves


def test_a_stream_adds_up_to_the_same_requests_whole_text(tmp_path):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")
    from serving import served

    async def both(url: str, prompt: list[int]) -> tuple[str, str]:
        body = {"prompt": prompt, "max_tokens": 40, "ignore_eos": True}
        async with httpx.AsyncClient(timeout=600) as c:
            whole = (await c.post(url + "/v1/completions", json=body)).json()["choices"][0]["text"]
            pieces = []
            async with c.stream(
                "POST", url + "/v1/completions", json={**body, "stream": True}
            ) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        pieces += [ch["text"] for ch in json.loads(line[6:])["choices"]]
            return whole, "".join(pieces)

    with served(
        "--kv-budget-tokens", "256", "--max-seqs", "8", tmp=tmp_path
    ) as srv:  # tight: rows preempted

        async def main():
            return await asyncio.gather(*(both(srv.url, [3 + i, 200 - i, 7]) for i in range(8)))

        pairs = asyncio.run(main())
        _, text = srv.get("/v1/models")
        metrics = srv.get("/metrics")[1]
    assert all(w == s for w, s in pairs), pairs
    assert any(ord(ch) > 127 for w, _ in pairs for ch in w)  # the model did print bytes above ASCII
    assert isinstance(json.loads(text)["data"][0]["created"], int)
    assert " -1\n" not in metrics
