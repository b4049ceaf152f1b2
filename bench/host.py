"""The host yardstick every bench prints beside its absolute times: hosts differ (one ran pure
Python 3x slower than another), and a shared one differs from minute to minute."""

from __future__ import annotations

import time

__all__ = ["yardstick"]


def yardstick() -> float:
    """Seconds for a 10M-iteration pure-Python loop: how fast this host runs Python right now."""
    t, x = time.perf_counter(), 10_000_000
    while x:
        x -= 1
    return time.perf_counter() - t
