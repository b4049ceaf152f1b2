"""``realrun.timing.jitter``: a pass that jitters more than loops of its own length is called the
engine's."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from realrun.cli.doctor import _whose
from realrun.timing.jitter import jitter_summary, pass_jitter, spread


class _Engine:
    """Stands in for the engine: a "pass" that reports 1 ms or 4 ms, at random, without waiting.

    Every time here is injected, the pass's and the yardsticks' alike: the test is of what
    pass_jitter does with the times, not of the host's scheduler (on a loaded 2-core machine the
    machine's own loops spread by 11, which no assertion about them could survive)."""

    def __init__(self) -> None:
        self.lm = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(hidden_size=64)))
        self.rng = np.random.default_rng(0)
        self.started: list[int] = []
        self.now = 0.0

    def start(self, workload) -> None:
        self.started.append(len(workload))

    def fill_rows(self, ids, contexts) -> None:
        assert ids == [0] and contexts == [64]

    def execute(self, step):
        t0 = self.now
        self.now += 0.004 if self.rng.random() < 0.5 else 0.001
        return t0, [self.now]


def _steady_loops(spreads: dict[str, float]):
    """Yardsticks whose times alternate between ``length`` and ``length x (1 + spread)``."""
    asked = []

    def make(length: float) -> dict:
        asked.append(length)
        out = {}
        for name, s in spreads.items():
            seq = iter([length, length * (1 + s)] * 10_000)
            out[name] = lambda seq=seq: next(seq)
        return out

    return make, asked


def test_spread_is_p90_over_p10_less_one():
    assert abs(spread(np.arange(1, 102)) - (91 / 11 - 1)) < 1e-12
    assert spread([2.0] * 10) == 0.0


def test_a_pass_that_jitters_more_than_the_machine_is_called_the_engines():
    eng = _Engine()
    loops, asked = _steady_loops({"torch loop": 0.2, "python loop": 0.5})
    got = pass_jitter(eng, passes=40, yardsticks=loops)
    assert got["passes"] == 40
    # sized to one pass
    assert len(asked) == 1 and min(abs(asked[0] - 0.001), abs(asked[0] - 0.004)) < 1e-12
    # Half 1 ms, half 4 ms: the pass's p90 / p10 is 4 (spread 3), its median one of the two or
    # between.
    assert abs(got["pass"]["spread"] - 3.0) < 1e-6
    assert 0.001 - 1e-9 <= got["pass"]["median_s"] <= 0.004 + 1e-9
    assert (
        abs(got["torch loop"]["spread"] - 0.2) < 1e-9
        and abs(got["python loop"]["spread"] - 0.5) < 1e-9
    )
    assert abs(got["excess"] - (3.0 - 0.5)) < 1e-6  # above the noisier loop, not the quieter
    assert "engine's own" in _whose(got["excess"])
    assert eng.started == [1, 0]  # the engine is left empty, as doctor's next probe expects


def test_a_pass_that_jitters_as_the_loops_do_is_the_machines():
    got = pass_jitter(
        _Engine(), passes=40, yardsticks=_steady_loops({"torch loop": 3.0, "python loop": 3.5})[0]
    )
    assert abs(got["excess"] - (3.0 - 3.5)) < 1e-6
    assert "this machine's, not the engine's" in _whose(got["excess"])


def test_jitter_summary_on_given_times():
    got = jitter_summary([1.0] * 5 + [2.0] * 5, [1.0] * 10, [1.0, 1.1] * 5)
    assert got["passes"] == 10
    assert got["pass"]["median_s"] == 1.5 and abs(got["pass"]["spread"] - 1.0) < 1e-12
    assert got["torch loop"]["spread"] == 0.0 and abs(got["python loop"]["spread"] - 0.1) < 1e-12
    assert abs(got["excess"] - 0.9) < 1e-12


def test_a_pass_within_the_loops_spread_is_the_machines():
    assert "this machine's, not the engine's" in _whose(0.0)
    assert "this machine's" in _whose(0.10) and "engine's own" in _whose(0.11)
