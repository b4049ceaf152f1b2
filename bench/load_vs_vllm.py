"""`realrun load` against our server and against `vllm serve`: the same model, the same load, side
by side.

Both servers serve tiny-gpt2 (the same seeded weights: ours builds them, vLLM loads the folder
``save_served_model`` writes, tokenizer included) on this machine's CPU: ours with one torch
thread, continuous batching at its defaults (max_seqs 32, 1024 tokens a step), vLLM with
max_num_seqs 32, eager, no prefix caching, one core for its model (it binds one and reserves the
other on 2 cores). Each round sends the same workload (Poisson arrivals, fixed lengths, seeded
by the round) to each server, in alternating order, with ``realrun load`` (``run_load``); the
table gives the median over rounds and, after ±, half the range between rounds. A host
yardstick (a fixed pure-Python loop) and the load average are printed first, since hosts differ.
Both servers stay up for the whole run, so one is idle while the other is measured.

    .venv-vllm/bin/python bench/load_vs_vllm.py                 # 40 requests at 4/s, 3 rounds
    .venv-vllm/bin/python bench/load_vs_vllm.py --rate 8 --requests 80 --output 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from host import yardstick  # noqa: E402 - bench/ is the script's own folder
from serving import served  # noqa: E402

from batchsim.core.arrivals import Poisson  # noqa: E402
from batchsim.core.lengths import Fixed  # noqa: E402
from batchsim.core.workload import make_workload  # noqa: E402

ROWS = [("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E", "e2el")]


def _cell(values: list[float], fmt: str = "8.1f") -> str:
    m = statistics.median(values)
    return f"{m:{fmt}} ±{(max(values) - min(values)) / 2:{fmt.replace('8', '6')}}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rate", type=float, default=4.0, help="Poisson arrivals per second (default 4)"
    )
    ap.add_argument("--requests", type=int, default=40, help="requests per run (default 40)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    ap.add_argument("--output", type=int, default=32, help="output tokens (default 32)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="runs per server, interleaved (default 3)"
    )
    args = ap.parse_args(argv)
    from realrun.classroom.load import run_load
    from realrun.reference.vllm.http_server import vllm_served
    from realrun.reference.vllm.tokenizer import save_served_model

    print(
        f"host yardstick: 10M-iteration Python loop {yardstick():.2f} s; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = save_served_model("tiny-gpt2", tmp / "tiny-gpt2-seed0")
        with (
            vllm_served(folder, log=tmp / "vllm.log") as vllm,
            served("--threads", "1", tmp=tmp) as ours,
        ):
            print(f"vllm serve answered /health after {vllm.startup_s:.0f} s")
            servers = {"ours": ours.url, "vllm": vllm.url}
            warm = make_workload(
                Poisson(args.rate), Fixed(args.prompt), Fixed(args.output), n=4, seed=999
            )
            for url in servers.values():
                # one-off costs (first passes, allocations) before anything is timed
                run_load(url, warm)
            runs: dict[str, list[dict]] = {k: [] for k in servers}
            for r in range(args.rounds):
                wl = make_workload(
                    Poisson(args.rate),
                    Fixed(args.prompt),
                    Fixed(args.output),
                    n=args.requests,
                    seed=r,
                )
                for name in list(servers) if r % 2 == 0 else list(servers)[::-1]:
                    runs[name].append(run_load(servers[name], wl).summary())
            print(
                f"workload: {args.requests} requests, Poisson {args.rate:g}/s, prompt "
                f"{args.prompt}, output {args.output} tokens; {args.rounds} rounds; load average "
                f"now {os.getloadavg()[0]:.2f}"
            )
            print(
                f"{'(ms, median of rounds ± half range)':<36}{'ours':>18}{'vllm serve':>18}"
                f"{'vllm/ours':>11}"
            )
            for label, key in ROWS:
                for q in ("median", "p90", "p99"):
                    f = f"{q}_{key}_ms"
                    a, b = ([x[f] for x in runs[n]] for n in servers)
                    print(
                        f"{label + ' ' + ('p50' if q == 'median' else q):<36}"
                        f"{_cell(a):>18}{_cell(b):>18}"
                        f"{statistics.median(b) / statistics.median(a):>10.2f}x"
                    )
            for label, f in (
                ("requests/s", "request_throughput"),
                ("output tokens/s", "output_throughput"),
            ):
                a, b = ([x[f] for x in runs[n]] for n in servers)
                print(
                    f"{label:<36}{_cell(a):>18}{_cell(b):>18}"
                    f"{statistics.median(b) / statistics.median(a):>10.2f}x"
                )
            failed = {n: sum(x["failed"] for x in runs[n]) for n in servers}
            print(f"failed requests: ours {failed['ours']}, vllm {failed['vllm']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
