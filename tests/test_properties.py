"""Invariants of the simulator over random workloads, for all four policies (hypothesis).

Whatever the workload, the policy and a (possibly tiny) KV budget:
- no request is lost or duplicated: completed + rejected == arrived, each completed
  request produced exactly its output tokens, a rejected one produced none;
- a step never holds more rows than the policy allows, KV in use never exceeds the
  budget, and memory is all given back at the end;
- time runs forwards: arrival <= start < first token <= last token <= finish, steps
  start in order and never overlap;
- FIFO where promised, and each policy's own rule (the taxi is work-conserving, the
  bus waits for N, the dynamic batcher never leaves before its deadline);
- the simulator's shortcut (one event for ``repeat`` identical steps) gives the same
  records as stepping one token at a time.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from batchsim import (
    ConstantStepTime,
    Continuous,
    Dynamic,
    LinearStepTime,
    Static,
    Taxi,
    Workload,
    simulate,
    summarize,
)
from batchsim.core.policies import Policy
from batchsim.core.step import Step

EPS = 1e-9
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


# -- strategies ----------------------------------------------------------------------------


def off_grid(gaps) -> np.ndarray:
    """Arrival times from gaps, stretched by an irrational-looking factor.

    Hypothesis loves round numbers: gaps of 0.05 and steps of 0.01 put an arrival exactly on
    a step boundary, where t0 + (d1 + d2 + ...) and ((t0 + d1) + d2) + ... (the shortcut's
    sum and the step-by-step sum) may round to either side of it and break the tie
    differently. Real arrival times never sit exactly on such a grid; this keeps the test's
    arrivals off it too. Zero gaps (simultaneous arrivals) stay zero.
    """
    return np.cumsum(gaps) * (1 + 1e-6 / np.pi)


@st.composite
def workloads(draw, max_n: int = 30) -> Workload:
    n = draw(st.integers(1, max_n))
    # Gaps of exactly 0 make simultaneous arrivals, a corner worth exercising.
    gaps = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-4, 0.5)), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    return Workload.from_arrays(off_grid(gaps), prompts, outputs, "hypothesis")


@st.composite
def policies(draw) -> Policy:
    kind = draw(st.sampled_from(["taxi", "static", "dynamic", "continuous"]))
    if kind == "taxi":
        return Taxi()
    if kind == "static":
        return Static(draw(st.integers(1, 6)))
    if kind == "dynamic":
        return Dynamic(draw(st.integers(1, 6)), draw(st.sampled_from([0.0, 0.01, 0.1, 0.5])))
    return Continuous(
        max_seqs=draw(st.integers(1, 8)),
        max_batched_tokens=draw(st.integers(8, 400)),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        chunked_prefill=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.2])),
    )


step_times = st.one_of(
    st.floats(1e-3, 0.2).map(ConstantStepTime),
    st.tuples(
        st.floats(1e-3, 0.05), st.floats(0, 1e-3), st.floats(0, 1e-3), st.floats(0, 1e-5)
    ).map(lambda c: LinearStepTime(*c)),
)
# None (unlimited), tiny budgets that force rejections and preemptions, and roomy ones.
kv_budgets = st.one_of(st.none(), st.integers(1, 300), st.integers(300, 5000))


# -- the invariants ------------------------------------------------------------------------


def check_invariants(wl: Workload, policy: Policy, res, kv: int | None) -> None:
    r = res.records
    n = len(wl)
    done, rej = r.completed_mask, r.rejected_mask

    # Nothing lost, nothing duplicated.
    assert not (done & rej).any(), "a request both completed and rejected"
    assert int(done.sum()) + int(rej.sum()) == n
    np.testing.assert_array_equal(r.arrival, wl.arrivals)
    np.testing.assert_array_equal(r.tokens[done], wl.output_tokens[done])
    assert (
        (r.tokens[rej] == 0).all()
        and np.isnan(r.start[rej]).all()
        and np.isnan(r.finish[rej]).all()
    )
    assert all(isinstance(reason, str) and reason for reason, x in zip(r.rejected, rej) if x)
    summarize(res)  # its conservation check must hold too

    # Timestamps of each request run forwards.
    a, s, f1, fl, fin = (
        x[done] for x in (r.arrival, r.start, r.first_token, r.last_token, r.finish)
    )
    assert (s >= a - EPS).all()
    assert (f1 > s).all(), "the first token comes at the end of a step, after its start"
    assert (fl >= f1).all() and (fin >= fl - EPS).all()
    assert (r.preemptions[rej] == 0).all()

    # The step log: ordered, non-overlapping, within the limits.
    steps = r.steps
    t0, dur = steps["start"], steps["duration"]
    assert (dur > 0).all()
    assert (np.diff(t0) >= 0).all()
    assert (t0[:-1] + dur[:-1] <= t0[1:] + EPS).all(), "steps overlap"
    assert (steps["batch_size"] >= 1).all()
    assert (steps["batch_size"] <= policy.max_rows).all(), (
        steps["batch_size"].max(),
        policy.max_rows,
    )
    assert (steps["padded_rows"] <= steps["decode_rows"]).all()
    assert (steps["repeat"] >= 1).all()
    assert int(steps["preempted"].sum()) == int(r.preemptions.sum()) == res.preemptions
    if kv is not None:
        assert (steps["kv_in_use"] <= kv).all()
        assert res.kv_peak_tokens <= kv
    assert (steps["kv_in_use"] <= res.kv_peak_tokens).all()
    # All memory is given back and nothing is left behind.
    assert policy.idle and policy.kv_in_use == 0
    if isinstance(policy, Continuous) and policy.total_blocks is not None:
        assert policy.free_blocks == policy.total_blocks

    # FIFO: every policy here serves (or, for continuous, admits) in arrival order, so
    # first-service times are non-decreasing in id (ids are in arrival order).
    served = np.flatnonzero(done)
    assert (np.diff(r.start[served]) >= 0).all(), "not FIFO"

    if not isinstance(policy, Continuous):
        check_padded(wl, policy, res, kv)
    else:
        # A request leaves the batch the step its last token is produced.
        np.testing.assert_array_equal(fin, fl)


def check_padded(wl: Workload, policy: Policy, res, kv: int | None) -> None:
    """generate()-style batches: one batch at a time, everyone delivered when the batch ends."""
    r = res.records
    done = np.flatnonzero(r.completed_mask)
    starts, first_idx, batch_of = np.unique(r.start[done], return_index=True, return_inverse=True)
    sizes = np.bincount(batch_of)
    assert (sizes <= policy.max_rows).all()
    fin = r.finish[done]
    # Everyone in a batch finishes together, when its longest output is done.
    for b in range(len(starts)):
        assert np.ptp(fin[batch_of == b]) == 0
        assert (r.first_token[done][batch_of == b] == r.first_token[done][batch_of == b][0]).all()
    ends = np.array([fin[batch_of == b][0] for b in range(len(starts))])
    # One batch at a time: a batch starts no earlier than the previous one ended.
    assert (starts[1:] >= ends[:-1] - EPS).all()
    # Each batch is a prefill step plus (longest output - 1) decode steps.
    steps = r.steps
    assert int(steps["prompt_tokens"].astype(bool).sum()) == len(starts)
    longest = np.array([r.output_tokens[done][batch_of == b].max() for b in range(len(starts))])
    assert int(steps["repeat"].sum()) == int(longest.sum())
    # KV reserved up front: rows x (longest prompt + longest output) within the budget.
    if kv is not None:
        for b in range(len(starts)):
            rows = done[batch_of == b]
            assert len(rows) * (r.prompt_tokens[rows].max() + r.output_tokens[rows].max()) <= kv

    prev_end = np.concatenate([[-np.inf], ends[:-1]])
    oldest = r.arrival[done][first_idx]  # FIFO: the batch's first member is its oldest
    if isinstance(policy, Taxi):
        # Work-conserving: a taxi leaves the moment it is free and someone waits.
        np.testing.assert_allclose(starts, np.maximum(oldest, prev_end), rtol=0, atol=EPS)
    elif isinstance(policy, Static):
        # The bus leaves full, except after the last arrival (nobody else is coming) or when
        # the KV budget cut the batch.
        last_arrival = float(wl.arrivals[-1])
        if kv is None:
            early = starts < last_arrival - EPS
            assert (sizes[early] == policy.max_batch).all(), (
                "the bus left before its seats were taken"
            )
    elif isinstance(policy, Dynamic):
        deadline = oldest + policy.max_wait
        # Never later than needed: at the deadline, or when the server came free.
        assert (starts <= np.maximum(deadline, prev_end) + EPS).all()
        if kv is None:
            # Never early: a batch that is not full waited for its deadline.
            part = sizes < policy.max_batch
            assert (starts[part] >= deadline[part] - EPS).all(), (
                "dynamic batch left before max_wait"
            )


@settings(max_examples=250, **SETTINGS)
@given(wl=workloads(), policy=policies(), step_time=step_times, kv=kv_budgets)
@example(  # a preempted request whose recompute (prompt + generated) exceeds the token budget
    wl=Workload.from_arrays([0.0, 0.0, 0.0], [60, 60, 60], [30, 30, 30]),
    policy=Continuous(max_seqs=4, max_batched_tokens=64, block_size=4, chunked_prefill=False),
    step_time=ConstantStepTime(0.01),
    kv=200,
)
@example(  # chunked prefill under a budget of a few blocks: stalls and preemptions
    wl=Workload.from_arrays([0.0, 0.0, 0.01, 0.02], [50, 37, 120, 5], [9, 30, 3, 17]),
    policy=Continuous(max_seqs=3, max_batched_tokens=16, block_size=4, chunked_prefill=True),
    step_time=ConstantStepTime(0.01),
    kv=140,
)
def test_invariants(wl, policy, step_time, kv):
    res = simulate(wl, policy, step_time, kv_budget_tokens=kv)
    check_invariants(wl, policy, res, kv)


@st.composite
def continuous_under_pressure(draw):
    """Continuous batching with a KV budget of a few requests' worth: preemptions galore."""
    n = draw(st.integers(2, 25))
    gaps = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-4, 0.05)), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    wl = Workload.from_arrays(off_grid(gaps), prompts, outputs, "pressure")
    block = draw(st.sampled_from([1, 4, 8]))
    policy = Continuous(
        max_seqs=draw(st.integers(2, 8)),
        max_batched_tokens=draw(st.integers(16, 128)),
        block_size=block,
        chunked_prefill=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.05])),
    )
    kv = draw(st.integers(block * 4, 400))
    return wl, policy, kv


@settings(max_examples=150, **SETTINGS)
@given(case=continuous_under_pressure(), step_time=step_times)
def test_continuous_under_memory_pressure(case, step_time):
    wl, policy, kv = case
    twin = copy.deepcopy(policy)
    res = simulate(wl, policy, step_time, kv_budget_tokens=kv)
    check_invariants(wl, policy, res, kv)
    assert_same_run(res, simulate(wl, OneStepAtATime(twin), step_time, kv_budget_tokens=kv))


def test_invariants_catch_a_lost_request():
    """The checker itself must fail on broken records (a test that cannot fail is a defect)."""
    wl = Workload.from_arrays([0.0, 0.1, 0.2], [5, 5, 5], [3, 3, 3])
    policy = Taxi()
    res = simulate(wl, policy, ConstantStepTime(0.01))
    check_invariants(wl, policy, res, None)
    res.records.finish[1] = np.nan
    with pytest.raises(AssertionError):
        check_invariants(wl, policy, res, None)


# -- the shortcut is exact -------------------------------------------------------------------


class OneStepAtATime(Policy):
    """Drives a policy without the simulator's shortcut: every ``repeat=k`` step is run as one
    step, after which the inner policy is asked again, as a real engine would."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.split = 0  # how many repeated steps were split (the test is vacuous if none)

    @property
    def max_rows(self) -> int:  # type: ignore[override]
        return self.inner.max_rows

    def start(self, kv_budget_tokens: int | None = None) -> None:
        self.inner.start(kv_budget_tokens)
        self._orig: Step | None = None
        self._proxy: Step | None = None

    def close(self, now: float) -> None:
        self.inner.close(now)

    def on_arrival(self, request, now):
        return self.inner.on_arrival(request, now)

    def next_action(self, now):
        action = self.inner.next_action(now)
        if isinstance(action, Step) and action.repeat > 1:
            self.split += 1
            self._orig, self._proxy = action, replace(action, repeat=1)
            return self._proxy
        return action

    def on_step_end(self, step, done, now):
        if step is self._proxy:
            step, self._proxy = self._orig, None
        return self.inner.on_step_end(step, done, now)

    @property
    def idle(self) -> bool:
        return self.inner.idle

    @property
    def kv_peak(self) -> int:  # type: ignore[override]
        return self.inner.kv_peak

    @property
    def kv_in_use(self) -> int:  # type: ignore[override]
        return self.inner.kv_in_use

    @property
    def preemptions(self) -> int:  # type: ignore[override]
        return self.inner.preemptions


def assert_same_run(fast, slow) -> None:
    """Request records equal (times to float rounding of sums); step logs equal step by step."""
    a, b = fast.records, slow.records
    for name in ("tokens", "preemptions", "output_tokens", "prompt_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.rejected == b.rejected
    # Sums of step times are associated differently (t0 + sum vs ((t0 + d1) + d2)...), so the
    # times agree to rounding, not bit for bit; any real divergence is a whole step or more.
    for name in ("arrival", "start", "first_token", "last_token", "finish", "itl_max"):
        np.testing.assert_allclose(
            getattr(a, name), getattr(b, name), rtol=0, atol=1e-9, err_msg=name
        )
    assert fast.kv_peak_tokens == slow.kv_peak_tokens
    assert fast.preemptions == slow.preemptions
    sa, sb = a.steps, b.steps
    reps = sa["repeat"]
    assert (sb["repeat"] == 1).all()
    assert int(reps.sum()) == len(sb["repeat"])
    for name in ("batch_size", "prompt_tokens", "decode_rows", "padded_rows", "preempted"):
        np.testing.assert_array_equal(np.repeat(sa[name], reps), sb[name], err_msg=name)
    first = np.cumsum(reps) - reps  # the slow run's index of each fast row's first repetition
    np.testing.assert_array_equal(sa["kv_in_use"], sb["kv_in_use"][first])
    np.testing.assert_allclose(sa["start"], sb["start"][first], rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        sa["duration"], np.add.reduceat(sb["duration"], first), rtol=0, atol=1e-9
    )


@settings(max_examples=200, **SETTINGS)
@given(wl=workloads(max_n=25), policy=policies(), step_time=step_times, kv=kv_budgets)
# continuous decoding long runs interrupted by arrivals, tight KV so runs are cut by blocks
@example(
    wl=Workload.from_arrays(
        np.arange(12) * 0.037, [20] * 12, [40, 3, 25, 7, 33, 1, 12, 40, 5, 18, 2, 29]
    ),
    policy=Continuous(max_seqs=4, max_batched_tokens=64, block_size=4),
    step_time=LinearStepTime(0.01, 1e-4, 2e-4, 1e-6),
    kv=160,
)
def test_shortcut_equals_one_step_at_a_time(wl, policy, step_time, kv):
    twin = copy.deepcopy(policy)  # same settings, independent state
    fast = simulate(wl, policy, step_time, kv_budget_tokens=kv)
    slow_policy = OneStepAtATime(twin)
    slow = simulate(wl, slow_policy, step_time, kv_budget_tokens=kv)
    assert_same_run(fast, slow)


def test_shortcut_comparison_is_not_vacuous():
    """A workload where the shortcut matters: long decode runs cut by arrivals and by KV blocks.
    The wrapper must actually split repeated steps, and the comparison must see a changed run."""
    rng = np.random.default_rng(7)
    n = 300
    wl = Workload.from_arrays(
        np.cumsum(rng.exponential(0.05, n)), rng.integers(4, 200, n), rng.integers(1, 120, n)
    )
    for make in (
        lambda: Continuous(max_seqs=8, max_batched_tokens=256, block_size=8),
        lambda: Static(4),
        lambda: Dynamic(4, 0.05),
    ):
        st_ = LinearStepTime(0.008, 1e-5, 3e-4, 1e-7)
        fast = simulate(wl, make(), st_, kv_budget_tokens=3000)
        wrapper = OneStepAtATime(make())
        slow = simulate(wl, wrapper, st_, kv_budget_tokens=3000)
        assert wrapper.split > 50
        assert (fast.records.steps["repeat"] > 1).sum() > 50
        assert len(slow.records.steps["repeat"]) > 2 * len(fast.records.steps["repeat"])
        assert_same_run(fast, slow)
        # ...and it would notice a run that differs by a single step's worth of time.
        slow.records.finish[n // 2] += st_.c0
        with pytest.raises(AssertionError):
            assert_same_run(fast, slow)
