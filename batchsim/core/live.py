"""Live arrivals: requests that come from outside the run (a network), on the wall clock.

A run over a workload knows every arrival in advance. A server for a class does not: a
request comes when a student sends it. This module lets the one driver (``drive``) serve
such traffic, with nothing else changed:

- ``Inbox``: what other threads hand the run (a request, a withdrawal, "no more"), with the
  moment each came. It is the only thing they touch: SimPy is not thread-safe, so every
  event is made in the run's own thread;
- ``LiveClock``: the wall clock (``WallClock``) whose sleep an inbox cuts short: asleep
  until the next event is due, it wakes the moment something comes in, and hands it to the
  arrivals process at the moment it came (never before the clock's own now);
- ``LiveArrivals``: the arrivals process
  (``drive(..., arrivals=live, recorder=GrowingRecorder())``): each request is handed to its server
  exactly as the workload's arrivals are (``Run.hand_over``), a withdrawal (a client that
  disconnected) goes to the server holding it, and "no more" closes the run, which ends when what
  was admitted is served;
- ``GrowingRecorder``: the logbook of a run whose length nobody knows in advance;
- ``LiveExecutor``: the wall clock's executor on a ``LiveClock``; a repeated step stops at
  the first pass after something comes in (the next arrival is unknown, so it cannot be
  told beforehand).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from .recorder import Recorder
from .records import Records
from .server import ARRIVAL, schedule_at
from .wallclock import WallClock, WallExecutor
from .workload import Request, Workload

__all__ = ["Inbox", "LiveClock", "LiveArrivals", "GrowingRecorder", "LiveExecutor"]

_ARRIVE, _WITHDRAW, _CLOSE = "arrive", "withdraw", "close"


class Inbox:
    """What other threads hand a live run, in order, each with the moment it came
    (``clock() - t0``).

    ``submit`` gives the request its id (0, 1, 2, ... in arrival order, as every record expects)
    under the same lock as its arrival time, so ids and times rise together."""

    def __init__(self, clock: Callable[[], float], t0: float) -> None:
        self.clock, self.t0 = clock, t0
        self._items: deque[tuple] = deque()
        self._cv = threading.Condition()
        self._next_id = 0
        self.closed = False

    def now(self) -> float:
        return self.clock() - self.t0

    def submit(self, prompt_tokens: int, output_tokens: int, payload=None) -> int:
        """A request arrives now; its id. ``payload`` travels with it to
        ``LiveArrivals.on_admit``."""
        with self._cv:
            if self.closed:
                raise RuntimeError("the server is shutting down: no new requests")
            rid, t = self._next_id, self.now()
            self._next_id += 1
            self._items.append(
                (_ARRIVE, t, Request(rid, t, int(prompt_tokens), int(output_tokens)), payload)
            )
            self._cv.notify()
        return rid

    def withdraw(self, request_id: int, reason: str) -> None:
        """The request's client has gone: the run lets it go at its next decision."""
        with self._cv:
            self._items.append((_WITHDRAW, self.now(), request_id, reason))
            self._cv.notify()

    def close(self) -> None:
        """No more requests: the run serves what it has, then ends."""
        with self._cv:
            if not self.closed:
                self.closed = True
                self._items.append((_CLOSE, self.now(), None, None))
                self._cv.notify()

    @property
    def submitted(self) -> int:
        """Requests submitted so far (the next one's id)."""
        return self._next_id

    def arrivals_pending(self) -> int:
        """Requests in the inbox, not yet handed to the run."""
        return sum(1 for it in list(self._items) if it[0] == _ARRIVE)

    @property
    def pending(self) -> bool:
        return bool(self._items)  # a deque's length is read atomically: no lock for a glance

    def wait(self, timeout: float | None) -> bool:
        """Sleep up to ``timeout`` seconds (None: as long as it takes); True if something came
        in."""
        with self._cv:
            if not self._items:
                self._cv.wait(timeout)
            return bool(self._items)

    def take(self) -> list[tuple]:
        with self._cv:
            items = list(self._items)
            self._items.clear()
        return items


class LiveClock(WallClock):
    """The wall clock, woken by an inbox: what comes in is delivered to the arrivals process at the
    moment the first of it came (never earlier than the clock's own now)."""

    def __init__(self, clock: Callable[[], float], t0: float, inbox: Inbox) -> None:
        super().__init__(clock, lambda s: None, t0)
        self.inbox = inbox
        self.delivery: simpy.Event | None = None  # what the arrivals process waits on

    def step(self) -> None:
        inbox = self.inbox
        while True:
            if inbox.pending and self.delivery is not None:
                self._deliver()
            t = self.peek()
            wait = None if t == math.inf else self.until(t)
            if wait is not None and wait <= 0:
                break
            if not inbox.wait(wait) and wait is not None:
                break  # the next event is due and nothing came in
        simpy.Environment.step(self)

    def _deliver(self) -> None:
        # At the moment the first of them came (never before now): a request that came during a step
        # is handed to the policy before that step's end is, exactly as a workload's arrival during
        # a step is, so the next decision sees it. (Delivered at the moment it is *taken*, it would
        # come after the step's end, and the next decision, and its repeat, would run without it.)
        ev, self.delivery = self.delivery, None
        items = self.inbox.take()
        ev._value, ev._ok = items, True  # Event.succeed, at that time and with arrivals' priority
        schedule_at(self, ev, max(self.now, items[0][1]), ARRIVAL)


class LiveArrivals:
    """The arrivals process of a live run: ``drive(Workload(()), ..., arrivals=LiveArrivals(inbox),
    recorder=GrowingRecorder())``.

    ``on_admit(request, payload)`` runs, in the run's thread, before the policy sees a request
    (a real engine learns its prompt there); ``on_decided(request_id, reason)`` after it has
    (``reason`` None: queued; else why it can never run). A request is handed over, and its arrival
    recorded, at the moment it came: that is what its waiting time counts from."""

    def __init__(self, inbox: Inbox, on_admit=None, on_decided=None) -> None:
        self.inbox = inbox
        self.on_admit, self.on_decided = on_admit, on_decided

    def __call__(self, run) -> simpy.events.ProcessGenerator:
        env = run.env
        if not isinstance(env, LiveClock):
            raise TypeError(
                f"live arrivals need a LiveClock (a LiveExecutor's environment), got "
                f"{type(env).__name__}"
            )
        rec = run.recorder
        if not isinstance(rec, GrowingRecorder):
            raise TypeError(
                "live arrivals need drive(..., recorder=GrowingRecorder()): nobody knows how many "
                "will come"
            )
        run.next_arrival = math.inf  # unknown: a real step is stopped by the inbox instead
        while True:
            env.delivery = env.event()
            items = yield env.delivery
            for kind, _t, what, extra in items:
                if kind == _ARRIVE:
                    rec.add(what)
                    if self.on_admit is not None:
                        self.on_admit(what, extra)
                    reason = run.hand_over(what, env.now)
                    if self.on_decided is not None:
                        self.on_decided(what.id, reason)
                elif kind == _WITHDRAW:
                    server = (
                        run.servers[0]
                        if run.router is None
                        else run.servers[int(rec.replica[what])]
                    )
                    server.withdraw(what, extra)
                elif not run.closed:
                    # What was admitted is served; the process stays, for clients that leave
                    # meanwhile.
                    run.close(env.now)


class GrowingRecorder(Recorder):
    """A ``Recorder`` for a run whose requests are not known in advance: ``add`` each as it
    arrives."""

    _GROWN = (
        "arrival",
        "prompt_tokens",
        "output_tokens",
        "start",
        "first_token",
        "finish",
        "last_token",
        "itl_max",
        "tokens",
        "preemptions",
    )

    def __init__(self, capacity: int = 1024, **kw) -> None:
        super().__init__(Workload(()), **kw)
        self.n = 0
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        for name in self._GROWN:
            old = getattr(self, name)
            ints = name in ("tokens", "preemptions", "prompt_tokens", "output_tokens")
            new = np.zeros(capacity, dtype=np.int64) if ints else np.full(capacity, np.nan)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def add(self, request: Request) -> None:
        i = request.id
        if i != self.n:
            raise ValueError(f"requests must be added in id order: got {i}, expected {self.n}")
        if i >= len(self.arrival):
            self._grow(2 * len(self.arrival))
        self.arrival[i], self.prompt_tokens[i], self.output_tokens[i] = (
            request.arrival,
            request.prompt_tokens,
            request.output_tokens,
        )
        self.rejected.append(None)
        self.n = i + 1

    def records(self) -> Records:
        for name in self._GROWN:
            setattr(self, name, getattr(self, name)[: self.n])
        return super().records()


class LiveExecutor(WallExecutor):
    """The wall clock's executor for live traffic: its environment is a ``LiveClock`` on ``inbox``,
    and a repeated step stops at the first pass boundary after anything comes in."""

    def __init__(self, engine, inbox: Inbox, clock: Callable[[], float], **kw) -> None:
        super().__init__(engine, clock, lambda s: None, t0=inbox.t0, **kw)
        self.inbox = inbox

    def environment(self) -> LiveClock:
        return LiveClock(self.clock, self.t0, self.inbox)

    def should_stop(self, stop_at: float | None) -> Callable[[], bool] | None:
        inbox = self.inbox
        return None if stop_at is None else (lambda: inbox.pending)
