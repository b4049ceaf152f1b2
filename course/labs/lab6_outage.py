"""Lab 6: a process of your own, the bus that goes in for maintenance.

The simulator is a handful of SimPy processes on one clock: one hands each request to
a server at its arrival time, one per server runs its batching policy. You can add your
own, as in SimPy's gas-station and bank examples: ``simulate(..., processes=[f])``, where
``f(env, servers)`` is a generator function. ``env`` is the SimPy environment (``env.now``,
``yield env.timeout(seconds)``); ``servers`` are the run's servers: ``servers[0].go_down()``
has server 0 finish the step it is running and then run nothing, ``servers[0].come_back()``
has it decide again at once. Requests routed to a server that is down wait in its queue.

Part A. Write ``outage(start, duration, server)``: it returns a process function that, at
``start`` seconds, takes ``servers[server]`` down for ``duration`` seconds.

Part B. One server, light traffic (it is idle most of the time). Predict, before
simulating, the mean time a request that arrives *during* the outage waits before its
first step starts. Hint: when do they arrive, and when does the server come back?

Part C. Two servers behind a router, server 0 down for 30 s. Which router keeps the mean
time to first token lower: ``"round-robin"`` (blind turns) or ``"least-loaded"`` (fewest
requests held)? Set ``ROUTER`` to your answer, and say why in ``WHY``, in your own words
(a few sentences: what does each router see while server 0 is down?).

Check your work:  pytest course/labs -k lab6
"""

from __future__ import annotations

from collections.abc import Callable


def outage(start: float, duration: float, server: int = 0) -> Callable:
    """Part A: a process that takes ``servers[server]`` down at ``start`` for ``duration`` seconds."""

    def maintenance(env, servers):
        # --- your code here: wait until start, take the server down, wait, bring it back ---
        raise NotImplementedError("your code here: outage")
        yield  # a generator function: keep this line, or any yield of your own

    return maintenance


def predict_wait_in_outage(duration: float) -> float:
    """Part B: the mean wait before the first step, for requests that arrive during the outage."""
    # --- your code here ---
    raise NotImplementedError("your code here: predict_wait_in_outage")


# Part C: "round-robin" or "least-loaded", and why.
ROUTER = "your code here"
WHY = "your code here"
