"""``realrun.jitter``: a pass that jitters more than loops of its own length is called the engine's."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from realrun.doctor import _whose
from realrun.jitter import pass_jitter, spread


class _Engine:
    """Stands in for the engine: a "pass" that takes 1 ms or 4 ms, at random.

    It waits that long (so the yardstick loops are sized to a real pass) but reports exactly that
    long: a busy-wait on a shared 2-core machine overshoots when it is preempted, and the test is
    of what pass_jitter does with the times, not of the host's scheduler."""

    def __init__(self) -> None:
        self.lm = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(hidden_size=64)))
        self.rng = np.random.default_rng(0)
        self.started: list[int] = []

    def start(self, workload) -> None:
        self.started.append(len(workload))

    def fill_rows(self, ids, contexts) -> None:
        assert ids == [0] and contexts == [64]

    def execute(self, step):
        t0 = time.perf_counter()
        until = t0 + (0.004 if self.rng.random() < 0.5 else 0.001)
        while time.perf_counter() < until:
            pass
        return t0, [until]


def test_spread_is_p90_over_p10_less_one():
    assert abs(spread(np.arange(1, 102)) - (91 / 11 - 1)) < 1e-12
    assert spread([2.0] * 10) == 0.0


def test_a_pass_that_jitters_more_than_the_machine_is_called_the_engines():
    eng = _Engine()
    got = pass_jitter(eng, passes=40)
    assert got["passes"] == 40
    # Half 1 ms, half 4 ms: the pass's p90 / p10 is 4 (spread 3), its median one of the two or
    # between them. (Reported times are exact, so only float rounding is allowed for.)
    assert abs(got["pass"]["spread"] - 3.0) < 1e-6
    assert 0.001 - 1e-9 <= got["pass"]["median_s"] <= 0.004 + 1e-9
    for loop in ("torch loop", "python loop"):
        assert got[loop]["spread"] >= 0 and got[loop]["median_s"] > 0
    noisier = max(got["torch loop"]["spread"], got["python loop"]["spread"])
    assert abs(got["excess"] - (got["pass"]["spread"] - noisier)) < 1e-12
    assert got["excess"] > 0.5  # a machine whose loops spread by 4 could not be measured on at all
    assert "engine's own" in _whose(got["excess"])
    assert eng.started == [1, 0]  # the engine is left empty, as doctor's next probe expects


def test_a_pass_within_the_loops_spread_is_the_machines():
    assert "this machine's, not the engine's" in _whose(0.0)
    assert "this machine's" in _whose(0.10) and "engine's own" in _whose(0.11)
