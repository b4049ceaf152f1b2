"""``realrun.timing.pass_level``: the machine's level read from a run's own passes, on injected
times.

Every time here is made up (the passes' seconds are the model's price times a chosen level, with
seeded noise), so the tests are of the arithmetic, never of this machine's speed.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from batchsim.core.plan import Pass
from batchsim.sim.level import LevelStepTime
from batchsim.sim.steptime import LinearStepTime
from realrun.timing.pass_level import CONTRADICTS, pass_level

sys.path.insert(0, str(Path(__file__).parent))  # test_canary_level, for the last test

MODEL = LinearStepTime(0.004, 2e-5, 5e-5, 1e-8)


def _run(
    prefill_level: float,
    decode_level: float,
    n: int = 400,
    noise: float = 0.0,
    seed: int = 0,
    drift=None,
):
    """A measured run of ``n`` passes (every tenth a prefill) at the given levels; ``drift(i)``
    multiplies pass i."""
    rng = np.random.default_rng(seed)
    passes = []
    for i in range(n):
        p = (
            Pass(prefill_tokens=64, prefill_rows=1, query=64)
            if i % 10 == 0
            else Pass(decode_rows=8, kv_read=8 * 100, attn_read=8 * 100)
        )
        level = prefill_level if p.prefill_rows else decode_level
        secs = (
            MODEL.pass_time(p)
            * level
            * (1 + noise * rng.standard_normal())
            * (drift(i) if drift else 1.0)
        )
        passes.append((p, secs))
    return SimpleNamespace(meta={"passes": passes})


def test_the_level_is_the_ratio_of_totals_prefill_and_decode_apart():
    pl = pass_level([_run(1.3, 0.9)], MODEL, "continuous")
    assert pl.prefill == pytest.approx(1.3) and pl.decode == pytest.approx(0.9)
    assert (pl.prefill_n, pl.decode_n) == (40, 360)
    assert pl.prefill_se < 1e-9 and pl.decode_se < 1e-9  # exact times: no spread between blocks


def test_several_runs_pool_their_passes():
    pl = pass_level([_run(1.0, 1.0), _run(1.2, 1.2)], MODEL, "continuous")
    assert pl.decode_n == 720 and 1.0 < pl.decode < 1.2


def test_slow_drift_widens_the_error_more_than_independent_noise_of_the_same_size():
    # The same per-pass spread (about 10 %), once independent, once as a slow wave over the run.
    indep = pass_level([_run(1.0, 1.0, n=2000, noise=0.1, seed=1)], MODEL, "continuous")
    wave = pass_level(
        [_run(1.0, 1.0, n=2000, drift=lambda i: 1 + 0.14 * math.sin(i / 2000 * 2 * math.pi))],
        MODEL,
        "continuous",
    )
    assert indep.decode == pytest.approx(1.0, abs=0.02)
    # batch means see the wave; a naive sd / sqrt(n) would not
    assert wave.decode_se > 3 * indep.decode_se


def test_contradiction_is_beyond_the_tolerance_and_the_error():
    pl = pass_level([_run(1.0, 1.0)], MODEL, "continuous")
    assert pl.contradicts(1.0 + CONTRADICTS * 0.9, 1.0) == []
    assert pl.contradicts(1.5, 1.0) == ["prefill"] and pl.contradicts(1.0, 0.7) == ["decode"]
    only_decode = pass_level(
        [
            SimpleNamespace(
                meta={"passes": [(Pass(decode_rows=1, kv_read=10, attn_read=10), 0.005)]}
            )
        ],
        MODEL,
        "taxi",
    )
    # no prefill ran
    assert only_decode.prefill is None and only_decode.contradicts(3.0, only_decode.decode) == []


def test_the_model_at_the_level_prices_each_kind_at_its_own():
    pl = pass_level([_run(1.3, 0.9)], MODEL, "continuous")
    m = pl.model(MODEL)
    pre, dec = (
        Pass(prefill_tokens=64, prefill_rows=1, query=64),
        Pass(decode_rows=8, kv_read=800, attn_read=800),
    )
    assert m.pass_time(pre) == pytest.approx(1.3 * MODEL.pass_time(pre))
    assert m.pass_time(dec) == pytest.approx(0.9 * MODEL.pass_time(dec))


def test_no_passes_no_level():
    assert pass_level([SimpleNamespace(meta={})], MODEL, "continuous") is None


def test_a_canary_level_the_passes_contradict_moves_nothing_and_the_report_says_so():
    """The canaries read prefill at 1.3x; the runs' own passes ran at the profile's price: the
    prediction stays at the profile's level, the notes say why, and the prediction at the passes'
    level is beside it."""
    from test_canary_level import WL, _readings, model

    from batchsim import make_policy, simulate
    from batchsim.sim.sampled import with_noise
    from realrun.judge.compare import compare_policies
    from realrun.timing.canary import CanaryReading

    readings = iter(_readings(1.3, 1.0, 0.03, n=8, seed=1))
    st = model()
    passes = [(Pass(prefill_tokens=300, prefill_rows=1, query=300), None)] * 30 + [
        (Pass(decode_rows=4, kv_read=1200, attn_read=1200), None)
    ] * 300
    count = {"k": 0}

    def measure(label, policy):
        count["k"] += 1
        res = simulate(WL, policy, with_noise(st, 100 + count["k"], "passes"))
        # at the profile's price
        res.meta["passes"] = [(p, st.for_policy(policy.name).pass_time(p)) for p, _ in passes]
        return res

    pairs = [(n, make_policy(n), make_policy(n)) for n in ("taxi", "static")]
    report = compare_policies(
        WL, pairs, measure, st, seeds=3, repeats=2, canary=lambda: next(readings), noise="passes"
    )
    assert report.level is not None and report.level.applied()[0] == pytest.approx(1.3, abs=0.05)
    for row in report.rows:
        assert row.predicted_at_profile is None  # not moved: the canaries' level was contradicted
        assert row.pass_level.prefill == pytest.approx(
            1.0
        ) and row.pass_level.decode == pytest.approx(1.0)
        assert row.predicted_at_passes is not None and set(row.errors_at_passes) == set(row.errors)
        assert row.as_dict()["pass_level"]["prefill_passes"] == 60  # both repeats' passes
    notes = "\n".join(report.notes)
    assert (
        "is contradicted by the runs' own passes" in notes
        and "predicted at the profile's level" in notes
    )
    assert (
        "predicted again at that level (each run predicted at its own passes' level, the median "
        "taken) (after the run" in notes
    )
    assert isinstance(next(iter(report.rows)).canary[0][0], CanaryReading)


class _Wakes:
    """A price of 1 ms a pass, a 0.2 ms gap between steps, and a 3 ms cold start after any idle."""

    step_gap = 2e-4

    def for_policy(self, name):
        return self

    def pass_time(self, p):
        return 1e-3

    def wake_penalty(self, idle):
        return 0.0, 3e-3


def test_a_pass_after_an_idle_is_priced_with_its_cold_start():
    from realrun.timing.pass_level import priced_passes, run_level

    # Every fifth step follows a 50 ms idle and runs 3 ms cold, as the simulator prices it; the
    # others follow the driver's own 0.2 ms gap (plus 0.1 ms of jitter: not an idle).
    idle = [0.05 if i % 5 == 0 else 3e-4 for i in range(100)]
    passes = [(Pass(decode_rows=1, kv_read=10), 1e-3 + (3e-3 if x > 0.01 else 0.0)) for x in idle]
    run = SimpleNamespace(meta={"passes": passes, "pass_idle": idle})
    assert run_level(run, _Wakes(), "taxi") == pytest.approx(1.0)
    assert sum(t for _, t, _ in priced_passes(run, _Wakes())) == pytest.approx(0.1 + 20 * 3e-3)
    # Without the idle log (an older run, or vLLM's steps) the cold starts read as a slower machine.
    bare = SimpleNamespace(meta={"passes": passes})
    assert run_level(bare, _Wakes(), "taxi") == pytest.approx(1.6)
    # A log out of step with the passes is not trusted.
    assert run_level(
        SimpleNamespace(meta={"passes": passes, "pass_idle": idle[:-1]}), _Wakes(), "taxi"
    ) == pytest.approx(1.6)


def test_vllms_step_log_gives_the_idle_before_each_step():
    pytest.importorskip("torch")
    from realrun.reference.vllm.serve import idle_before
    from realrun.timing.pass_level import run_level

    # vLLM's step log: back to back (0.05 ms between a step's end and the next's scheduling), a
    # step scheduled before the previous one ended (async scheduling), a 40 ms wait for a request,
    # and a step that never ended (not one of the run's steps).
    log = [
        {"start": 0.0, "end": 0.001},
        {"start": 0.00105, "end": 0.002},
        {"start": 0.0019, "end": 0.003},
        {"start": 0.043, "end": 0.047},
        {"start": 0.048, "end": None},
    ]
    assert idle_before(log) == pytest.approx([0.0, 5e-5, 0.0, 0.040])

    class Wakes(_Wakes):
        step_gap = 0.0  # vLLM's profile adds none: its time between steps is in the step

    # The pass after the wait ran 3 ms cold, as the profile prices it: the machine's level is 1.
    idle = idle_before(log)
    passes = [(Pass(decode_rows=1, kv_read=10), 1e-3 + (3e-3 if x > 0.01 else 0.0)) for x in idle]
    run = SimpleNamespace(meta={"passes": passes, "pass_idle": idle})
    assert run_level(run, Wakes(), "continuous") == pytest.approx(1.0)
    assert run_level(SimpleNamespace(meta={"passes": passes}), Wakes(), "continuous") > 1.5


def test_the_engine_logs_the_idle_before_each_step():
    pytest.importorskip("torch")
    from batchsim import Fixed, Poisson, make_policy, make_workload
    from realrun.clock.runner import run_real
    from realrun.engine.engine import Engine
    from realrun.engine.model import load_model

    lm = load_model("tiny-gpt2", device="cpu", threads=1)
    wl = make_workload(Poisson(20.0), Fixed(8), Fixed(4), n=6, seed=0)
    res = run_real(wl, make_policy("taxi"), Engine(lm), trace=True)
    idle = res.meta["pass_idle"]
    assert len(idle) == len(res.meta["passes"]) and idle[0] == 0.0 and min(idle) >= 0.0
    # Taxi runs one request's prefill and decodes as steps back to back; between requests it waits
    # for the next arrival, so some steps follow an idle and most passes (the repeats of a step)
    # follow a pass.
    assert sum(x > 0 for x in idle) >= 1 and sum(x == 0 for x in idle) > len(idle) // 2


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_a_machine_off_the_profile_is_judged_at_its_own_level(speed):
    """A laptop twice as slow as the profile's machine (issue 40): at 9 requests/s the taxi
    saturates there and not at the profile's speed, so the prediction as made ranks it below static
    where the machine measured it above. The verdict says what the machine ran at and judges the
    prediction made again at that level, which ranks as the machine did; at the profile's speed
    nothing is moved."""
    from batchsim import Poisson, Uniform, make_policy, make_workload, simulate
    from realrun.judge.bottom_line import verdict_dict, verdict_line
    from realrun.judge.compare import compare_policies

    wl = make_workload(Poisson(9.0), Uniform(50, 150), Uniform(8, 24), n=150, seed=3)
    slow = LevelStepTime(MODEL, speed, speed)
    passes = [Pass(prefill_tokens=100, prefill_rows=1, query=100)] * 30 + [
        Pass(decode_rows=4, kv_read=400, attn_read=400)
    ] * 300

    def measure(label, policy):
        res = simulate(wl, policy, slow)
        res.meta["passes"] = [(p, MODEL.pass_time(p) * speed) for p in passes]
        return res

    kw = {"static": {"max_batch": 4}}
    pairs = [
        (n, make_policy(n, **kw.get(n, {})), make_policy(n, **kw.get(n, {})))
        for n in ("taxi", "dynamic", "static")
    ]
    report = compare_policies(wl, pairs, measure, MODEL, repeats=2, level=False)
    line, d = verdict_line(report), verdict_dict(report)
    assert report.machine_level.decode == pytest.approx(
        speed
    ) and report.machine_level.prefill == pytest.approx(speed)
    if speed == 1.0:
        assert all(r.predicted_at_machine is None for r in report.rows)
        assert "this machine ran" not in line and "ranking by p99 E2E preserved" in line
        assert d["judged_at"] == "the level predicted at"
        return
    rows = {r.label: r for r in report.rows}
    # as made: another machine's
    assert rows["taxi"].predicted["p99_e2e"] < rows["static"].predicted["p99_e2e"]
    assert rows["taxi"].measured["p99_e2e"] > rows["static"].measured["p99_e2e"]
    assert (
        rows["taxi"].predicted_at_machine["p99_e2e"]
        > rows["static"].predicted_at_machine["p99_e2e"]
    )
    assert line.startswith("verdict: this machine ran its passes at prefill 2.000x")
    assert "(at the level predicted at, the ranking was NOT preserved)" in line
    assert "): ranking by p99 E2E preserved (dynamic < static < taxi" in line
    assert d["ranking_preserved"] is True and d["judged_at"].startswith("this machine's level")
    assert any(
        "the verdict judges the prediction again at this machine's level" in n for n in report.notes
    )
    assert rows["taxi"].as_dict()["predicted_at_machine"] == rows["taxi"].predicted_at_machine


def test_off_the_profile_with_no_two_policies_apart_it_claims_no_ranking():
    """Two runs of one policy under two names on a machine twice as slow: nothing is measured apart,
    so the line says so instead of calling a ranking that was never judged "preserved"."""
    from batchsim import Poisson, Uniform, make_policy, make_workload, simulate
    from realrun.judge.bottom_line import verdict_line
    from realrun.judge.compare import compare_policies

    wl = make_workload(Poisson(4.0), Uniform(50, 150), Uniform(8, 24), n=60, seed=5)
    slow = LevelStepTime(MODEL, 2.0, 2.0)
    passes = [Pass(prefill_tokens=100, prefill_rows=1, query=100)] * 30 + [
        Pass(decode_rows=4, kv_read=400, attn_read=400)
    ] * 300

    def measure(label, policy):
        res = simulate(wl, policy, slow)
        res.meta["passes"] = [(p, MODEL.pass_time(p) * 2.0) for p in passes]
        return res

    pairs = [(n, make_policy("continuous"), make_policy("continuous")) for n in ("one", "two")]
    line = verdict_line(compare_policies(wl, pairs, measure, MODEL, repeats=2, level=False))
    assert "(at the level predicted at, no two policies were apart)" in line
    assert "preserved" not in line.split("):")[0]


def test_after_the_run_each_run_is_predicted_at_its_own_level_and_the_median_taken():
    """Three runs, two at the profile's price and one three times slower (a burst): the prediction
    after the run is the median run's, at 1.0x, not one at the pooled level (about 1.7x, which no
    run ran at)."""
    from batchsim import Poisson, Uniform, make_policy, make_workload, simulate, summarize
    from realrun.judge.compare import compare_policies

    wl = make_workload(Poisson(30.0), Uniform(50, 150), Uniform(8, 24), n=80, seed=7)
    passes = [Pass(prefill_tokens=100, prefill_rows=1, query=100)] * 20 + [
        Pass(decode_rows=4, kv_read=400, attn_read=400)
    ] * 200
    levels = iter([1.0, 3.0, 1.0])

    def measure(label, policy):
        f = next(levels)
        res = simulate(wl, policy, LevelStepTime(MODEL, f, f))
        res.meta["passes"] = [(p, MODEL.pass_time(p) * f) for p in passes]
        return res

    report = compare_policies(
        wl,
        [("continuous", make_policy("continuous"), make_policy("continuous"))],
        measure,
        MODEL,
        seeds=1,
        repeats=3,
        level=False,
    )
    row = report.rows[0]
    assert 1.5 < row.pass_level.decode < 2.0  # pooled: the ratio of totals leans to the slow run
    at_one = summarize(simulate(wl, make_policy("continuous"), LevelStepTime(MODEL, 1.0, 1.0)))
    pooled = summarize(simulate(wl, make_policy("continuous"), row.pass_level.model(MODEL)))
    assert row.predicted_at_passes["p50_e2e"] == pytest.approx(at_one["p50_e2e"], rel=1e-12)
    assert pooled["p50_e2e"] > 1.2 * at_one["p50_e2e"]  # the pooled level would have said otherwise
    # the median run is the 1.0x one
    assert row.errors_at_passes["p50_e2e"] == pytest.approx(0.0, abs=1e-9)
