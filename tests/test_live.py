"""The one driver fed live (``batchsim.core.live``): requests from another thread, on the real
clock.

The engine here is made of sleeps (each pass a fixed few milliseconds, told to stop between
passes as a real engine is), so the checks are about scheduling, not speed: a request that
comes during a long repeated step joins at the next pass, not after the repeat; a withdrawn
request frees its queue place or its row and blocks at once; nothing is lost or duplicated.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from batchsim.core.driver import drive
from batchsim.core.live import GrowingRecorder, Inbox, LiveArrivals, LiveExecutor
from batchsim.core.policies import make_policy
from batchsim.core.workload import Workload

PASS_S = 0.004
#: A watchdog against a hang only: these runs take a second or two, however loaded the machine.
WATCHDOG_S = 600


class SleepEngine:
    """Each pass sleeps ``PASS_S``; a repeat stops after the pass where ``should_stop()`` turns
    true.

    It notes when each pass ended (``ends``), so a test counts passes, not seconds; and it can hold
    still after ``hold_after`` passes until the test lets it go (``reached``, then ``go``), so a
    test acts at a known point of the run however slow the machine is."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.released: list[int] = []
        self.ends: list[float] = []
        self.hold_after = hold_after
        self.reached, self.go = threading.Event(), threading.Event()

    def execute(self, step, should_stop=None):
        t0, ends = time.perf_counter(), []
        for j in range(step.repeat):
            time.sleep(PASS_S)
            ends.append(time.perf_counter())
            self.ends.append(ends[-1])
            if len(self.ends) == self.hold_after:
                self.reached.set()
                assert self.go.wait(WATCHDOG_S), "watchdog: the test never let the engine go on"
            if should_stop is not None and j + 1 < step.repeat and should_stop():
                break
        return t0, ends

    def release(self, ids) -> None:
        self.released.extend(int(i) for i in ids)


def _live(policy, hold_after: int | None = None):
    clock = time.perf_counter
    inbox = Inbox(clock, clock())
    rec = GrowingRecorder(capacity=2)  # grows as requests come: the doubling is exercised too
    engine = SleepEngine(hold_after)
    out: dict = {}

    def run():
        out["drive"] = drive(
            Workload(()),
            policy,
            LiveExecutor(engine, inbox, clock),
            None,
            arrivals=LiveArrivals(inbox),
            recorder=rec,
        )

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return inbox, th, out, engine


def test_a_request_during_a_long_repeat_joins_at_the_next_pass():
    policy = make_policy("continuous", max_seqs=8)
    # (the sleeps below only spread the arrivals; no result hangs on them)
    inbox, th, out, engine = _live(policy)
    inbox.submit(8, 400)  # a repeat of ~400 passes (1.6 s) starts
    time.sleep(0.1)
    late = [inbox.submit(8, 5) for _ in range(3)]
    time.sleep(0.05)
    for _ in range(3):
        time.sleep(0.15)
        inbox.submit(4, 3)
    inbox.close()
    th.join(WATCHDOG_S)
    assert not th.is_alive()
    r = out["drive"].recorder.records()
    assert len(r) == 7 and r.completed == 7 and (r.tokens == r.output_tokens).all()
    ends = np.array(engine.ends)
    # Counted in passes, not seconds: each joined at the next pass boundary (the pass under way when
    # it came ends; a second only if it came just as the stop check ran), never after the 400-pass
    # repeat.
    waited = [int(((ends > a) & (ends < s)).sum()) for a, s in zip(r.arrival, r.start)]
    assert max(waited[i] for i in [*late, 4, 5, 6]) <= 2, waited
    assert (r.start[[*late, 4, 5, 6]] < r.finish[0]).all()
    assert policy.kv_in_use == 0


@pytest.mark.parametrize("name", ["continuous", "static", "dynamic", "taxi"])
def test_withdrawn_requests_leave_and_nothing_is_lost_or_duplicated(name):
    kw = {"max_seqs": 4} if name == "continuous" else {} if name == "taxi" else {"max_batch": 4}
    policy = make_policy(name, **kw)
    inbox, th, out, engine = _live(policy, hold_after=2)
    ids = [inbox.submit(8 + i, 30 + 10 * i) for i in range(10)]
    assert engine.reached.wait(WATCHDOG_S), "watchdog: the engine never ran two passes"
    # running (or in the first batch)
    inbox.withdraw(ids[1], "the client disconnected after 2 tokens")
    # queued behind the others
    inbox.withdraw(ids[9], "the client disconnected before its first token")
    engine.go.set()
    inbox.close()
    th.join(WATCHDOG_S)
    assert not th.is_alive()
    r = out["drive"].recorder.records()
    done, rejected = r.completed_mask, r.rejected_mask
    assert len(r) == 10 and (done ^ rejected).all()  # each request finished or rejected, never both
    assert rejected[9] and "before its first token" in r.rejected[9]  # a queued one always leaves
    if name == "continuous":
        assert rejected[1] and r.tokens[1] < r.output_tokens[1]  # a running row leaves mid-answer
    elif name == "taxi":
        assert rejected[1] and r.tokens[1] == 0  # one ride at a time: it was still queued
    else:
        assert done[1]  # a padded batch keeps its row as padding: it rides to the batch's end
    assert (r.tokens[done] == r.output_tokens[done]).all()
    assert sorted(set(engine.released)) == sorted(engine.released)  # released once each
    assert policy.kv_in_use == 0 and policy.idle


def test_the_recorder_grows_and_ids_rise_with_arrival_times():
    rec = GrowingRecorder(capacity=1)
    from batchsim.core.workload import Request

    for i in range(5):
        rec.add(Request(i, 0.1 * i, 3, 4))
    with pytest.raises(ValueError):
        rec.add(Request(9, 1.0, 3, 4))
    r = rec.records()
    assert (
        len(r) == 5 and np.allclose(r.arrival, [0, 0.1, 0.2, 0.3, 0.4]) and np.isnan(r.finish).all()
    )


def test_a_growing_recorder_rejects_only_the_requests_it_was_given():
    # Capacity 8, three requests added, one finished: a stop rejects the two others, never the five
    # spare slots beyond them (NaN like an unfinished request's), and the recorder still grows
    # afterwards.
    from batchsim.core.workload import Request

    rec = GrowingRecorder(capacity=8)
    for i in range(3):
        rec.add(Request(i, 0.1 * i, 4, 2))
    rec.finish[1] = 1.0
    rec.reject_unfinished("stopped", arrived=2)
    assert rec.rejected == ["stopped", None, "stopped (never arrived)"]
    for i in range(3, 10):
        rec.add(Request(i, 1.0, 4, 2))
    assert rec.n == 10 and len(rec.records().rejected) == 10
