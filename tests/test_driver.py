"""One driver loop, two clocks: the wall-clock path writes the simulator's records exactly.

``simulate`` and realrun's ``run_real`` are both ``batchsim.core.driver.drive``; what
differs is the executor. Here the wall-clock executor drives an engine made of numbers
(``fakes.PricedEngine``: each pass advances a fake clock by a step-time model's price),
so no torch is needed. Arrival times and step times are dyadic (multiples of powers of
two), so every sum is exact and the records can be compared bit for bit, for all four
policies, chunked prefill, preemption, interrupted repeats and Wait deadlines.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeClock, PricedEngine, wall_run

from batchsim import (
    LinearStepTime,
    Poisson,
    Uniform,
    Workload,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.core.driver import INTERRUPTED, StopRun, WallExecutor, drive
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import Policy
from batchsim.core.step import Step, Wait
from batchsim.sim.simulator import ReplayDiverged, ReplayExecutor, SimExecutor

# Dyadic coefficients: every step time is a sum of multiples of 2^-20, exactly representable.
DYADIC = LinearStepTime(c0=2**-7, c1=2**-14, c2=2**-11, c3=2**-18, plan="grouped")
RECORD_ARRAYS = (
    "arrival",
    "start",
    "first_token",
    "finish",
    "last_token",
    "tokens",
    "preemptions",
    "itl_max",
)


def dyadic_workload(n: int, rate: float, seed: int, prompt=(4, 90), output=(1, 40)) -> Workload:
    wl = make_workload(Poisson(rate), Uniform(*prompt), Uniform(*output), n=n, seed=seed)
    return Workload.from_arrays(
        np.round(wl.arrivals * 1024) / 1024, wl.prompt_tokens, wl.output_tokens, "dyadic"
    )


def assert_identical(a, b) -> None:
    for k in RECORD_ARRAYS:
        np.testing.assert_array_equal(getattr(a.records, k), getattr(b.records, k), err_msg=k)
    assert a.records.rejected == b.records.rejected
    for k, v in a.records.steps.items():
        np.testing.assert_array_equal(v, b.records.steps[k], err_msg=f"steps[{k}]")
    assert (a.kv_peak_tokens, a.preemptions) == (b.kv_peak_tokens, b.preemptions)


CASES = [
    ("taxi", {}, None),
    ("static", {"max_batch": 4}, None),
    ("dynamic", {"max_batch": 4, "max_wait": 0.03}, None),
    ("continuous", {"max_seqs": 6, "chunked_prefill": False}, None),
    # chunked prefill
    (
        "continuous",
        {"max_seqs": 6, "max_batched_tokens": 24, "block_size": 4},
        None,
    ),
    ("continuous", {"max_seqs": 8, "max_batched_tokens": 48, "block_size": 4}, 160),  # preemptions
    ("static", {"max_batch": 4}, 200),  # batches cut by memory
]


@pytest.mark.parametrize("name, kw, kv", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_wall_clock_path_writes_the_simulators_records(name, kw, kv):
    wl = dyadic_workload(60, 12.0, seed=3)
    limits = ServerLimits(kv_budget_tokens=kv, context_len=128)
    sim = simulate(wl, make_policy(name, **kw), DYADIC, limits=limits)
    wall = wall_run(wl, make_policy(name, **kw), DYADIC, limits)
    assert_identical(sim, wall)
    s = summarize(sim)
    assert s["completed"] > 0 and s["steps"] > len(wl)  # not vacuous: real work was scheduled
    if kv == 160:
        assert sim.preemptions > 0
    if name == "continuous":
        assert (sim.records.steps["repeat"] > 1).any()  # the shortcut was taken, and cut


def test_the_comparison_is_not_vacuous():
    """A wall clock whose passes take a little longer gives different records."""
    wl = dyadic_workload(30, 12.0, seed=3)
    slower = LinearStepTime(c0=2**-7 + 2**-12, c1=2**-14, c2=2**-11, c3=2**-18, plan="grouped")
    sim = simulate(wl, make_policy("continuous"), DYADIC)
    wall = wall_run(wl, make_policy("continuous"), slower)
    with pytest.raises(AssertionError):
        assert_identical(sim, wall)


def test_replay_of_measured_step_times_reproduces_the_run_exactly():
    """The simulator fed a run's measured step times (not a model) gives that run's records."""
    wl = make_workload(Poisson(15.0), Uniform(4, 60), Uniform(1, 30), n=50, seed=5)  # not dyadic
    noisy = LinearStepTime(c0=0.0123, c1=3.1e-5, c2=4.4e-4, c3=1.7e-6, plan="grouped")
    for name in ("taxi", "static", "dynamic", "continuous"):
        measured = wall_run(wl, make_policy(name), noisy, trace=True)
        run = drive(wl, make_policy(name), ReplayExecutor(measured.meta["trace"]))
        replayed = run.recorder.records()
        for k in RECORD_ARRAYS:
            np.testing.assert_allclose(
                getattr(replayed, k),
                getattr(measured.records, k),
                rtol=1e-12,
                atol=1e-12,
                err_msg=f"{name}: {k}",
            )


def test_replay_notices_a_different_schedule():
    wl = make_workload(Poisson(15.0), Uniform(4, 60), Uniform(1, 30), n=30, seed=5)
    measured = wall_run(wl, make_policy("static", max_batch=4), DYADIC, trace=True)
    with pytest.raises(ReplayDiverged):
        drive(wl, make_policy("static", max_batch=3), ReplayExecutor(measured.meta["trace"]))


class Stalls(Policy):
    """A broken policy: it holds a request and never runs it, nor asks to be woken."""

    name = "stalls"

    def on_arrival(self, request, now):
        self.held = request
        return None

    def next_action(self, now):
        return Wait(None)

    def on_step_end(self, step, done, now):
        raise AssertionError("never runs a step")

    @property
    def idle(self):
        return False


def test_a_stalled_policy_is_an_error_on_both_clocks():
    wl = Workload.from_arrays([0.0, 0.5], [4, 4], [2, 2])
    with pytest.raises(RuntimeError, match="waits with no deadline"):
        simulate(wl, Stalls(), DYADIC)
    with pytest.raises(RuntimeError, match="waits with no deadline"):
        wall_run(wl, Stalls(), DYADIC)


@pytest.mark.parametrize(
    "error, word",
    [(KeyboardInterrupt(), "interrupted"), (StopRun("stopped: out of memory"), "out of memory")],
)
def test_a_run_cut_short_keeps_what_it_measured(error, word):
    wl = make_workload(Poisson(20.0), Uniform(4, 20), Uniform(2, 10), n=30, seed=2)
    clock = FakeClock(100.0)
    engine = PricedEngine(clock, DYADIC, fail_at=25, error=error)
    run = drive(wl, make_policy("continuous", max_seqs=4), WallExecutor(engine, clock, clock.sleep))
    assert word in run.stopped
    r = run.recorder.records()
    done = r.completed_mask
    assert 0 < done.sum() < len(wl)
    assert (done | r.rejected_mask).all() and not (done & r.rejected_mask).any()
    reasons = [x for x in r.rejected if x]
    assert all(word in x for x in reasons) and any("never arrived" in x for x in reasons)
    assert (INTERRUPTED in run.stopped) == isinstance(error, KeyboardInterrupt)


def test_the_simulator_executor_cuts_a_repeat_at_the_next_arrival():
    ex = SimExecutor(DYADIC)
    step = Step(decode=(0, 1), kv_read=20, decode_width=10, repeat=10, interruptible=True)
    d = DYADIC.durations(step, 10)
    t0, ends = ex.run(step, 1.0, stop_at=1.0 + d[:3].sum() - 1e-9)
    assert t0 == 1.0 and len(ends) == 3  # the third pass was running when it arrived
    t0, ends = ex.run(step, 1.0, stop_at=1.0 + d[:3].sum())
    assert len(ends) == 3  # arriving exactly at a boundary: noticed at that boundary
    assert len(ex.run(step, 1.0, None)[1]) == 10
