"""``realrun serve``: OpenAI's protocol, many clients at once, bad requests, a full queue, a clean
stop.

Every server here is a real process on 127.0.0.1 with the default offline model (tiny-gpt2,
random weights), stopped by its test. What is checked is behaviour a class relies on: each
client gets exactly the tokens it asked for, a client that leaves frees its row and costs
nobody else a token, a bad request is a 4xx naming its field and the server stays up, and
SIGTERM drains: what runs finishes, the record is written, the exit code is 0.
"""

from __future__ import annotations

import asyncio
import csv
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serving import served  # noqa: E402

from batchsim.core.traces import read_trace  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with served("--record", str(tmp / "record.csv"), "--max-seqs", "32", tmp=tmp) as srv:
        srv.record = tmp / "record.csv"
        yield srv


async def _stream(
    client: httpx.AsyncClient, url: str, prompt, max_tokens: int, stop_after: int | None = None
) -> dict:
    """One streaming completion: the content chunks, the finish reason and the usage it reported."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    chunks, finish, usage, done = 0, None, None, False
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                done = True
                break
            obj = json.loads(data)
            assert "error" not in obj, obj
            if obj["choices"]:
                chunks += 1
                finish = obj["choices"][0]["finish_reason"] or finish
                if stop_after is not None and chunks >= stop_after:
                    return {"chunks": chunks, "cut": True}
            elif "usage" in obj:
                usage = obj["usage"]
    return {"chunks": chunks, "finish": finish, "usage": usage, "done": done}


def test_the_openai_client_streams_a_completion(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    model = client.models.list().data[0].id
    stream = client.completions.create(
        model=model,
        prompt="The bus leaves when",
        max_tokens=12,
        stream=True,
        temperature=0,
        extra_body={"ignore_eos": True},
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = 0, None, None
    for ev in stream:
        if ev.choices:
            pieces += 1
            finish = ev.choices[0].finish_reason or finish
        if ev.usage is not None:
            usage = ev.usage
    assert pieces == 12 and finish == "length"
    assert usage.completion_tokens == 12 and usage.prompt_tokens > 0
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert chat.usage.completion_tokens == 5 and chat.choices[0].finish_reason == "length"


def test_64_streams_each_get_exactly_their_tokens_and_a_killed_one_leaves_the_others_whole(server):
    async def main():
        async with httpx.AsyncClient(timeout=600) as client:  # a watchdog against a hang only
            lengths = [8 + (i * 7) % 40 for i in range(64)]
            tasks = [
                _stream(client, server.url, [1 + i % 200, 2, 3, 4 + i % 50], n)
                for i, n in enumerate(lengths)
            ]
            killed = asyncio.ensure_future(_stream(client, server.url, [9] * 20, 200, stop_after=3))
            results = await asyncio.gather(*tasks)
            cut = await killed
            return lengths, results, cut

    before = server.metric("vllm:generation_tokens_total")
    lengths, results, cut = asyncio.run(main())
    assert cut["cut"] and cut["chunks"] == 3
    for n, r in zip(lengths, results):
        assert (
            r["done"]
            and r["chunks"] == n
            and r["finish"] == "length"
            and r["usage"]["completion_tokens"] == n
        )
    # The one that left is withdrawn before the next step: running falls back to 0, and its 200
    # tokens were never all made (the others' total is exact, the killed one's is far short of 200).
    for _ in range(100):
        if server.metric("vllm:num_requests_running") == 0:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert server.metric("vllm:num_requests_running") == 0
    assert server.metric("vllm:num_requests_waiting") == 0
    made = server.metric("vllm:generation_tokens_total") - before
    assert sum(lengths) + 3 <= made < sum(lengths) + 200
    assert server.get("/health") == (200, "ok")


BAD = [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "hi", "max_tokens": -3}, 400, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 5000}, 400, "max_tokens"),
    ({"prompt": [7] * 1100, "max_tokens": 4}, 400, "prompt"),
    ({"prompt": [7] * 1000, "max_tokens": 100}, 400, "max_tokens"),
    ({"prompt": [100000], "max_tokens": 4}, 400, "prompt"),
    ({"prompt": [], "max_tokens": 4}, 400, "prompt"),
    ({"prompt": 42, "max_tokens": 4}, 400, "prompt"),
    ({"prompt": ["a", "b"], "max_tokens": 4}, 400, "prompt"),
    ({"prompt": "hi", "model": "gpt-9"}, 404, "model"),
    ({"prompt": "hi", "temperature": 0.7}, 400, "temperature"),
    ({"prompt": "hi", "stream": "yes"}, 400, "stream"),
    ({"prompt": "hi", "n": 3}, 400, "n"),
]


@pytest.mark.parametrize("body,status,param", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_request_is_a_4xx_naming_its_field_and_the_server_stays_up(
    server, body, status, param
):
    code, obj, _ = server.post("/v1/completions", body)
    assert code == status, obj
    assert obj["error"]["param"] == param and obj["error"]["message"]
    assert server.get("/health") == (200, "ok")


def test_chat_messages_are_checked_and_unknown_routes_are_json_404s(server):
    code, obj, _ = server.post(
        "/v1/chat/completions", {"messages": [{"role": "user"}], "max_tokens": 3}
    )
    assert code == 400 and obj["error"]["param"] == "messages[0]"
    code, obj, _ = server.post("/v1/chat/completions", {"messages": [], "max_tokens": 3})
    assert code == 400 and obj["error"]["param"] == "messages"
    assert server.get("/v1/nothing")[0] == 404
    models = json.loads(server.get("/v1/models")[1])
    assert models["data"][0]["id"] == "tiny-gpt2"


def test_metrics_speak_prometheus_with_vllm_names(server):
    code, text = server.get("/metrics")
    assert code == 200
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "realrun:step_duration_seconds_count",
        "realrun:kv_blocks_in_use",
    ):
        assert f"\n{name}{{" in "\n" + text, name
    state = json.loads(server.get("/v1/state")[1])
    assert {"running", "waiting", "kv_blocks_used", "tokens_per_s", "steps"} <= set(state)


def test_a_full_queue_answers_503_with_retry_after_and_sigterm_drains(tmp_path):
    # One seat and a queue of one: a request runs, one waits (the queue is full), the next is turned
    # away and kept in the record with why. SIGTERM drains: the one running and the one waiting
    # finish whole. (A static bus larger than the queue is refused at start-up: it could never
    # leave; a dynamic batch waits out its max_wait even when the stop comes, so neither would show
    # a full queue here.)
    record = tmp_path / "r.csv"
    with served(
        "--max-seqs", "1", "--max-queue", "1", "--record", str(record), tmp=tmp_path
    ) as srv:

        async def main():
            async with httpx.AsyncClient(timeout=600) as client:  # a watchdog against a hang only
                first = asyncio.ensure_future(_stream(client, srv.url, [5, 6, 7], 60))
                while srv.metric("vllm:num_requests_running") < 1:
                    await asyncio.sleep(0.05)
                second = asyncio.ensure_future(_stream(client, srv.url, [1, 2], 9))
                while srv.metric("vllm:num_requests_waiting") < 1:
                    await asyncio.sleep(0.05)
                r = await client.post(
                    srv.url + "/v1/completions", json={"prompt": [1], "max_tokens": 2}
                )
                assert r.status_code == 503 and r.headers.get("Retry-After")
                assert "queue is full" in r.json()["error"]["message"]
                srv.terminate()
                return await asyncio.gather(first, second)

        out = asyncio.run(main())
        code, log = srv.stop()
    assert [o["chunks"] for o in out] == [60, 9] and all(o["done"] for o in out), out
    assert code == 0, log
    rows = list(csv.DictReader(record.read_text().splitlines()))
    assert [r["tokens"] for r in rows] == ["60", "9", "0"], rows
    assert rows[2]["rejected"].startswith("refused (503): the queue is full"), rows
    trace = read_trace(record)  # the record is a trace batchsim replays, the refused request too
    assert len(trace) == 3 and int(trace.output_tokens[1]) == 9


def test_sigterm_with_streams_in_flight_finishes_them_all_and_writes_the_record(server):
    # The last test on this server: eight long streams run, SIGTERM comes; each finishes whole, the
    # record (everything earlier tests sent, too) is written, and the exit code is 0.

    async def main():
        async with httpx.AsyncClient(timeout=600) as client:  # a watchdog against a hang only
            tasks = [
                asyncio.ensure_future(
                    _stream(client, server.url, [3, 1, 4, 1, 5, 9][: 1 + i % 6], 80)
                )
                for i in range(8)
            ]
            for _ in range(200):
                if server.metric("vllm:num_requests_running") >= 8:
                    break
                await asyncio.sleep(0.02)
            server.terminate()
            return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert all(r["done"] and r["chunks"] == 80 and r["finish"] == "length" for r in results), (
        results
    )
    code, log = server.stop()
    assert code == 0, log
    assert "wrote the record" in log
    rows = list(csv.DictReader(server.record.read_text().splitlines()))
    assert len(rows) >= 64
    cut = [r for r in rows if r["rejected"]]
    assert any("disconnected" in r["rejected"] for r in cut)
    trace = read_trace(server.record)
    assert len(trace) == len(rows)
    served_rows = [r for r in rows if not r["rejected"]]
    assert all(float(r["first_token_s"]) >= float(r["arrival_s"]) for r in served_rows)
    assert all(int(r["tokens"]) == int(r["output_tokens"]) for r in served_rows)


SERVE_BAD = [
    (["--port", "-1"], "port"),
    (["--port", "70000"], "port"),
    (["--max-queue", "-1"], "max-queue"),
    (["--max-queue", "0"], "max-queue"),
    (["--record", "/no/such/folder/r.csv"], "record"),
    (["--drain-timeout", "0"], "drain-timeout"),
    (["--policy", "taxi,static"], "policy"),
    (["--policy", "bus"], "policy"),
    (["--max-seqs", "0"], "max_seqs"),
    (["--kv-budget-tokens", "-5"], "kv-budget-tokens"),
    (["--threads", "100000"], "threads"),
    (["--log-level", "loud"], "log-level"),
]


@pytest.mark.parametrize("flags,field", SERVE_BAD, ids=[" ".join(f) for f, _ in SERVE_BAD])
def test_bad_serve_flags_are_one_line_and_exit_2_before_the_model_loads(
    flags, field, capsys, monkeypatch
):
    from realrun import cli
    from realrun.cli import run as commands

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(commands, "load", no_model)
    assert cli.main(["serve", *flags]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and field.replace("_", "-") in lines[0].replace("_", "-"), lines
