"""``realrun serve`` stopped in every state writes the whole class's record and exits 0 (issue 37).

Each test starts a real server on 127.0.0.1 (the offline tiny-gpt2), puts it in one state (idle,
a bus waiting for company, long streams and a whole answer running past a short drain) and sends
SIGTERM once the server shows that state (its ``/metrics``), never after a guessed time. What is
asserted is the record: every request in it, each one still running at the drain's end cut at a
pass boundary with fewer tokens than it asked for and the reason, the file readable by others.
"""

from __future__ import annotations

import asyncio
import csv
import stat

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serving import served  # noqa: E402

from batchsim.core.traces import read_trace  # noqa: E402

#: A watchdog against a hang only: a tiny-gpt2 server starts and stops in seconds on a loaded
#: machine.
WATCHDOG_S = 600


async def _ask(url: str, n: int, stream: bool) -> tuple[int, str]:
    """One request for ``n`` tokens: its status and the last thing it was sent."""
    body = {"prompt": [1, 2, 3], "max_tokens": n, "stream": stream, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=WATCHDOG_S) as client:
        if not stream:
            r = await client.post(url + "/v1/completions", json=body)
            return r.status_code, r.text
        lines = []
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.strip():
                    lines.append(line)
        return r.status_code, "\n".join(lines[-2:])


async def _until(srv, name: str, at_least: float) -> None:
    while srv.metric(name) < at_least:  # the watchdog is the test's own timeout, below
        await asyncio.sleep(0.05)


def _rows(path) -> list[dict]:
    return list(csv.DictReader(path.read_text().splitlines()))


STATES = {
    # flags, requests (tokens, streamed), the metric that shows the state, how much of it
    "idle": ((), (), None, 0),
    "bus-waiting": (
        ("--policy", "static", "--max-batch", "8"),
        ((5, True), (5, False)),
        "vllm:num_requests_waiting",
        2,
    ),
    "long-streams": (
        (),
        ((1000, True), (1000, True), (1000, False)),
        "vllm:generation_tokens_total",
        30,
    ),
    "static-long": (
        ("--policy", "static", "--max-batch", "2"),
        ((1000, True), (1000, False)),
        "vllm:generation_tokens_total",
        30,
    ),
}


@pytest.mark.parametrize("state", list(STATES))
def test_a_stop_in_any_state_writes_every_request_and_exits_0(state, tmp_path):
    flags, asks, metric, level = STATES[state]
    record = tmp_path / "class.csv"
    with served("--record", str(record), "--drain-timeout", "1", *flags, tmp=tmp_path) as srv:

        async def main():
            tasks = [asyncio.ensure_future(_ask(srv.url, n, s)) for n, s in asks]
            if metric is not None:
                await _until(srv, metric, level)
            srv.terminate()
            return await asyncio.gather(*tasks)

        answers = asyncio.run(asyncio.wait_for(main(), WATCHDOG_S))
        code, log = srv.stop()
    assert code == 0, log
    assert "Traceback" not in log and "wrote the record" in log, log
    rows = _rows(record)
    assert len(rows) == len(asks)
    assert stat.S_IMODE(record.stat().st_mode) & 0o044, "the record must be readable by the class"
    for (n, _), row, (status, last) in zip(asks, rows, answers):
        if n == 5:  # the bus left with who was aboard when the stop came: served whole
            assert row["rejected"] == "" and row["tokens"] == "5" and status == 200
        else:  # cut at a pass boundary at the drain's end, with the tokens it had and why
            assert row["rejected"].startswith("cut: still running 1 s after"), row
            assert 0 < int(row["tokens"]) < n and row["output_tokens"] == row["tokens"], row
            assert "cut: still running" in last, last  # the client heard why, too
    if rows:  # still a trace batchsim replays (an idle class's record is its header alone)
        assert len(read_trace(record)) == len(rows)


def test_a_record_whose_folder_went_is_written_to_a_named_fallback(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    here = tmp_path / "cwd"
    here.mkdir()
    with served("--record", str(gone / "class.csv"), tmp=tmp_path, cwd=here) as srv:
        assert srv.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 3})[0] == 200
        gone.rmdir()
        code, log = srv.stop()
    assert code == 0, log
    assert "Traceback" not in log, log
    line = next(ln for ln in log.splitlines() if "could not write the record" in ln)
    fallback = line.rsplit("wrote it to ", 1)[1].removesuffix(" instead")
    assert fallback.startswith(str(here)) and fallback.endswith(".csv"), line
    rows = _rows(here / fallback.rsplit("/", 1)[1])
    assert len(rows) == 1 and rows[0]["tokens"] == "3"
