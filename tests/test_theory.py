"""The simulator against queueing theory, and the formulas against independent checks.

Three kinds of test:
1. formulas against each other and against a numerical solution of the same Markov
   chain (exact to rounding);
2. the simulator against the Lindley recursion on the very same arrivals and service
   times (a sample-path identity, exact to rounding);
3. long seeded runs against the closed forms, each within a stated tolerance. Each
   tolerance is about 4 standard deviations of the relative error's spread over 16
   seeds at the same settings (measured once, quoted next to each test), so a fixed seed
   passes by design, not by luck, while a modelling error of a step's worth of time or
   a batch rule that differs from the formula's fails by a wide margin.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import (
    ConfigError,
    ConstantStepTime,
    Continuous,
    Dynamic,
    Fixed,
    LinearStepTime,
    Poisson,
    Static,
    Taxi,
    Uniform,
    make_workload,
    simulate,
    summarize,
)
from batchsim.cli.theory import mean_queue_wait, saturated_throughput
from batchsim.sim.steptime import ExponentialStepTime, StepTimeModel
from batchsim.sim.theory import (
    MD1,
    MG1,
    MM1,
    BulkService,
    BusFill,
    ContinuousCapacity,
    GeneralBulkPolicy,
    bus_fill_wait,
    relative_error,
    request_work,
)

SEED = 1


def exp_step(mean: float, seed: int = SEED) -> ExponentialStepTime:
    return ExponentialStepTime(mean, np.random.default_rng([seed, 99]))


def poisson_run(policy, rate, step_time, n, output=Fixed(1), seed=SEED):
    wl = make_workload(Poisson(rate), Fixed(16), output, n=n, seed=seed)
    return simulate(wl, policy, step_time)


# -- 1. the formulas -------------------------------------------------------------------------


def test_single_server_formulas_agree():
    lam, s = 4.0, 0.15
    # M/M/1 and M/D/1 are M/G/1 with E[S^2] = 2 E[S]^2 and E[S]^2.
    assert MM1(lam, 1 / s).mean_wait == pytest.approx(MG1(lam, s, 2 * s * s).mean_wait, rel=1e-12)
    assert MD1(lam, s).mean_wait == pytest.approx(MG1(lam, s, s * s).mean_wait, rel=1e-12)
    assert MD1(lam, s).mean_wait == pytest.approx(MM1(lam, 1 / s).mean_wait / 2, rel=1e-12)
    # A worked number: rho = 0.6, W_q = rho / (mu - lambda) = 0.6 / (6.667 - 4) = 0.225 s.
    assert MM1(lam, 1 / s).mean_wait == pytest.approx(0.225, rel=1e-12)
    assert MM1(lam, 1 / s).mean_queue_length == pytest.approx(lam * 0.225, rel=1e-12)  # Little
    # A taxi on a constant step: uniform 1..9 tokens of 0.02 s.
    g = MG1.steps_of(5.0, 0.02, range(1, 10))
    assert g.mean_service == pytest.approx(0.1) and g.service_second_moment == pytest.approx(
        0.0004 * 285 / 9
    )


def test_bus_fill_wait():
    assert bus_fill_wait(1, 3.0) == 0.0
    assert bus_fill_wait(8, 10.0) == pytest.approx(0.35)
    assert BusFill(8, 10.0).mean_wait == bus_fill_wait(8, 10.0)


@pytest.mark.parametrize(
    "lam, mu, a, b",
    [(0.7, 1.0, 1, 1), (2.0, 1.0, 1, 4), (2.0, 1.0, 2, 5), (2.0, 1.0, 4, 4), (5.0, 2.0, 3, 8)],
)
def test_bulk_service_against_numerical_markov_chain(lam, mu, a, b):
    """Solve the same chain numerically (truncated generator matrix) and compare."""
    q = BulkService(lam, mu, a, b)
    r = q.root
    assert mu * r ** (b + 1) - (lam + mu) * r + lam == pytest.approx(0, abs=1e-12) and 0 < r < 1

    K = 600  # queue lengths 0..K while busy; r^K is far below rounding
    idle = list(range(a))  # (n, 0)
    busy = list(range(K + 1))  # (n, 1)
    size = a + K + 1
    I = lambda n: n  # noqa: E731
    B = lambda n: a + n  # noqa: E731
    Q = np.zeros((size, size))
    for n in idle:
        Q[I(n), I(n + 1) if n + 1 < a else B(0)] += lam
    for n in busy:
        if n < K:
            Q[B(n), B(n + 1)] += lam
        Q[B(n), I(n) if n < a else (B(0) if n <= b else B(n - b))] += mu
    np.fill_diagonal(Q, -Q.sum(axis=1))
    A = Q.T.copy()
    A[-1] = 1.0  # replace one (redundant) balance equation by the normalisation
    rhs = np.zeros(size)
    rhs[-1] = 1.0
    pi = np.linalg.solve(A, rhs)
    p_idle, p_busy = pi[:a], pi[a:]
    lq = float((np.arange(a) * p_idle).sum() + (np.arange(K + 1) * p_busy).sum())

    assert q.prob_busy == pytest.approx(p_busy.sum(), rel=1e-9)
    np.testing.assert_allclose(q.idle_probabilities(), p_idle, rtol=1e-9, atol=1e-14)
    assert q.mean_queue_length == pytest.approx(lq, rel=1e-9)
    assert q.mean_wait == pytest.approx(lq / lam, rel=1e-9)
    if a == b == 1:
        assert q.mean_wait == pytest.approx(MM1(lam, mu).mean_wait, rel=1e-9)
    if a == b:
        assert q.mean_batch_size == pytest.approx(a, rel=1e-9)


def test_continuous_capacity_formula():
    # Constant step: a full batch of B rows finishes B requests every E[O] steps.
    cap = ContinuousCapacity(ConstantStepTime(0.02), 16, mean_prompt=100, mean_output=50)
    assert cap.max_rate == pytest.approx(16 / (0.02 * 50))
    assert cap.stable(15.9) and not cap.stable(16.1)
    assert cap.utilisation(8.0) == pytest.approx(0.5)
    # The moments form equals the per-request sum it stands for.
    step = LinearStepTime(0.01, 2e-5, 5e-5, 1e-7)
    rng = np.random.default_rng(0)
    p, o = rng.integers(16, 129, 5000), rng.integers(5, 101, 5000)
    from_samples = ContinuousCapacity.from_samples(step, 16, p, o)
    assert from_samples.mean_work == pytest.approx(
        float(request_work(step, p, o).mean()), rel=1e-12
    )
    # w for one request by hand: P=10, O=4 -> c1*10 + c2*3 + c3*(10 + 11 + 12)
    assert request_work(step, np.array([10]), np.array([4]))[0] == pytest.approx(
        2e-4 + 1.5e-4 + 33e-7
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: MM1(5.0, 5.0),
        lambda: MD1(5.0, 0.2),
        lambda: MG1(1.0, 1.0, 2.0),
        lambda: MG1(1.0, 0.5, 0.1),  # second moment below mean^2
        lambda: BulkService(4.0, 1.0, 2, 4),  # rho = 1
        lambda: BulkService(1.0, 1.0, 3, 2),  # b < a
        lambda: BulkService(-1.0, 1.0, 1, 2),
        lambda: GeneralBulkPolicy(0, 2),
        lambda: GeneralBulkPolicy(3, 2),
        lambda: bus_fill_wait(0, 1.0),
        lambda: ContinuousCapacity(ExponentialStepTime(0.1), 4, 10, 10),
        lambda: ContinuousCapacity(ConstantStepTime(0.1), 4, 10, 0.5),
    ],
)
def test_bad_inputs_raise_config_error(make):
    with pytest.raises(ConfigError):
        make()


def test_relative_error():
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.0, 0.0) == 0.0


# -- 2. sample paths: the simulator is the Lindley recursion ----------------------------------


class Recording(StepTimeModel):
    """Wraps a step-time model and keeps every duration it hands out, in order."""

    def __init__(self, inner: StepTimeModel) -> None:
        self.inner, self.log = inner, []

    def times(self, prefill_tokens, decode_rows, kv_read):
        t = self.inner.times(prefill_tokens, decode_rows, kv_read)
        self.log.append(np.array(t, dtype=float))
        return t


@pytest.mark.parametrize("output", [Fixed(1), Uniform(1, 12)])
def test_taxi_is_the_lindley_recursion(output):
    """start_i = max(arrival_i, finish_{i-1}); finish_i = start_i + (sum of its step times)."""
    wl = make_workload(Poisson(8.0), Fixed(16), output, n=3000, seed=SEED)
    step = Recording(exp_step(0.1))
    r = simulate(wl, Taxi(), step).records
    # Taxi steps come in request order: a prefill, then one run of (k - 1) decodes.
    durations = iter(step.log)
    service = np.empty(len(wl))
    for i, k in enumerate(wl.output_tokens):
        service[i] = next(durations).sum() + (next(durations).sum() if k > 1 else 0.0)
    assert next(durations, None) is None
    start = np.empty(len(wl))
    free = 0.0
    for i, a in enumerate(wl.arrivals):
        start[i] = max(a, free)
        free = start[i] + service[i]
    np.testing.assert_allclose(r.start, start, rtol=0, atol=1e-9)
    np.testing.assert_allclose(r.finish, start + service, rtol=0, atol=1e-9)
    assert (start > wl.arrivals).mean() > 0.3  # a real queue formed


# -- 3. long runs against the closed forms --------------------------------------------------


def test_taxi_md1():
    # M/D/1, rho = 0.6. Spread over 16 seeds at 30k requests: sd 1.9 %. Tolerance 7 %.
    res = poisson_run(Taxi(), 5.0, ConstantStepTime(0.12), 30_000)
    theory = MD1(5.0, 0.12).mean_wait
    assert mean_queue_wait(res) == pytest.approx(theory, rel=0.07)
    # The server is busy a fraction rho of the time (the makespan is ~6000 s).
    assert summarize(res)["busy_fraction"] == pytest.approx(0.6, rel=0.02)


def test_taxi_mm1():
    # M/M/1, rho = 0.5, exponential step times. Spread over 16 seeds at 40k: sd 2.2 %. Tolerance 8
    # %.
    res = poisson_run(Taxi(), 5.0, exp_step(0.1), 40_000)
    assert mean_queue_wait(res) == pytest.approx(MM1(5.0, 10.0).mean_wait, rel=0.08)
    # ...and it is not the M/D/1 answer, which is half as long.
    assert mean_queue_wait(res) > 1.5 * MD1(5.0, 0.1).mean_wait


def test_taxi_mg1_token_counts():
    # M/G/1: a request of k tokens is k constant steps (1 prefill + k-1 decodes), k ~ U{1..9}.
    # Spread over 16 seeds at 20k: sd 2.0 %. Tolerance 8 %.
    res = poisson_run(Taxi(), 5.0, ConstantStepTime(0.02), 20_000, output=Uniform(1, 9))
    theory = MG1.steps_of(5.0, 0.02, range(1, 10))
    assert mean_queue_wait(res) == pytest.approx(theory.mean_wait, rel=0.08)
    # The variability matters: a deterministic service of the same mean waits 22 % less.
    assert mean_queue_wait(res) > 1.1 * MD1(5.0, 0.1).mean_wait


def test_static_bus_fill_at_low_load():
    # N = 8 at 10 req/s with a 1 ms ride: the wait is the time to fill the bus.
    # Spread over 16 seeds at 20k: sd 0.8 %. Tolerance 3 %.
    res = poisson_run(Static(8), 10.0, ConstantStepTime(0.001), 20_000)
    assert mean_queue_wait(res) == pytest.approx(bus_fill_wait(8, 10.0), rel=0.03)
    # only the last bus is partial
    assert summarize(res)["mean_batch_size"] == pytest.approx(8, rel=1e-3)


@pytest.mark.parametrize(
    "policy, a, b",
    [
        (Static(4), 4, 4),  # the bus that waits for N is M/M^(N,N)/1
        (Dynamic(4, 0.0), 1, 4),  # a dynamic batcher that never waits is M/M^(1,b)/1
        (GeneralBulkPolicy(2, 5), 2, 5),  # Neuts' rule in general
    ],
    ids=["static", "dynamic", "general"],
)
def test_bulk_service(policy, a, b):
    # One prefill step per batch (1 token) with exponential step times: exponential batch
    # service whatever the batch size. lambda = 2, mu = 1. Spread over 16 seeds at 20k:
    # sd 2.4 % / 3.1 % / 3.5 %; at 60k about sqrt(3) smaller. Tolerance 7 %.
    res = poisson_run(policy, 2.0, exp_step(1.0), 60_000)
    q = BulkService(2.0, 1.0, a, b)
    assert mean_queue_wait(res) == pytest.approx(q.mean_wait, rel=0.07)
    assert summarize(res)["mean_batch_size"] == pytest.approx(q.mean_batch_size, rel=0.03)


def test_continuous_capacity_is_the_saturation_throughput():
    """Overloaded, a continuous batch stays full and serves exactly mu* requests per second;
    below mu* what arrives is served and the queue stays short; above it the queue grows."""
    step = LinearStepTime(0.01, 2e-5, 5e-5, 1e-7)
    for max_seqs, output in ((16, Uniform(5, 100)), (8, Fixed(50))):
        probe = make_workload(Poisson(1.0), Uniform(16, 128), output, n=4000, seed=SEED)
        cap = ContinuousCapacity.from_samples(
            step, max_seqs, probe.prompt_tokens, probe.output_tokens
        )

        def run(load, cap=cap, output=output, max_seqs=max_seqs):
            wl = make_workload(
                Poisson(load * cap.max_rate), Uniform(16, 128), output, n=4000, seed=SEED
            )
            return simulate(wl, Continuous(max_seqs=max_seqs, max_batched_tokens=2048), step)

        over = run(2.0)
        # A backlog keeps every row busy; the window excludes ramp-up and drain. Tolerance 2 %
        # (measured: within 0.1 % for these settings).
        assert saturated_throughput(over) == pytest.approx(cap.max_rate, rel=0.02)
        under = run(0.8)
        assert saturated_throughput(under) == pytest.approx(0.8 * cap.max_rate, rel=0.06)
        w_under = under.records.start - under.records.arrival
        w_over = over.records.start - over.records.arrival
        q = len(w_under) // 4
        assert w_under[-q:].mean() < 20 * step.c0  # bounded: a few steps
        # Fluid limit: the backlog grows at lambda - mu*, so a request arriving at t waits
        # (lambda / mu* - 1) t, here t itself. Fitted over the second half of arrivals.
        a = over.records.arrival
        slope = np.polyfit(a[len(a) // 2 :], w_over[len(a) // 2 :], 1)[0]
        assert slope == pytest.approx(2.0 - 1.0, rel=0.05)
