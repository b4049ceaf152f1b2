"""Events at an absolute time, and the order of the events of one instant
(``batchsim.core.server``).

SimPy keeps time as ``now + delay``, and in floating point ``now + (t - now)`` is not always ``t``:
a request that arrives at 0.3 s must arrive at 0.3 s, or the two clocks (and a replay) would
disagree in the last digit. So a process yields ``env.at(t, priority)``, an ``At``; ``priority``
orders the events of one instant: ``ARRIVAL`` first, then each server in turn (``server_priority``).
Both clocks are ``AtMixin`` environments. Textbook: ``batchsim/textbook/server.py``, ``Clock.at``.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT

__all__ = ["ARRIVAL", "At", "AtMixin", "schedule_at", "server_priority"]

#: Arrivals come first among the events of one instant.
ARRIVAL = URGENT


def server_priority(index: int) -> int:
    """Server ``index``'s events of one instant come after the arrivals and the servers before
    it."""
    return NORMAL + index


class At(simpy.Timeout):
    """A timeout that fires at the absolute time ``t`` (not ``now + delay``), with ``priority``."""

    def __init__(
        self, env: simpy.Environment, t: float, priority: int = NORMAL, value=None
    ) -> None:
        if t < env.now:
            raise ValueError(f"cannot schedule an event in the past: {t} < now {env.now}")
        # Event.__init__'s fields, set here as simpy.Timeout does (it has no hook for an absolute
        # time).
        self.env = env
        self.callbacks = []
        self._value = value
        self._delay = t - env.now
        self._ok = True
        schedule_at(env, self, t, priority)


def schedule_at(
    env: simpy.Environment, event: simpy.Event, t: float, priority: int = NORMAL
) -> None:
    """Put a triggered ``event`` on ``env``'s queue at the absolute time ``t`` (>= now).

    Environment.schedule adds a delay to now; the queue entry is the same tuple with t itself."""
    heappush(env._queue, (t, priority, next(env._eid), event))


class AtMixin:
    """Adds ``at`` (and ``jump``) to an environment: both clocks are one of these."""

    #: Whether ``jump`` can move the clock (a simulated one): a lone server may then read its
    #: arrivals.
    jumps = False

    def at(self, t: float, priority: int = NORMAL, value=None) -> At:
        return At(self, t, priority, value)  # type: ignore[arg-type]

    def jump(self, t: float) -> bool:
        """Move the clock to ``t`` at once, if that is the same as yielding an event at ``t``;
        whether it did."""
        return False  # a wall clock must wait for ``t`` to come
