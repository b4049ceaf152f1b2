"""A fleet on the wall clock: several engines in one process, taking turns, behind batchsim's router.

``run_real_fleet`` is ``batchsim.core.driver.drive`` with one policy and one
``WallExecutor`` per engine and a router: the loop that simulates a fleet, on the wall
clock. All engines share the one model loaded (each keeps its own KV cache) and the
one device, so they take turns: while one runs a step the others wait, and every step
starts when the process is free. What it shows is the router and each server's
records on real passes, not the speed of N GPUs: a real fleet runs its servers at
once, so its latencies are the simulator's, not these (``batchsim run --replicas N``).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import Policy
from batchsim.core.records import Recorder, SimResult
from batchsim.core.router import Router
from batchsim.core.workload import Workload
from batchsim.sim.simulator import result_of

from .engine import memory_stats, reset_memory_stats
from .runner import _cut_at_eos, _explain_oom, _oom_error_types, limits_for

__all__ = ["run_real_fleet", "TAKING_TURNS"]

TAKING_TURNS = ("{n} engines in one process take turns on one {device}: each step waits for the others', so "
                "latencies here are those of one device shared, not of {n} GPUs (batchsim run --replicas {n} "
                "simulates those); the routing and each server's records are real")


def run_real_fleet(
    workload: Workload,
    policies: Sequence[Policy],
    engines: Sequence,
    router: Router,
    kv_budget_tokens: int | None = None,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    limits: ServerLimits | None = None,
) -> SimResult:
    """Serve ``workload`` with one policy per engine, ``router`` choosing, on the wall clock."""
    n = len(engines)
    lm = engines[0].lm
    if limits is None:
        limits = limits_for(lm, kv_budget_tokens)
    for e in engines:
        e.start(workload)
    reset_memory_stats(lm)
    t0 = clock()
    executors = [WallExecutor(e, clock, sleep, stop_errors=_oom_error_types(), explain=_explain_oom, t0=t0)
                 for e in engines]
    run = drive(workload, list(policies), executors, limits, progress=progress, desc="measuring", router=router,
                recorder=Recorder(workload, replicas=n))
    result = result_of(
        run, list(policies), f"measured: {lm.name} on {lm.device} ({lm.dtype}, {lm.threads} threads), "
        f"{n} engines {engines[0].name} taking turns", limits, workload,
        meta={"engine": engines[0].name, "model": lm.name, "device": lm.device, "dtype": lm.dtype, "threads": lm.threads,
              "taking_turns": TAKING_TURNS.format(n=n, device=lm.device), **memory_stats(lm)},
        router=router,
    )
    for e in engines:
        if getattr(e, "stop_on_eos", False):
            _cut_at_eos(result.records, e, t0)
    return result
