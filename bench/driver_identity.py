"""Fingerprints of ~2,000 runs, to hold a change of the driver to the same results, to the last
float.

Every policy (and the vllm-v1 flavour) on four workloads (two dyadic, Poisson, gamma), three KV
budgets and three step-time models; fleets of 2 and 3 behind every router; summary-only runs;
the wall clock on a fake clock (one server and fleets) and the replay of its trace; and the JSON
of nine scenarios through the CLI. Each run's records are hashed (every request array, the step
log, rejections, KV peak, preemptions).

    python bench/driver_identity.py OUT.json                 # write the fingerprints
    python bench/driver_identity.py OUT.json --against A.json  # and count those that differ from A

Run it on the tree before a change and after (a git worktree of the old commit), and compare.
It measured the SimPy driver against the plain loop it replaced: 1,961 of 1,961 identical.
"""

import hashlib
import json
import subprocess
import sys

import numpy as np

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fakes import FakeClock, PricedEngine, wall_run

from batchsim import (
    Gamma,
    LinearStepTime,
    LogNormal,
    Poisson,
    Uniform,
    Workload,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.cli.options import DEFAULT_STEP_TIME
from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import ServerLimits
from batchsim.core.recorder import Recorder
from batchsim.core.router import make_router
from batchsim.sim.simulator import ReplayExecutor, result_of

ARR = (
    "arrival",
    "start",
    "first_token",
    "finish",
    "last_token",
    "tokens",
    "preemptions",
    "itl_max",
)


def digest(res):
    h = hashlib.sha256()
    r = res.records
    for k in ARR:
        h.update(np.ascontiguousarray(getattr(r, k)).tobytes())
    if getattr(r, "replica", None) is not None:
        h.update(np.asarray(r.replica).tobytes())
    h.update(repr(r.rejected).encode())
    for k in sorted(r.steps):
        h.update(k.encode())
        h.update(np.ascontiguousarray(r.steps[k]).tobytes())
    h.update(repr((res.kv_peak_tokens, res.preemptions)).encode())
    return h.hexdigest()[:16]


def sdigest(s):
    return hashlib.sha256(repr(sorted((k, repr(v)) for k, v in s.items())).encode()).hexdigest()[
        :16
    ]


DY = LinearStepTime(c0=2**-7, c1=2**-14, c2=2**-11, c3=2**-18, plan="grouped")
NOISY = LinearStepTime(c0=0.0123, c1=3.1e-5, c2=4.4e-4, c3=1.7e-6, plan="grouped")


def dyadic(n, rate, seed):
    wl = make_workload(Poisson(rate), Uniform(4, 90), Uniform(1, 40), n=n, seed=seed)
    return Workload.from_arrays(
        np.round(wl.arrivals * 1024) / 1024, wl.prompt_tokens, wl.output_tokens, "dyadic"
    )


POL = [
    ("taxi", {}),
    ("static", {"max_batch": 4}),
    ("dynamic", {"max_batch": 4, "max_wait": 0.03}),
    ("continuous", {"max_seqs": 6, "chunked_prefill": False}),
    ("continuous", {"max_seqs": 6, "max_batched_tokens": 24, "block_size": 4}),
    ("continuous", {"max_seqs": 8, "max_batched_tokens": 48, "block_size": 4}),
    (
        "continuous",
        {"max_seqs": 8, "max_batched_tokens": 48, "block_size": 4, "scheduler": "vllm-v1"},
    ),
    ("continuous", {"max_seqs": 64, "scheduler": "vllm-v1"}),
]
out = {}
wls = {
    "dy": dyadic(200, 12.0, 3),
    "dy-heavy": dyadic(300, 40.0, 4),
    "po": make_workload(Poisson(6.0), Uniform(32, 512), LogNormal(128, 96), n=400, seed=1),
    "gam": make_workload(Gamma(20.0, 4.0), Uniform(8, 200), Uniform(1, 60), n=300, seed=2),
}
for wname, wl in wls.items():
    for i, (name, kw) in enumerate(POL):
        for kv in (None, 160, 2000):
            for st_name, st in (("dy", DY), ("noisy", NOISY), ("default", DEFAULT_STEP_TIME)):
                lim = ServerLimits(kv_budget_tokens=kv, context_len=1024)
                key = f"sim/{wname}/{name}{i}/kv{kv}/{st_name}"
                try:
                    res = simulate(wl, make_policy(name, **kw), st, limits=lim)
                    out[key] = digest(res)
                except Exception as e:
                    out[key] = f"error {type(e).__name__}: {e}"
                if st_name != "default" and kv != 2000:
                    for reps in (2, 3):
                        for router in ("round-robin", "least-loaded", "least-kv", "random"):
                            k2 = f"fleet{reps}/{router}/{wname}/{name}{i}/kv{kv}/{st_name}"
                            try:
                                res = simulate(
                                    wl,
                                    make_policy(name, **kw),
                                    st,
                                    limits=lim,
                                    replicas=reps,
                                    router=router,
                                    router_seed=7,
                                )
                                out[k2] = digest(res)
                            except Exception as e:
                                out[k2] = f"error {type(e).__name__}: {e}"
                if st_name != "default" and kv is None:
                    for reps in (1, 3):
                        try:
                            s = summarize(
                                simulate(
                                    wl,
                                    make_policy(name, **kw),
                                    st,
                                    limits=lim,
                                    replicas=reps,
                                    records="summary",
                                )
                            )
                            out[f"summary{reps}/{wname}/{name}{i}/{st_name}"] = sdigest(s)
                        except Exception as e:
                            out[f"summary{reps}/{wname}/{name}{i}/{st_name}"] = (
                                f"error {type(e).__name__}: {e}"
                            )
                if st_name != "default":
                    try:
                        w = wall_run(wl, make_policy(name, **kw), st, lim, trace=True)
                        out[f"wall/{wname}/{name}{i}/kv{kv}/{st_name}"] = digest(w)
                        rp = make_policy(name, **kw)
                        run = drive(wl, rp, ReplayExecutor(w.meta["trace"]), lim)
                        rr = result_of(run, rp, "replay", lim, wl)
                        out[f"replay/{wname}/{name}{i}/kv{kv}/{st_name}"] = digest(rr)
                    except Exception as e:
                        out[f"wall/{wname}/{name}{i}/kv{kv}/{st_name}"] = (
                            f"error {type(e).__name__}: {e}"
                        )
                    if kv is None:
                        for reps in (2, 3):
                            clock = FakeClock()
                            engines = [PricedEngine(clock, st) for _ in range(reps)]
                            pols = [make_policy(name, **kw) for _ in range(reps)]
                            run = drive(
                                wl,
                                pols,
                                [WallExecutor(e, clock, clock.sleep, t0=0.0) for e in engines],
                                lim,
                                router=make_router("least-loaded"),
                                recorder=Recorder(wl, replicas=reps),
                            )
                            out[f"wallfleet{reps}/{wname}/{name}{i}/{st_name}"] = digest(
                                result_of(run, pols, "f", lim, wl)
                            )
# the scenarios through the CLI
for sc in [
    "taxi-vs-bus",
    "laundromat",
    "rush-hour",
    "mixed-lengths",
    "chat-vs-offline",
    "memory-wall",
    "cost-10x",
    "batch-size-sweep",
    "fleet",
]:
    p = subprocess.run(
        [sys.executable, "-m", "batchsim", "run", sc, "--json", "--no-plots"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    out[f"cli/{sc}"] = (
        hashlib.sha256((p.stdout + str(p.returncode)).encode()).hexdigest()[:16]
        + f" rc{p.returncode}"
    )
json.dump(out, open(sys.argv[1], "w"), indent=0, sort_keys=True)
print(
    len(out), "fingerprints;", sum(1 for v in out.values() if str(v).startswith("error")), "errors"
)
if len(sys.argv) > 3 and sys.argv[2] == "--against":
    ref = json.load(open(sys.argv[3]))
    diff = sorted(k for k in ref if ref[k] != out.get(k))
    print(
        f"{len(ref) - len(diff)} of {len(ref)} identical"
        + (": differ: " + ", ".join(diff[:20]) if diff else "")
    )
