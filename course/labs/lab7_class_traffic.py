"""Lab 7: the class is the traffic. Predict what the room measured, then the other policy.

In class the teacher runs one server and every student is a client (on a GPU machine: step 6 of
``course/gpu-lab.md``):

    teacher:  python -m realrun serve --policy static --max-batch 8 --host 0.0.0.0 --port 8000 \
                  --record r1.csv --api-key CLASSKEY --max-queue-per-client 4
    each of you, your own rate (0.2 to 1 request per second) and your seat number as the seed:
              python -m realrun load --url http://TEACHER:8000 --api-key CLASSKEY --rate 0.5 \
                  --requests 12 --seed 7
    teacher, when the room is done: Ctrl-C (the last bus leaves with who is aboard), then the same
              with --policy continuous --record r2.csv, and the room sends again.

``r1.csv`` is a trace (arrival, prompt and output tokens of every request, the room's) and,
in the columns after those, what the server measured for each (``start_s``,
``first_token_s``, ``finish_s``, ``tokens``, ``rejected``, and ``client``, a short id of the
laptop that sent it, the same as on the dashboard: whose requests waited); ``r1.csv.json`` beside it
says what served it (model, machine, ``policy`` and ``policy_knobs``, ``context_len``). Since the
record is a trace, batchsim can replay the very arrivals the room made.
``python -m realrun predict r1.csv`` does Parts A and B at once, on the machine that served (every
metric predicted against measured, with a verdict); Part C's what-if, another policy on the same
arrivals, it does not: that is yours. ``python -m batchsim run --trace r1.csv`` replays the arrivals
on batchsim's default simulated GPU, not on the machine that served the room: a what-if on other
hardware, not a prediction of the room. At home, ``solo()`` below is the room: one server and four
clients on this machine (``python course/labs/lab7_class_traffic.py static r1.csv``).

The lab's checks use two records shipped in ``course/labs/data/``: four clients at 0.25
requests per second each, 12 requests apiece, on tiny-gpt2 and a 2-core CPU, served with
``static`` (max_batch 8) and then ``continuous``; and the step-time calibration of that
machine (``python -m realrun profile``).

Part A. ``measured_ttft(record)``: the time to first token, in seconds, of every request in
the record that finished (an empty ``rejected`` and a ``finish_s``), in the record's order:
``first_token_s - arrival_s``, read from the CSV yourself (``csv`` or ``numpy``).

Part B. ``predict_p50_ttft(record, calibration)``: batchsim's prediction of the record's
median TTFT: replay its arrivals (``batchsim.read_trace`` reads the first three columns;
``batchsim.trace_workload`` turns them into a workload) through the policy the sidecar
names, with its knobs (``batchsim.make_policy``), on steps timed by the calibration
(``batchsim.load_step_time``), within the model's ``context_len``
(``batchsim.core.limits.ServerLimits``, passed to ``simulate`` as ``limits``); return
``summarize(...)["p50_ttft"]``. ``sidecar(record)`` reads the sidecar for you.

Part C. ``what_if(record, calibration, policy, knobs)``: the same arrivals, the same machine,
another policy: the p50 TTFT the room would have had. Then set ``LOWER_P90_TTFT`` to the
policy ("static" or "continuous") that gave the room the lower *measured* p90 TTFT, and
``PREDICTED_THE_SAME`` to whether batchsim's predictions rank the two the same way.

Part D. ``GAP``: in your own words, at least three sentences: for the continuous record, how
far batchsim's p50 TTFT and its mean TPOT are from the measured ones, in which direction, and why;
and why the static record's TTFT agrees although its steps were slow too. The record's own
columns tell you where a request's time went (``start_s - arrival_s`` is its wait in the queue,
``first_token_s - start_s`` its prefill, the rest its decode): split the measured and the simulated
TTFT the same way (``simulate(...).records`` has ``arrival``, ``start`` and ``first_token``) and say
which part the simulator gets right and which it misses. What did the machine and the room do
that the profiled steps leave out? (``python -m realrun predict`` prints every metric with a
verdict, and ``--out`` draws the TTFT's distribution, predicted against measured.)

Check your work:  pytest course/labs -k lab7
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
STATIC_RECORD = DATA / "class-static.csv"
CONTINUOUS_RECORD = DATA / "class-continuous.csv"
CALIBRATION = DATA / "class-calibration-tiny-gpt2-cpu.json"


def sidecar(record) -> dict:
    """What served the record: ``RECORD.json``, written beside it by ``realrun serve --record``."""
    return json.loads(Path(str(record) + ".json").read_text())


def measured_ttft(record):
    """Part A: TTFT (s) of every finished request, from the record's own columns."""
    # --- your code here ---
    raise NotImplementedError("your code here: measured_ttft")


def predict_p50_ttft(record, calibration) -> float:
    """Part B: batchsim's p50 TTFT for the record's arrivals, under the policy that served them."""
    # --- your code here ---
    raise NotImplementedError("your code here: predict_p50_ttft")


def what_if(record, calibration, policy: str, knobs: dict) -> float:
    """Part C: the p50 TTFT the record's arrivals would have had under ``policy`` with ``knobs``."""
    # --- your code here ---
    raise NotImplementedError("your code here: what_if")


# Part C: "static" or "continuous", and True or False.
LOWER_P90_TTFT = "your code here"
PREDICTED_THE_SAME = "your code here"

# Part D: the gap, in your own words.
GAP = "your code here"


# -- at home: the room on one machine (not checked) ----------------------------------------------


def solo(
    policy: str = "static",
    record: str = "r1.csv",
    students: int = 4,
    rate: float = 0.25,
    requests: int = 12,
    port: int = 8000,
    max_batch: int = 8,
    model: str = "tiny-gpt2",
    dry_run: bool = False,
):
    """One server and ``students`` load generators on 127.0.0.1, each with its own seed; the server
    is stopped when they are done (or, for a bus still waiting for company, a little after the last
    arrival: the drain sends it). Returns the record's path; ``dry_run`` returns the commands
    instead.

        python course/labs/lab7_class_traffic.py static r1.csv        # then: continuous r2.csv
        python -m realrun predict r1.csv
    """
    py, url = sys.executable, f"http://127.0.0.1:{port}"
    knobs = ["--max-batch", str(max_batch)] if policy in ("static", "dynamic") else []
    serve = [
        py,
        "-m",
        "realrun",
        "serve",
        "--model",
        model,
        "--policy",
        policy,
        *knobs,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--record",
        str(record),
        "--client-by",
        "key",
    ]
    # On one machine every client has the same address, so each "student" sends a key of its own,
    # and the record's ``client`` column tells the four apart (in a room their laptops' addresses do
    # that).
    loads = [
        [
            py,
            "-m",
            "realrun",
            "load",
            "--url",
            url,
            "--rate",
            f"{rate:g}",
            "--requests",
            str(requests),
            "--seed",
            str(k + 1),
            "--api-key",
            f"student-{k + 1}",
            "--no-progress",
        ]
        for k in range(students)
    ]
    if dry_run:
        return [serve, *loads]
    server = subprocess.Popen(serve)
    clients: list[subprocess.Popen] = []
    try:
        _wait_until_up(url, server)
        clients = [subprocess.Popen(c) for c in loads]
        # Poisson spans vary; clients start slowly
        deadline = time.monotonic() + 2 * requests / rate + 30.0
        while time.monotonic() < deadline and any(c.poll() is None for c in clients):
            time.sleep(0.2)
    finally:
        server.terminate()  # SIGTERM: a drain; what runs finishes, then the record is written
        server.wait(timeout=120)
        for c in clients:
            c.wait(timeout=60)
    return Path(record)


def _wait_until_up(url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    """Poll ``/v1/models`` until the server answers (the model loads first)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            raise RuntimeError(
                f"the server stopped before it was up (exit code {server.returncode})"
            )
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the server at {url} did not answer within {timeout:g} s")


if __name__ == "__main__":  # python course/labs/lab7_class_traffic.py POLICY RECORD [PORT]
    solo(
        sys.argv[1] if len(sys.argv) > 1 else "static",
        sys.argv[2] if len(sys.argv) > 2 else "r1.csv",
        port=int(sys.argv[3]) if len(sys.argv) > 3 else 8000,
    )
