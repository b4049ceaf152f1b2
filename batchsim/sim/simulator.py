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

from typing import Sequence

import numpy as np

from ..core.driver import drive
from ..core.limits import ServerLimits
from ..core.policies import Policy
from ..core.records import SimResult
from ..core.step import Step
from ..core.workload import Workload
from .steptime import StepTimeModel

__all__ = ["SimResult", "SimExecutor", "ReplayExecutor", "ReplayDiverged", "simulate", "result_of"]


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


def result_of(run, policy: Policy, step_time: str, limits: ServerLimits, workload: Workload, meta: dict | None = None) -> SimResult:
    """A ``SimResult`` from a finished ``drive``."""
    return SimResult(
        records=run.recorder.records(),
        policy=policy.describe(),
        step_time=step_time,
        kv_budget_tokens=limits.kv_budget_tokens,
        kv_peak_tokens=policy.kv_peak,
        preemptions=policy.preemptions,
        workload=workload.description,
        meta={"stopped": run.stopped, **(meta or {})},
    )


def simulate(
    workload: Workload,
    policy: Policy,
    step_time: StepTimeModel,
    kv_budget_tokens: int | None = None,
    progress: bool = False,
    limits: ServerLimits | None = None,
) -> SimResult:
    """Run ``workload`` through ``policy`` on a server whose steps take ``step_time``.

    ``limits`` (KV budget, the model's context, tokens per pass) replaces ``kv_budget_tokens``.
    """
    if limits is None:
        limits = ServerLimits(kv_budget_tokens=kv_budget_tokens)
    elif kv_budget_tokens is not None and kv_budget_tokens != limits.kv_budget_tokens:
        raise ValueError("give the KV budget once: in limits or as kv_budget_tokens, not both")
    step_time = step_time.for_policy(policy.name)
    run = drive(workload, policy, SimExecutor(step_time), limits, progress=progress, desc="simulating")
    if run.stopped is not None:  # Ctrl-C: the simulator has nothing to keep
        raise KeyboardInterrupt
    return result_of(run, policy, repr(step_time), limits, workload)
