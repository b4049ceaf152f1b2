"""The two clocks a run can keep: SimPy's, jumping from event to event, or the wall clock.

Both are ``simpy.Environment``s, so the processes of a run (the arrivals, one per server,
and any a user adds) are the same generators on either:

- ``SimClock`` is SimPy's own ``Environment``: time jumps to the next event at once;
- ``WallClock`` is SimPy's ``RealtimeEnvironment(strict=False)`` reading a clock we hand it
  (``time.perf_counter`` in a real run, a fake clock in tests): before each event it sleeps
  until the wall clock reaches the event's time, and when a real step has already carried
  the wall clock past it, it does not sleep at all. That is how a real forward pass, run
  synchronously inside a server process, and a ``yield`` of its measured end fit together.

Both add one thing to SimPy: ``at(t, priority)``, a timeout that fires *at* the time ``t``
rather than after a delay. SimPy keeps time as ``now + delay``, and in floating point
``now + (t - now)`` is not always ``t``; a request that arrives at 0.3 s must arrive at
0.3 s, not at 0.30000000000000004, or the two clocks (and a replay) would disagree in the
last digit. ``priority`` orders events of one instant: ``ARRIVAL`` first (a request that
arrives as a step ends is seen by the next decision, as on a server that polls its queue
between steps), then each server in turn (``server_priority``).
"""

from __future__ import annotations

from heapq import heappush
from typing import Callable

import simpy
import simpy.rt
from simpy.events import NORMAL, URGENT

__all__ = ["SimClock", "WallClock", "At", "ARRIVAL", "server_priority", "schedule_at"]

#: Arrivals come first among the events of one instant.
ARRIVAL = URGENT


def server_priority(index: int) -> int:
    """Server ``index``'s events of one instant come after the arrivals and the servers before it."""
    return NORMAL + index


class At(simpy.Timeout):
    """A timeout that fires at the absolute time ``t`` (not ``now + delay``), with ``priority``."""

    def __init__(self, env: simpy.Environment, t: float, priority: int = NORMAL, value=None) -> None:
        if t < env.now:
            raise ValueError(f"cannot schedule an event in the past: {t} < now {env.now}")
        # Event.__init__'s fields, set here as simpy.Timeout does (it has no hook for an absolute time).
        self.env = env
        self.callbacks = []
        self._value = value
        self._delay = t - env.now
        self._ok = True
        schedule_at(env, self, t, priority)


def schedule_at(env: simpy.Environment, event: simpy.Event, t: float, priority: int = NORMAL) -> None:
    """Put a triggered ``event`` on ``env``'s queue at the absolute time ``t`` (>= now).

    Environment.schedule adds a delay to now; the queue entry is the same tuple with t itself."""
    heappush(env._queue, (t, priority, next(env._eid), event))


class _At:
    """Adds ``at`` (and ``jump``) to an environment."""

    def at(self, t: float, priority: int = NORMAL, value=None) -> At:
        return At(self, t, priority, value)  # type: ignore[arg-type]

    def jump(self, t: float) -> bool:
        """Move the clock to ``t`` at once, if that is the same as yielding an event at ``t``; whether it did."""
        return False  # a wall clock must wait for ``t`` to come


class SimClock(_At, simpy.Environment):
    """SimPy's simulated clock: nothing takes time but what a process yields."""

    def jump(self, t: float) -> bool:
        # With no event due at or before t, yielding an event at t would have the environment pop that
        # very event next and resume the process at t, with nothing else run in between: setting the
        # clock is the same, without the event. (An event due exactly at t might have to go first.)
        queue = self._queue
        if queue and queue[0][0] <= t:
            return False
        self._now = t
        return True


class WallClock(_At, simpy.rt.RealtimeEnvironment):
    """SimPy's real-time clock on a clock we choose: ``clock()`` read, ``sleep(s)`` to wait, time
    counted from ``t0`` (a fleet's executors share one). Never strict: a real step overruns its
    event's time by design (it runs, then its measured end is yielded)."""

    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], None], t0: float) -> None:
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
        """Seconds of wall clock until the time ``t`` of this environment (negative: already past)."""
        return (t - self.env_start) * self.factor - (self.clock() - self.real_start)
