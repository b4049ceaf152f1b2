"""The policies by hand, without SimPy: feed arrivals, ask what to run, report it done.

Each test walks a policy through a few steps and checks the exact shape of every step
(rows, chunks, padding, KV read, repeat) against what the docstrings promise, so a
change of semantics shows up here before it blurs a statistic elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import ConfigError, Continuous, Dynamic, Request, Static, Taxi, make_policy
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import POLICY_NAMES
from batchsim.core.step import Chunk, Step, Wait


def req(i, p, o, t=0.0):
    return Request(i, t, p, o)


def run_step(policy, now):
    """Ask for the next step and run all its repetitions; return (step, outcome)."""
    step = policy.next_action(now)
    assert isinstance(step, Step), step
    return step, policy.on_step_end(step, step.repeat, now)


def counts(outcome):
    return dict(zip(outcome.token_ids.tolist(), outcome.token_counts.tolist()))


# -- padded batches -------------------------------------------------------------------------


def test_taxi_one_request_prefill_then_decodes():
    p = Taxi()
    p.start(None)
    assert p.idle and p.next_action(0.0) == Wait(None)
    assert p.on_arrival(req(0, 10, 3), 0.0) is None
    assert p.on_arrival(req(1, 4, 1), 0.0) is None
    step, out = run_step(p, 0.0)
    assert (
        step.prefill == (Chunk(0, 0, 10, True),) and step.decode == () and step.prefill_padding == 0
    )
    assert step.kv_in_use == 13  # prompt + output reserved up front
    assert counts(out) == {0: 1} and out.finished == ()
    step, out = run_step(p, 0.1)
    assert step.decode == (0,) and step.repeat == 2 and step.kv_read == 10 and step.padded_rows == 0
    assert counts(out) == {0: 2} and out.finished == (0,)
    assert p.kv_in_use == 0
    step, out = run_step(p, 0.3)  # the next passenger: alone, one token, done in the prefill
    assert step.batch_size == 1 and out.finished == (1,)
    assert p.idle and p.kv_peak == 13


def test_static_waits_for_n_then_pads_like_generate():
    p = Static(3)
    p.start(None)
    p.on_arrival(req(0, 5, 2), 0.0)
    assert p.next_action(0.0) == Wait(None)  # the bus does not leave half empty
    p.on_arrival(req(1, 9, 4), 0.1)
    assert p.next_action(0.1) == Wait(None)
    p.on_arrival(req(2, 3, 4), 0.2)
    step, out = run_step(p, 0.2)
    assert [c.request_id for c in step.prefill] == [0, 1, 2]
    assert step.prefill_padding == 3 * 9 - (5 + 9 + 3) and step.prefill_tokens == 27
    assert step.kv_in_use == 3 * (9 + 4)
    assert counts(out) == {0: 1, 1: 1, 2: 1}
    # Decode until the shortest answer is done (shape holds), then with one padded row.
    step, out = run_step(p, 0.3)
    assert (
        step.decode == (0, 1, 2)
        and step.repeat == 1
        and step.padded_rows == 0
        and step.kv_read == 27
    )
    assert counts(out) == {0: 1, 1: 1, 2: 1} and out.finished == ()
    step, out = run_step(p, 0.4)
    assert (
        step.decode == (0, 1, 2)
        and step.repeat == 2
        and step.padded_rows == 1
        and step.kv_read == 30
    )
    assert counts(out) == {1: 2, 2: 2}
    assert out.finished == (0, 1, 2)  # everyone leaves when the longest is done, row 0 included
    assert p.kv_in_use == 0 and p.idle


def test_static_partial_bus_departs_after_close():
    p = Static(4)
    p.start(None)
    p.on_arrival(req(0, 5, 1), 0.0)
    p.on_arrival(req(1, 5, 1), 0.0)
    assert isinstance(p.next_action(1.0), Wait)
    p.close(1.0)
    step, out = run_step(p, 1.0)
    assert step.batch_size == 2 and out.finished == (0, 1)


def test_dynamic_leaves_when_full_or_at_the_deadline():
    p = Dynamic(max_batch=3, max_wait=0.5)
    p.start(None)
    p.on_arrival(req(0, 5, 1, 1.0), 1.0)
    assert p.next_action(1.0) == Wait(1.5)
    p.on_arrival(req(1, 5, 1, 1.2), 1.2)
    assert p.next_action(1.2) == Wait(1.5)  # the deadline is the oldest's
    step, out = run_step(p, 1.5)
    assert step.batch_size == 2 and out.finished == (0, 1)
    for i in range(2, 6):
        p.on_arrival(req(i, 5, 1, 2.0), 2.0)
    step, _ = run_step(p, 2.0)  # full: no waiting
    assert [c.request_id for c in step.prefill] == [2, 3, 4]
    assert p.next_action(2.1) == Wait(2.5)


def test_padded_kv_reservation_cuts_the_batch_and_rejects_what_never_fits():
    p = Static(4)
    p.start(100)
    reason = p.on_arrival(req(9, 90, 20), 0.0)
    assert reason is not None and "100" in reason
    # Rows x (longest prompt + longest output): 2 x 35 fits, 3 x 35 does not.
    for i, (pr, o) in enumerate([(20, 5), (30, 5), (20, 5), (20, 5)]):
        assert p.on_arrival(req(i, pr, o), 0.0) is None
    step, _ = run_step(p, 0.0)
    assert [c.request_id for c in step.prefill] == [0, 1]
    assert step.kv_in_use == 70 and p.kv_peak == 70
    run_step(p, 0.1)
    p.close(0.2)
    step, _ = run_step(p, 0.2)
    assert [c.request_id for c in step.prefill] == [2, 3] and step.kv_in_use == 50


# -- continuous batching --------------------------------------------------------------------


def test_continuous_admits_fifo_up_to_max_seqs_and_repeats_decodes():
    p = Continuous(max_seqs=2, max_batched_tokens=100, block_size=4)
    p.start(None)
    for i in range(3):
        p.on_arrival(req(i, 30, 3), 0.0)
    step, out = run_step(p, 0.0)
    assert [c.request_id for c in step.prefill] == [0, 1] and step.decode == ()
    assert counts(out) == {0: 1, 1: 1}
    step, out = run_step(p, 0.1)
    # Nothing can join (the batch is full), so the decodes run until the first finishes.
    assert (
        step.decode == (0, 1) and step.repeat == 2 and not step.interruptible and step.kv_read == 60
    )
    assert counts(out) == {0: 2, 1: 2} and set(out.finished) == {0, 1}
    step, out = run_step(p, 0.3)
    assert [c.request_id for c in step.prefill] == [2]
    step = p.next_action(0.4)
    assert step.decode == (2,) and step.repeat == 2 and step.interruptible  # a newcomer could join
    out = p.on_step_end(step, 1, 0.45)  # the driver stopped early for an arrival
    assert counts(out) == {2: 1} and out.finished == ()
    step, out = run_step(p, 0.5)
    assert step.repeat == 1 and out.finished == (2,) and p.idle


def test_continuous_token_budget_with_and_without_chunking():
    p = Continuous(max_seqs=8, max_batched_tokens=50, block_size=4, chunked_prefill=False)
    p.start(None)
    p.on_arrival(req(1, 30, 2), 0.0)
    p.on_arrival(req(2, 30, 2), 0.0)
    # longer than the budget, but it fits in memory
    assert p.on_arrival(req(0, 120, 2), 0.0) is None
    step, _ = run_step(p, 0.0)
    assert [c.request_id for c in step.prefill] == [1]  # the second prompt waits for the next step
    step, _ = run_step(p, 0.1)
    assert [c.request_id for c in step.prefill] == [2] and step.decode == (1,)
    step, _ = run_step(p, 0.2)
    # Unchunked, the 120-token prompt takes a step's prefill to itself, whole.
    assert step.prefill == (Chunk(0, 0, 120, True),) and step.prefill_tokens == 120
    # ... unless the server's pass cannot hold it: then it is refused on arrival, with the reason.
    p.start(ServerLimits(max_step_tokens=100))
    assert "max_step_tokens=100" in p.on_arrival(req(0, 120, 2), 0.0)

    q = Continuous(max_seqs=8, max_batched_tokens=50, block_size=4, chunked_prefill=True)
    q.start(None)
    assert q.on_arrival(req(0, 120, 2), 0.0) is None
    chunks = []
    for t in range(3):
        step, out = run_step(q, t * 0.1)
        chunks += list(step.prefill)
    assert chunks == [Chunk(0, 0, 50, False), Chunk(0, 50, 50, False), Chunk(0, 100, 20, True)]
    assert counts(out) == {0: 1}  # the first token comes with the chunk that completes the prompt
    assert step.kv_read == 100  # that chunk attends to the 100 tokens already cached


def test_continuous_kv_blocks_preempt_the_newest_and_recompute():
    p = Continuous(max_seqs=4, max_batched_tokens=100, block_size=4, watermark=0.0)
    p.start(16)  # 4 blocks of 4 tokens
    assert "blocks" in p.on_arrival(req(9, 30, 10), 0.0)  # 39 tokens: 10 blocks, never fits
    p.on_arrival(req(0, 4, 6), 0.0)
    p.on_arrival(req(1, 4, 6), 0.0)
    step, _ = run_step(p, 0.0)
    assert len(step.prefill) == 2 and p.kv_in_use == 8
    step, out = run_step(p, 0.1)
    # Blocks allow 4 more tokens per row (8 of 16 tokens left), not the 5 both still need.
    assert step.decode == (0, 1) and step.repeat == 4 and step.kv_in_use == 16
    assert counts(out) == {0: 4, 1: 4} and p.kv_in_use == 16
    step, out = run_step(p, 0.5)
    assert step.preempted == (1,) and step.decode == (0,) and p.preemptions == 1
    assert out.finished == (0,)
    step, out = run_step(p, 0.6)
    # Back at the front of the queue, it recomputes prompt + the 5 tokens it had made.
    assert step.prefill == (Chunk(1, 0, 9, True),)
    assert out.finished == (1,)
    assert p.kv_peak == 16 and p.kv_in_use == 0 and p.free_blocks == p.total_blocks and p.idle


@pytest.mark.parametrize("kv", [None, 1000])
def test_continuous_kv_in_use_counts_the_block_a_decoding_row_grows_into(kv):
    # A budget decides preemptions, not what a step's KV in use counts: with none, the step log
    # still holds the block the token a decoding row writes lands in (as batchsim.textbook's does).
    p = Continuous(max_seqs=4, block_size=4, watermark=0.0)
    p.start(kv)
    p.on_arrival(req(0, 4, 3), 0.0)
    step, _ = run_step(p, 0.0)
    assert step.prefill == (Chunk(0, 0, 4, True),) and step.kv_in_use == 4  # one block, full
    step, out = run_step(p, 0.1)
    assert step.decode == (0,) and step.repeat == 2
    assert step.kv_in_use == 8  # its next token needs a second block
    assert out.finished == (0,) and p.kv_peak == 8 and p.kv_in_use == 0


def test_continuous_recompute_longer_than_the_token_budget_is_readmitted():
    """Only the prompt is checked against max_batched_tokens on arrival; after a preemption
    the context to recompute is longer. Without chunked prefill it must still get back in
    (alone in a step's prefill) rather than wait forever at the head of the queue."""
    p = Continuous(
        max_seqs=4, max_batched_tokens=64, block_size=4, watermark=0.0, chunked_prefill=False
    )
    p.start(200)
    for i in range(3):
        p.on_arrival(req(i, 60, 30), 0.0)
    produced = {0: 0, 1: 0, 2: 0}
    recompute = None
    for k in range(200):
        if p.idle:
            break
        step, out = run_step(p, k * 0.01)
        for c in step.prefill:
            if c.length > 64:
                recompute = c
        for i, n in counts(out).items():
            produced[i] += n
    assert p.idle and p.preemptions >= 1
    assert recompute is not None and recompute.completes
    assert produced == {0: 30, 1: 30, 2: 30}


def test_continuous_rejects_a_foreign_step():
    p = Continuous()
    p.start(None)
    p.on_arrival(req(0, 4, 2), 0.0)
    p.next_action(0.0)
    with pytest.raises(RuntimeError):
        p.on_step_end(Step(decode=(0,)), 1, 0.1)


# -- construction ---------------------------------------------------------------------------


def test_make_policy_by_name():
    assert [make_policy(n).name for n in POLICY_NAMES] == list(POLICY_NAMES)
    assert make_policy("static", max_batch=5).max_rows == 5
    assert make_policy("continuous", max_seqs=7).max_rows == 7
    assert make_policy("taxi").max_rows == 1
    with pytest.raises(ConfigError, match="limo"):
        make_policy("limo")


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Static(0), "max_batch"),
        (lambda: Dynamic(4, -0.1), "max_wait"),
        (lambda: Dynamic(0, 0.1), "max_batch"),
        (lambda: Continuous(max_seqs=0), "max_seqs"),
        (lambda: Continuous(max_batched_tokens=0), "max_batched_tokens"),
        (lambda: Continuous(block_size=0), "block_size"),
        (lambda: Continuous(watermark=1.0), "watermark"),
        (lambda: Static(2.5), "max_batch"),
    ],
)
def test_bad_settings_name_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        make()


def test_start_resets_state():
    p = Continuous(max_seqs=2, block_size=4)
    p.start(64)
    p.on_arrival(req(0, 10, 5), 0.0)
    run_step(p, 0.0)
    assert p.kv_in_use > 0
    p.start(64)
    assert (
        p.idle
        and p.kv_in_use == 0
        and p.kv_peak == 0
        and p.preemptions == 0
        and p.free_blocks == 16
    )
    assert np.asarray(p.running_ids).size == 0
