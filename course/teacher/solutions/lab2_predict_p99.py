"""Lab 2, solution: predict the p99 before you run it.

The mean needs no distribution at all: seat i waits (N - i) / rate on average, and
the average over seats is (N - 1) / (2 rate) (``batchsim.sim.theory.bus_fill_wait``).
The p99 needs the whole mixture, and lands far above the mean: for 8 seats at 20
requests/s the mean wait is 0.175 s but the p99 is about 0.6 s, because one
passenger in eight is the first aboard and waits for seven more.
"""

from __future__ import annotations

import math


def erlang_cdf(k: int, rate: float, t: float) -> float:
    if k <= 0:
        return 1.0
    if t <= 0:
        return 0.0
    x = rate * t
    term, total = 1.0, 1.0  # the j = 0 term of the Poisson sum, without exp(-x)
    for j in range(1, k):
        term *= x / j
        total += term
    return max(0.0, 1.0 - math.exp(-x) * total)


def wait_cdf(t: float, seats: int, rate: float) -> float:
    return sum(erlang_cdf(k, rate, t) for k in range(seats)) / seats


def predict_p99_e2e(seats: int, rate: float, ride: float) -> float:
    if wait_cdf(0.0, seats, rate) >= 0.99:
        return ride
    lo, hi = 0.0, 1.0 / rate
    while wait_cdf(hi, seats, rate) < 0.99:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if wait_cdf(mid, seats, rate) < 0.99:
            lo = mid
        else:
            hi = mid
    return hi + ride


def predict_mean_e2e(seats: int, rate: float, ride: float) -> float:
    return (seats - 1) / (2 * rate) + ride
