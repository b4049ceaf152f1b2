"""What the fast path buys: the textbook server against ``batchsim.simulate``, on one workload.

The same workloads, knobs and step time as ``bench/sim_speed.py`` (Poisson arrivals at the
issue's loads, prompts uniform 32..512, outputs lognormal mean 128, the default linear step
time, max_seqs 64), each policy run by ``batchsim.textbook.simulate`` (plain Python, a decision
every pass) and by ``batchsim.simulate`` (the fast path), in turns, ``--repeat`` times each;
medians, and the host's yardstick (``bench/host.py``) before and after, since only figures
measured side by side on one host compare. Both must finish the same requests at the same
times (``tests/test_textbook.py`` holds every record equal): the script checks the makespan.

    python bench/textbook_speed.py [--requests 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from host import yardstick  # noqa: E402 - bench/ is the script's own folder
from sim_speed import ISSUE_LOADS, SETTINGS, workload  # noqa: E402

from batchsim import make_policy, simulate, summarize, textbook
from batchsim.cli.options import DEFAULT_STEP_TIME


def timed(run) -> tuple[float, dict]:
    t = time.perf_counter()
    res = run()
    return time.perf_counter() - t, summarize(res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.requests < 1 or args.repeat < 1:
        print("--requests and --repeat must be at least 1", file=sys.stderr)
        return 2
    sticks = [yardstick()]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {args.requests:,} requests per policy, median of "
        f"{args.repeat}; {DEFAULT_STEP_TIME!r}"
    )
    head = f"{'policy':<11}{'rate/s':>7}{'passes':>11}{'textbook s':>12}{'fast s':>8}{'faster':>8}"
    print(head + "\n" + "-" * len(head))
    for name, rate in ISSUE_LOADS.items():
        wl = workload(rate, args.requests)
        book, fast = [], []
        for _ in range(args.repeat):  # in turns: a neighbour's load falls on both alike
            t, a = timed(
                lambda wl=wl, name=name: textbook.simulate(wl, name, DEFAULT_STEP_TIME, **SETTINGS)
            )
            book.append(t)
            t, b = timed(
                lambda wl=wl, name=name: simulate(
                    wl, make_policy(name, **SETTINGS), DEFAULT_STEP_TIME
                )
            )
            fast.append(t)
            if a["duration"] != b["duration"] or a["completed"] != b["completed"]:
                raise SystemExit(f"{name}: the textbook and the fast path disagree")
        tb, fs = statistics.median(book), statistics.median(fast)
        print(f"{name:<11}{rate:>7.2f}{a['steps']:>11,}{tb:>12.3f}{fs:>8.3f}{tb / fs:>7.1f}x")
    sticks.append(yardstick())
    print(
        f"yardstick (10M-iteration Python loop, bench/host.py): {sticks[0]:.3f} s before, "
        f"{sticks[1]:.3f} s after; load average at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
