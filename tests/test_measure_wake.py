"""The cold start after an idle, as the profile measures it (``realrun.timing.wake``).

A fake engine whose passes take fixed times, plus a cold extra on the first pass after a sleep
that the test chooses, so what the measurement should read is known exactly."""

from __future__ import annotations

import importlib
import time
from types import SimpleNamespace

import numpy as np
import pytest

from realrun.timing.grid import Grid
from realrun.timing.wake import WAKE_PAIRS
from realrun.timing.wake import wake as _wake

# the module: its name is also a function's
wake_module = importlib.import_module("realrun.timing.wake")

PASS_S = 0.010  # every pass of the fake engine, warm
REAL_SLEEP = time.sleep


class ColdAfterSleep:
    """``clock`` is the real clock plus the time the fake passes took. The first pass after a
    sleep of ``idle`` costs ``cold[idle]`` extra (the sleep is seen through ``sleep``, not timed:
    a busy machine's own pauses must not make a warm pass look cold); ``slow`` lists calls (by
    count) that another process made slower by ``slow_s``."""

    def __init__(self, cold: dict[float, float], slow: set[int] = frozenset(), slow_s: float = 0.0):
        self.cold, self.slow, self.slow_s = cold, slow, slow_s
        self.spent = 0.0
        self.calls = 0
        self.slept: float | None = None

    def clock(self) -> float:
        return time.perf_counter() + self.spent

    def sleep(self, seconds: float) -> None:
        self.slept = seconds
        REAL_SLEEP(seconds)

    def execute(self, step) -> None:
        extra = self.cold[self.slept] if self.slept is not None else 0.0
        self.slept = None
        self.spent += PASS_S * getattr(step, "repeat", 1) + extra
        self.spent += self.slow_s if self.calls in self.slow else 0.0
        self.calls += 1

    def release(self, ids) -> None:
        pass


@pytest.fixture(autouse=True)
def seen_sleep(monkeypatch):
    """Routes the measurement's sleep through the engine made last, so it knows which pass is
    cold."""
    made: list[ColdAfterSleep] = []
    real_init = ColdAfterSleep.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(ColdAfterSleep, "__init__", init)
    monkeypatch.setattr(wake_module, "time", SimpleNamespace(sleep=lambda s: made[-1].sleep(s)))


def grid(idles) -> Grid:
    return Grid(
        decode_rows=(1,),
        decode_widths=(32,),
        prefill_rows=(1,),
        prefill_lengths=(32,),
        repeats=1,
        wake_idle=tuple(idles),
    )


def test_the_extra_is_the_cold_start_and_never_falls_as_the_idle_grows():
    # Read alone, 5 ms would be dearer than 20 ms (noise on a real machine does this): pooled.
    cold = {0.001: 0.001, 0.005: 0.004, 0.02: 0.002, 0.1: 0.005}
    got = _wake(ColdAfterSleep(cold), grid(cold), [0], None)
    assert got["idle"] == list(cold)
    assert np.allclose(got["extra"], [0.001, 0.003, 0.003, 0.005], atol=2e-4)
    assert all(b >= a for a, b in zip(got["extra"], got["extra"][1:]))
    assert got["late"] >= 0


def test_a_slow_moment_on_one_pair_does_not_move_the_reading():
    # One call in the first idle's pairs is made 50 ms slower (the core lent away): the median of
    # paired differences ignores it, where a mean of three would have read +17 ms.
    cold = {0.001: 0.002, 0.1: 0.002}
    calls_per_pair = 4  # two sequences of a prefill and a decode run
    slow = {calls_per_pair * 2}  # the cold sequence's first pass in the third pair
    got = _wake(ColdAfterSleep(cold, slow, 0.05), grid(cold), [0], None)
    assert np.allclose(got["extra"], [0.002, 0.002], atol=2e-4)


def test_at_least_five_pairs_are_timed_after_each_idle():
    engine = ColdAfterSleep({0.001: 0.0})
    _wake(engine, grid([0.001]), [0], None)
    assert engine.calls == 4 * WAKE_PAIRS >= 20


@pytest.mark.parametrize("extra", [0.0, 0.003])
def test_no_cold_start_reads_none_and_a_flat_one_reads_flat(extra):
    cold = {0.001: extra, 0.02: extra}
    got = _wake(ColdAfterSleep(cold), grid(cold), [0], None)
    assert np.allclose(got["extra"], [extra, extra], atol=2e-4)
