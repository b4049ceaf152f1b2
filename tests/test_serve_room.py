"""No student can lock the class out of ``realrun serve`` (issue 37), and each is named by a short
id.

One real server (offline tiny-gpt2 on 127.0.0.1) with small limits, so each misbehaviour is cheap to
show: half-sent request heads beyond the connection cap, a head dribbled past its time limit, a body
dribbled past its own, a body larger than the cap, a request without the room's key, and one client
filling the queue. Each is answered with the status that names its limit, while ``/health`` and a
well-behaved completion still answer. Every wait is for a reply or a state, never a guessed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serving import served  # noqa: E402

KEY = "room-7"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: A watchdog against a hang only: the slowest reply here comes after a 1 s limit.
WATCHDOG_S = 600


@pytest.fixture(scope="module")
def room(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("room")
    with served(
        "--max-connections",
        "8",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
        "--max-body-bytes",
        "4096",
        "--api-key",
        KEY,
        "--max-seqs",
        "1",
        "--max-queue-per-client",
        "1",
        "--record",
        str(tmp / "class.csv"),
        tmp=tmp,
    ) as srv:
        srv.record = tmp / "class.csv"
        yield srv


async def _open(room, head: bytes = b"POST /v1/completions HTTP/1.1\r\n"):
    host, port = room.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head)
    await writer.drain()
    return reader, writer


def _complete(room, body: dict, headers=AUTH) -> httpx.Response:
    return httpx.post(room.url + "/v1/completions", json=body, headers=headers, timeout=WATCHDOG_S)


def test_half_sent_heads_beyond_the_cap_give_way_and_health_still_answers(room):
    async def main():
        held = [await _open(room) for _ in range(20)]  # 20 half-sent heads against a cap of 8
        try:
            async with httpx.AsyncClient(timeout=WATCHDOG_S) as c:
                health = await c.get(room.url + "/health")
                done = await c.post(
                    room.url + "/v1/completions",
                    json={"prompt": [1, 2], "max_tokens": 2},
                    headers=AUTH,
                )
            # the oldest gave way to a newer connection: its 408, or a reset if it came before the
            # read
            try:
                first = await held[0][0].read()
            except ConnectionResetError:
                first = b"reset"
        finally:
            for _, w in held:
                w.close()
                with contextlib.suppress(OSError):  # a connection the server reset
                    await w.wait_closed()
        return health, done, first

    health, done, first = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
    assert health.status_code == 200 and done.status_code == 200, (health.text, done.text)
    assert first == b"reset" or (
        first.startswith(b"HTTP/1.1 408") and b"--header-timeout" in first
    ), first


def test_a_head_or_a_body_dribbled_past_its_limit_is_a_408(room):
    async def main():
        # the blank line never comes
        r1, w1 = await _open(room, b"GET /health HTTP/1.1\r\nHost: x\r\n")
        head = await r1.read()
        body = b'{"prompt": [1, 2], "max_tokens": 2}'
        r2, w2 = await _open(
            room,
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body[:5]),
        )
        late = await r2.readuntil(b"}}")
        w1.close()
        w2.close()
        return head, late

    head, late = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
    assert head.startswith(b"HTTP/1.1 408"), head
    assert late.startswith(b"HTTP/1.1 408") and b"--body-timeout" in late, late


def test_a_body_over_the_cap_is_a_413_before_it_is_read(room):
    r = _complete(room, {"prompt": "x" * 10_000, "max_tokens": 2})
    assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]["message"]


def test_the_room_key_is_needed_on_v1_routes_only(room):
    assert _complete(room, {"prompt": [1], "max_tokens": 1}, headers={}).status_code == 401
    wrong = _complete(
        room, {"prompt": [1], "max_tokens": 1}, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    assert httpx.get(room.url + "/v1/models", timeout=WATCHDOG_S).status_code == 401
    assert httpx.get(room.url + "/v1/models", headers=AUTH, timeout=WATCHDOG_S).status_code == 200
    assert room.get("/health")[0] == 200 and room.get("/metrics")[0] == 200


def test_one_client_cannot_fill_the_queue_and_the_record_names_it(room):
    # One seat; this client's first request runs, its second waits, its third is turned away: at
    # most one of its requests may wait (--max-queue-per-client 1). The record names the client on
    # all three.
    async def main():
        async with httpx.AsyncClient(timeout=WATCHDOG_S, headers=AUTH) as c:
            body = {"prompt": [1, 2], "max_tokens": 200, "ignore_eos": True}
            first = asyncio.ensure_future(c.post(room.url + "/v1/completions", json=body))
            while room.metric("vllm:num_requests_running") < 1:
                await asyncio.sleep(0.05)
            second = asyncio.ensure_future(
                c.post(room.url + "/v1/completions", json={**body, "max_tokens": 3})
            )
            while room.metric("vllm:num_requests_waiting") < 1:
                await asyncio.sleep(0.05)
            state = json.loads(room.get("/v1/state")[1])
            third = await c.post(room.url + "/v1/completions", json={**body, "max_tokens": 3})
            return [await first, await second, third], state

    (first, second, third), state = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
    assert first.status_code == second.status_code == 200
    assert third.status_code == 503 and "--max-queue-per-client" in third.json()["error"]["message"]
    assert list(state["clients"].values()) == [{"waiting": 1, "running": 1}]
    code, log = room.stop()
    assert code == 0, log
    rows = list(csv.DictReader(room.record.read_text().splitlines()))
    mine = rows[-3:]
    assert [r["tokens"] for r in mine] == ["200", "3", "0"], mine
    assert len({r["client"] for r in mine}) == 1 and len(mine[0]["client"]) == 8
    assert list(state["clients"]) == [mine[0]["client"]]
