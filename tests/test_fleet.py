"""A fleet of servers behind a router: the same loop, N policies, one front door.

- A fleet of one is the single server, to the bit, for every policy.
- Each server of a fleet behaves exactly as a single server fed the requests the router
  gave it (at light load, and under load too: routing decides who gets what, nothing else).
- least-loaded never sends a request to a server holding more outstanding requests than
  another (checked from the records, independently of the router's own bookkeeping).
- Nothing is lost across servers; a seeded random router is reproducible.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import (
    LinearStepTime,
    LogNormal,
    Poisson,
    Uniform,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.core.errors import ConfigError
from batchsim.core.fleet import fleet_summaries, replica_result
from batchsim.core.limits import ServerLimits
from batchsim.core.router import ROUTER_NAMES

STEP = LinearStepTime(0.01, 2e-5, 5e-5, 1e-8)
ARRAYS = ("start", "first_token", "finish", "last_token", "tokens", "preemptions", "itl_max")
KNOBS = dict(max_batch=4, max_wait=0.05, max_seqs=8, max_batched_tokens=512, block_size=8)


def workload(n, rate, seed=1):
    return make_workload(Poisson(rate), Uniform(8, 300), LogNormal(60, 40), n=n, seed=seed)


def assert_same(a, b, what=""):
    for k in ARRAYS:
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=f"{what} {k}")
    assert list(a.rejected) == list(b.rejected)
    for k in (
        "start",
        "duration",
        "repeat",
        "batch_size",
        "prompt_tokens",
        "decode_rows",
        "kv_in_use",
    ):
        np.testing.assert_array_equal(a.steps[k], b.steps[k], err_msg=f"{what} steps[{k}]")


@pytest.mark.parametrize("name", ["taxi", "static", "dynamic", "continuous"])
@pytest.mark.parametrize("router", ROUTER_NAMES)
def test_a_fleet_of_one_is_the_single_server(name, router):
    wl = workload(300, 6.0)
    limits = ServerLimits(kv_budget_tokens=3000, context_len=512)
    one = simulate(wl, make_policy(name, **KNOBS), STEP, limits=limits)
    fleet = simulate(wl, make_policy(name, **KNOBS), STEP, limits=limits, replicas=1, router=router)
    assert_same(one.records, fleet.records)
    assert summarize(one) == summarize(fleet)


@pytest.mark.parametrize("name", ["taxi", "dynamic", "continuous"])
@pytest.mark.parametrize(
    "router, rate",
    [
        ("round-robin", 0.3),
        ("least-loaded", 0.3),
        ("least-kv", 0.3),
        ("random", 0.3),
        ("least-loaded", 12.0),
        ("least-kv", 12.0),
    ],
)
def test_each_server_is_a_single_server_fed_what_the_router_gave_it(name, router, rate):
    """(static is left out: after the last arrival it departs half full, and that moment is the
    fleet's last arrival, not the server's own.)"""
    wl = workload(400, rate)
    limits = ServerLimits(kv_budget_tokens=4000)
    fleet = simulate(
        wl,
        make_policy(name, **KNOBS),
        STEP,
        limits=limits,
        replicas=3,
        router=router,
        router_seed=5,
    )
    got = fleet.records.replica
    assert sorted(set(got.tolist())) == [0, 1, 2]
    for i in range(3):
        alone = simulate(
            wl.subset(np.flatnonzero(got == i)), make_policy(name, **KNOBS), STEP, limits=limits
        )
        mine = replica_result(fleet, i)
        assert_same(mine.records, alone.records, f"{router} server {i}")
        assert (mine.kv_peak_tokens, mine.preemptions) == (alone.kv_peak_tokens, alone.preemptions)


def outstanding_at_each_arrival(r, n_rep):
    """From the records alone: how many requests each server held when request j arrived (routed
    before j, not rejected, not finished by then; a step ending exactly at an arrival ends after
    it)."""
    out = np.zeros((len(r), n_rep), dtype=np.int64)
    served = r.completed_mask
    for j in range(len(r)):
        prior = np.arange(j)
        live = served[prior] & (r.finish[prior] >= r.arrival[j])
        out[j] = np.bincount(r.replica[prior][live], minlength=n_rep)
    return out


@pytest.mark.parametrize("name", ["continuous", "dynamic"])
def test_least_loaded_never_picks_a_busier_server(name):
    wl = workload(500, 25.0 if name == "continuous" else 6.0, seed=7)
    fleet = simulate(wl, make_policy(name, **KNOBS), STEP, replicas=4, router="least-loaded")
    r = fleet.records
    loads = outstanding_at_each_arrival(r, 4)
    chosen = loads[np.arange(len(r)), r.replica]
    assert (chosen == loads.min(axis=1)).all()
    assert loads.max() >= 3  # not vacuous: servers were busy, and differently
    # ...and round-robin, blind to load, does pick busier servers.
    rr = simulate(wl, make_policy(name, **KNOBS), STEP, replicas=4, router="round-robin").records
    loads = outstanding_at_each_arrival(rr, 4)
    assert (loads[np.arange(len(rr)), rr.replica] > loads.min(axis=1)).any()


@pytest.mark.parametrize("router", ROUTER_NAMES)
def test_nothing_is_lost_across_servers(router):
    wl = workload(600, 20.0)
    fleet = simulate(
        wl,
        make_policy("continuous", **KNOBS),
        STEP,
        kv_budget_tokens=1500,
        replicas=3,
        router=router,
    )
    whole, parts = fleet_summaries(fleet)
    assert whole["arrived"] == sum(p["arrived"] for p in parts) == 600
    assert whole["completed"] == sum(p["completed"] for p in parts)
    assert whole["rejected"] == sum(p["rejected"] for p in parts)
    assert whole["total_output_tokens"] == sum(p["total_output_tokens"] for p in parts)
    assert whole["steps"] == sum(p["steps"] for p in parts)
    assert whole["preemptions"] == sum(p["preemptions"] for p in parts)
    assert whole["busy_fraction"] == pytest.approx(np.mean([p["busy_fraction"] for p in parts]))
    # every server is rented for the whole run
    assert all(p["duration"] == whole["duration"] for p in parts)
    r = fleet.records
    np.testing.assert_array_equal(r.tokens[r.completed_mask], wl.output_tokens[r.completed_mask])


def test_the_random_router_is_seeded():
    wl = workload(200, 5.0)

    def go(seed):
        return simulate(
            wl, make_policy("taxi"), STEP, replicas=3, router="random", router_seed=seed
        ).records.replica

    np.testing.assert_array_equal(go(1), go(1))
    assert (go(1) != go(2)).any()
    counts = np.bincount(go(3), minlength=3)
    assert counts.min() > 40  # about a third each


def test_more_servers_wait_less():
    wl = workload(800, 3.0)
    p99 = [
        summarize(simulate(wl, make_policy("taxi"), STEP, replicas=k, router="least-loaded"))[
            "p99_e2e"
        ]
        for k in (1, 2, 4)
    ]
    assert p99[0] > p99[1] > p99[2]


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"replicas": 0}, "replicas must be an integer >= 1"),
        ({"replicas": 2, "router": "fastest"}, "router must be one of"),
        ({"replicas": 1.5}, "replicas must be an integer"),
    ],
)
def test_bad_fleets_are_refused_naming_the_field(kw, words):
    with pytest.raises(ConfigError, match=words):
        simulate(workload(5, 1.0), make_policy("taxi"), STEP, **kw)
