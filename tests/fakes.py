"""A wall clock and an engine made of numbers, so the wall-clock path runs without torch.

``PricedEngine`` "runs" a step by advancing a fake clock by a step-time model's price of
each repetition, exactly as a real engine would advance the real clock by its passes.
Driven through ``WallExecutor``, it must give what ``simulate`` gives with that model.
"""

from __future__ import annotations

from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import as_limits
from batchsim.core.result import result_of


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(0.0, s)


class PricedEngine:
    name = "priced"

    def __init__(
        self,
        clock: FakeClock,
        step_time,
        fail_at: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.clock, self.step_time, self.fail_at, self.error = clock, step_time, fail_at, error
        self.calls = 0
        self.released: list[int] = []

    def start(self, workload) -> None:
        self.calls = 0

    def execute(self, step, should_stop=None):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise self.error
        d = self.step_time.durations(step, step.repeat)
        t0, ends = self.clock(), []
        for j in range(step.repeat):
            self.clock.t += float(d[j])
            ends.append(self.clock.t)
            if should_stop is not None and j + 1 < step.repeat and should_stop():
                break
        return t0, ends

    def release(self, ids) -> None:
        self.released.extend(int(i) for i in ids)


def wall_run(workload, policy, step_time, limits=None, trace: bool = False, **engine_kw):
    """``workload`` through ``policy`` on the wall-clock path (fake clock, priced engine)."""
    clock = FakeClock()
    engine = PricedEngine(clock, step_time, **engine_kw)
    run = drive(workload, policy, WallExecutor(engine, clock, clock.sleep), limits, trace=trace)
    res = result_of(run, policy, "fake wall clock", as_limits(limits), workload)
    if trace:
        res.meta["trace"] = run.trace
    return res
