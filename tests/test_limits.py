"""The server's limits, enforced by the policies, the same way on both clocks (hypothesis).

Whatever the workload, the policy and the limits (KV budget, the model's context, tokens
per pass):
- a request is rejected exactly when it could never run alone, with a reason naming
  the limit, and the simulated and the wall-clock runs reject the same ids with the same
  words;
- no step breaks a limit: a padded batch's longest prompt plus its longest output fit the
  context and its prefill fits a pass; a continuous step's prefill fits a pass; no row is
  ever fed past the context;
- two requests that each fit alone but not together still both complete (the batch is cut).
"""

from __future__ import annotations

import numpy as np
from fakes import wall_run
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from batchsim import (
    Continuous,
    Dynamic,
    LinearStepTime,
    Static,
    Taxi,
    Workload,
    simulate,
    summarize,
)
from batchsim.core.limits import ServerLimits
from batchsim.core.plan import plan_step

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
STEP = LinearStepTime(c0=0.004, c1=2e-5, c2=1e-4, c3=1e-7, plan="grouped")


@st.composite
def cases(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-4, 0.2)), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    wl = Workload.from_arrays(np.cumsum(gaps) * (1 + 1e-6 / np.pi), prompts, outputs, "limits")
    limits = ServerLimits(
        kv_budget_tokens=draw(st.one_of(st.none(), st.integers(50, 2000))),
        context_len=draw(st.one_of(st.none(), st.integers(16, 400))),
        max_step_tokens=draw(st.one_of(st.none(), st.integers(16, 600))),
    )
    kind = draw(st.sampled_from(["taxi", "static", "dynamic", "continuous"]))
    if kind == "taxi":
        policy = Taxi()
    elif kind == "static":
        policy = Static(draw(st.integers(1, 6)))
    elif kind == "dynamic":
        policy = Dynamic(draw(st.integers(1, 6)), draw(st.sampled_from([0.0, 0.05])))
    else:
        policy = Continuous(
            max_seqs=draw(st.integers(1, 8)),
            max_batched_tokens=draw(st.integers(8, 400)),
            block_size=draw(st.sampled_from([1, 4, 16])),
            chunked_prefill=draw(st.booleans()),
        )
    return wl, policy, limits


def never_fits(policy, limits: ServerLimits, p: int, o: int) -> bool:
    """The rule, restated: could this request ever run alone on this server under this policy?"""
    if limits.context_len is not None and p + o - 1 > limits.context_len:
        return True
    chunked = isinstance(policy, Continuous) and policy.chunked_prefill
    if not chunked and limits.max_step_tokens is not None and p > limits.max_step_tokens:
        return True
    kv = limits.kv_budget_tokens
    if kv is None:
        return False
    if isinstance(policy, Continuous):
        return -(-(p + o - 1) // policy.block_size) > kv // policy.block_size
    return p + o > kv


def check_limits(wl, policy, limits, res) -> None:
    r = res.records
    expect = np.array(
        [
            never_fits(policy, limits, int(p), int(o))
            for p, o in zip(wl.prompt_tokens, wl.output_tokens)
        ]
    )
    np.testing.assert_array_equal(r.rejected_mask, expect)
    assert r.completed_mask[~expect].all(), "a request that fits was not served"
    summarize(res)
    hard = limits.max_step_tokens
    for _, step, _, ends in res.meta["trace"]:
        if step.prefill_padding or (not isinstance(policy, Continuous) and step.prefill):
            rows = [wl.requests[c.request_id] for c in step.prefill]
            P, L = max(q.prompt_tokens for q in rows), max(q.output_tokens for q in rows)
            if limits.context_len is not None:
                assert P + L - 1 <= limits.context_len, "a padded batch runs past the context"
            if hard is not None:
                assert len(rows) * P <= hard
        for p in plan_step(step, "grouped"):
            if hard is not None and isinstance(policy, Continuous) and policy.chunked_prefill:
                assert sum(c.length for c in p.chunks) <= hard
            if limits.context_len is not None:
                # No row is fed past the context: chunk ends, and decode positions through the last
                # repetition.
                assert all(c.start + c.length <= limits.context_len for c in p.chunks)
                if p.decode_rows and not step.padded_rows and isinstance(policy, Continuous):
                    assert step.decode_width + len(ends) - 1 <= limits.context_len


@settings(max_examples=200, **SETTINGS)
@given(case=cases())
@example(
    case=(  # the repro: each fits a 1,024-position model alone, not all together
        Workload.from_arrays([0, 0, 0, 0], [1000, 10, 500, 20], [4, 1000, 500, 20]),
        Static(4),
        ServerLimits(context_len=1024),
    )
)
def test_limits_hold_and_both_clocks_reject_the_same(case):
    wl, policy, limits = case
    import copy

    twin = copy.deepcopy(policy)
    sim = simulate_traced(wl, policy, limits)
    wall = wall_run(wl, twin, STEP, limits, trace=True)
    check_limits(wl, policy, limits, sim)
    check_limits(wl, twin, limits, wall)
    assert sim.records.rejected == wall.records.rejected


def simulate_traced(wl, policy, limits):
    from batchsim.core.driver import drive
    from batchsim.sim.simulator import SimExecutor, result_of

    run = drive(wl, policy, SimExecutor(STEP), limits, trace=True)
    res = result_of(run, policy, repr(STEP), limits, wl)
    res.meta["trace"] = run.trace
    return res


def test_the_repro_pairs_are_cut_into_batches_that_fit():
    wl = Workload.from_arrays([0, 0, 0, 0], [1000, 10, 500, 20], [4, 1000, 500, 20])
    res = simulate(wl, Static(4), STEP, limits=ServerLimits(context_len=1024))
    r = res.records
    assert r.completed_mask.all()
    # 1000 + 1000 - 1 > 1024: request 0 (prompt 1000) and request 1 (output 1000) never share a
    # batch.
    assert r.start[0] != r.start[1]
    assert summarize(res)["completed"] == 4


def test_reasons_name_the_limit():
    limits = ServerLimits(kv_budget_tokens=100, context_len=64, max_step_tokens=32)
    wl = Workload.from_arrays([0, 0, 0, 0], [60, 40, 10, 10], [10, 2, 95, 2])
    res = simulate(wl, Static(2), STEP, limits=limits)
    reasons = res.records.rejected
    assert "context of 64 positions" in reasons[0]
    assert "max_step_tokens=32" in reasons[1]
    assert "context" in reasons[2]  # 10 + 95 - 1 > 64
    assert reasons[3] is None
    chunked = simulate(wl, Continuous(chunked_prefill=True, block_size=4), STEP, limits=limits)
    assert chunked.records.rejected[1] is None  # chunked prefill splits a prompt longer than a pass


def test_limits_validate_themselves():
    import pytest

    from batchsim import ConfigError

    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="context_len"):
            ServerLimits(context_len=bad)
    assert ServerLimits(kv_budget_tokens=np.int64(7)).kv_budget_tokens == 7
