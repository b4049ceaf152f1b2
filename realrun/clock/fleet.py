"""A fleet on the wall clock: several engines in one process, taking turns, behind batchsim's
router.

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
from collections.abc import Callable, Sequence

from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import Policy
from batchsim.core.recorder import Recorder
from batchsim.core.result import RunResult, result_of
from batchsim.core.router import Router
from batchsim.core.workload import Workload

from .memory import memory_stats, reset_memory_stats
from .runner import cut_at_eos, explain_oom, limits_for, oom_error_types

__all__ = ["run_real_fleet", "check_fleet_memory", "TAKING_TURNS", "ENGINE_BYTES_PER_WEIGHT_BYTE"]

#: An engine's memory over its model's weights: a packed copy for oneDNN on the CPU plus warm-up
#: buffers (measured: 50 MB an engine of tiny-gpt2, whose weights are 14 MB; 2-core VM, 2026).
ENGINE_BYTES_PER_WEIGHT_BYTE = 4.0

TAKING_TURNS = (
    "{n} engines in one process take turns on one {device}: each step waits for the others', so "
    "latencies here are those of one device shared, not of {n} GPUs (batchsim run --replicas {n} "
    "simulates those); the routing and each server's records are real"
)


def check_fleet_memory(lm, replicas: int, memory: float | None = None) -> None:
    """Refuse, before the first engine is built, a fleet whose engines would not fit in this
    machine's memory."""
    from batchsim.core.errors import ConfigError
    from batchsim.core.sizing import OVERRIDE_FLAG, machine_memory

    memory = machine_memory() if memory is None else memory
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    each = ENGINE_BYTES_PER_WEIGHT_BYTE * weights
    if memory is not None and replicas * each > 0.8 * memory:
        most = max(1, int(0.8 * memory // each))
        raise ConfigError(
            f"replicas {replicas}: {replicas:,} engines of {lm.name} need about "
            f"{replicas * each / 1e9:,.1f} GB (each keeps its own packed copy of the weights, "
            f"about {each / 1e6:,.0f} MB), more than this machine's {memory / 1e9:,.0f} GB; lower "
            f"--replicas (at most {most} here), or pass {OVERRIDE_FLAG}"
        )


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
) -> RunResult:
    """Serve ``workload`` with one policy per engine, ``router`` choosing, on the wall clock."""
    n = len(engines)
    lm = engines[0].lm
    if limits is None:
        limits = limits_for(lm, kv_budget_tokens)
    for e in engines:
        e.start(workload)
    reset_memory_stats(lm)
    t0 = clock()
    executors = [
        WallExecutor(e, clock, sleep, stop_errors=oom_error_types(), explain=explain_oom, t0=t0)
        for e in engines
    ]
    run = drive(
        workload,
        list(policies),
        executors,
        limits,
        progress=progress,
        desc="measuring",
        router=router,
        recorder=Recorder(workload, replicas=n),
    )
    result = result_of(
        run,
        list(policies),
        f"measured: {lm.name} on {lm.device} ({lm.dtype}, {lm.threads} threads), {n} engines "
        f"{engines[0].name} taking turns",
        limits,
        workload,
        meta={
            "engine": engines[0].name,
            "model": lm.name,
            "device": lm.device,
            "dtype": lm.dtype,
            "threads": lm.threads,
            "taking_turns": TAKING_TURNS.format(n=n, device=lm.device),
            **memory_stats(lm),
        },
        router=router,
    )
    for e in engines:
        if getattr(e, "stop_on_eos", False):
            cut_at_eos(result.records, e, t0)
    return result
