"""The simulated clock's executors: a step priced by a model, or replayed from a measurement.

``SimExecutor`` prices a step with a step-time model instead of running it; SimPy's clock
then jumps to its end. A step the policy marks ``repeat=k`` is priced in one vectorised
call; if it is ``interruptible``, it ends at the first boundary after the next arrival, exactly
where a server stepping token by token would have noticed it: priced only up to ``stop_at`` when
the server knows that arrival is its own, or ``cut`` there when the arrival interrupts it (a
fleet's). That is what lets a 10,000-request run finish in well under a second.

Both bring ``SimClock``, SimPy's own ``Environment`` (with ``at``, ``batchsim.core.server``):
time jumps to the next event at once, and a step whose end comes before any other event needs
no event at all (``SimClock.jump``).

``ReplayExecutor`` is the same clock fed the step times a real run measured instead of a
model's: it reproduces that run's records to the last float, which proves that the two
clocks schedule identically (``realrun compare`` reports it).

Textbook (``batchsim/textbook/server.py``): ``price`` and ``end = start + seconds``, once a pass;
``SimExecutor.run`` makes the very same additions for a run of passes, in one call. A model
that draws each pass's time (``ExponentialStepTime``) gets back the draws of passes cut off
(``put_back``), so it too gives the textbook's records. One that draws a run's luck as one
correlated path (``SampledStepTime``) cannot: its passes' times follow how they were grouped,
from the same distribution.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np
import simpy

from ..core.server import AtMixin
from ..core.step import Step
from .steptime import StepTimeModel

__all__ = ["SimExecutor", "ReplayExecutor", "ReplayDiverged", "SimClock"]


class SimClock(AtMixin, simpy.Environment):
    """SimPy's simulated clock: nothing takes time but what a process yields."""

    jumps = True

    def jump(self, t: float) -> bool:
        """Textbook: ``yield clock.at(end)`` in ``serve``, with nothing else due before ``end``."""
        # With no event due at or before t, yielding an event at t would have the environment pop
        # that very event next and resume the process at t, with nothing else run in between:
        # setting the clock is the same, without the event. (An event due exactly at t might have to
        # go first.)
        queue = self._queue
        if queue and queue[0][0] <= t:
            return False
        self._now = t
        return True


# The ufuncs' own methods: ``d.min()`` and ``np.cumsum(d)`` reach the same loops through Python
# wrappers that cost more than the work on a step's few passes (cumsum is add.accumulate).
_least, _running_sum = np.minimum.reduce, np.add.accumulate


class SimExecutor:
    """Prices a step with ``step_time`` and jumps to its end."""

    #: A priced step can be shortened after the fact: an arrival routed here interrupts it
    #: (``cut``).
    can_cut = True

    def __init__(self, step_time: StepTimeModel) -> None:
        self.step_time = step_time
        self.gap = float(getattr(step_time, "step_gap", 0.0))
        self.last_end = 0.0

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, Sequence[float]]:
        """(start, each pass's end) of ``step``'s passes up to the first to end at or after
        ``stop_at``. Textbook: ``price`` and ``end = start + seconds``, pass by pass."""
        t0 = now + self.gap
        m = step.repeat
        short = self.step_time.short_durations(step, m)
        if short is not None:
            return self._run_short(short, now, t0, stop_at)
        d = self.step_time.durations(step, m)
        if now > self.last_end:  # the server sat idle: it wakes late and runs cold
            late, extra = self.step_time.wake_penalty(now - self.last_end)
            t0 += late
            d[0] += extra
        # a single pass, in Python floats: the same additions, without numpy's per-call cost
        if m == 1:
            d0 = d.item(0)
            if t0 < now or d0 < 0:
                # A fitted model's offsets (a negative gap, repeat or step extra, fitted on a noisy
                # machine) can price a pass below zero; no pass takes negative time, and no step
                # starts before it was decided. Never the case for a well-fitted model: nothing else
                # changes.
                t0, d0 = max(t0, now), max(d0, 0.0)
            self.last_end = end = t0 + d0
            return t0, (end,)
        if t0 < now or _least(d) < 0:  # as above
            t0 = max(t0, now)
            np.maximum(d, 0.0, out=d)
        # Sequential sums from the start, as a clock that advances pass by pass would add them:
        # (t0 + d0) + d1 + ..., the very additions of a cumulative sum that starts at t0.
        d[0] += t0
        ends = _running_sum(d)
        if stop_at is not None and stop_at < ends.item(m - 1):
            # Stop at the boundary of the step during which the next request arrives.
            k = int(ends.searchsorted(stop_at, side="left")) + 1
            if k < m:
                ends = ends[:k]
                self.step_time.put_back(d[k:])  # d[0] alone took t0: the rest are the model's
        self.last_end = ends.item(len(ends) - 1)
        self._ends, self._d = ends, d
        return t0, ends

    def _run_short(
        self, d: list[float], now: float, t0: float, stop_at: float | None
    ) -> tuple[float, list[float]]:
        """``run`` for a short step priced in Python floats: the same sums, in the same order
        (``SHORT_REPEAT``: numpy's calls cost more than a few passes' arithmetic)."""
        if now > self.last_end:
            late, extra = self.step_time.wake_penalty(now - self.last_end)
            t0 += late
            d[0] += extra
        if t0 < now or min(d) < 0:  # as in run
            t0, d = max(t0, now), [max(x, 0.0) for x in d]
        if len(d) == 1:  # a single pass (every prefill step): nothing to stop short of
            ends = [t0 + d[0]]
            self.last_end = ends[0]
            self._ends, self._d = ends, d
            return t0, ends
        ends, t = [], t0
        for x in d:
            t += x
            ends.append(t)
        if stop_at is not None and stop_at < t:
            k = bisect_left(ends, stop_at) + 1
            del ends[k:]
            self.step_time.put_back(d[k:])
        self.last_end = ends[-1]
        self._ends, self._d = ends, d
        return t0, ends

    def cut(self, k: int) -> None:
        """Only the first k repetitions of the step just priced ran (a fleet's arrival ended it)."""
        self.last_end = float(self._ends[k - 1])
        # Only the draws of passes priced to run: those past ``stop_at`` went back in ``run``.
        self.step_time.put_back(self._d[k : len(self._ends)])

    def environment(self) -> SimClock:
        return SimClock()

    def release(self, finished) -> None:
        pass


class ReplayDiverged(AssertionError):
    """The replayed policy chose a step the measured run did not: the two clocks scheduled
    differently."""


class ReplayExecutor:
    """Hands back, step by step, the times a measured run took, and checks it asked for the same
    steps.

    ``trace``: (decided at, step, start, ends) per step, as ``drive(..., trace=True)`` returns.
    """

    #: The measured run already stopped where its arrivals cut it; a replay hands back those passes.
    can_cut = False

    def __init__(self, trace: list[tuple[float, Step, float, Sequence[float]]]) -> None:
        self.trace = trace
        self.k = 0

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, np.ndarray]:
        if self.k >= len(self.trace):
            raise ReplayDiverged(
                f"the replay asked for step {self.k + 1}, but the measured run ran "
                f"{len(self.trace)}"
            )
        decided, measured, t_start, ends = self.trace[self.k]
        if step != measured:
            raise ReplayDiverged(
                f"step {self.k + 1} differs: replay {step!r}, measured {measured!r}"
            )
        self.k += 1
        shift = now - decided  # zero, as long as every earlier step matched
        return t_start + shift, np.asarray(ends, dtype=np.float64) + shift

    def environment(self) -> SimClock:
        return SimClock()

    def cut(self, k: int) -> None:
        raise NotImplementedError("a replay is never cut: the measured run stopped where it did")

    def release(self, finished) -> None:
        pass
