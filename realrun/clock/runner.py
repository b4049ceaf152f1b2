"""The wall-clock server: the simulator's own driver loop, with a real model and a real clock.

``run_real`` is ``batchsim.core.driver.drive``, the very loop ``batchsim.simulate``
runs, handed a ``WallExecutor``: the engine runs each step and ``time.perf_counter``
times it, where the simulator prices it. It replays the workload open-loop (requests
arrive at their times whether or not the server keeps up, like vLLM's serving
benchmark), so the result is a ``RunResult`` that ``batchsim.summarize`` reads unchanged.

- The server's limits are batchsim's ``ServerLimits``: the KV budget and the model's
  context (``n_positions``). The policy enforces them, on both clocks alike: a request
  that can never run is rejected on arrival with the reason, and a padded batch is cut
  so that its longest prompt plus its longest output fit the context.
- Ctrl-C (or running out of GPU memory) stops the run cleanly: what was measured is
  kept, and every request not finished is counted as rejected with the reason, so no
  request is silently lost and the summary still adds up.
- With ``trace=True`` the result keeps each step's decision time, shape and measured
  times (``meta["trace"]``): ``batchsim.sim.ReplayExecutor`` replays them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from batchsim.core.driver import WallExecutor, drive
from batchsim.core.errors import ConfigError, check_int_at_least, show
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import POLICY_NAMES, Policy
from batchsim.core.result import RunResult, result_of
from batchsim.core.step import Step
from batchsim.core.workload import Workload

from .memory import memory_stats, reset_memory_stats

__all__ = [
    "run_real",
    "limits_for",
    "context_reason",
    "cut_at_eos",
    "explain_oom",
    "oom_error_types",
]


def limits_for(lm, kv_budget_tokens: int | None = None) -> ServerLimits:
    """The real server's limits: the KV budget asked for, and the model's context."""
    return ServerLimits(kv_budget_tokens=kv_budget_tokens, context_len=lm.n_positions)


def context_reason(prompt: int, output: int, n_positions: int) -> str | None:
    """Why a request cannot run on a model with ``n_positions`` positions (None if it can)."""
    check_int_at_least("prompt", prompt, 1)
    check_int_at_least("output", output, 1)
    return ServerLimits(context_len=n_positions).context_reason(prompt, output)


def oom_error_types() -> tuple[type, ...]:
    """The out-of-memory errors this torch build raises (CPU and CUDA), to catch as one."""
    import torch

    types = [
        t
        for t in (
            getattr(torch, "OutOfMemoryError", None),
            getattr(torch.cuda, "OutOfMemoryError", None),
        )
        if t
    ]
    return tuple(types)


def explain_oom(error: BaseException, step: Step) -> str:
    """One line on what ran out of memory in ``step``, and what to try."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return (
        f"stopped: CUDA out of memory in a step of {step.batch_size} rows and "
        f"{step.prefill_tokens} prompt tokens ({str(error).splitlines()[0][:120]}); "
        "lower --kv-budget-tokens, --max-seqs or --max-batch"
    )


def _check_run_args(workload, policy, engine) -> None:
    """``run_real``'s three positional arguments, named as ``simulate``'s are
    (``batchsim.sim.arguments``)."""
    if not isinstance(workload, Workload):
        raise ConfigError(
            f"workload must be a Workload (make_workload(...) or trace_workload(...)), got "
            f"{show(workload)}"
        )
    if not isinstance(policy, Policy):
        hint = (
            f"make_policy({policy!r})"
            if isinstance(policy, str) and policy in POLICY_NAMES
            else "make_policy(...)"
        )
        raise ConfigError(f"policy must be a Policy ({hint}), got {show(policy)}")
    if (
        isinstance(engine, (str, bytes, int, float))
        or not hasattr(engine, "lm")
        or not hasattr(engine, "start")
    ):
        raise ConfigError(
            f"engine must be an engine (realrun.engine.engine.Engine(load_model('tiny-gpt2'))), "
            f"got {show(engine)}"
        )


def run_real(
    workload: Workload,
    policy: Policy,
    engine,
    kv_budget_tokens: int | None = None,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    limits: ServerLimits | None = None,
    trace: bool = False,
) -> RunResult:
    """Serve ``workload`` with ``policy`` deciding and ``engine`` executing, on the wall clock."""
    _check_run_args(workload, policy, engine)
    lm = engine.lm
    if limits is None:
        limits = limits_for(lm, kv_budget_tokens)
    engine.start(workload)
    if hasattr(engine, "preallocate"):
        # The engine's KV blocks are the policy's: the same block size, and no more than its budget.
        engine.preallocate(
            policy.max_rows,
            block_size=getattr(policy, "block_size", None),
            kv_budget_tokens=limits.kv_budget_tokens,
        )
    reset_memory_stats(lm)
    executor = WallExecutor(
        engine, clock, sleep, stop_errors=oom_error_types(), explain=explain_oom
    )
    run = drive(
        workload, policy, executor, limits, progress=progress, desc="measuring", trace=trace
    )
    result = result_of(
        run,
        policy,
        f"measured: {lm.name} on {lm.device} ({lm.dtype}, {lm.threads} threads), engine "
        f"{engine.name}",
        limits,
        workload,
        meta={
            "engine": engine.name,
            "model": lm.name,
            "model_source": lm.source,
            "random_weights": lm.random_weights,
            "device": lm.device,
            "dtype": lm.dtype,
            "threads": lm.threads,
            "kv_bytes_per_token": lm.kv_bytes_per_token,
            "kv_peak_bytes_measured": int(getattr(engine, "kv_peak_bytes", 0)),
            **(engine.kv_figures() if hasattr(engine, "kv_figures") else {}),
            **memory_stats(lm),
        },
    )
    if trace:
        result.meta["trace"] = run.trace
        if hasattr(engine, "pass_log"):
            # every pass it ran: planned shape, seconds
            result.meta["passes"] = list(engine.pass_log)
            idle = getattr(engine, "pass_idle", None)
            if idle is not None and len(idle) == len(engine.pass_log):
                # seconds idle before each pass (0: it followed a pass)
                result.meta["pass_idle"] = list(idle)
            rep = getattr(engine, "pass_rep", None)
            if rep is not None and len(rep) == len(engine.pass_log):
                # the repetition of its step each pass ran in (0: the first)
                result.meta["pass_rep"] = list(rep)
    if getattr(engine, "stop_on_eos", False):
        cut_at_eos(result.records, engine, executor.t0)
    return result


def cut_at_eos(records, engine, t0: float) -> None:
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
