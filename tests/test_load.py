"""``realrun load`` against a fake OpenAI-compatible server whose delays are known.

The fake server (Starlette on uvicorn, in a thread of this process, on a free port) streams
``max_tokens`` tokens: the first after ``first`` seconds, each later one ``gap`` seconds after
the one before. It runs on this process's clock, so what it saw (when each request came in,
with what body) is compared with what the client measured and with the workload's arrival
times: open loop means request k is sent at its arrival, not after request k-1 has finished.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request as HTTPRequest  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402
from watched import Watched  # noqa: E402

from batchsim.core.config import WorkloadConfig  # noqa: E402
from realrun.classroom.load import LoadConfig, LoadReport, prompt_for, run_load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The names `vllm bench serve --save-result --save-detailed` writes (vllm/benchmarks/serve.py, 0.x):
VLLM_FIELDS = [
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "errors",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
]
VLLM_STATS = [
    f"{k}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for k in ("mean", "median", "std", "p99")
]


class Fake:
    """The fake server's knobs and what it saw."""

    def __init__(self) -> None:
        self.reset()

    def reset(
        self,
        first: float = 0.02,
        gap: float = 0.005,
        per_chunk: int = 1,
        usage: bool = True,
        fail: int | None = None,
        fail_every: int = 1,
        models: tuple[str, ...] = ("fake-model",),
        hold_until: int = 0,
        key: str | None = None,
    ) -> None:
        self.key = (
            key  # when set, as `realrun serve --api-key`: a 401 without "Authorization: Bearer KEY"
        )
        self.auths: list[str | None] = []
        self.first, self.gap, self.per_chunk, self.usage = first, gap, per_chunk, usage
        self.hold_until = hold_until  # no answer starts before this many requests came
        self.fail, self.fail_every, self.models = fail, fail_every, models
        self.bodies: list[dict] = []
        self.received: list[float] = []
        self.gets = 0

    def _refused(self, request: HTTPRequest):
        self.auths.append(request.headers.get("authorization"))
        if self.key is not None and self.auths[-1] != f"Bearer {self.key}":
            return JSONResponse(
                {"error": {"message": "missing or wrong API key", "code": 401}}, status_code=401
            )
        return None

    async def list_models(self, request: HTTPRequest):
        self.gets += 1
        if (no := self._refused(request)) is not None:
            return no
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        )

    async def complete(self, request: HTTPRequest):
        self.received.append(time.perf_counter())
        if (no := self._refused(request)) is not None:
            return no
        body = await request.json()
        k = len(self.bodies)
        self.bodies.append(body)
        if self.fail is not None and k % self.fail_every == 0:
            return JSONResponse(
                {"error": {"message": f"no room for request {k}", "type": "x", "code": self.fail}},
                status_code=self.fail,
            )
        chat = request.url.path.endswith("/chat/completions")
        return StreamingResponse(
            self._stream(int(body["max_tokens"]), chat), media_type="text/event-stream"
        )

    async def _stream(self, n: int, chat: bool):
        def event(obj) -> str:
            return f"data: {json.dumps(obj)}\n\n"

        if chat:  # as vLLM and OpenAI open a chat stream: the role, no token yet
            yield event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        while len(self.bodies) < self.hold_until:
            await asyncio.sleep(0.005)
        await asyncio.sleep(self.first)
        sent = 0
        while sent < n:
            if sent:
                await asyncio.sleep(self.gap)
            m = min(self.per_chunk, n - sent)
            sent += m
            choice = (
                {"index": 0, "delta": {"content": "ab" * m}}
                if chat
                else {"index": 0, "text": "ab" * m}
            )
            choice["finish_reason"] = "length" if sent == n else None
            yield event({"choices": [choice]})
        if self.usage:
            yield event(
                {
                    "choices": [],
                    "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n},
                }
            )
        yield "data: [DONE]\n\n"


@pytest.fixture(scope="module")
def server():
    fake = Fake()
    app = Starlette(
        routes=[
            Route("/v1/models", fake.list_models),
            Route("/v1/completions", fake.complete, methods=["POST"]),
            Route("/v1/chat/completions", fake.complete, methods=["POST"]),
        ]
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", http="h11")
    )
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # a watchdog against a hang; the fake starts in well under a second
    deadline = time.monotonic() + 600
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.started, "the fake server did not start"
    fake.url = f"http://127.0.0.1:{port}"
    yield fake
    srv.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def fake(server):
    server.reset()
    return server


def workload(n=10, rate=50.0, prompt=16, output=8, arrival="constant"):
    return WorkloadConfig(
        arrival=arrival, rate=rate, requests=n, prompt_len=prompt, output_len=output
    ).build()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(argv: list[str]) -> int:
    """realrun's own entry point (a stand-in for `serve` until its command exists: not this
    test's)."""
    import importlib.util
    import types

    from realrun.cli import main

    if importlib.util.find_spec("realrun.cli.serve") is None:
        stub = types.ModuleType("realrun.cli.serve")
        stub.add_parser = lambda sub: None
        sys.modules["realrun.cli.serve"] = stub
        try:
            return main(argv)
        finally:
            del sys.modules["realrun.cli.serve"]
    return main(argv)


# -- what is measured --------------------------------------------------------------------------


def test_timings_match_the_servers_delays(fake):
    wl = workload(n=10, output=8)
    rep = run_load(fake.url, wl, seed=3)
    assert (rep.completed, rep.failed) == (10, 0)
    assert [r.output_tokens for r in rep.results] == [8] * 10
    for r in rep.results:
        assert len(r.itl) == 7
        assert r.latency == pytest.approx(r.ttft + sum(r.itl), abs=1e-9)
        assert r.tpot == pytest.approx((r.latency - r.ttft) / 7)
    med = {k: float(np.median(v)) for k, v in rep.samples().items()}
    # The server sleeps 20 ms before the first token and 5 ms between tokens; the client's own
    # overhead (a local connection, asyncio's timer, a busy 2-core machine) adds some ms, never
    # takes any away. A TTFT taken at the stream's end would be past 55 ms.
    assert 0.020 <= med["ttft"] <= 0.050, med
    assert 0.005 <= med["itl"] <= 0.015, med
    assert 0.055 <= med["e2el"] <= 0.120, med
    assert 0.005 <= med["tpot"] <= 0.015, med
    # Each body asks for what the workload says, as vllm bench does: token ids, exact length, no EOS
    # stop.
    for body in fake.bodies:
        assert body["model"] == "fake-model"
        assert body["max_tokens"] == 8 and body["ignore_eos"] is True and body["temperature"] == 0
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert len(body["prompt"]) == 16 and all(
            isinstance(i, int) and 0 <= i < 256 for i in body["prompt"]
        )


def test_prompts_are_seeded_by_request_and_match_the_real_engines():
    from realrun.engine.inputs import prompt_ids

    wl = workload(n=3, prompt=24)
    for req in wl.requests:
        assert prompt_for(req, 7, chat=False) == prompt_ids(req, 50257, None, 7)
    a, b = (prompt_for(wl.request(i), 7, chat=False) for i in (0, 1))
    assert a != b and prompt_for(wl.request(0), 8, chat=False) != a
    assert len(prompt_for(wl.request(0), 7, chat=True).split()) == 24


@pytest.mark.parametrize("usage, expected_tokens", [(True, 8), (False, 3)])
def test_a_chunk_of_several_tokens_is_counted_from_usage(fake, usage, expected_tokens):
    fake.reset(per_chunk=3, usage=usage)
    rep = run_load(fake.url, workload(n=3, output=8))
    assert [r.output_tokens for r in rep.results] == [
        expected_tokens
    ] * 3  # without usage: one per chunk
    # 3 chunks, 2 gaps: an ITL is a gap between chunks
    assert all(len(r.itl) == 2 for r in rep.results)


def test_chat_role_chunk_is_not_the_first_token(fake):
    fake.reset(first=0.03)
    rep = run_load(
        LoadConfig(url=fake.url + "/v1/", endpoint="/v1/chat/completions"), workload(n=3, output=4)
    )
    assert rep.completed == 3 and all(r.output_tokens == 4 for r in rep.results)
    assert min(r.ttft for r in rep.results) >= 0.03
    body = fake.bodies[0]
    assert body["max_completion_tokens"] == 4 and len(body["messages"][0]["content"].split()) == 16


def test_arrivals_are_open_loop(fake):
    # No answer starts until all six requests have come: a client that waited for an answer before
    # sending the next (closed loop) would never get one. Nothing here depends on the machine's
    # speed.
    fake.reset(first=0.05, gap=0.01, hold_until=6)
    wl = workload(n=6, rate=20.0, output=4)
    rep = run_load(fake.url, wl)
    assert rep.completed == 6 and len(fake.received) == 6
    # none sent before its arrival time
    assert all(r.start >= r.arrival - 1e-6 for r in rep.results)
    assert [r.arrival for r in rep.results] == sorted(r.arrival for r in rep.results)


def test_max_concurrency_makes_arrivals_wait_on_the_client(fake):
    fake.reset(first=0.1, gap=0.01)
    rep = run_load(fake.url, workload(n=3, rate=100.0, output=3), max_concurrency=1)
    assert rep.completed == 3
    assert np.all(np.diff(fake.received) >= 0.11)  # one at a time: each after the last one's answer
    assert rep.results[2].start - rep.results[2].arrival >= 0.2


@pytest.mark.parametrize("status", [400, 503])
def test_http_errors_are_failed_requests_with_their_message(fake, status):
    fake.reset(fail=status, fail_every=2)
    rep = run_load(fake.url, workload(n=6))
    assert (rep.completed, rep.failed) == (3, 3)
    bad = [r for r in rep.results if not r.success]
    assert all(
        r.status == status and r.error.startswith(f"HTTP {status}: no room for request")
        for r in bad
    )
    s = rep.summary()
    assert s["output_lens"].count(0) == 3 and s["total_output_tokens"] == 3 * 8
    assert sum(e != "" for e in s["errors"]) == 3


def test_a_request_past_its_timeout_fails(fake):
    fake.reset(first=1.0)
    rep = run_load(fake.url, workload(n=2, output=2), timeout=0.2)
    assert rep.failed == 2 and all("timed out after 0.2 s" in r.error for r in rep.results)


# -- the command line ---------------------------------------------------------------------------


def test_json_has_vllms_names_and_consistent_numbers(fake, tmp_path, capsys):
    out = tmp_path / "load.json"
    rc = cli(
        [
            "load",
            "--url",
            fake.url,
            "--requests",
            "8",
            "--rate",
            "40",
            "--arrival",
            "gamma:2",
            "--prompt-len",
            "16",
            "--output-len",
            "uniform:4,12",
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "completed / failed      8 / 0" in text and "TTFT" in text
    d = json.loads(out.read_text())
    missing = [k for k in VLLM_FIELDS + VLLM_STATS if k not in d]
    assert not missing
    assert d["num_prompts"] == 8 and d["completed"] + d["failed"] == 8
    assert d["request_rate"] == 40 and d["burstiness"] == pytest.approx(0.25)
    assert sorted(d["output_lens"]) == sorted(b["max_tokens"] for b in fake.bodies)
    assert d["total_output_tokens"] == sum(d["output_lens"])
    assert d["total_input_tokens"] == sum(d["input_lens"]) == 8 * 16
    assert d["output_throughput"] == pytest.approx(d["total_output_tokens"] / d["duration"])
    assert d["request_throughput"] == pytest.approx(8 / d["duration"])
    assert d["mean_ttft_ms"] == pytest.approx(1000 * np.mean(d["ttfts"]))
    assert d["mean_itl_ms"] == pytest.approx(1000 * np.mean([g for r in d["itls"] for g in r]))
    assert d["mean_e2el_ms"] == pytest.approx(1000 * np.mean(d["latencies"]))
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert d[f"median_{m}_ms"] <= d[f"p90_{m}_ms"] <= d[f"p99_{m}_ms"] <= d[f"max_{m}_ms"]


def test_a_trace_brings_its_own_arrivals_and_lengths(fake, tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,5,3\n0.05,7,2\n0.1,9,4\n")
    out = tmp_path / "t.json"
    assert (
        cli(["load", "--url", fake.url, "--trace", str(trace), "--json", str(out), "--no-progress"])
        == 0
    )
    d = json.loads(out.read_text())
    assert d["output_lens"] == [3, 2, 4] and d["request_rate"] == "trace"
    assert sorted(len(b["prompt"]) for b in fake.bodies) == [5, 7, 9]
    assert "Trace(" in capsys.readouterr().out


def test_the_field_names_are_vllms_own():
    """Hold the literal names above against vLLM's source, where vLLM is installed (`make test-vllm`
    runs this test in vLLM's venv). Not read from .venv-vllm/ by path: `make test` builds that venv
    while the main tests run, and a file half unpacked would fail for nothing."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed here (make test-vllm runs this check in its venv)")
    src = Path(next(iter(spec.submodule_search_locations))) / "benchmarks" / "serve.py"
    text = src.read_text()
    assert [k for k in VLLM_FIELDS if f'"{k}"' not in text] == []
    assert all(f'f"{k}_{{metric_attribute_name}}_ms"' in text for k in ("mean", "median", "std"))
    assert 'f"p{p_word}_{metric_attribute_name}_ms"' in text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--url", "notaurl"], ["url", "'notaurl'"]),
        (["--rate", "-1"], ["rate", "-1"]),
        (["--max-concurrency", "0"], ["max_concurrency", "0"]),
        (["--timeout", "nan"], ["timeout", "nan"]),
        (["--endpoint", "/v1/embeddings"], ["endpoint", "'/v1/embeddings'"]),
        (["--requests", "4", "--duration", "2"], ["--requests", "--duration"]),
        (["--json", "/no/such/folder/x.json"], ["json", "/no/such/folder", "does not exist"]),
        (["--api-key", " "], ["api_key"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_request(fake, capsys, argv, words):
    base = ([] if "--url" in argv else ["--url", fake.url]) + (
        [] if "--requests" in argv else ["--requests", "4"]
    )
    rc = cli(["load", *base, *argv])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert all(w in err for w in words), err
    assert fake.bodies == [] and fake.gets == 0


def test_an_unreachable_server_is_named(capsys):
    port = free_port()
    rc = cli(["load", "--url", f"http://127.0.0.1:{port}", "--requests", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert (
        err.strip()
        == f"realrun load: error: cannot connect to http://127.0.0.1:{port}: connection refused"
    )


def test_a_server_that_lists_no_model_asks_for_one(fake, capsys):
    fake.reset(models=())
    assert cli(["load", "--url", fake.url, "--requests", "2"]) == 2
    assert "give --model NAME" in capsys.readouterr().err and fake.bodies == []
    assert (
        cli(
            [
                "load",
                "--url",
                fake.url,
                "--requests",
                "2",
                "--rate",
                "50",
                "--model",
                "mine",
                "--no-progress",
            ]
        )
        == 0
    )
    assert {b["model"] for b in fake.bodies} == {"mine"}


def test_a_server_that_wants_a_key_is_asked_with_it(fake, capsys):
    fake.reset(key="class-key")
    # Without the key: one line naming the flag, before any request leaves (not a table of 401s).
    assert cli(["load", "--url", fake.url, "--requests", "2"]) == 2
    err = capsys.readouterr().err
    assert (
        len(err.strip().splitlines()) == 1
        and "401" in err
        and "--api-key" in err
        and fake.bodies == []
    )
    # the probe checks it too
    assert cli(["load", "--url", fake.url, "--requests", "2", "--model", "m"]) == 2
    assert "--api-key" in capsys.readouterr().err and fake.bodies == []
    fake.reset(key="class-key")
    assert (
        cli(
            [
                "load",
                "--url",
                fake.url,
                "--requests",
                "3",
                "--rate",
                "50",
                "--api-key",
                "class-key",
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(fake.bodies) == 3 and set(fake.auths) == {"Bearer class-key"}


def test_every_request_failing_exits_1(fake, capsys):
    fake.reset(fail=503)
    assert cli(["load", "--url", fake.url, "--requests", "3", "--rate", "50", "--no-progress"]) == 1
    assert "HTTP 503: no room for request" in capsys.readouterr().out


_SCRIPT = """
import importlib.util, sys, types
# until `serve` exists: not this test's command
if importlib.util.find_spec("realrun.cli.serve") is None:
    stub = types.ModuleType("realrun.cli.serve"); stub.add_parser = lambda sub: None
    sys.modules["realrun.cli.serve"] = stub
{body}
"""


def test_ctrl_c_prints_what_was_measured_and_exits_130(fake, tmp_path):
    fake.reset(first=0.01, gap=0.01)
    body = "from realrun.cli import main; sys.exit(main(sys.argv[1:]))"
    w = Watched(
        [
            "-c",
            _SCRIPT.format(body=body),
            "load",
            "--url",
            fake.url,
            "--requests",
            "200",
            "--rate",
            "20",
            "--arrival",
            "constant",
            "--output-len",
            "4",
            "--progress",
        ],
        ROOT,
        module=False,
    )
    # five answered, as the client's own bar counts them; the 200th is 10 s away
    w.wait_for_count(200, 5)
    code, out, err = w.interrupt()
    assert code == 130, err
    assert "interrupted" in out and "completed / failed" in out and "Traceback" not in err
    done = int(out.split("completed / failed")[1].split("/")[0])
    assert 5 <= done < 200
    assert "interrupted (Ctrl-C)" in err


def test_help_needs_no_httpx(monkeypatch, capsys):
    """`python -m realrun --help` builds every subcommand's parser: this one must not need httpx."""
    import argparse
    import importlib

    import realrun.classroom.load
    import realrun.cli.load

    # the fresh import rebinds it
    monkeypatch.setattr(realrun.classroom, "load", realrun.classroom.load)
    monkeypatch.setattr(realrun.cli, "load", realrun.cli.load)
    # `import httpx` now fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "httpx", None)
    for name in [
        m
        for m in sys.modules
        if m in ("realrun.classroom.load", "realrun.cli.load")
        or m.startswith("realrun.classroom.load.")
    ]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh below; restored after the test
    fresh = importlib.import_module("realrun.cli.load")
    p = argparse.ArgumentParser(prog="realrun")
    fresh.add_parser(p.add_subparsers())
    with pytest.raises(SystemExit) as e:
        p.parse_args(["load", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--max-concurrency" in text and "--arrival" in text and "--json FILE" in text
    # Each workload flag's help gives the default load actually sends: realrun's, not the
    # simulator's.
    from realrun.cli.run_setup import REALRUN_DEFAULTS as d

    words = " ".join(text.split())
    for flag, value in (
        ("--rate RATE", f"{d['rate']:g}"),
        ("--requests REQUESTS", d["requests"]),
        ("--prompt-len PROMPT_LEN", d["prompt_len"]),
        ("--output-len OUTPUT_LEN", d["output_len"]),
    ):
        help_of = words.rsplit(flag, 1)[1].split(" --", 1)[0]
        assert f"(default {value})" in help_of, (flag, help_of)


def test_report_refuses_results_out_of_order():
    with pytest.raises(ValueError, match="id order"):
        LoadReport(
            url="u",
            endpoint="/v1/completions",
            model="m",
            workload="w",
            requests=2,
            duration=1.0,
            results=tuple(run_result(i) for i in (1, 0)),
        )


def run_result(i: int):
    from realrun.classroom.load import RequestResult

    return RequestResult(
        id=i,
        arrival=0.0,
        start=0.0,
        prompt_len=1,
        max_tokens=1,
        success=True,
        output_tokens=1,
        ttft=0.01,
        latency=0.01,
    )
