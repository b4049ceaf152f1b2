"""Fidelity: does the calibrated simulator predict the real server, on every load shape?

For each load shape: profile the real engine on a grid fitted to the shape (batchsim's
``ProfiledStepTime``), then for each of the four policies run one workload twice,
simulated and measured, side by side in this one process, and compare:

    targets at 50-85 % busy: p50 E2E within 10 %, p99 E2E within 20 %, p50 TTFT within
    15 %, mean TPOT within 10 %; and throughput within 5 % in a saturated run per policy.

Shapes (tiny-gpt2 on the CPU, one thread):

    short      Poisson; prompts uniform 16..128, outputs uniform 16..96
    mixed      Poisson; prompts uniform 32..512, outputs uniform 5..300
    bursty     gamma arrivals, CV 3; prompts uniform 16..256, outputs lognormal mean 64, median 48
    long       Poisson; prompts uniform 400..900, outputs uniform 8..48
    trace      the Azure LLM inference trace 2023 (conversation), its arrivals and lengths
               scaled by a quarter to fit tiny-gpt2's 1,024 positions (skipped without the file)

Each measured run's load is set by the simulator: the arrival rate at which the simulated
server is busy ``--load`` of the time (70 % by default) under that policy; the measured busy
fraction is printed beside it, so a run outside 50-85 % shows. The saturated run offers
three times the rate that keeps the server fully busy. Every figure is printed, misses
included, with the machine's load average and the profile's drift, and the worst case is
decomposed (``realrun.decompose``). ``--spread`` measures each busy run a second time and
prints how far apart the two measurements are: the floor under any error on this machine.

    python bench/fidelity.py [--seconds 10] [--only short,long] [--load 0.7] [--no-saturation] [--spread]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from batchsim import Gamma, LogNormal, Poisson, Uniform, make_policy, make_workload, simulate, summarize
from batchsim.core.workload import Workload
from realrun.compare import error_pct
from realrun.decompose import decompose, format_decomposition
from realrun.drift import load_warning, recheck, speed_check
from realrun.engine import Engine
from realrun.grid import grid_for_workload
from realrun.model import load_model
from realrun.profile import profile
from realrun.runner import limits_for, run_real

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "azure_llm_2023_conv.csv"
POLICIES = {"taxi": {}, "static": {"max_batch": 8}, "dynamic": {"max_batch": 8, "max_wait": 0.05},
            "continuous": {"max_seqs": 32, "max_batched_tokens": 1024}}
SHAPES = {
    "short": (Poisson(1.0), Uniform(16, 128), Uniform(16, 96)),
    "mixed": (Poisson(1.0), Uniform(32, 512), Uniform(5, 300)),
    "bursty": (Gamma(1.0, 3.0), Uniform(16, 256), LogNormal(64, 48)),
    "long": (Poisson(1.0), Uniform(400, 900), Uniform(8, 48)),
    "trace": None,
}
#: (summary key, target %, label)
TARGETS = (("p50_e2e", 10, "p50 E2E"), ("p99_e2e", 20, "p99 E2E"), ("p50_ttft", 15, "p50 TTFT"), ("mean_tpot", 10, "TPOT"))


def unit_workload(name: str, n: int, seed: int) -> Workload | None:
    """The shape at one arrival per second (scaled to a rate later); None if its data is missing."""
    if name != "trace":
        arrival, prompt, output = SHAPES[name]
        return make_workload(arrival, prompt, output, n=n, seed=seed)
    if not TRACE.is_file():
        return None
    from batchsim.core.traces import read_trace

    t = read_trace(str(TRACE))
    k = min(n, len(t.arrival_s))
    start = int(np.random.default_rng(seed).integers(0, len(t.arrival_s) - k))
    a = t.arrival_s[start:start + k] - t.arrival_s[start]
    a = a / max(a[-1], 1e-9) * (k - 1)  # one per second on average, the trace's own burstiness kept
    prompts = np.clip(t.prompt_tokens[start:start + k] // 4, 1, 900)
    outputs = np.clip(t.output_tokens[start:start + k] // 4, 1, 1024 - 1 - prompts)
    return Workload.from_arrays(a, prompts, outputs, f"Azure conv trace rows {start}..{start + k}, lengths / 4")


def scaled(wl: Workload, rate: float) -> Workload:
    return Workload.from_arrays(wl.arrivals / rate, wl.prompt_tokens, wl.output_tokens, f"{wl.description} at {rate:.2f}/s")


def rate_for_busy(wl: Workload, policy: str, model, limits, busy: float) -> float:
    """The rate at which the simulated server is busy ``busy`` of the time (bisection on a log scale)."""
    def frac(rate: float) -> float:
        return summarize(simulate(scaled(wl, rate), make_policy(policy, **POLICIES[policy]), model, limits=limits))["busy_fraction"]

    lo, hi = 1e-2, 1.0
    while frac(hi) < busy and hi < 1e4:
        lo, hi = hi, hi * 2
    for _ in range(18):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if frac(mid) < busy else (lo, mid)
    return (lo * hi) ** 0.5


def capacity(wl: Workload, policy: str, model, limits, n: int = 300) -> float:
    """Requests per second the simulated server completes when everyone is already waiting."""
    burst = Workload.from_arrays(np.zeros(n), wl.prompt_tokens[:n], wl.output_tokens[:n], "burst")
    return summarize(simulate(burst, make_policy(policy, **POLICIES[policy]), model, limits=limits))["request_throughput"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of arrivals per measured run (default 10)")
    p.add_argument("--load", type=float, default=0.7, help="simulated busy fraction to run at (default 0.7)")
    p.add_argument("--only", default=None, help="comma-separated shapes")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--no-saturation", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--explain", action="store_true", help="print every run's error decomposition, not only the worst")
    p.add_argument("--spread", action="store_true", help="measure each busy run twice and print how far the second "
                   "measurement is from the first: an error inside that spread is the machine's, not the model's")
    p.add_argument("--no-speed-check", action="store_true", help="predict with the profile as measured, not scaled to "
                   "the machine's speed just before each run")
    args = p.parse_args(argv)
    shapes = args.only.split(",") if args.only else list(SHAPES)
    policies = args.policies.split(",")
    lm = load_model("tiny-gpt2", device="cpu", threads=args.threads)
    engine = Engine(lm)
    limits = limits_for(lm)
    print(f"model: {lm.describe()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    t_all = time.perf_counter()
    rows, worst = [], None
    spreads: list[float] = []  # --spread: the largest run-to-run difference of each busy run
    for name in shapes:
        unit = unit_workload(name, 2000, args.seed)
        if unit is None:
            print(f"\n== {name}: skipped ({TRACE} not found)")
            continue
        pols = {k: make_policy(k, **POLICIES[k]) for k in policies}
        chunk = min((q.max_batched_tokens for q in pols.values() if getattr(q, "chunked_prefill", False)), default=None)
        p_max = int(unit.prompt_tokens.max())
        max_prefill = max([getattr(q, "max_batched_tokens", 0) for q in pols.values()] +
                          [q.max_rows * p_max for q in pols.values() if not hasattr(q, "max_batched_tokens")])
        grid = grid_for_workload(unit, max(q.max_rows for q in pols.values()), max_prefill, chunk,
                                 policies=tuple(pols), rounds=2)
        prof = profile(engine, grid, policies=pols)
        model = prof.model
        print(f"\n== {name}: {unit.description}")
        print(prof.text())
        for pol in policies:
            runs = [("busy", args.load)] + ([] if args.no_saturation else [("saturated", None)])
            for kind, busy in runs:
                if busy is not None:
                    rate = rate_for_busy(unit, pol, model, limits, busy)
                    n = int(np.clip(rate * args.seconds, 60, 600))
                else:
                    rate = 3 * capacity(unit, pol, model, limits)
                    n = int(np.clip(rate * args.seconds / 3, 60, 400))
                wl = scaled(Workload(unit.requests[:n], unit.description), rate)
                now = model if args.no_speed_check else speed_check(engine, model)[0]
                sim = simulate(wl, make_policy(pol, **POLICIES[pol]), now, limits=limits)
                real = run_real(wl, make_policy(pol, **POLICIES[pol]), engine, limits=limits, trace=True)
                s, m = summarize(sim), summarize(real)
                errs = {k: error_pct(s[k], m[k]) for k, *_ in TARGETS} if kind == "busy" else {}
                tp = error_pct(s["request_throughput"], m["request_throughput"]) if kind == "saturated" else None
                ok = all(e is not None and abs(e) <= t for (k, t, _), e in zip(TARGETS, errs.values())) if errs else abs(tp) <= 5
                row = (name, pol, kind, rate, n, s["busy_fraction"], m["busy_fraction"], errs, tp, ok)
                rows.append(row)
                score = max([abs(e) / t for (k, t, _), e in zip(TARGETS, errs.values()) if e is not None] or [abs(tp or 0) / 5])
                dec = decompose(wl, make_policy(pol, **POLICIES[pol]), real, now, limits)
                if worst is None or score > worst[0]:
                    worst = (score, row, dec)
                print(_line(row), flush=True)
                if args.spread and kind == "busy":
                    again = summarize(run_real(wl, make_policy(pol, **POLICIES[pol]), engine, limits=limits))
                    spreads.append(max(abs(error_pct(again[k], m[k])) for k, *_ in TARGETS))
                    print("  run-to-run, second measurement against the first: " + ", ".join(
                        f"{lab} {error_pct(again[k], m[k]):+.1f}%" for k, _, lab in TARGETS), flush=True)
                if args.explain:
                    print("\n".join(format_decomposition(f"{name} {pol} {kind}", dec)))
        print(recheck(engine, model).text())
        if (w := load_warning(lm.threads)):
            print(w)
    print("\n== all runs: error = (predicted - measured) / measured, % (targets: "
          + ", ".join(f"{lab} {t} %" for _, t, lab in TARGETS) + ", saturated throughput 5 %)")
    print(_head())
    for row in rows:
        print(_line(row))
    met = sum(r[-1] for r in rows)
    print(f"\n{met} of {len(rows)} runs within every target; load average at end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; total {time.perf_counter() - t_all:.0f} s")
    if spreads:
        print(f"run-to-run spread (--spread), the largest per busy run: median {np.median(spreads):.1f} %, "
              f"worst {max(spreads):.1f} %: errors of that size cannot be told from the machine's own noise")
    if worst is not None:
        _, row, dec = worst
        print(f"\nworst case: {row[0]} / {row[1]} ({row[2]})")
        print("\n".join(format_decomposition(f"{row[0]} {row[1]}", dec)))
    return 0


def _head() -> str:
    return (f"{'shape':7s} {'policy':11s} {'run':9s} {'rate/s':>7s} {'n':>4s} {'busy sim':>8s} {'real':>5s} | "
            + " ".join(f"{lab:>9s}" for _, _, lab in TARGETS) + f" {'req/s':>7s} | verdict")


def _line(row) -> str:
    name, pol, kind, rate, n, bs, bm, errs, tp, ok = row
    cells = " ".join(f"{errs[k]:+8.1f}%" if errs.get(k) is not None else f"{'-':>9s}" for k, *_ in TARGETS)
    t = f"{tp:+6.1f}%" if tp is not None else f"{'-':>7s}"
    return f"{name:7s} {pol:11s} {kind:9s} {rate:7.2f} {n:4d} {bs:8.0%} {bm:5.0%} | {cells} {t} | {'met' if ok else 'MISSED'}"


if __name__ == "__main__":
    sys.exit(main())
