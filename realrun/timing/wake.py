"""The cold start after an idle: what a step costs extra after the server slept.

A server that waits for arrivals sleeps; its next step starts late (the sleep overshoots) and runs
its first passes cold (caches and the CPU's clock recover over a few passes). At light load this is
most of the gap between a model of warm passes and the wall clock, so the profile times it: after
each idle of the grid's ``wake_idle``, a short prefill and a few decode passes run cold, then at
once again warm.
"""

from __future__ import annotations

import time

import numpy as np

from batchsim.core.step import Chunk, Step
from batchsim.sim.grid2d import isotonic

from .grid import Grid

__all__ = ["WAKE_PAIRS", "wake"]

#: cold/warm pairs timed after each idle (at least; more where the grid repeats more)
WAKE_PAIRS = 5


def wake(engine, grid: Grid, ids: list[int], bar) -> dict:
    """What a step costs extra after the server slept: the sleep's overshoot, and a cold first few
    passes.

    After each idle time, a short prefill and a few decode passes run twice: right after the sleep
    (cold) and at once again (warm); the difference is the cold start's cost."""
    clock, n = engine.clock, min(32, grid.prefill_lengths[-1])

    def sequence() -> float:
        t0 = clock()
        engine.execute(Step(prefill=(Chunk(ids[0], 0, n, True),)))
        engine.execute(Step(decode=(ids[0],), kv_read=n, decode_width=n, repeat=4))
        t1 = clock()
        engine.release([ids[0]])
        return t1 - t0

    late, extra = [], []
    for idle in grid.wake_idle:
        paired = []
        for _ in range(max(WAKE_PAIRS, grid.repeats)):
            target = clock() + idle
            time.sleep(idle)
            late.append(clock() - target)
            cold = sequence()
            paired.append(cold - sequence())
        # The median of paired differences: each cold run is set against the warm run beside it,
        # so a slow moment of the machine lands on both (a difference of two means of three runs
        # each read +7 ms after 5 ms idle and +2 ms after 20 ms on a 11 ms pass, beside other work).
        extra.append(max(0.0, float(np.median(paired))))
        if bar is not None:
            bar.update(1)
    # Longer idle leaves the caches no warmer: the extra never falls as the idle grows. Where
    # noise says it does, the two readings pool (isotonic), instead of a short idle priced dearer.
    extra = isotonic(np.asarray(extra)).tolist() if extra else extra
    return {
        "idle": list(grid.wake_idle),
        "extra": extra,
        "late": float(np.mean(late)) if late else 0.0,
    }
