"""Direction and seed stability: the simulator moves the way the world does, and repeats itself.

Direction tests run the same seed at each setting (common random numbers: the Poisson
arrivals at rate 2x are the arrivals at rate x, squeezed), so a difference between
settings is the setting's doing, not noise.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import (
    ConstantStepTime,
    Continuous,
    Dynamic,
    Fixed,
    LinearStepTime,
    LogNormal,
    Poisson,
    Static,
    Taxi,
    Uniform,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.sim.theory import ContinuousCapacity

STEP = LinearStepTime(0.01, 2e-5, 5e-5, 1e-8)


def wait_at(
    policy_factory,
    rate,
    n=3000,
    output=Fixed(1),
    step=ConstantStepTime(0.1),
    prompt=Fixed(16),
    seed=3,
):
    wl = make_workload(Poisson(rate), prompt, output, n=n, seed=seed)
    return summarize(simulate(wl, policy_factory(), step))


def test_more_load_more_waiting_taxi():
    # rho 0.2 .. 0.8
    waits = [wait_at(Taxi, rate)["mean_queue_wait"] for rate in (2.0, 4.0, 6.0, 8.0)]
    assert all(b > 1.3 * a for a, b in zip(waits, waits[1:])), waits


def test_more_load_more_waiting_continuous():
    prompt, output = Uniform(32, 256), Uniform(5, 200)
    probe = make_workload(Poisson(1.0), prompt, output, n=2000, seed=3)
    cap = ContinuousCapacity.from_samples(
        STEP, 16, probe.prompt_tokens, probe.output_tokens
    ).max_rate
    rows = [
        wait_at(
            lambda: Continuous(max_seqs=16),
            load * cap,
            n=2000,
            output=output,
            step=STEP,
            prompt=prompt,
        )
        for load in (0.3, 0.6, 0.9)
    ]
    waits = [s["mean_queue_wait"] for s in rows]
    assert all(b > a for a, b in zip(waits, waits[1:])), waits
    assert waits[-1] > 3 * waits[0]
    # The batch fills up as load grows, and so does the time to first token.
    assert all(b["mean_batch_size"] > a["mean_batch_size"] for a, b in zip(rows, rows[1:]))
    assert all(b["mean_ttft"] > a["mean_ttft"] for a, b in zip(rows, rows[1:]))


def test_the_bus_fills_faster_under_more_load():
    """The one policy that goes the other way at low load: more riders, a shorter wait for the
    bus."""
    waits = [
        wait_at(lambda: Static(8), rate, step=ConstantStepTime(0.001))["mean_queue_wait"]
        for rate in (2.0, 4.0, 8.0)
    ]
    assert all(b < 0.6 * a for a, b in zip(waits, waits[1:])), waits


def test_larger_max_wait_larger_batches():
    # Moderate load and short answers, so the server is often free and the timer decides.
    # (Near saturation the server is never free when the timer fires and max_wait stops mattering.)
    rows = [
        wait_at(
            lambda w=w: Dynamic(max_batch=32, max_wait=w),
            20.0,
            n=2000,
            output=Uniform(1, 4),
            step=STEP,
        )
        for w in (0.0, 0.02, 0.1, 0.4)
    ]
    sizes = [s["mean_batch_size"] for s in rows]
    waits = [s["mean_queue_wait"] for s in rows]
    assert all(b > 1.2 * a for a, b in zip(sizes, sizes[1:])), sizes
    # ...bought with waiting: the batch leaves later.
    assert all(b > a for a, b in zip(waits, waits[1:])), waits


def test_continuous_beats_static_on_mixed_output_lengths():
    """Overloaded, outputs uniform 5..500: a static batch rides until its longest answer is done,
    a continuous one refills each row as it empties."""
    wl = make_workload(Poisson(200.0), Uniform(32, 256), Uniform(5, 500), n=1500, seed=3)
    static = summarize(simulate(wl, Static(16), STEP))
    cont = summarize(simulate(wl, Continuous(max_seqs=16), STEP))
    assert cont["request_throughput"] > 1.3 * static["request_throughput"]
    assert cont["output_throughput"] > 1.3 * static["output_throughput"]
    assert static["padded_row_fraction"] > 0.3 and cont["padded_row_fraction"] == 0.0
    assert cont["mean_e2e"] < static["mean_e2e"]


# -- seeds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["taxi", "static", "dynamic", "continuous"])
def test_same_seed_identical_summary(name):
    def once():
        wl = make_workload(Poisson(30.0), Uniform(16, 300), LogNormal(60, 40), n=800, seed=11)
        res = simulate(
            wl,
            make_policy(name, max_batch=8, max_seqs=16, max_batched_tokens=512),
            STEP,
            kv_budget_tokens=6000,
        )
        return summarize(res), res.records

    (s1, r1), (s2, r2) = once(), once()
    assert s1 == s2
    for field in ("start", "first_token", "finish", "tokens", "itl_max"):
        np.testing.assert_array_equal(getattr(r1, field), getattr(r2, field))
    np.testing.assert_array_equal(r1.steps["start"], r2.steps["start"])


def test_different_seed_different_workload():
    def wl(seed):
        return make_workload(Poisson(10.0), Uniform(16, 300), LogNormal(60, 40), n=200, seed=seed)

    a, b = wl(1), wl(2)
    assert not np.array_equal(a.arrivals, b.arrivals)
    assert not np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.output_tokens, b.output_tokens)
    sa = summarize(simulate(a, Continuous(), STEP))
    sb = summarize(simulate(b, Continuous(), STEP))
    assert sa["mean_e2e"] != sb["mean_e2e"]
    # Streams are independent: changing the output lengths leaves arrivals and prompts alone.
    c = make_workload(Poisson(10.0), Uniform(16, 300), Fixed(7), n=200, seed=1)
    np.testing.assert_array_equal(a.arrivals, c.arrivals)
    np.testing.assert_array_equal(a.prompt_tokens, c.prompt_tokens)
