"""Continuous(scheduler="vllm-v1"): vLLM V1's order of scheduling, checked without vLLM.

The flavour differs from batchsim's own scheduler in exactly the documented ways (decode
tokens spend the step's budget, running rows go first in admission order and sit out
when the budget is spent, no watermark), and keeps every invariant: no request lost, the
step never over its token budget or its rows, KV never over its budget, FIFO admission.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import Poisson, Uniform, make_workload, summarize
from batchsim.core.errors import ConfigError
from batchsim.core.policies import SCHEDULERS, VLLMV1, Continuous, make_policy
from batchsim.core.step import Step
from batchsim.core.workload import Request
from batchsim.sim.simulator import simulate
from batchsim.sim.steptime import LinearStepTime

ST = LinearStepTime(0.002, 2e-5, 1e-4, 1e-7)


def _steps(policy: VLLMV1, requests, limits=None, until_idle=True):
    """Drive the policy by hand, every step run once: the steps it chose."""
    policy.start(limits)
    for r in requests:
        assert policy.on_arrival(r, 0.0) is None
    policy.close(0.0)
    out, t = [], 0.0
    while not policy.idle:
        step = policy.next_action(t)
        assert isinstance(step, Step)
        out.append(step)
        t += 0.01
        policy.on_step_end(step, 1, t)
        if not until_idle and len(out) > 50:
            break
    return out


def test_make_policy_offers_the_flavour_by_name():
    assert SCHEDULERS == ("batchsim", "vllm-v1")
    p = make_policy("continuous", max_seqs=4, scheduler="vllm-v1")
    assert isinstance(p, VLLMV1) and p.name == "continuous" and 'scheduler="vllm-v1"' in repr(p)
    assert type(make_policy("continuous")) is Continuous
    with pytest.raises(
        ConfigError, match="scheduler must be one of batchsim, vllm-v1, got 'vllm-v0'"
    ):
        make_policy("continuous", scheduler="vllm-v0")
    assert VLLMV1().watermark == 0.0  # vLLM 0.32's default


def test_decode_tokens_spend_the_budget():
    # 6 rows decoding and a budget of 10 tokens: a 20-token prompt gets 4 of them (batchsim's own:
    # 10).
    reqs = [Request(i, 0.0, 1, 50) for i in range(6)] + [Request(6, 0.0, 20, 5)]
    for make, chunk in (
        (lambda: VLLMV1(8, 10, 4, async_scheduling=False), 4),
        (lambda: Continuous(8, 10, 4), 10),
    ):
        pol = make()
        pol.start(None)
        for r in reqs[:6]:
            pol.on_arrival(r, 0.0)
        first = pol.next_action(0.0)
        pol.on_step_end(first, 1, 0.01)
        pol.on_arrival(reqs[6], 0.01)
        step = pol.next_action(0.01)
        assert len(step.decode) == 6
        assert [c.length for c in step.prefill] == [chunk], type(pol).__name__


def test_rows_past_the_budget_sit_out_in_admission_order():
    # Budget 3, 5 running rows: rows 0..2 decode, rows 3 and 4 wait, every step (vLLM's FCFS order).
    pol = VLLMV1(max_seqs=8, max_batched_tokens=3, block_size=4)
    steps = _steps(pol, [Request(i, 0.0, 1, 4) for i in range(5)])
    for s in steps:
        assert s.prefill_tokens + len(s.decode) <= 3
    first_decodes = [s for s in steps if s.decode and not s.prefill]
    assert set(first_decodes[0].decode) == {0, 1, 2}


def test_with_a_budget_no_step_can_spend_it_equals_batchsims_scheduler():
    wl = make_workload(Poisson(60.0), Uniform(16, 300), Uniform(8, 120), n=200, seed=4)
    a = simulate(wl, Continuous(32, 10**6, 32, watermark=0.0), ST)
    b = simulate(wl, VLLMV1(32, 10**6, 32, async_scheduling=False), ST)
    assert np.array_equal(a.records.finish, b.records.finish)
    assert np.array_equal(a.records.first_token, b.records.first_token)


@pytest.mark.parametrize("kv", [None, 3000, 900])
@pytest.mark.parametrize("chunked", [True, False])
def test_invariants_under_memory_pressure(kv, chunked):
    wl = make_workload(Poisson(80.0), Uniform(8, 200), Uniform(4, 150), n=250, seed=7)
    budget = 256 if chunked else 512
    pol = VLLMV1(16, budget, 16, chunked_prefill=chunked)
    res = simulate(wl, pol, ST, kv_budget_tokens=kv)
    r = res.records
    assert (r.completed_mask ^ r.rejected_mask).all()
    assert (r.tokens[r.completed_mask] == wl.output_tokens[r.completed_mask]).all()
    st = r.steps
    assert (st["prompt_tokens"] + st["decode_rows"] <= budget).all()  # one budget for every token
    assert (st["batch_size"] <= 16).all()
    if kv is not None:
        assert res.kv_peak_tokens <= kv
    if kv == 900:
        assert res.preemptions > 0
    s = summarize(res)
    assert s["completed"] + s["rejected"] == len(wl)


def test_fifo_admission_and_newest_preempted_first():
    # A tiny cache: the newest running request is the one evicted, and it goes back to the front.
    pol = VLLMV1(max_seqs=4, max_batched_tokens=64, block_size=4)
    reqs = [Request(i, 0.0, 6, 20) for i in range(4)]
    steps = _steps(pol, reqs, limits=40)
    admitted = [c.request_id for s in steps for c in s.prefill if c.start == 0]
    assert admitted[:3] == [0, 1, 2]
    victims = [v for s in steps for v in s.preempted]
    assert victims and victims[0] == max(admitted[: admitted.index(victims[0]) + 1][:4])
    assert pol.preemptions == len(victims)


def test_async_scheduling_a_newcomer_waits_one_more_step():
    # Step k+1 is chosen when step k starts: a request arriving during step k joins step k+2,
    # unless nothing else would run (then it is scheduled when step k ends).
    def first_prefill_step(async_scheduling: bool) -> int:
        pol = VLLMV1(8, 64, 4, async_scheduling=async_scheduling)
        pol.start(None)
        pol.on_arrival(Request(0, 0.0, 4, 20), 0.0)
        t, k = 0.0, 0
        while True:
            step = pol.next_action(t)
            k += 1
            if any(c.request_id == 1 for c in step.prefill):
                return k
            t += 0.01
            if k == 2:
                pol.on_arrival(Request(1, t - 0.005, 4, 3), t - 0.005)  # arrived during step 2
            pol.on_step_end(step, 1, t)

    assert first_prefill_step(False) == 3 and first_prefill_step(True) == 4
    # Alone, a newcomer is scheduled at once: no step is in flight to wait for.
    pol = VLLMV1(8, 64, 4)
    pol.start(None)
    pol.on_arrival(Request(0, 0.0, 4, 1), 0.0)
    s = pol.next_action(0.0)
    pol.on_step_end(s, 1, 0.01)
    pol.on_arrival(Request(1, 0.005, 4, 2), 0.005)
    assert [c.request_id for c in pol.next_action(0.01).prefill] == [1]
    assert "async_scheduling=True" in repr(VLLMV1())
