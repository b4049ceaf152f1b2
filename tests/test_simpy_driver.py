"""The run is SimPy processes on both clocks, and a user can add processes of their own.

The arrivals and one process per server run on ``simpy.Environment`` (simulated) or
``simpy.rt.RealtimeEnvironment`` (wall clock); a repeated step is cut by
``process.interrupt()``; ``simulate(..., processes=[f])`` starts ``f(env, servers)``
beside them, and the run ends when every request is accounted for.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
import simpy.rt
from fakes import FakeClock, PricedEngine
from test_driver import DYADIC, RECORD_ARRAYS, assert_identical, dyadic_workload

from batchsim import (
    ConfigError,
    ConstantStepTime,
    LogNormal,
    Poisson,
    Uniform,
    Workload,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import as_limits
from batchsim.core.result import result_of
from batchsim.core.server import ServerProcess
from batchsim.core.wallclock import WallClock
from batchsim.sim.executors import SimClock, SimExecutor


def outage(start: float, duration: float, server: int = 0):
    def maintenance(env, servers):
        yield env.timeout(start)
        servers[server].go_down()
        yield env.timeout(duration)
        servers[server].come_back()

    return maintenance


def test_both_clocks_are_simpy_environments():
    assert isinstance(SimExecutor(DYADIC).environment(), simpy.Environment)
    clock = FakeClock()
    env = WallExecutor(PricedEngine(clock, DYADIC), clock, clock.sleep).environment()
    assert isinstance(env, simpy.rt.RealtimeEnvironment) and not env.strict


def test_at_fires_at_the_absolute_time_to_the_last_float():
    env = SimClock()
    seen = []

    def p(env):
        for t in (0.1, 0.3, 0.7000000000000001):
            yield env.at(t)
            seen.append(env.now)

    env.process(p(env))
    env.run()
    assert seen == [0.1, 0.3, 0.7000000000000001]  # 0.1 + (0.3 - 0.1) would be 0.30000000000000004
    with pytest.raises(ValueError, match="past"):
        env.at(0.5)


def test_the_wall_clock_sleeps_until_an_event_and_not_after_a_step_overran_it():
    clock = FakeClock(10.0)
    env = WallClock(clock, clock.sleep, t0=10.0)
    marks = []

    def p(env):
        yield env.timeout(2.0)
        marks.append((env.now, clock()))
        clock.t += 5.0  # a real step of 5 s runs synchronously here
        yield env.timeout(1.0)  # its end is already past on the wall clock: no sleep
        marks.append((env.now, clock()))

    env.process(p(env))
    env.run()
    assert marks == [(2.0, 12.0), (3.0, 17.0)]


def test_a_user_process_sees_the_environment_and_the_servers():
    wl = make_workload(Poisson(5.0), Uniform(8, 32), Uniform(1, 20), n=50, seed=1)
    seen = {}

    def look(env, servers):
        seen["env"], seen["servers"] = env, list(servers)
        yield env.timeout(1.0)
        seen["outstanding at 1 s"] = [s.outstanding for s in servers]

    res = simulate(
        wl, make_policy("continuous"), DYADIC, replicas=2, router="round-robin", processes=[look]
    )
    assert isinstance(seen["env"], simpy.Environment)
    assert [type(s) for s in seen["servers"]] == [ServerProcess, ServerProcess]
    assert [s.policy.name for s in seen["servers"]] == ["continuous"] * 2
    assert seen["servers"][0].policy is not seen["servers"][1].policy
    assert sum(s.steps for s in seen["servers"]) == len(res.records.steps["start"])
    assert res.records.completed_mask.all()


def test_a_process_that_never_ends_does_not_keep_the_run_going():
    wl = make_workload(Poisson(5.0), Uniform(8, 32), Uniform(1, 20), n=40, seed=2)
    ticks = []

    def monitor(env, servers):
        while True:
            ticks.append(servers[0].outstanding)
            yield env.timeout(0.5)

    res = simulate(wl, make_policy("dynamic"), DYADIC, processes=[monitor])
    plain = simulate(wl, make_policy("dynamic"), DYADIC)
    assert_identical(res, plain)  # watching changes nothing
    assert 0 < len(ticks) <= res.makespan / 0.5 + 2
    assert max(ticks) > 0


@pytest.mark.parametrize("name", ["taxi", "static", "dynamic", "continuous"])
def test_an_outage_stops_the_server_and_its_queue_waits(name):
    wl = make_workload(Poisson(2.0), Uniform(32, 128), LogNormal(64, 48), n=150, seed=3)
    # a taxi busy about 13 % of the time: the backlog drains in about a second
    st = ConstantStepTime(0.001)
    res = simulate(wl, make_policy(name, max_batch=4), st, processes=[outage(20.0, 10.0)])
    base = simulate(wl, make_policy(name, max_batch=4), st)
    r = res.records
    starts = r.steps["start"]
    assert not ((starts > 20.0 + 1e-9) & (starts < 30.0)).any()  # nothing starts while it is down
    assert r.completed_mask.all() and not r.rejected_mask.any()  # nobody lost
    np.testing.assert_array_equal(r.tokens, wl.output_tokens)
    during = (r.arrival > 20.0) & (r.arrival < 30.0)
    waited = r.start[during] - r.arrival[during]
    # Arrivals uniform over the outage wait for its rest: about half of it, on a server this lightly
    # loaded.
    assert waited.mean() == pytest.approx(5.0, rel=0.25)
    # direction: an outage means waiting
    assert summarize(res)["p99_ttft"] > summarize(base)["p99_ttft"] + 5.0
    before = r.arrival < 15.0
    # the past is untouched
    np.testing.assert_array_equal(r.finish[before], base.records.finish[before])


def test_least_loaded_routes_around_a_server_that_is_down():
    wl = make_workload(Poisson(4.0), Uniform(32, 128), LogNormal(64, 48), n=400, seed=4)
    st = ConstantStepTime(0.01)
    ttft = {}
    for router in ("round-robin", "least-loaded"):
        res = simulate(
            wl,
            make_policy("continuous"),
            st,
            replicas=2,
            router=router,
            processes=[outage(30.0, 30.0)],
        )
        assert res.records.completed_mask.all()
        ttft[router] = summarize(res)["mean_ttft"]
    assert ttft["least-loaded"] < 0.5 * ttft["round-robin"]


def test_a_server_down_for_good_is_an_error_not_a_hang():
    wl = make_workload(Poisson(4.0), Uniform(8, 32), Uniform(1, 10), n=40, seed=5)

    def break_it(env, servers):
        yield env.timeout(2.0)
        servers[0].go_down()

    with pytest.raises(RuntimeError, match="went down"):
        simulate(wl, make_policy("continuous"), DYADIC, processes=[break_it])


@pytest.mark.parametrize(
    "bad, word",
    [
        ("not a list", "processes must be a list"),
        ([42], "processes must be functions"),
        ([lambda env, servers: None], "must be a generator function"),
    ],
)
def test_a_bad_process_is_a_config_error(bad, word):
    wl = make_workload(Poisson(4.0), Uniform(8, 32), Uniform(1, 10), n=5, seed=5)
    with pytest.raises(ConfigError, match=word):
        simulate(wl, make_policy("taxi"), DYADIC, processes=bad)


def test_an_error_in_a_user_process_surfaces_as_itself():
    wl = make_workload(Poisson(4.0), Uniform(8, 32), Uniform(1, 10), n=20, seed=5)

    def broken(env, servers):
        yield env.timeout(0.5)
        raise ZeroDivisionError("the student's bug")

    with pytest.raises(ZeroDivisionError, match="the student's bug"):
        simulate(wl, make_policy("taxi"), DYADIC, processes=[broken])


def test_the_same_user_process_gives_the_same_records_on_both_clocks():
    """An outage on the wall clock (fake clock, priced engine) and in the simulator: same
    records."""
    wl = dyadic_workload(80, 12.0, seed=3)
    sim = simulate(wl, make_policy("continuous", max_seqs=6), DYADIC, processes=[outage(2.0, 1.5)])
    clock = FakeClock()
    policy = make_policy("continuous", max_seqs=6)
    run = drive(
        wl,
        policy,
        WallExecutor(PricedEngine(clock, DYADIC), clock, clock.sleep),
        processes=[outage(2.0, 1.5)],
    )
    wall = result_of(run, policy, "fake wall clock", as_limits(None), wl)
    assert_identical(sim, wall)
    starts = sim.records.steps["start"]
    assert not ((starts > 2.0) & (starts < 3.5)).any()


def test_same_seed_same_result_with_a_process():
    wl = make_workload(Poisson(4.0), Uniform(32, 128), LogNormal(64, 48), n=200, seed=9)
    a = simulate(
        wl,
        make_policy("dynamic"),
        DYADIC,
        replicas=3,
        router="random",
        router_seed=4,
        processes=[outage(5.0, 5.0, 1)],
    )
    b = simulate(
        wl,
        make_policy("dynamic"),
        DYADIC,
        replicas=3,
        router="random",
        router_seed=4,
        processes=[outage(5.0, 5.0, 1)],
    )
    assert_identical(a, b)
    for k in RECORD_ARRAYS:
        assert np.isfinite(getattr(a.records, k)).all() or k == "start"


def test_an_empty_workload_still_ends():
    wl = Workload.from_arrays([], [], [])
    res = simulate(wl, make_policy("continuous"), DYADIC, processes=[outage(1.0, 1.0)])
    assert len(res.records.arrival) == 0


def test_a_model_that_prices_a_pass_below_zero_cannot_move_the_clock_backwards():
    """A profile fitted on a noisy machine can come with negative offsets (a repeat cheaper than
    free): no pass takes negative time, so the run is priced at zero for it, and completes."""
    from dataclasses import dataclass

    import numpy as np

    from batchsim import Poisson, Uniform, make_policy, make_workload, simulate
    from batchsim.sim.steptime import StepTimeModel

    @dataclass(frozen=True)
    class NegativeRepeats(StepTimeModel):
        def times(self, p, d, kv):
            return np.full(np.shape(p), 0.01)

        def durations(self, step, m):
            x = super().durations(step, m)
            x[1:] -= 0.02
            return x

    wl = make_workload(Poisson(5.0), Uniform(8, 32), Uniform(8, 64), n=50, seed=1)
    res = simulate(wl, make_policy("continuous"), NegativeRepeats())
    st = res.records.steps
    assert res.records.completed == 50 and (st["duration"] >= 0).all()
    assert (np.diff(st["start"]) >= 0).all()


@pytest.mark.parametrize(
    "policy",
    [
        make_policy("continuous", max_seqs=16),
        make_policy("continuous", scheduler="vllm-v1", max_seqs=16),
    ],
)
def test_a_lone_server_stops_its_repeat_where_an_interrupt_would_have_cut_it(policy, monkeypatch):
    """A lone server knows its next passenger's arrival and prices a repeat only up to it; the same
    run with that knowledge taken away (as in a fleet, where the arrival interrupts the repeat)
    gives the very same records, and only it interrupts."""
    from batchsim.core import driver

    wl = make_workload(Poisson(30.0), Uniform(8, 64), LogNormal(40, 30), n=300, seed=4)
    kicks = {"n": 0}
    real = ServerProcess._interrupt

    def counted(self):
        # a process interrupt, not a bell
        kicks["n"] += self.process is not None and self._bell is None
        real(self)

    monkeypatch.setattr(ServerProcess, "_interrupt", counted)
    told = simulate(wl, policy, DYADIC)
    told_kicks = kicks["n"]
    born = driver.Run.__init__

    def as_in_a_fleet(self, *a, **k):
        born(self, *a, **k)
        self.fleet = True  # the server no longer knows that the next passenger is surely its own

    monkeypatch.setattr(driver.Run, "__init__", as_in_a_fleet)
    cut = simulate(wl, policy, DYADIC)
    assert told_kicks == 0 < kicks["n"]  # the same repeats, cut by interrupts this time
    assert (told.records.steps["repeat"] > 1).any()
    assert_identical(told, cut)


@pytest.mark.parametrize("cut_by", ["told", "interrupted"])
def test_a_cut_repeat_puts_back_the_draws_of_the_passes_that_never_ran(cut_by):
    """A random model's passes take its draws in the order they run, however they were grouped: of
    a repeat of 10 cut after 3 passes, the 7 draws priced for passes that never ran price the next
    ones (as ``batchsim.textbook``, pricing pass by pass, draws them), whether the server was told
    where to stop (a lone server) or an arrival cut it (a fleet)."""
    from batchsim.core.step import Step
    from batchsim.sim.steptime import ExponentialStepTime

    draws = np.random.default_rng(5).exponential(0.01, 12)
    model = ExponentialStepTime(0.01, np.random.default_rng(5))
    ex = SimExecutor(model)
    ran = np.cumsum(draws[:10])
    if cut_by == "told":
        _, ends = ex.run(Step(decode=(0,), kv_read=10, repeat=10), 0.0, stop_at=ran[1] + 1e-9)
        assert len(ends) == 3  # the arrival came during the third pass
    else:
        _, ends = ex.run(Step(decode=(0,), kv_read=10, repeat=10), 0.0, None)
        assert len(ends) == 10
        ex.cut(3)
    np.testing.assert_allclose(ends[:3], ran[:3], rtol=1e-12)
    assert ex.last_end == ends[2]
    # The next 9 passes: the 7 put back, then 2 fresh draws, the very floats drawn pass by pass.
    after = model.durations(Step(decode=(0,), kv_read=13, repeat=9), 9)
    assert after.tolist() == draws[3:].tolist()
