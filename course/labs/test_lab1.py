"""Checks for lab 1 (the bus with a timetable). Run: pytest course/labs -k lab1"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import ConstantStepTime, Dynamic, Fixed, Poisson, Uniform, make_workload, simulate, summarize
from batchsim.cli.options import DEFAULT_STEP_TIME


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab1_timetable")


def _records(policy, wl, step=DEFAULT_STEP_TIME):
    res = simulate(wl, policy, step)
    return res, summarize(res)


def test_lab1_behaves_exactly_like_the_reference_dynamic_batcher(lab):
    # Same decisions, same moments: every request starts and finishes at the same time.
    for rate, seats, wait in ((2.0, 8, 0.1), (30.0, 8, 0.05), (8.0, 4, 1.0)):
        wl = make_workload(Poisson(rate), Uniform(16, 128), Uniform(4, 32), n=300, seed=7)
        mine, _ = _records(lab.TimetableBus(seats, wait), wl)
        ref, _ = _records(Dynamic(seats, wait), wl)
        np.testing.assert_array_equal(mine.records.start, ref.records.start)
        np.testing.assert_array_equal(mine.records.finish, ref.records.finish)


def test_lab1_never_more_than_the_seats(lab):
    wl = make_workload(Poisson(200.0), Fixed(32), Fixed(8), n=400, seed=1)
    _, s = _records(lab.TimetableBus(6, 0.5), wl)
    assert s["max_batch_size"] <= 6
    assert s["mean_batch_size"] > 5.5  # busy: the buses leave full
    assert s["completed"] == 400


def test_lab1_nobody_waits_past_the_timetable_when_the_server_is_free(lab):
    # A very fast server is always free when a bus wants to leave: the wait at the stop is
    # at most max_wait (and someone waits exactly that long).
    wl = make_workload(Poisson(3.0), Fixed(1), Fixed(1), n=500, seed=2)
    res, _ = _records(lab.TimetableBus(100, 0.25), wl, ConstantStepTime(0.0005))
    wait = res.records.start - res.records.arrival
    assert wait.max() <= 0.25 + 1e-6
    assert wait.max() >= 0.25 - 1e-6


def test_lab1_strands_nobody_at_the_end(lab):
    # Five passengers for fifty seats: the last bus leaves on its timetable, not never.
    wl = make_workload(Poisson(1.0), Fixed(8), Fixed(4), n=5, seed=3)
    res, s = _records(lab.TimetableBus(50, 2.0), wl)
    assert s["completed"] == 5
    assert float(np.max(res.records.start - res.records.arrival)) <= 2.0 + 1e-6


@pytest.mark.parametrize("rate,wait", [(2.0, 0.5), (0.5, 0.2), (10.0, 0.3)])
def test_lab1_part_b_prediction_matches_simulation(lab, rate, wait):
    predicted = lab.predict_mean_wait(rate, wait)
    wl = make_workload(Poisson(rate), Fixed(1), Fixed(1), n=20_000, seed=11)
    _, s = _records(lab.TimetableBus(10_000, wait), wl, ConstantStepTime(0.0001))
    assert predicted == pytest.approx(s["mean_queue_wait"], rel=0.03)
