"""A server, as a SimPy process: the bus and its driver.

A bus driver does the same thing all day: look at who is waiting, decide whether to
leave now or wait a little, drive the route, let people off, and start again. A server
of a model does exactly that with its batching policy deciding::

    def serve(self):
        while True:
            action = policy.next_action(env.now)           # what runs now?
            if isinstance(action, Wait):                   # nothing yet:
                if closed and policy.idle: return          #   nobody else is coming
                yield env.at(action.until) or an arrival   #   sleep to the deadline or a passenger
            else:
                start, ends = executor.run(action, ...)    # run the step (real) or price it (sim)
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

A lone server on the simulated clock, with no process of the user's beside it, has no arrivals
process at all (``Run.pull_arrivals``): before each decision it takes every request due by now
(``_take_arrivals``), as the textbook's server does, and a sleep jumps to the deadline or the next
arrival. Nothing else shares its clock, so no event is needed per request; the records are the same
to the last float (``tests/test_textbook.py``, ``tests/test_simpy_driver.py``).

On the simulated clock a step whose end comes before any other event needs no event of its own:
nothing can happen meanwhile, so the clock jumps to its end (``SimClock.jump``) and the server
goes on, exactly as if it had yielded that event and been resumed by it.

The server yields a step's end *at* its time (``env.at(t, priority)``, an ``At``), not after a
delay: SimPy keeps time as ``now + delay``, and in floating point ``now + (t - now)`` is not always
``t``; a request that arrives at 0.3 s must arrive at 0.3 s, not at 0.30000000000000004, or the two
clocks (and a replay) would disagree in the last digit. ``priority`` orders the events of one
instant: ``ARRIVAL`` first (a request that arrives as a step ends is seen by the next decision, as
on a server that polls its queue between steps), then each server in turn (``server_priority``).
Both clocks are ``AtMixin`` environments: the simulated one (``batchsim.sim.executors.SimClock``)
and the wall clock (``batchsim.core.wallclock.WallClock``).

``go_down()`` / ``come_back()`` are for a user's own process (a maintenance window): a
server that is down finishes the step it is running, then runs nothing until it is back;
requests routed to it wait in its queue.

Textbook: ``batchsim/textbook/server.py``, ``serve``: the same loop for one server, pass by pass,
reading the arrivals itself between passes. The repeat, its two ends (``stop_at``, ``cut``) and
the clock's jump are here for speed alone; ``tests/test_textbook.py`` holds the records equal.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

import simpy

from .at import ARRIVAL, At, AtMixin, schedule_at, server_priority
from .executor import Executor
from .standstill import StandStill
from .step import Wait

if TYPE_CHECKING:
    from .policies.base import Policy
    from .recorder import Recorder

__all__ = [
    "ServerProcess",
    "RunShared",
    "At",
    "AtMixin",
    "ARRIVAL",
    "server_priority",
    "schedule_at",
    "guarded",
]


def guarded(body: Iterable, ended: Callable[[BaseException | None], None]):
    """Run a process's ``body``, then tell ``ended`` how it ended (the error, or None). An error
    ends the run as it happens: SimPy would re-raise a copy of it an event later, after other
    processes had moved on. Every process of a run is run this way: the arrivals, each server, a
    user's own."""
    error = None
    try:
        yield from body
    except GeneratorExit:
        raise  # the run is over and SimPy drops a process still waiting: nothing went wrong
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt and StopRun too: the driver decides
        error = e
    ended(error)


class RunShared(Protocol):
    """What a server reads of the run it serves in (``driver.Run``), named here so that the server
    need not import the driver that starts it: whether every request has arrived, when the next one
    comes, whether a router chooses each request's server only when it comes (``fleet``), where a
    step's outcome goes (the recorder, the trace when one is kept, the progress bar) and a withdrawn
    request is reported, and how the process ends (``ended``: with the error that ended it, if
    any)."""

    closed: bool
    next_arrival: float
    fleet: bool
    recorder: Recorder
    trace: list | None

    def progress(self, k: int) -> None: ...

    def withdrew(self, request_id: int, reason: str) -> None: ...

    def ended(self, error: BaseException | None) -> None: ...


class ServerProcess:
    """One server of a run: ``policy`` decides, ``executor`` runs or prices, ``env`` keeps time.

    ``outstanding``: requests routed here and not yet finished or rejected (what a router sees).
    ``steps``: steps it has run. ``process``: its SimPy process, once the run has started it.
    """

    def __init__(
        self, env: simpy.Environment, index: int, policy: Policy, executor: Executor, run: RunShared
    ) -> None:
        self.env, self.index, self.policy, self.executor, self.run = (
            env,
            index,
            policy,
            executor,
            run,
        )
        self.priority = server_priority(index)
        self.outstanding = 0
        self.steps = 0
        self.process: simpy.Process | None = None
        self.waiting = False  # asleep: an arrival wakes it
        # running a priced repeat: an arrival at or before this boundary cuts it
        self.cut_until = -math.inf
        # running a priced repeat: go_down() at or before this boundary cuts it
        self.down_cut_until = -math.inf
        self.down = False
        self._back: simpy.Event | None = None
        self._bell: simpy.Event | None = None  # what a sleep without deadline waits on
        self._withdrawn: list[
            tuple[int, str]
        ] = []  # (request, reason): clients gone, applied between steps
        # a policy that waits "until now" forever stops the run, not hangs it
        self._still = StandStill()

    def process_body(self):
        """What SimPy runs: ``serve``, and the run told how it ended (``guarded``)."""
        return guarded(self.serve(), self.run.ended)

    def serve(self):
        """The server's process: decide, run or wait, report; until nobody is left to serve."""
        env, policy, run = self.env, self.policy, self.run
        if run.pulls:  # set before any process starts (``drive``): a lone server reads arrivals
            yield from self._serve_alone()
            return
        while True:
            while self.down:  # back and down again at one instant: it runs nothing
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

    def _serve_alone(self):
        """``serve`` for a lone server that reads the arrivals itself (``Run.pull_arrivals``): the
        same decisions in the same order, with ``_run`` inlined for a step the clock jumps over.
        Nothing can interrupt it (no arrivals process, no process of the user's, no live client),
        so a step never needs its cut or its event, unless something is due before its end. Speed
        alone: a generator and a few calls fewer per step. Textbook: ``serve``, as ``serve``."""
        env, policy, run, ex = self.env, self.policy, self.run, self.executor
        next_action, on_step_end, price, release = (
            policy.next_action,
            policy.on_step_end,
            ex.run,
            ex.release,
        )
        jump = env.jump
        while True:
            now = env.now
            if run.next_arrival <= now:
                self._take_arrivals(now)
            while self.down:  # as in serve: only a process of the user's takes it down
                yield self._back
            if self._withdrawn:
                self._withdraw_now()
            action = next_action(now)
            if isinstance(action, Wait):
                if run.closed and policy.idle:
                    return
                yield from self._sleep(action.until)
                continue
            # Textbook: ``serve`` from ``price`` to ``step_done`` (``_run``, its lone server's
            # case).
            if action.interruptible and action.repeat > 1 and not run.closed:
                start, ends = price(action, now, run.next_arrival)
            else:
                start, ends = price(action, now, None)
            end = ends[-1]
            if not jump(end):
                yield from self._wait_end(ends)
            outcome = on_step_end(action, len(ends), end)  # the clock reads ``end`` now
            release(outcome.finished)
            self.steps += 1
            self._report(now, action, start, ends, outcome)

    def _wait_end(self, ends):
        """A lone server's step whose end the clock cannot jump to: its end, as an event (as
        ``_run``)."""
        env = self.env
        if self.executor.can_cut and len(ends) > 1:
            self.down_cut_until = ends[-2]
        yield env.at(ends[-1], self.priority)
        self.down_cut_until = -math.inf

    def _take_arrivals(self, now: float) -> None:
        """A lone server reads the arrivals itself (``Run.pull_arrivals``): every request due by
        ``now`` is handed over at its own time, in order, then the run closed after the last.
        Textbook: ``serve``'s
        ``while come < len(requests) and requests[come].arrival <= clock.now``.

        Where the arrivals process would hand a request over while a step runs, this hands it over
        when the step ends, with the same time: the policy queues it and is asked nothing before the
        step's end, so the next decision sees the same queue (a repeat was told beforehand where to
        stop, ``stop_at``)."""
        run = self.run
        arrivals, request = run.workload.arrivals, run.workload.request
        n = len(arrivals)
        i, a = run.come, run.next_arrival
        while a <= now:
            run.hand_over(request(i), a)
            i += 1
            a = run.next_arrival = arrivals.item(i) if i < n else math.inf
        run.come = i
        if i == n and not run.closed:
            run.close(arrivals.item(n - 1))

    def _sleep(self, until: float | None):
        """Wait until ``until`` (None: no deadline) or until an arrival wakes us."""
        env = self.env
        # or the run would hang
        self._still.check(self.policy, env.now, until, self.steps, self.run.closed)
        if self.run.pulls:
            # Nothing else shares the clock: it jumps to the deadline or the next arrival, whichever
            # comes first (``Run.pull_arrivals``). Textbook:
            # ``yield clock.at(max(wake, clock.now))``.
            wake = self.run.next_arrival if until is None else min(until, self.run.next_arrival)
            if wake < math.inf and env.jump(max(wake, env.now)):
                return
        # A deadline already past is "now": the policy is asked again at once (not forever:
        # StandStill). Without a deadline, a bell the next passenger rings (cheaper than an
        # interrupt: no exception).
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
        """Textbook: ``serve`` from ``price`` to ``step_done``, for a run of passes that ends where
        its next decision would see an arrival (told in advance, ``stop_at``, or ``cut``)."""
        env, ex = self.env, self.executor
        decided = env.now
        repeats = step.interruptible and step.repeat > 1 and not self.run.closed
        stop_at = None
        if repeats:
            # Where the next passenger is surely ours (a lone server), the repeat stops at its
            # arrival, priced or real: knowing it, the server prices a repeat only up to it, with no
            # interrupt, and stops just where one would. Where a router chooses only when it comes,
            # a real engine stops at the next arrival anywhere, and a priced repeat runs on until an
            # arrival routed here interrupts it.
            if not self.run.fleet or not ex.can_cut:
                stop_at = self.run.next_arrival
        start, ends = ex.run(step, decided, stop_at)
        # The simulated clock jumps to the step's end when nothing else happens before it: no
        # arrival can cut it, and the event of its end would be the very next one anyway.
        jumped = env.jump(ends[-1])
        if repeats and stop_at is None and len(ends) > 1 and not jumped:
            self.cut_until = ends[-2]
        if ex.can_cut and len(ends) > 1 and not jumped:
            # Textbook: go_down() lets the pass running end, and runs no other.
            self.down_cut_until = ends[-2]
        end = None if jumped else env.at(ends[-1], self.priority)
        while end is not None:
            try:
                yield end
                end = None
            except simpy.Interrupt:
                # A passenger for us at env.now: the repeat ends at the first pass boundary at or
                # after it. numpy's searchsorted, side "left"; a list's too
                k = bisect_left(ends, env.now) + 1
                ends = ends[:k]
                ex.cut(k)
                end = None if env.jump(ends[-1]) else env.at(ends[-1], self.priority)
        self.cut_until = self.down_cut_until = -math.inf
        outcome = self.policy.on_step_end(step, len(ends), env.now)
        ex.release(outcome.finished)
        self.steps += 1
        self._report(decided, step, start, ends, outcome)

    def _report(self, decided: float, step, start: float, ends, outcome) -> None:
        """The step's outcome to the run's records (and trace), and its finished requests off our
        count."""
        run = self.run
        run.recorder.step(step, start, ends, outcome, self.index)
        if run.trace is not None:
            run.trace.append((decided, step, start, ends) + ((self.index,) if run.fleet else ()))
        if outcome.finished:
            self.outstanding -= len(outcome.finished)
            run.progress(len(outcome.finished))

    def withdraw(self, request_id: int, reason: str) -> None:
        """A request's client has gone (a live server): the policy lets it go before its next
        decision, never in the middle of a step; a sleeping server wakes to decide again without
        it."""
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
        """From a user's process: finish the step running, then run nothing until
        ``come_back()``."""
        if not self.down:
            self.down = True
            self._back = self.env.event()
            self._rouse()  # asleep: it goes down now, not at its next decision
            # in a priced run of passes: after the one running
            if self.env.now <= self.down_cut_until:
                self.cut_until = self.down_cut_until = -math.inf
                self._interrupt()

    def come_back(self) -> None:
        """From a user's process: the server decides again, at once."""
        if self.down:
            self.down = False
            self._back.succeed()

    def __repr__(self) -> str:
        return (
            f"ServerProcess({self.index}, {self.policy.describe()}, outstanding={self.outstanding})"
        )
