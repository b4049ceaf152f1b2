"""The server: one SimPy process that asks its policy what to run, runs it, and writes it down.

::

    while True:
        the requests that have arrived by now join the policy's queue (or are turned away)
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


def serve(clock: Clock, requests: list[Request], policy, model: StepTimeModel, log: list):
    """The server's process. ``log`` gets one row per pass (the columns of ``Records.steps``); it
    returns when its last pass ended (None: none ran)."""
    come = 0  # requests[:come] have arrived
    last_end = 0.0  # when the last pass ended
    while True:
        while come < len(requests) and requests[come].arrival <= clock.now:
            requests[come].rejected = policy.arrive(requests[come])
            come += 1
        everyone_in = come == len(requests)
        step = policy.next_step(clock.now, everyone_in)
        if step is None:
            if everyone_in and policy.idle:
                return last_end if log else None
            deadline = policy.deadline()
            wake = min(math.inf if everyone_in else requests[come].arrival,
                       math.inf if deadline is None else deadline)
            yield clock.at(max(wake, clock.now))
            continue
        start, seconds = price(model, step, clock.now, last_end)
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
        log.append((start, end - start, 1, len(step.prefill) + len(step.decode), prompt_tokens,
                    len(step.decode), step.padded_rows, step.kv_in_use, len(step.preempted)))


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
