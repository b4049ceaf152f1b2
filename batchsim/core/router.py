"""Routers: which server of a fleet takes a request, decided the moment it arrives.

A fleet is N servers, each with its own batching policy and its own KV cache, behind
one front door. The router sees only what a real load balancer sees at that instant:
how many requests each server holds (queued or running: *outstanding*) and how much
KV cache each one has in use at its last step boundary.

- ``round-robin``: 0, 1, 2, ..., N-1, 0, ...: blind, and fair only when requests are alike;
- ``least-loaded``: the server with the fewest outstanding requests (vLLM's production
  router and most L7 balancers call this least-requests);
- ``least-kv``: the server with the least KV cache in use: memory is what caps a batch,
  but a queue holds no KV yet, so it can send a request to a server with a long queue;
- ``random``: uniformly at random, from an explicit seeded generator.

Ties are broken in turn (the tied server after the last one chosen), so at light load,
where every server is empty, the least-* routers spread requests as round-robin does
instead of piling them on server 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import check_choice, check_int_at_least

__all__ = [
    "Router",
    "RoundRobin",
    "LeastLoaded",
    "LeastKV",
    "RandomRouter",
    "ROUTER_NAMES",
    "make_router",
]

ROUTER_NAMES = ("round-robin", "least-loaded", "least-kv", "random")


class Router:
    """Base class: ``start(n)`` for a fresh run over n servers, then ``choose`` per arrival."""

    name = "router"

    def start(self, n: int) -> None:
        self.n = n
        self._next = 0  # where the turn for breaking ties starts

    def choose(self, outstanding: Sequence[int], policies: Sequence) -> int:
        raise NotImplementedError

    def _in_turn(self, candidates: list[int]) -> int:
        """The first candidate at or after the turn, cyclically; the turn moves past it."""
        n, k = self.n, self._next
        best = min(candidates, key=lambda i: (i - k) % n)
        self._next = (best + 1) % n
        return best

    def __repr__(self) -> str:
        return self.name


class RoundRobin(Router):
    name = "round-robin"

    def choose(self, outstanding, policies) -> int:
        i = self._next
        self._next = (i + 1) % self.n
        return i


class LeastLoaded(Router):
    name = "least-loaded"

    def choose(self, outstanding, policies) -> int:
        low = min(outstanding)
        return self._in_turn([i for i, x in enumerate(outstanding) if x == low])


class LeastKV(Router):
    name = "least-kv"

    def choose(self, outstanding, policies) -> int:
        kv = [p.kv_in_use for p in policies]
        low = min(kv)
        tied = [i for i, x in enumerate(kv) if x == low]
        fewest = min(outstanding[i] for i in tied)
        return self._in_turn([i for i in tied if outstanding[i] == fewest])


class RandomRouter(Router):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        check_int_at_least("router seed", seed, 0)
        self.seed = int(seed)

    def start(self, n: int) -> None:
        super().start(n)
        # a stream of its own
        self.rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x726F75]))

    def choose(self, outstanding, policies) -> int:
        return int(self.rng.integers(self.n))

    def __repr__(self) -> str:
        return f"random(seed={self.seed})"


def make_router(name: str, seed: int = 0) -> Router:
    """A router by name (``random`` draws from a generator seeded with ``seed``)."""
    check_choice("router", name, ROUTER_NAMES)
    if name == "random":
        return RandomRouter(seed)
    return {"round-robin": RoundRobin, "least-loaded": LeastLoaded, "least-kv": LeastKV}[name]()
