"""A server, as a SimPy process: the bus and its driver.

A bus driver does the same thing all day: look at who is waiting, decide whether to
leave now or wait a little, drive the route, let people off, and start again. A server
of a model does exactly that with its batching policy deciding::

    def serve(self):
        while True:
            action = policy.next_action(env.now)           # what runs now?
            if isinstance(action, Wait):                   # nothing yet:
                if closed and policy.idle: return          #   nobody else is coming
                yield env.at(action.until) or an arrival   #   sleep until the deadline or a passenger
            else:
                start, ends = executor.run(action, ...)    # run the step (real) or price it (simulated)
                yield env.at(ends[-1])                     # the step takes its time
                outcome = policy.on_step_end(action, ...)  # who got a token, who is done
                record it

Two things make it a little longer than that, and both are SimPy's ``interrupt``:

- a passenger who arrives while the server sleeps wakes it (``wake``);
- a *repeated* step (the simulator prices a run of identical decode passes in one go) is
  cut by an arrival the policy could admit: the step ends at the first pass boundary after
  the arrival, exactly where a server stepping pass by pass would have noticed it (``cut``).
  In a fleet the router picks a passenger's server only when the passenger comes, so the
  arrival interrupts the server it picked. A lone server knows its next passenger's time in
  advance (every request is its own), and a real engine cannot be cut after the fact: both
  are told beforehand where to stop (``stop_at``), and their repeat is never interrupted.
  The steps are the same either way, to the last float (``tests/test_simpy_driver.py``);
  telling beforehand saves an interrupt and two events an arrival, about a sixth of a run.

On the simulated clock a step whose end comes before any other event needs no event of its own:
nothing can happen meanwhile, so the clock jumps to its end (``SimClock.jump``) and the server
goes on, exactly as if it had yielded that event and been resumed by it.

``go_down()`` / ``come_back()`` are for a user's own process (a maintenance window): a
server that is down finishes the step it is running, then runs nothing until it is back;
requests routed to it wait in its queue.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, Protocol

import simpy

from .clock import server_priority
from .executor import Executor
from .step import Wait

if TYPE_CHECKING:
    from .policies.base import Policy

__all__ = ["ServerProcess", "RunShared"]


class RunShared(Protocol):
    """What a server reads of the run it serves in (``driver.Run``), named here so that the server
    need not import the driver that starts it: whether every request has arrived, when the next one
    comes (and when the next that is surely this server's does: None where a router will choose),
    and where a step's outcome and a withdrawn request are reported."""

    closed: bool
    next_arrival: float

    def next_arrival_for(self, server: "ServerProcess") -> float | None: ...

    def step_ended(self, server: "ServerProcess", decided: float, step, start: float, ends, outcome) -> None: ...

    def withdrew(self, request_id: int, reason: str) -> None: ...


class ServerProcess:
    """One server of a run: ``policy`` decides, ``executor`` runs or prices, ``env`` keeps time.

    ``outstanding``: requests routed here and not yet finished or rejected (what a router sees).
    ``steps``: steps it has run. ``process``: its SimPy process, once the run has started it.
    """

    def __init__(self, env: simpy.Environment, index: int, policy: Policy, executor: Executor, run: RunShared) -> None:
        self.env, self.index, self.policy, self.executor, self.run = env, index, policy, executor, run
        self.priority = server_priority(index)
        self.outstanding = 0
        self.steps = 0
        self.process: simpy.Process | None = None
        self.waiting = False  # asleep: an arrival wakes it
        self.cut_until = -math.inf  # running a priced repeat: an arrival at or before this boundary cuts it
        self.down = False
        self._back: simpy.Event | None = None
        self._bell: simpy.Event | None = None  # what a sleep without deadline waits on
        self._withdrawn: list[tuple[int, str]] = []  # (request, reason): clients gone, applied between steps

    def serve(self):
        """The server's process: decide, run or wait, report; until nobody is left to serve."""
        env, policy, run = self.env, self.policy, self.run
        while True:
            if self.down:
                yield self._back
            if self._withdrawn:
                self._withdraw_now()
            action = policy.next_action(env.now)
            if isinstance(action, Wait):
                if run.closed and policy.idle:
                    return
                yield from self._sleep(action.until)
            else:
                yield from self._run(action)

    def _sleep(self, until: float | None):
        """Wait until ``until`` (None: no deadline) or until an arrival wakes us."""
        env = self.env
        if until is None and self.run.closed:
            raise RuntimeError(f"{self.policy.name}: waits with no deadline and no arrival to come, but is not idle")
        # A deadline already past is "now": the policy is asked again at once. Without a deadline the
        # server waits on a bell the next passenger rings (cheaper than an interrupt: no exception).
        if until is None:
            alarm = self._bell = env.event()
        else:
            alarm = env.at(max(until, env.now), self.priority)
        self.waiting = True
        try:
            yield alarm
        except simpy.Interrupt:
            pass  # a passenger: decide again, now
        self.waiting, self._bell = False, None

    def _run(self, step):
        env, ex = self.env, self.executor
        decided = env.now
        repeats = step.interruptible and step.repeat > 1 and not self.run.closed
        stop_at = None
        if repeats:
            # Where the next passenger is surely ours (a lone server), the repeat stops at its arrival,
            # priced or real. Where a router chooses only when it comes, a real engine stops at the next
            # arrival anywhere, and a priced repeat runs on until an arrival routed here interrupts it.
            stop_at = self.run.next_arrival_for(self)
            if stop_at is None and not ex.can_cut:
                stop_at = self.run.next_arrival
        start, ends = ex.run(step, decided, stop_at)
        # The simulated clock jumps to the step's end when nothing else happens before it: no arrival
        # can cut it, and the event of its end would be the very next one anyway.
        jumped = env.jump(ends[-1])
        if repeats and stop_at is None and len(ends) > 1 and not jumped:
            self.cut_until = ends[-2]
        end = None if jumped else env.at(ends[-1], self.priority)
        while end is not None:
            try:
                yield end
                end = None
            except simpy.Interrupt:
                # A passenger for us at env.now: the repeat ends at the first pass boundary at or after it.
                k = bisect_left(ends, env.now) + 1  # numpy's searchsorted, side "left"; a list's too
                ends = ends[:k]
                ex.cut(k)
                end = None if env.jump(ends[-1]) else env.at(ends[-1], self.priority)
        self.cut_until = -math.inf
        outcome = self.policy.on_step_end(step, len(ends), env.now)
        ex.release(outcome.finished)
        self.steps += 1
        self.run.step_ended(self, decided, step, start, ends, outcome)

    def withdraw(self, request_id: int, reason: str) -> None:
        """A request's client has gone (a live server): the policy lets it go before its next decision,
        never in the middle of a step; a sleeping server wakes to decide again without it."""
        self._withdrawn.append((request_id, reason))
        self._rouse()

    def _withdraw_now(self) -> None:
        gone, self._withdrawn = self._withdrawn, []
        for rid, reason in gone:
            if self.policy.cancel(rid):
                self.executor.release((rid,))
                self.outstanding -= 1
                self.run.withdrew(rid, reason)

    def wake(self, now: float) -> None:
        """A passenger for us at ``now``: wake us if asleep, cut our repeat if it runs past ``now``.

        Once per instant: the flags drop at once, so a second passenger of the same instant
        (processed before the interrupt is) does not interrupt again."""
        if self.waiting or now <= self.cut_until:
            self.waiting, self.cut_until = False, -math.inf
            self._interrupt()

    def _rouse(self) -> None:
        """Asleep: wake now, to decide again (a repeat that runs is left to end)."""
        if self.waiting:
            self.waiting = False
            self._interrupt()

    def _interrupt(self) -> None:
        bell, self._bell = self._bell, None
        if bell is not None:
            bell.succeed()  # asleep with no deadline: ring
        else:
            self.process.interrupt()  # a deadline pending, or a repeat to cut

    def go_down(self) -> None:
        """From a user's process: finish the step running, then run nothing until ``come_back()``."""
        if not self.down:
            self.down = True
            self._back = self.env.event()
            self._rouse()  # asleep: it goes down now, not at its next decision

    def come_back(self) -> None:
        """From a user's process: the server decides again, at once."""
        if self.down:
            self.down = False
            self._back.succeed()

    def __repr__(self) -> str:
        return f"ServerProcess({self.index}, {self.policy.describe()}, outstanding={self.outstanding})"
