"""Lab 6, worked solution: a maintenance outage as a SimPy process of one's own."""

from __future__ import annotations

from collections.abc import Callable


def outage(start: float, duration: float, server: int = 0) -> Callable:
    """Part A: a process that takes ``servers[server]`` down at ``start`` for ``duration``
    seconds."""

    def maintenance(env, servers):
        yield env.timeout(start)
        servers[server].go_down()
        yield env.timeout(duration)
        servers[server].come_back()

    return maintenance


def predict_wait_in_outage(duration: float) -> float:
    """Part B: arrivals during the outage are uniform over it (Poisson), and each waits for the rest
    of it: duration / 2 on average. At light load the backlog drains in a few steps, a small
    extra."""
    return duration / 2


ROUTER = "least-loaded"
WHY = (
    "Round-robin does not look: it keeps sending every other request to server 0 while it is down, "
    "so half the traffic of those 30 seconds queues behind the outage and waits 15 s on average. "
    "Least-loaded sees server 0's queue of outstanding requests grow and sends new requests to "
    "server 1, which has room; only the few routed before the queue grew wait for server 0 to come "
    "back. A load balancer that counts what each server holds routes around a sick server without "
    "being told it is sick."
)
