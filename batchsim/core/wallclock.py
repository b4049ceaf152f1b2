"""The wall clock's executor: a real engine runs each step of the driver's loop, a clock times it.

The simulator's executor prices a step; this one runs it (``engine.execute``) and reads
the clock. Everything else, the loop, the policy, the records, is shared
(``batchsim.core.driver``). Its clock, ``WallClock``, is SimPy's
``RealtimeEnvironment(strict=False)`` reading a clock we hand it (``time.perf_counter`` in a real
run, a fake clock in tests): before each event it sleeps until the wall clock reaches the event's
time, and when a real step has already carried the wall clock past it, it does not sleep at all.
That is how a real forward pass, run synchronously inside a server process, and a ``yield`` of its
measured end fit together.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy
import simpy.rt

from .executor import StopRun
from .server import AtMixin
from .step import Step

__all__ = ["WallExecutor", "WallClock"]


class WallClock(AtMixin, simpy.rt.RealtimeEnvironment):
    """SimPy's real-time clock on a clock we choose: ``clock()`` read, ``sleep(s)`` to wait, time
    counted from ``t0`` (a fleet's executors share one). Never strict: a real step overruns its
    event's time by design (it runs, then its measured end is yielded)."""

    def __init__(
        self, clock: Callable[[], float], sleep: Callable[[float], None], t0: float
    ) -> None:
        simpy.rt.RealtimeEnvironment.__init__(self, initial_time=0.0, factor=1.0, strict=False)
        self.clock, self.sleep = clock, sleep
        self.real_start = t0

    def sync(self) -> None:
        self.real_start = self.clock()

    def step(self) -> None:
        # simpy.rt's step, on our clock: sleep until the next event is due, then process it.
        t = self.peek()
        if t == simpy.core.Infinity:
            raise simpy.core.EmptySchedule
        delay = self.until(t)
        if delay > 0:
            self.sleep(delay)
        simpy.Environment.step(self)

    def until(self, t: float) -> float:
        """Seconds of wall clock until the time ``t`` of this environment (negative: already
        past)."""
        return (t - self.env_start) * self.factor - (self.clock() - self.real_start)


class WallExecutor:
    """The wall clock's executor: an engine runs each step, ``clock`` times it.

    ``engine.execute(step, should_stop) -> (start, ends)`` runs up to ``step.repeat`` passes
    and calls ``should_stop()`` after each (realrun's engines do); ``engine.release(ids)`` drops
    finished requests. Times are seconds since ``start()``. ``stop_errors``: exception types
    that end the run cleanly (a GPU out of memory), each turned into ``StopRun`` with a reason
    from ``explain(error, step)``. ``t0``: the moment times count from (a fleet's executors share
    one, so their records share one clock); default: now.
    """

    def __init__(
        self,
        engine,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        stop_errors: tuple[type[BaseException], ...] = (),
        explain: Callable[[BaseException, Step], str] | None = None,
        t0: float | None = None,
    ) -> None:
        self.engine, self.clock, self.sleep = engine, clock, sleep
        self.stop_errors, self.explain = stop_errors, explain
        self.t0 = clock() if t0 is None else t0

    #: A real step cannot be cut after it ran: it is told beforehand where to stop.
    can_cut = False

    def environment(self) -> WallClock:
        """SimPy's real-time clock on this executor's clock, counting from ``t0``."""
        return WallClock(self.clock, self.sleep, self.t0)

    def now(self) -> float:
        return self.clock() - self.t0

    def should_stop(self, stop_at: float | None) -> Callable[[], bool] | None:
        """What a repeated step asks after each pass: has the next arrival come (None: never
        stop)?"""
        return None if stop_at is None else (lambda: self.now() >= stop_at)

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, np.ndarray]:
        should_stop = self.should_stop(stop_at)
        try:
            t_start, ends = self.engine.execute(step, should_stop)
        except self.stop_errors as e:
            raise StopRun(self.explain(e, step) if self.explain else f"stopped: {e}") from e
        return t_start - self.t0, np.asarray(ends, dtype=np.float64) - self.t0

    def cut(self, k: int) -> None:
        raise NotImplementedError("a real step cannot be cut after it ran")

    def release(self, finished: tuple[int, ...]) -> None:
        self.engine.release(finished)
