"""The server: one SimPy process that asks its policy what to run, runs it, and writes it down.

::

    while True:
        the requests that have arrived by now join the policy's queue (or are turned away)
        if the server is down:  wait until it is back, then look again
        step = policy.next_step(now, everyone_in)
        if there is none:  stop if nobody is left, else sleep until the next arrival or the
                           policy's deadline
        else:              price the pass, wait until it ends, then give each request its
                           token and record who finished

A step is one forward pass, and the policy decides again before every pass. The server knows
the workload, so it reads the arrivals itself between passes: a request that arrives while a
pass runs is seen by the next decision. A policy (``padded.py``, ``continuous.py``) offers
``start(limits)``, ``arrive(request)`` (a reason if it can never run), ``next_step(now,
everyone_in)`` (a ``Step`` or None), ``deadline()``, ``step_done(step)`` (who got a token, who
finished), ``idle``, ``kv_peak`` and ``preemptions``.

A process of your own runs beside the server on the same clock (``simulate(...,
processes=[f])``, ``f(env, servers)``, as in SimPy's gas station): a maintenance window calls
``servers[0].go_down()`` and, later, ``servers[0].come_back()``. Nothing else changes. At one
instant the user's event and the server's (a pass's end, a wake-up) come in the order SimPy
scheduled them; ``tests/test_textbook.py`` holds outages to the fast path's records away from
such ties, where the fast path's order is its own.

The clock is SimPy's with one addition, ``Clock.at``: an event *at* a time. SimPy keeps time
as ``now + delay``, and in floating point ``now + (t - now)`` is not always ``t``: an arrival at
0.3 s would come at 0.30000000000000004 s, and the records would differ in the last digit.
"""

from __future__ import annotations

import math
from heapq import heappush

import simpy
from simpy.events import NORMAL

from ..core.step import Step
from ..sim.stepmodel import StepTimeModel
from .request import Request


class Clock(simpy.Environment):
    def at(self, t: float) -> simpy.Event:
        event = self.event()
        event._ok, event._value = True, None  # triggered, as a timeout is; SimPy runs it at t
        heappush(self._queue, (t, NORMAL, next(self._eid), event))
        return event


class Server:
    """One server: ``policy`` decides, ``model`` prices each pass, ``log`` gets a row per pass
    (the columns of ``Records.steps``). ``down``: a process of the user's took it down."""

    def __init__(self, clock: Clock, requests: list[Request], policy, model: StepTimeModel):
        self.clock, self.requests, self.policy, self.model = clock, requests, policy, model
        self.log: list[tuple] = []
        self.down = False
        self.back = clock.event()  # what a server that is down waits for: come_back() fires it

    def go_down(self) -> None:
        """Finish the pass running, then run nothing until ``come_back()``. Arrivals still join
        the queue. A server asleep is not woken: it finds itself down when it next wakes (an
        arrival, a deadline), and until then it would have run nothing anyway."""
        if not self.down:
            self.down, self.back = True, self.clock.event()

    def come_back(self) -> None:
        """Decide again, now."""
        if self.down:
            self.down = False
            self.back.succeed()

    def serve(self):
        """The server's process; it returns when its last pass ended (None: none ran)."""
        clock, requests, policy = self.clock, self.requests, self.policy
        come = 0  # requests[:come] have arrived
        last_end = 0.0  # when the last pass ended
        while True:
            while come < len(requests) and requests[come].arrival <= clock.now:
                requests[come].rejected = policy.arrive(requests[come])
                come += 1
            if self.down:
                yield self.back
                continue  # back: see who came meanwhile, then decide
            everyone_in = come == len(requests)
            step = policy.next_step(clock.now, everyone_in)
            if step is None:
                if everyone_in and policy.idle:
                    return last_end if self.log else None
                deadline = policy.deadline()
                wake = min(
                    math.inf if everyone_in else requests[come].arrival,
                    math.inf if deadline is None else deadline,
                )
                yield clock.at(max(wake, clock.now))
                continue
            start, seconds = price(self.model, step, clock.now, last_end)
            end = last_end = start + seconds
            yield clock.at(end)
            made, finished = policy.step_done(step)
            for c in step.prefill:
                if requests[c.request_id].start is None:
                    requests[c.request_id].start = start
            for r in made:
                r.got_token(end)
            for r in finished:
                r.finish = end
            prompt_tokens = sum(c.length for c in step.prefill) + step.prefill_padding
            self.log.append(
                (
                    start,
                    end - start,
                    1,
                    len(step.prefill) + len(step.decode),
                    prompt_tokens,
                    len(step.decode),
                    step.padded_rows,
                    step.kv_in_use,
                    len(step.preempted),
                )
            )

    def __repr__(self) -> str:
        return f"Server({self.policy!r}, {'down' if self.down else 'up'})"


def price(model: StepTimeModel, step: Step, now: float, last_end: float) -> tuple[float, float]:
    """(when the pass starts, how long it takes), decided at ``now``."""
    start = now + model.step_gap  # the server's own time between passes, if the model has one
    seconds = float(model.durations(step, 1)[0])
    if now > last_end:  # the server sat idle: it wakes late and runs its first pass cold
        late, extra = model.wake_penalty(now - last_end)
        start += late
        seconds += extra
    # A fitted model's negative offsets could price a pass below zero or start it early: neither
    # can happen on a machine.
    return max(start, now), max(seconds, 0.0)
