"""Lab 6: a process of your own, the bus that goes in for maintenance.

Read ``batchsim/textbook/server.py`` first: the server is one SimPy process (``Server.serve``:
decide, run a pass, record it), and ``go_down()`` / ``come_back()`` are the few lines above it.
You add a process of your own beside it, as in SimPy's gas-station and bank examples:
``textbook.simulate(..., processes=[f])``, with ``textbook`` the package ``batchsim.textbook``
and ``f(env, servers)`` a generator function. ``env`` is the SimPy environment (``env.now``,
``yield env.timeout(seconds)``); ``servers`` are the run's servers: ``servers[0].go_down()``
has server 0 finish the pass it is running and then run nothing, ``servers[0].come_back()``
has it decide again at once. Requests that arrive while it is down wait in its queue.

Part A. Write ``outage(start, duration, server)``: it returns a process function that, at
``start`` seconds, takes ``servers[server]`` down for ``duration`` seconds.

Part B. One server, light traffic (it is idle most of the time). Predict, before
simulating, the mean time a request that arrives *during* the outage waits before its
first step starts. Hint: when do they arrive, and when does the server come back?

Part C. Two servers behind a router, server 0 down for 30 s. Which router keeps the mean
time to first token lower: ``"round-robin"`` (blind turns) or ``"least-loaded"`` (fewest
requests held)? Set ``ROUTER`` to your answer, and say why in ``WHY``, in your own words
(a few sentences: what does each router see while server 0 is down?).
Part C (and Part A's check of the other server) runs on the fast simulator,
``batchsim.simulate(..., replicas=2, router=...)``: the
textbook is one server, kept short enough to read in one sitting, and a fleet needs what it
leaves out (an arrivals process that routes each request as it comes, and wakes the server it
picks). Your process is the same there: each of ``servers`` has ``go_down()`` and ``come_back()``;
the routers are ``batchsim/core/router.py``, a few lines each.

Check your work:  pytest course/labs -k lab6
"""

from __future__ import annotations

from collections.abc import Callable


def outage(start: float, duration: float, server: int = 0) -> Callable:
    """Part A: a process that takes ``servers[server]`` down at ``start`` for ``duration``
    seconds."""

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
