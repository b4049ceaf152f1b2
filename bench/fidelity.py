"""Fidelity: does the calibrated simulator predict the real server?

For two workload shapes, profile the real engine (a grid fitted to the shape), fit
batchsim's LinearStepTime, then for each of the four policies run the identical
Poisson workload twice, simulated and measured, and compare:

    targets: request throughput within 10 %, p50 E2E latency within 15 %

Shapes (tiny-gpt2 on the CPU; both scaled down to run in a few minutes):

    poisson-70   prompts uniform 16..128, outputs uniform 16..96; static/dynamic batches of 8,
                 continuous up to 32 rows
    mixed        batchsim's mixed-lengths shape: prompts uniform 32..512, outputs uniform
                 5..500; static/dynamic batches of 16 (the scenario's 32, halved so that a
                 CPU run sees several batches), max_wait 0.5 s; continuous up to 64 rows

The load is Poisson at the rate where the simulator has the server busy 70 % of the
time under that policy (each policy its own rate: busy but stable), and each policy is
predicted with the fit of its family (``realrun.profile.FAMILIES``). Each run lasts
about --seconds of arrivals (mixed: 2.5 times as long, its requests are long). Every
figure is printed, misses included, with the machine's load average: on a shared machine other processes stretch measured steps.

    python bench/fidelity.py [--seconds 12] [--threads N] [--only poisson-70|mixed]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from batchsim import Poisson, make_policy, make_workload, simulate, summarize
from batchsim.core.lengths import Uniform
from batchsim.core.workload import Workload
from realrun.engine import Engine
from realrun.model import load_model
from realrun.profile import grid_for_workload, profile
from realrun.runner import run_real

SHAPES = {
    "poisson-70": {
        "prompt": Uniform(16, 128), "output": Uniform(16, 96), "seconds": 1.0,
        "policies": {"taxi": {}, "static": {"max_batch": 8}, "dynamic": {"max_batch": 8, "max_wait": 0.05},
                     "continuous": {"max_seqs": 32, "max_batched_tokens": 1024}},
    },
    "mixed": {
        "prompt": Uniform(32, 512), "output": Uniform(5, 500), "seconds": 2.5,
        "policies": {"taxi": {}, "static": {"max_batch": 16}, "dynamic": {"max_batch": 16, "max_wait": 0.5},
                     "continuous": {"max_seqs": 64, "max_batched_tokens": 2048}},
    },
}
LOAD = 0.7


def rate_for_load(policy_name, kw, shape, step_time, seed, load=LOAD) -> float:
    """The Poisson rate at which the simulated server is busy ``load`` of the time (bisection).

    Utilisation, not a share of peak throughput: a dynamic batcher at 70 % of its full-batch
    throughput forms small batches and is busy nearly all the time.
    """
    sample = make_workload(Poisson(1.0), shape["prompt"], shape["output"], n=200, seed=seed)

    def busy(rate: float) -> float:
        wl = Workload.from_arrays(sample.arrivals / rate, sample.prompt_tokens, sample.output_tokens, "probe")
        return summarize(simulate(wl, make_policy(policy_name, **kw), step_time))["busy_fraction"]

    lo, hi = 1e-3, 1.0
    while busy(hi) < load and hi < 1e4:
        lo, hi = hi, hi * 2
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if busy(mid) < load else (lo, mid)
    return (lo * hi) ** 0.5


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=12.0, help="seconds of arrivals per run")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--only", default=None, choices=list(SHAPES))
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    lm = load_model("tiny-gpt2", device="cpu", threads=args.threads)
    engine = Engine(lm)
    print(f"model: {lm.describe()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    t_all = time.perf_counter()
    verdicts = []
    for name, shape in SHAPES.items():
        if args.only and name != args.only:
            continue
        pols = shape["policies"]
        sample = make_workload(Poisson(1.0), shape["prompt"], shape["output"], n=300, seed=args.seed)
        rows = max(make_policy(k, **kw).max_rows for k, kw in pols.items())
        max_prefill = max(kw.get("max_batched_tokens", 0) for kw in pols.values())
        grid = grid_for_workload(sample, rows, max(max_prefill, rows * 128), repeats=5, rounds=2)
        prof = profile(engine, grid)
        print()
        print(f"== {name}: prompts {shape['prompt']!r}, outputs {shape['output']!r}")
        print(f"profile: {prof.text()}")
        print("each policy is predicted with its family's fit")
        head = (f"{'policy':11s} {'rate/s':>6s} {'n':>4s} | {'req/s pred':>10s} {'meas':>7s} {'err':>6s} | "
                f"{'p50 E2E pred':>12s} {'meas':>7s} {'err':>6s} | {'mean TTFT pred':>14s} {'meas':>7s} | {'busy pred':>9s} {'meas':>5s} {'load':>5s} | verdict")
        print(head)
        print("-" * len(head))
        for pol, kw in pols.items():
            model = prof.model_for(pol)
            rate = rate_for_load(pol, kw, shape, model, args.seed)
            n = int(np.clip(rate * args.seconds * shape["seconds"], 24, 600))
            wl = make_workload(Poisson(rate), shape["prompt"], shape["output"], n=n, seed=args.seed + 1)
            sim = summarize(simulate(wl, make_policy(pol, **kw), model))
            real = summarize(run_real(wl, make_policy(pol, **kw), engine))
            e_tp = (sim["request_throughput"] - real["request_throughput"]) / real["request_throughput"] * 100
            e_p50 = (sim["p50_e2e"] - real["p50_e2e"]) / real["p50_e2e"] * 100
            ok = abs(e_tp) <= 10 and abs(e_p50) <= 15
            verdicts.append((name, pol, ok))
            print(f"{pol:11s} {rate:6.2f} {n:4d} | {sim['request_throughput']:10.2f} {real['request_throughput']:7.2f} {e_tp:+5.1f}% | "
                  f"{sim['p50_e2e']:11.3f}s {real['p50_e2e']:6.3f}s {e_p50:+5.1f}% | {sim['mean_ttft'] * 1e3:12.0f}ms {real['mean_ttft'] * 1e3:5.0f}ms | "
                  f"{sim['busy_fraction']:9.0%} {real['busy_fraction']:5.0%} {os.getloadavg()[0]:5.2f} | {'met' if ok else 'MISSED'}"
                  f"{'' if abs(e_tp) <= 10 else ' (throughput)'}{'' if abs(e_p50) <= 15 else ' (p50 E2E)'}")
    print()
    met = sum(ok for *_, ok in verdicts)
    print(f"{met} of {len(verdicts)} policy x shape pairs within both targets; "
          f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; total {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
