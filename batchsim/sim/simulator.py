"""The simulated server: the shared driver loop on a clock that jumps.

``simulate`` is ``batchsim.core.driver.drive`` with the simulator's executor: it prices
each step with a step-time model instead of running it, and time jumps to the step's
end instead of passing. A step the policy marks ``repeat=k`` is priced in one
vectorised call; if it is ``interruptible`` and a request arrives during it, the run
stops at the first step boundary after the arrival, exactly where a server stepping
token by token would have noticed it. That is what lets a 10,000-request run finish in
well under a second.

``ReplayExecutor`` is the same clock fed the step times a real run measured instead of
a model's: it reproduces that run's records to the last float, which proves that the
two clocks schedule identically (``realrun compare`` reports it).
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from ..core.driver import drive
from ..core.errors import check_choice
from ..core.fleet import check_replicas
from ..core.records import Recorder
from ..core.router import Router, make_router
from ..core.limits import ServerLimits
from ..core.policies import Policy
from ..core.records import SimResult
from ..core.step import Step
from ..core.workload import Workload
from .steptime import StepTimeModel

__all__ = ["SimResult", "SimExecutor", "ReplayExecutor", "ReplayDiverged", "simulate", "result_of", "RECORDS"]


class SimExecutor:
    """Prices a step with ``step_time`` and jumps to its end."""

    def __init__(self, step_time: StepTimeModel) -> None:
        self.step_time = step_time
        self.gap = float(getattr(step_time, "step_gap", 0.0))
        self.last_end = 0.0

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, Sequence[float]]:
        t0 = now + self.gap
        m = step.repeat
        d = self.step_time.durations(step, m)
        if now > self.last_end:  # the server sat idle: it wakes late and runs cold
            late, extra = self.step_time.wake_penalty(now - self.last_end)
            t0 += late
            d[0] += extra
        if m == 1:
            self.last_end = end = t0 + d.item(0)
            return t0, (end,)
        # Sequential sums from the start, as a clock that advances pass by pass would add them:
        # (t0 + d0) + d1 + ..., the very additions of a cumulative sum that starts at t0.
        d[0] += t0
        ends = np.cumsum(d)
        if stop_at is not None and stop_at < ends.item(m - 1):
            # Stop at the boundary of the step during which the next request arrives.
            k = int(np.searchsorted(ends, stop_at, side="left")) + 1
            if k < m:
                ends = ends[:k]
        self.last_end = ends.item(len(ends) - 1)
        self._ends = ends
        return t0, ends

    def cut(self, k: int) -> None:
        """Only the first k repetitions of the step just priced ran (a fleet's arrival ended it)."""
        self.last_end = float(self._ends[k - 1])

    def wait_until(self, t: float) -> None:
        pass

    def release(self, finished) -> None:
        pass


class ReplayDiverged(AssertionError):
    """The replayed policy chose a step the measured run did not: the two clocks scheduled differently."""


class ReplayExecutor:
    """Hands back, step by step, the times a measured run took, and checks it asked for the same steps.

    ``trace``: (decided at, step, start, ends) per step, as ``drive(..., trace=True)`` returns.
    """

    def __init__(self, trace: list[tuple[float, Step, float, Sequence[float]]]) -> None:
        self.trace = trace
        self.k = 0

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, np.ndarray]:
        if self.k >= len(self.trace):
            raise ReplayDiverged(f"the replay asked for step {self.k + 1}, but the measured run ran {len(self.trace)}")
        decided, measured, t_start, ends = self.trace[self.k]
        if step != measured:
            raise ReplayDiverged(f"step {self.k + 1} differs: replay {step!r}, measured {measured!r}")
        self.k += 1
        shift = now - decided  # zero, as long as every earlier step matched
        return t_start + shift, np.asarray(ends, dtype=np.float64) + shift

    def wait_until(self, t: float) -> None:
        pass

    def release(self, finished) -> None:
        pass


def result_of(run, policy: Policy | Sequence[Policy], step_time: str, limits: ServerLimits, workload: Workload,
              meta: dict | None = None, router: Router | None = None) -> SimResult:
    """A ``SimResult`` from a finished ``drive`` (of one server, or a fleet's policies)."""
    policies = [policy] if isinstance(policy, Policy) else list(policy)
    extra: dict = {"stopped": run.stopped}
    if len(policies) > 1:
        extra.update(router=repr(router), replica_kv_peak=[p.kv_peak for p in policies],
                     replica_preemptions=[p.preemptions for p in policies])
    return SimResult(
        records=run.recorder.records(),
        policy=policies[0].describe(),
        step_time=step_time,
        kv_budget_tokens=limits.kv_budget_tokens,
        kv_peak_tokens=max(p.kv_peak for p in policies),
        preemptions=sum(p.preemptions for p in policies),
        workload=workload.description,
        meta={**extra, **(meta or {})},
        replicas=len(policies),
    )


#: How a run keeps its records: every request ("full") or only sums and sketches ("summary").
RECORDS = ("full", "summary")


def simulate(
    workload: Workload,
    policy: Policy,
    step_time: StepTimeModel,
    kv_budget_tokens: int | None = None,
    progress: bool = False,
    limits: ServerLimits | None = None,
    replicas: int = 1,
    router: Router | str = "round-robin",
    router_seed: int = 0,
    records: str = "full",
    slo=None,
    steps_path=None,
) -> SimResult:
    """Run ``workload`` through ``policy`` on a server whose steps take ``step_time``.

    ``limits`` (KV budget, the model's context, tokens per pass) replaces ``kv_budget_tokens``.
    ``replicas`` > 1: a fleet of that many such servers, each with its own copy of ``policy``
    and its own KV budget, behind ``router`` (a name of ``ROUTER_NAMES`` or a ``Router``;
    ``router_seed`` seeds the random one). A fleet of one is exactly ``simulate`` of one server.
    ``records="summary"`` keeps sums and quantile sketches instead of every request (see
    ``batchsim.core.stream``); its goodput is counted for ``slo``, given now.
    ``steps_path``: also write the step log, as it goes, to this CSV file.
    """
    if limits is None:
        limits = ServerLimits(kv_budget_tokens=kv_budget_tokens)
    elif kv_budget_tokens is not None and kv_budget_tokens != limits.kv_budget_tokens:
        raise ValueError("give the KV budget once: in limits or as kv_budget_tokens, not both")
    check_replicas(replicas)
    check_choice("records", records, RECORDS)
    step_time = step_time.for_policy(policy.name)
    # Copies made before the run starts: each server's policy holds only its own run's state.
    policies = [policy] + [copy.deepcopy(policy) for _ in range(replicas - 1)]
    rt = router if isinstance(router, Router) else make_router(router, router_seed)  # checked, even for one
    if replicas == 1:
        rt = None
    if records == "summary":
        from ..core.metrics import streams_by_default
        from ..core.stream import StreamRecorder

        rec = StreamRecorder(workload, slo=slo, streaming=streams_by_default(policy.describe()), replicas=replicas,
                             steps_path=steps_path)
    else:
        rec = Recorder(workload, replicas=replicas, steps_path=steps_path)
    run = drive(workload, policies, [SimExecutor(step_time) for _ in policies], limits, progress=progress,
                desc="simulating", router=rt, recorder=rec)
    if run.stopped is not None:  # Ctrl-C: the simulator has nothing to keep
        raise KeyboardInterrupt
    return result_of(run, policies, repr(step_time), limits, workload, router=rt)
