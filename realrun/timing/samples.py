"""Timed passes by shape: each shape's seconds, their robust mean."""

from __future__ import annotations

import numpy as np

__all__ = ["Samples", "robust_mean"]


class Samples:
    """Timed passes by shape key: each key's seconds, and their robust mean."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, list[float]] = {}

    def add(self, key: tuple, seconds) -> None:
        self.by_key.setdefault(key, []).extend(float(s) for s in np.atleast_1d(seconds))

    def mean(self, key: tuple) -> float:
        return robust_mean(self.by_key[key])


def robust_mean(xs) -> float:
    """The mean of the timings, leaving out those over twice their median.

    The mean, because the simulator adds step times up and a median would underestimate the busy
    time of right-skewed timings. But a pass that took twice the usual time was interrupted by
    another process: the core was lent away, which says nothing about this engine's passes."""
    t = np.asarray(xs, dtype=float)
    return float(t[t <= 2 * np.median(t)].mean())
