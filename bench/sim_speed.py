"""How fast the simulator runs: simulated requests per wall-clock second, and peak memory.

For each policy, a 10,000-request Poisson workload (prompts uniform 32..512, outputs
lognormal mean 128 / median 96, the package defaults) on the default linear step time.
A slider stays live only if this takes well under a second per policy.

Two loads, because no single arrival rate is both stable and busy for every policy (a
taxi serves about 0.8 requests/s on this server, a continuous batch of 64 about 40):

- common: 0.5 requests/s for everyone, so all four are stable (the taxi at ~65 % busy);
- busy: each policy at 70 % of its own saturation throughput, measured first by an
  overloaded 2,000-request run (not timed), so each runs the batches it was made for.

Time is the best of ``--repeat`` runs (the machine's noise only ever adds); peak memory is
tracemalloc's peak during one separate run (tracemalloc slows Python, so it is not timed).

    python bench/sim_speed.py [--requests 10000] [--repeat 3] [--profile continuous]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import sys
import time
import tracemalloc

import numpy as np

from batchsim import LogNormal, Poisson, Uniform, make_policy, make_workload, simulate, summarize
from batchsim.cli.options import DEFAULT_STEP_TIME
from batchsim.core.policies import POLICY_NAMES

PROMPT, OUTPUT = Uniform(32, 512), LogNormal(128, 96)
SETTINGS = dict(max_batch=8, max_wait=0.05, max_seqs=64, max_batched_tokens=2048)


def policy(name):
    return make_policy(name, **SETTINGS)


def saturation_throughput(name: str, seed: int) -> float:
    """Completions per second of an overloaded run, over its middle 60 % of completions."""
    wl = make_workload(Poisson(1000.0), PROMPT, OUTPUT, n=2000, seed=seed)
    res = simulate(wl, policy(name), DEFAULT_STEP_TIME)
    fin = np.sort(res.records.finish)
    lo, hi = fin[len(fin) // 5], fin[4 * len(fin) // 5]
    return float(np.count_nonzero((fin > lo) & (fin <= hi)) / (hi - lo))


def measure(name: str, rate: float, n: int, repeat: int, seed: int) -> dict:
    t = time.perf_counter()
    wl = make_workload(Poisson(rate), PROMPT, OUTPUT, n=n, seed=seed)
    t_workload = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        res = simulate(wl, policy(name), DEFAULT_STEP_TIME)
        best = min(best, time.perf_counter() - t)
    s = summarize(res)
    tracemalloc.start()
    simulate(wl, policy(name), DEFAULT_STEP_TIME)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "policy": name, "rate": rate, "busy": s["busy_fraction"], "batch": s["mean_batch_size"],
        "wait": s["mean_queue_wait"], "steps": s["steps"], "events": len(res.records.steps["start"]),
        "wall": best, "req_per_s": n / best, "peak_mb": peak / 2**20, "workload_s": t_workload,
    }


def table(rows: list[dict]) -> str:
    head = f"{'policy':<11}{'rate/s':>8}{'busy':>6}{'batch':>7}{'wait s':>8}{'steps':>9}{'events':>8}{'wall s':>8}{'sim req/s':>11}{'peak MB':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['policy']:<11}{r['rate']:>8.2f}{r['busy']:>6.0%}{r['batch']:>7.1f}{r['wait']:>8.2f}{r['steps']:>9}"
            f"{r['events']:>8}{r['wall']:>8.3f}{r['req_per_s']:>11,.0f}{r['peak_mb']:>9.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=POLICY_NAMES, default=None, help="cProfile one policy's busy run and print the top functions")
    args = ap.parse_args(argv)
    n = args.requests
    print(f"{n} requests, Poisson; prompts {PROMPT!r}, outputs {OUTPUT!r}; {DEFAULT_STEP_TIME!r}; {SETTINGS}")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; wall = best of {args.repeat}\n")

    print("common load (0.5 req/s: every policy stable)")
    print(table([measure(p, 0.5, n, args.repeat, args.seed) for p in POLICY_NAMES]))

    sat = {p: saturation_throughput(p, args.seed) for p in POLICY_NAMES}
    print("\nbusy load (70 % of each policy's saturation throughput: " + ", ".join(f"{p} {v:.2f}/s" for p, v in sat.items()) + ")")
    busy = [measure(p, 0.7 * sat[p], n, args.repeat, args.seed) for p in POLICY_NAMES]
    print(table(busy))
    print(f"\nworkload generation ({n} requests): {busy[0]['workload_s']:.3f} s;"
          f" process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")

    if args.profile:
        wl = make_workload(Poisson(0.7 * sat[args.profile]), PROMPT, OUTPUT, n=n, seed=args.seed)
        prof = cProfile.Profile()
        prof.enable()
        simulate(wl, policy(args.profile), DEFAULT_STEP_TIME)
        prof.disable()
        print(f"\nprofile of {args.profile} (busy load), top 15 by own time:")
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
