"""The wall-clock runner mirrors batchsim's simulator exactly.

With a fake clock and an engine whose every pass takes exactly d seconds, ``run_real``
must write the very records ``simulate`` writes with ``ConstantStepTime(d)``: same
first tokens, finishes, step log, for every policy, including interrupted repeated
steps and Wait deadlines. Then: the records schema equals batchsim's, Ctrl-C and GPU
out-of-memory keep what was measured and account for every request, and prompts that
do not fit the model's context are rejected with the reason.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fakes import FakeClock, PricedEngine  # noqa: E402

from batchsim import (  # noqa: E402
    ConstantStepTime,
    Gamma,
    Poisson,
    Uniform,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.core.records import REQUEST_FIELDS, STEP_FIELDS  # noqa: E402
from realrun.clock.runner import context_reason, run_real  # noqa: E402


class FakeEngine(PricedEngine):
    """Every pass takes ``d`` seconds of the fake clock (a constant step time); ``fail_at`` raises
    on that call. It carries what run_real reads of a loaded model."""

    name = "fake"

    def __init__(
        self,
        clock: FakeClock,
        d: float,
        n_positions: int = 10_000,
        fail_at: int | None = None,
        error=None,
    ) -> None:
        super().__init__(clock, ConstantStepTime(d), fail_at=fail_at, error=error)
        self.lm = SimpleNamespace(
            n_positions=n_positions,
            device="cpu",
            name="fake",
            source="test",
            random_weights=True,
            dtype="fp32",
            threads=1,
            kv_bytes_per_token=0,
        )


def FakeClockAt100() -> FakeClock:
    return FakeClock(100.0)  # not zero: the runner must measure from its own start


POLICIES = [
    ("taxi", {}),
    ("static", {"max_batch": 4}),
    ("dynamic", {"max_batch": 4, "max_wait": 0.03}),
    ("continuous", {"max_seqs": 6}),
    (
        "continuous",
        {"max_seqs": 6, "max_batched_tokens": 24, "chunked_prefill": True, "block_size": 4},
    ),
]


def _close(a, b):
    return np.allclose(a, b, rtol=0, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("kv", [None, 120])
@pytest.mark.parametrize("name, kw", POLICIES, ids=[p[0] + str(i) for i, p in enumerate(POLICIES)])
def test_runner_writes_the_simulators_records(name, kw, kv):
    d = 0.004
    wl = make_workload(Gamma(60.0, 2.0), Uniform(4, 40), Uniform(1, 30), n=40, seed=5)
    sim = simulate(wl, make_policy(name, **kw), ConstantStepTime(d), kv_budget_tokens=kv)
    clock = FakeClockAt100()
    eng = FakeEngine(clock, d)
    real = run_real(
        wl, make_policy(name, **kw), eng, kv_budget_tokens=kv, clock=clock, sleep=clock.sleep
    )
    a, b = sim.records, real.records
    for f in ("start", "first_token", "finish", "last_token", "itl_max"):
        assert _close(getattr(a, f), getattr(b, f)), f
    assert (a.tokens == b.tokens).all() and (a.preemptions == b.preemptions).all()
    assert a.rejected == b.rejected
    for k in STEP_FIELDS:
        assert _close(a.steps[k], b.steps[k]), k
    assert sim.preemptions == real.preemptions and sim.kv_peak_tokens == real.kv_peak_tokens
    if name == "continuous" and kv is None and not kw.get("chunked_prefill"):
        # the interesting path: repeated decode steps cut at arrivals
        assert (b.steps["repeat"] > 1).any()
    assert sorted(eng.released) == sorted(np.flatnonzero(b.completed_mask).tolist())


def test_records_schema_equals_batchsims(tmp_path):
    wl = make_workload(Poisson(50.0), Uniform(4, 20), Uniform(1, 10), n=10, seed=1)
    sim = simulate(wl, make_policy("continuous"), ConstantStepTime(0.01))
    clock = FakeClockAt100()
    real = run_real(
        wl, make_policy("continuous"), FakeEngine(clock, 0.01), clock=clock, sleep=clock.sleep
    )
    a, b = sim.records, real.records
    for f in (
        "arrival",
        "prompt_tokens",
        "output_tokens",
        "start",
        "first_token",
        "finish",
        "last_token",
        "tokens",
        "preemptions",
        "itl_max",
    ):
        assert (
            getattr(a, f).dtype == getattr(b, f).dtype
            and getattr(a, f).shape == getattr(b, f).shape
        ), f
    assert set(a.steps) == set(b.steps) == set(STEP_FIELDS)
    assert all(a.steps[k].dtype == b.steps[k].dtype for k in STEP_FIELDS)
    assert list(a.request_rows()[0]) == list(b.request_rows()[0]) == list(REQUEST_FIELDS)
    pa, pb = tmp_path / "a", tmp_path / "b"
    for recs, p in ((a, pa), (b, pb)):
        req, steps = recs.write_csv(p)
        assert req.read_text().splitlines()[0] == ",".join(REQUEST_FIELDS)
        assert steps.read_text().splitlines()[0] == ",".join(STEP_FIELDS)
    assert set(summarize(sim)) == set(summarize(real))


@pytest.mark.parametrize(
    "error, word",
    [
        (KeyboardInterrupt(), "interrupted"),
        (torch.OutOfMemoryError("CUDA out of memory"), "out of memory"),
    ],
)
def test_a_stopped_run_keeps_what_was_measured(error, word):
    wl = make_workload(Poisson(20.0), Uniform(4, 20), Uniform(2, 10), n=30, seed=2)
    clock = FakeClockAt100()
    eng = FakeEngine(clock, 0.01, fail_at=25, error=error)
    res = run_real(wl, make_policy("continuous", max_seqs=4), eng, clock=clock, sleep=clock.sleep)
    assert word in res.meta["stopped"]
    s = summarize(res)  # conservation holds: nothing silently lost
    assert 0 < s["completed"] < len(wl)
    assert s["completed"] + s["rejected"] == len(wl)
    reasons = [r for r in res.records.rejected if r]
    assert reasons and all(word in r for r in reasons)
    assert any("never arrived" in r for r in reasons)


def test_prompts_longer_than_the_context_are_rejected_with_the_reason():
    # positions 0..123: the last token is never fed back
    assert context_reason(100, 25, 124) is None
    assert "context of 124" in context_reason(100, 26, 124)
    wl = make_workload(Poisson(50.0), Uniform(10, 60), Uniform(1, 5), n=20, seed=4)
    clock = FakeClockAt100()
    res = run_real(
        wl,
        make_policy("continuous"),
        FakeEngine(clock, 0.01, n_positions=40),
        clock=clock,
        sleep=clock.sleep,
    )
    r = res.records
    too_long = wl.prompt_tokens + wl.output_tokens - 1 > 40
    assert too_long.any() and (~too_long).any()
    assert (r.rejected_mask == too_long).all()
    assert all("exceeds the model's context" in r.rejected[i] for i in np.flatnonzero(too_long))
    assert r.completed_mask[~too_long].all()


def test_compare_stops_at_ctrl_c():
    from realrun.judge.compare import compare_policies, format_compare

    wl = make_workload(Poisson(20.0), Uniform(4, 20), Uniform(2, 10), n=20, seed=2)
    clock = FakeClockAt100()
    eng = FakeEngine(clock, 0.01, fail_at=5, error=KeyboardInterrupt())
    pairs = [(n, make_policy(n), make_policy(n)) for n in ("taxi", "continuous")]
    report = compare_policies(
        wl,
        pairs,
        lambda label, p: run_real(wl, p, eng, clock=clock, sleep=clock.sleep),
        ConstantStepTime(0.01),
    )
    assert [r.label for r in report.rows] == ["taxi"]
    assert "interrupted" in report.notes[0]
    assert "taxi" in format_compare(report)
