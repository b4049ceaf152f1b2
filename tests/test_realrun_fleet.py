"""A fleet on the wall clock: engines in one process take turns, behind the same router and driver.

Without torch, engines made of numbers on one fake clock: each pass advances the shared
clock, so the servers' steps never overlap in time (they take turns), every request is
served by the server the router chose, and a fleet of one is the single-server wall run.
With torch, ``realrun run --replicas 2`` serves every request on tiny-gpt2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import FakeClock, PricedEngine, wall_run

from batchsim import LinearStepTime, Poisson, Uniform, make_policy, make_workload
from batchsim.core.driver import WallExecutor, drive
from batchsim.core.limits import ServerLimits
from batchsim.core.recorder import Recorder
from batchsim.core.result import result_of
from batchsim.core.router import make_router

STEP = LinearStepTime(c0=2**-7, c1=2**-14, c2=2**-11, c3=2**-18, plan="grouped")
LIMITS = ServerLimits(kv_budget_tokens=4000)


def wall_fleet(wl, name, n, router="least-loaded"):
    clock = FakeClock()
    engines = [PricedEngine(clock, STEP) for _ in range(n)]
    t0 = clock()
    policies = [make_policy(name, max_seqs=4, max_batch=4) for _ in range(n)]
    run = drive(
        wl,
        policies,
        [WallExecutor(e, clock, clock.sleep, t0=t0) for e in engines],
        LIMITS,
        router=make_router(router) if n > 1 else None,
        recorder=Recorder(wl, replicas=n),
    )
    return result_of(run, policies, "fake wall clock", LIMITS, wl), engines


@pytest.mark.parametrize("name", ["taxi", "dynamic", "continuous"])
def test_engines_in_one_process_take_turns(name):
    wl = make_workload(Poisson(30.0), Uniform(4, 60), Uniform(1, 30), n=80, seed=2)
    res, engines = wall_fleet(wl, name, 3)
    st = res.records.steps
    order = np.argsort(st["start"], kind="stable")
    starts, ends = st["start"][order], (st["start"] + st["duration"])[order]
    assert (starts[1:] >= ends[:-1] - 1e-12).all(), "two engines ran at once"
    assert len(set(st["replica"].tolist())) == 3  # all three took turns
    r = res.records
    assert r.completed_mask.all()
    np.testing.assert_array_equal(r.tokens, wl.output_tokens)
    for i, e in enumerate(engines):  # each engine released exactly the requests routed to it
        assert sorted(e.released) == np.flatnonzero(r.replica == i).tolist()


def test_a_wall_clock_fleet_of_one_is_the_single_server():
    wl = make_workload(Poisson(20.0), Uniform(4, 60), Uniform(1, 30), n=60, seed=3)
    one = wall_run(wl, make_policy("continuous", max_seqs=4), STEP, LIMITS)
    fleet, _ = wall_fleet(wl, "continuous", 1)
    for k in ("start", "first_token", "finish", "itl_max"):
        np.testing.assert_array_equal(getattr(one.records, k), getattr(fleet.records, k))


def test_realrun_run_with_two_replicas_serves_everyone(capsys):
    pytest.importorskip("torch")
    from realrun.cli import main

    code = main(
        [
            "run",
            "--replicas",
            "2",
            "--router",
            "round-robin",
            "--policy",
            "continuous",
            "--requests",
            "10",
            "--json",
            "--no-plots",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    whole, parts = out["summary"], out["runs"][0]["servers"]
    assert whole["completed"] == 10 and whole["replicas"] == 2
    assert [p["completed"] for p in parts] == [5, 5]  # round-robin: every other request
    assert any("take turns" in n for n in out["notes"])


def test_hf_continuous_cannot_take_turns(capsys):
    pytest.importorskip("torch")
    from realrun.cli import main

    assert main(["run", "--replicas", "2", "--engine", "hf-continuous", "--requests", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hf-continuous" in err[0] and "replicas 2" in err[0]
