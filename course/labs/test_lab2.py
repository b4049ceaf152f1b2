"""Checks for lab 2 (predict the p99). Run: pytest course/labs -k lab2"""

from __future__ import annotations

import math

import pytest

from batchsim import ConstantStepTime, Fixed, Poisson, Static, make_workload, simulate, summarize


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab2_predict_p99")


def test_lab2_erlang_cdf_known_values(lab):
    assert lab.erlang_cdf(0, 5.0, 0.3) == 1.0
    # k = 1 is the exponential distribution
    assert lab.erlang_cdf(1, 2.0, 0.5) == pytest.approx(1 - math.exp(-1.0))
    # k = 2 at rate 1, t = 1: 1 - e^-1 (1 + 1)
    assert lab.erlang_cdf(2, 1.0, 1.0) == pytest.approx(1 - 2 * math.exp(-1.0))
    assert lab.erlang_cdf(3, 4.0, 0.0) == 0.0
    # increasing in t, decreasing in k
    assert lab.erlang_cdf(3, 4.0, 0.5) < lab.erlang_cdf(3, 4.0, 1.0)
    assert lab.erlang_cdf(4, 4.0, 0.5) < lab.erlang_cdf(3, 4.0, 0.5)


def test_lab2_wait_cdf_is_a_mixture(lab):
    assert lab.wait_cdf(0.0, 8, 10.0) == pytest.approx(1 / 8)  # the last one aboard never waits
    assert lab.wait_cdf(100.0, 8, 10.0) == pytest.approx(1.0)
    assert lab.wait_cdf(0.3, 1, 10.0) == 1.0


def _simulate(seats, rate, ride, n=20_000, seed=5):
    wl = make_workload(Poisson(rate), Fixed(1), Fixed(1), n=n, seed=seed)
    return summarize(simulate(wl, Static(seats), ConstantStepTime(ride)))


@pytest.mark.parametrize("seats,rate,ride", [(8, 20.0, 0.01), (4, 5.0, 0.02), (16, 50.0, 0.005)])
def test_lab2_p99_and_mean_predicted_before_the_run(lab, seats, rate, ride):
    p99 = lab.predict_p99_e2e(seats, rate, ride)
    mean = lab.predict_mean_e2e(seats, rate, ride)
    s = _simulate(seats, rate, ride)
    assert p99 == pytest.approx(s["p99_e2e"], rel=0.05)
    assert mean == pytest.approx(s["mean_e2e"], rel=0.03)
    assert p99 > 2 * mean  # the tail is far from the mean: the first aboard waits for everyone


def test_lab2_one_seat_is_a_taxi(lab):
    assert lab.predict_p99_e2e(1, 3.0, 0.05) == pytest.approx(0.05)
