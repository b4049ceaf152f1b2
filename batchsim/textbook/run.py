"""``simulate``: a workload through a policy on the textbook server, and the records it leaves.

It takes what ``batchsim.simulate`` takes (a ``Workload``, a step-time model, the server's
limits) and returns what that returns (a ``RunResult`` holding ``Records``), so ``summarize``
and every plot read either. The policy is a name and its knobs, as ``make_policy`` takes them
(``simulate(wl, "static", st, max_batch=4)``), or a policy of this package (``Static(4)``).
``processes=[f]`` adds processes of your own, each ``f(env, servers)`` a generator function
(``servers``: the one ``Server``); the run ends when the server has served everyone.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict

import numpy as np

from ..core.driver import check_processes
from ..core.errors import ConfigError, show
from ..core.knobs import DEFAULTS, KNOBS, POLICY_NAMES, READS
from ..core.limits import ServerLimits
from ..core.records import STEP_FIELDS, Records
from ..core.result import RunResult
from ..core.workload import Workload
from ..sim.stepmodel import StepTimeModel
from .continuous import Continuous
from .padded import Dynamic, Static, Taxi
from .request import Request
from .server import Clock, Server

POLICIES = {"taxi": Taxi, "static": Static, "dynamic": Dynamic, "continuous": Continuous}


def make_policy(name: str, **knobs):
    """A policy by name, with the knobs it reads (the others' are left to them), each given or
    at its default (``batchsim.core.knobs``, which checks each and names the one that is wrong)."""
    if name not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {show(name)}")
    for k in knobs:
        if k not in DEFAULTS:
            raise ConfigError(f"{k} is not a policy knob (the knobs are {', '.join(DEFAULTS)})")
    if knobs.get("scheduler") not in (None, "batchsim"):
        raise ConfigError(
            f"scheduler must be batchsim (the textbook's only scheduler), got "
            f"{show(knobs['scheduler'])}"
        )
    mine = {k: v for k, v in knobs.items() if k in READS[name] and v is not None}
    chosen = asdict(KNOBS[name](**mine))
    chosen.pop("scheduler", None)
    return POLICIES[name](**chosen)


def simulate(
    workload: Workload,
    policy,
    step_time: StepTimeModel,
    kv_budget_tokens: int | None = None,
    limits: ServerLimits | None = None,
    processes: Sequence[Callable] = (),
    **knobs,
) -> RunResult:
    """Run ``workload`` through ``policy`` on a server whose passes take ``step_time``."""
    if not isinstance(workload, Workload):
        raise ConfigError(f"workload must be a Workload (make_workload(...)), got {show(workload)}")
    if isinstance(policy, str):
        policy = make_policy(policy, **knobs)
    elif not isinstance(policy, tuple(POLICIES.values())):
        raise ConfigError(
            f"policy must be one of {', '.join(POLICY_NAMES)} or a policy of batchsim.textbook, "
            f"got {show(policy)}"
        )
    elif knobs:
        raise ConfigError(
            f"knobs go with a policy's name, not with {policy!r}: got {', '.join(knobs)}"
        )
    if not isinstance(step_time, StepTimeModel):
        raise ConfigError(
            f"step_time must be a StepTimeModel (ConstantStepTime(0.02), ...), got "
            f"{show(step_time)}"
        )
    if limits is None:
        limits = ServerLimits(kv_budget_tokens=kv_budget_tokens)
    elif not isinstance(limits, ServerLimits):
        raise ConfigError(f"limits must be a ServerLimits, got {show(limits)}")
    elif kv_budget_tokens is not None and kv_budget_tokens != limits.kv_budget_tokens:
        raise ConfigError("give the KV budget once: in limits or as kv_budget_tokens, not both")
    model = step_time.for_policy(policy.name)  # a profile may know each policy's own overhead
    columns = (
        workload.arrivals.tolist(),
        workload.prompt_tokens.tolist(),
        workload.output_tokens.tolist(),
    )
    requests = [Request(i, a, p, o) for i, (a, p, o) in enumerate(zip(*columns))]
    check_processes(processes)
    policy.start(limits)
    clock = Clock()
    server = Server(clock, requests, policy, model)
    served = clock.process(server.serve())
    for f in processes:  # started after the server, as the fast path starts them
        process = f(clock, [server])
        if not inspect.isgenerator(process):
            raise ConfigError(
                f"process {getattr(f, '__name__', f)!r} must be a generator function f(env, "
                f"servers) that yields SimPy events; it returned {process!r}"
            )
        clock.process(process)
    try:
        end = clock.run(until=served)  # a process of the user's may still wait: it is not served
    except RuntimeError:
        if clock.peek() < math.inf or not server.down:
            raise  # not SimPy's "no event left"
        raise RuntimeError(
            "the run cannot finish: the server went down and nothing brings it back"
        ) from None
    return RunResult(
        records(workload, requests, server.log, end),
        repr(policy),
        repr(model),
        limits.kv_budget_tokens,
        policy.kv_peak,
        policy.preemptions,
        workload.description,
        meta={"stopped": None, "engine": "textbook"},
    )


def records(
    workload: Workload, requests: list[Request], log: list[tuple], end: float | None
) -> Records:
    """The requests' records and the pass log, as the arrays ``Records`` holds; ``end``: when the
    last pass ended (a row's start + duration, read back, can land an ulp off it)."""

    def column(field: str, dtype=float) -> np.ndarray:  # a time that never came is NaN
        values = [getattr(r, field) for r in requests]
        return np.array([math.nan if v is None else v for v in values], dtype=dtype)

    rows = list(zip(*log)) or [()] * len(STEP_FIELDS)
    steps = {
        k: np.array(c, dtype=float if k in ("start", "duration") else np.int64)
        for k, c in zip(STEP_FIELDS, rows)
    }
    return Records(
        workload.arrivals,
        workload.prompt_tokens,
        workload.output_tokens,
        column("start"),
        column("first_token"),
        column("finish"),
        column("last_token"),
        column("tokens", np.int64),
        column("preemptions", np.int64),
        column("itl_max"),
        [r.rejected for r in requests],
        steps,
        step_ends=[end],
    )
