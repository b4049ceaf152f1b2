"""A student who leaves frees the seat before the next step, whatever they asked for (issue 37).

A server of two seats (``--max-seqs 2``) runs two long answers while a short one waits; one of the
two clients hangs up (a streamed one after a few tokens, or one that asked for the whole answer,
``"stream": false``). The waiting request must take the freed seat while the other long answer
still runs (before, the leaver's row ran its whole repeat: the short one waited for both), and the
record must say the leaver was cancelled, with the tokens actually made, not the 900 asked for.
Every wait is for something the server shows (its ``/metrics``), never for a guessed time.
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

#: A watchdog against a hang only: each test's server serves ~2,000 tokens of tiny-gpt2.
WATCHDOG_S = 600
LONG = 900


async def _until(srv, name: str, at_least: float) -> None:
    while srv.metric(name) < at_least:
        await asyncio.sleep(0.05)


async def _raw(url: str, body: dict) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A request sent on a bare socket, so that the test decides exactly when the client hangs
    up."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = json.dumps(body).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
    )
    await writer.drain()
    return reader, writer


async def _whole(url: str, body: dict) -> dict:
    async with httpx.AsyncClient(timeout=WATCHDOG_S) as client:
        r = await client.post(url + "/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_client_who_leaves_a_full_batch_frees_the_seat_for_the_one_waiting(streamed, tmp_path):
    record = tmp_path / "class.csv"
    long = {"max_tokens": LONG, "ignore_eos": True}
    with served("--max-seqs", "2", "--record", str(record), tmp=tmp_path) as srv:

        async def main():
            reader, writer = await _raw(srv.url, {"prompt": [1, 2, 3], "stream": streamed, **long})
            stays = asyncio.ensure_future(_whole(srv.url, {"prompt": [4, 5, 6], **long}))
            await _until(srv, "vllm:num_requests_running", 2)
            short = asyncio.ensure_future(
                _whole(srv.url, {"prompt": [7, 8, 9], "max_tokens": 3, "ignore_eos": True})
            )
            await _until(srv, "vllm:num_requests_waiting", 1)
            if streamed:  # a few tokens read, then gone
                while (await reader.read(4096)).count(b"data: ") < 3:
                    pass
            writer.close()
            first = await short
            return first, stays.done(), await stays

        short, stays_done_then, stays = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
        code, log = srv.stop()
    assert code == 0, log
    assert short["usage"]["completion_tokens"] == 3
    assert not stays_done_then, (
        "the waiting request was served only after both long answers had ended"
    )
    assert stays["usage"]["completion_tokens"] == LONG
    rows = list(csv.DictReader(record.read_text().splitlines()))
    assert len(rows) == 3
    left, stayed, waited = rows
    assert left["rejected"].startswith("cancelled: the client disconnected"), left
    assert 0 < int(left["tokens"]) < LONG and left["output_tokens"] == left["tokens"], left
    assert stayed["rejected"] == "" and stayed["tokens"] == str(LONG)
    # it took the seat the leaver freed
    assert float(waited["finish_s"]) < float(stayed["finish_s"])


def test_a_client_who_leaves_the_queue_is_recorded_cancelled_with_no_tokens(tmp_path):
    record = tmp_path / "class.csv"
    with served("--max-seqs", "1", "--record", str(record), tmp=tmp_path) as srv:

        async def main():
            runs = asyncio.ensure_future(
                _whole(srv.url, {"prompt": [1, 2], "max_tokens": 300, "ignore_eos": True})
            )
            await _until(srv, "vllm:num_requests_running", 1)
            _, writer = await _raw(srv.url, {"prompt": [3, 4], "max_tokens": 5})
            await _until(srv, "vllm:num_requests_waiting", 1)
            writer.close()
            # gone from the queue while the other runs
            while srv.metric("vllm:num_requests_waiting") > 0:
                await asyncio.sleep(0.05)
            return runs.done(), await runs

        was_done, runs = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
        code, log = srv.stop()
    assert code == 0, log
    assert not was_done, "the queued request left the queue only when the running one ended"
    rows = list(csv.DictReader(record.read_text().splitlines()))
    # Heard while its request was on its way to the queue, or once queued ("after 0 tokens"): either
    # way, none made.
    assert rows[1]["rejected"].startswith("cancelled: the client disconnected"), rows
    assert rows[1]["tokens"] == "0" and rows[0]["tokens"] == "300"
