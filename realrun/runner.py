"""The wall-clock server: the simulator's loop, with a real model and a real clock.

``run_real`` is ``batchsim.sim.simulator.simulate`` with SimPy's clock swapped for
``time.perf_counter`` and the step-time model swapped for an engine that runs the
step. It replays the workload open-loop (requests arrive at their times whether or not
the server keeps up, like vLLM's serving benchmark), calls the policy with the same
calls in the same order, and feeds a batchsim ``Recorder`` the same way, so the result
is a ``SimResult`` that ``batchsim.core.metrics.summarize`` reads unchanged.

- When the policy says ``Wait(until)``, the runner sleeps until the next arrival or
  ``until``, whichever is first.
- A step with ``repeat=k`` is k real passes. If it is ``interruptible``, the runner
  stops after the first pass that ends once the next request has arrived, exactly
  where the simulator cuts a repeated step.
- A request whose prompt plus output does not fit the model's context is rejected on
  arrival with the reason, before the policy sees it.
- Ctrl-C (or running out of GPU memory) stops the run cleanly: what was measured is
  kept, and every request not finished is counted as rejected with the reason, so no
  request is silently lost and the summary still adds up.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from batchsim.core.policies import Policy
from batchsim.core.records import Recorder
from batchsim.sim.simulator import SimResult
from batchsim.core.step import Wait
from batchsim.core.workload import Workload

from .engine import memory_stats, reset_memory_stats

__all__ = ["run_real", "context_reason"]

# A request counts as arrived this close to its time: after sleeping until an arrival, the clock
# may read a hair short of it (float rounding), and waiting again for 1e-15 s would never end.
_EPS = 1e-9


def context_reason(prompt: int, output: int, n_positions: int) -> str | None:
    """Why a request cannot run on a model with ``n_positions`` positions (None if it can)."""
    # The last output token is never fed back, so positions 0 .. prompt+output-2 are used.
    if prompt + output - 1 > n_positions:
        return (f"prompt of {prompt} tokens + output of {output} exceeds the model's context of "
                f"{n_positions} positions")
    return None


def _oom_error_types() -> tuple[type, ...]:
    import torch

    types = [t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t]
    return tuple(types)


def run_real(
    workload: Workload,
    policy: Policy,
    engine,
    kv_budget_tokens: int | None = None,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> SimResult:
    """Serve ``workload`` with ``policy`` deciding and ``engine`` executing, on the wall clock."""
    rec = Recorder(workload)
    policy.start(kv_budget_tokens)
    engine.start(workload)
    lm = engine.lm
    reset_memory_stats(lm)
    requests, arrivals = workload.requests, workload.arrivals
    n = len(requests)
    nxt = 0
    closed = False
    stopped: str | None = None
    bar = None
    if progress and n:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=f"measuring {policy.name}", unit="req", leave=False)
    oom_types = _oom_error_types()

    t0 = clock()

    def now() -> float:
        return clock() - t0

    def deliver(t: float) -> None:
        """Hand the policy every request that has arrived by t (the simulator's arrival process)."""
        nonlocal nxt, closed
        while nxt < n and arrivals[nxt] <= t + _EPS:
            req = requests[nxt]
            reason = context_reason(req.prompt_tokens, req.output_tokens, lm.n_positions)
            if reason is None:
                reason = policy.on_arrival(req, t)
            if reason is not None:
                rec.reject(req.id, reason)
                if bar is not None:
                    bar.update(1)
            nxt += 1
        if nxt == n and not closed:
            policy.close(t)
            closed = True

    def arrived() -> bool:
        return nxt < n and now() + _EPS >= arrivals[nxt]

    try:
        deliver(0.0)
        while True:
            t = now()
            deliver(t)
            action = policy.next_action(t)
            if isinstance(action, Wait):
                if closed and policy.idle:
                    break
                wake = float(arrivals[nxt]) if nxt < n else math.inf
                if action.until is not None:
                    wake = min(wake, action.until)
                if wake == math.inf:
                    raise RuntimeError(f"{policy.name}: waits with no deadline and no arrival to come, but is not idle")
                delay = wake - now()
                if delay > 0:
                    sleep(delay)
                continue
            step = action
            try:
                t_start, ends_abs = engine.execute(step, arrived if step.interruptible else None)
            except oom_types as e:  # only on a GPU: the step asked for more memory than there is
                import torch

                torch.cuda.empty_cache()
                stopped = (f"stopped: CUDA out of memory in a step of {step.batch_size} rows and "
                           f"{step.prefill_tokens} prompt tokens ({str(e).splitlines()[0][:120]}); "
                           "lower --kv-budget-tokens, --max-seqs or --max-batch")
                break
            ends = np.asarray(ends_abs, dtype=np.float64) - t0
            outcome = policy.on_step_end(step, len(ends), float(ends[-1]))
            engine.release(outcome.finished)
            rec.step(step, t_start - t0, ends, outcome)
            if bar is not None and outcome.finished:
                bar.update(len(outcome.finished))
    except KeyboardInterrupt:
        stopped = "interrupted (Ctrl-C) before it finished"
    finally:
        if bar is not None:
            bar.close()
    if stopped is not None:
        # Keep what was measured; every request not finished is accounted for, with the reason.
        rec.reject_unfinished(stopped, arrived=nxt)
    records = rec.records()
    if getattr(engine, "stop_on_eos", False):
        _cut_at_eos(records, engine, t0)
    meta = {
        "engine": engine.name,
        "model": lm.name,
        "model_source": lm.source,
        "random_weights": lm.random_weights,
        "device": lm.device,
        "dtype": lm.dtype,
        "threads": lm.threads,
        "kv_bytes_per_token": lm.kv_bytes_per_token,
        "kv_peak_bytes_measured": int(getattr(engine, "kv_peak_bytes", 0)),
        "stopped": stopped,
        **memory_stats(lm),
    }
    return SimResult(
        records=records,
        policy=policy.describe(),
        step_time=f"measured: {lm.name} on {lm.device} ({lm.dtype}, {lm.threads} threads), engine {engine.name}",
        kv_budget_tokens=kv_budget_tokens,
        kv_peak_tokens=policy.kv_peak,
        preemptions=policy.preemptions,
        workload=workload.description,
        meta=meta,
    )


def _cut_at_eos(records, engine, t0: float) -> None:
    """--stop-on-eos: a request whose model produced EOS ends there: its tokens count up to and
    including EOS, and it finishes when that token was produced.

    The policy schedules by the workload's lengths (as batchsim does), so the row keeps its
    place and its compute until the policy ends it; what changes is what the user received
    and when it was complete. (A random-weight model rarely produces EOS; a real one does.)
    """
    for rid, k in engine.eos_at.items():
        if records.tokens[rid] > k and not np.isnan(records.finish[rid]) and rid in engine.eos_time:
            t = engine.eos_time[rid] - t0
            records.tokens[rid] = k
            records.finish[rid] = t
            records.last_token[rid] = t
