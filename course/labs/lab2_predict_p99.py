"""Lab 2: predict the p99 before you run it.

An engineer who can predict a number before measuring it understands the
system; one who can only measure it does not. Here is a system simple enough to
predict exactly: a bus of N seats that leaves only when full (batchsim's
``Static(N)``), requests arriving at random (Poisson, ``rate`` per second), and a
ride that always takes ``ride`` seconds (each request wants one token; the server
takes the same time for any batch). The load is light: the bus is always back
before the next one is full, so nobody waits for the server, only for company.

A passenger's end-to-end latency is then (wait for the bus to fill) + ride.
The passenger in seat i (i = 1..N) waits for the N - i who come after: the sum of
N - i exponential gaps, an Erlang(N - i, rate) time. Seats are equally likely,
so the wait is a mixture of Erlang(k, rate) for k = 0..N-1, each with weight 1/N
(Erlang(0) is zero: the last one aboard does not wait).

1. ``erlang_cdf(k, rate, t)``: P(Erlang(k, rate) <= t). For k >= 1 it is
   1 - sum_{j=0}^{k-1} exp(-rate t) (rate t)^j / j!  (the chance that at least k
   Poisson arrivals happened by t). For k = 0 it is 1.
2. ``wait_cdf(t, seats, rate)``: the mixture above.
3. ``predict_p99_e2e(seats, rate, ride)``: the t with wait_cdf(t) = 0.99, plus the
   ride. wait_cdf rises from 1/N at t = 0 to 1; find t by bisection.
4. ``predict_mean_e2e(seats, rate, ride)``: the mean, for comparison (lesson 4).

Then the check runs the simulator and holds your predictions to it.

Check your work:  pytest course/labs -k lab2
"""

from __future__ import annotations

import math


def erlang_cdf(k: int, rate: float, t: float) -> float:
    """P(the k-th arrival of a Poisson stream of ``rate`` has come by time t)."""
    # --- your code here ---
    raise NotImplementedError("your code here: erlang_cdf")


def wait_cdf(t: float, seats: int, rate: float) -> float:
    """P(a passenger's wait for the bus to fill <= t)."""
    # --- your code here ---
    raise NotImplementedError("your code here: wait_cdf")


def predict_p99_e2e(seats: int, rate: float, ride: float) -> float:
    """The 99th percentile of end-to-end latency, in seconds."""
    # --- your code here ---
    raise NotImplementedError("your code here: predict_p99_e2e")


def predict_mean_e2e(seats: int, rate: float, ride: float) -> float:
    """The mean end-to-end latency, in seconds."""
    # --- your code here ---
    raise NotImplementedError("your code here: predict_mean_e2e")


# Keep the import used in your answer (the factorial and the exponential live there).
_ = math
