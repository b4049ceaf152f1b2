"""``realrun.judge.equivalence``: verdicts by equivalence, on made-up runs (no machine is timed
here).

The numbers are chosen so the answer can be worked by hand, and one test checks the interval's
coverage by drawing runs from a known spread with a seeded generator.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from realrun.judge.equivalence import Judgement, judge, pooled_log_sd, runs_to_show, t90


def test_t_quantiles_are_the_tables_and_fall_to_the_normals():
    assert t90(None) == 1.645 and t90(2) == 2.920 and t90(10) == 1.812
    qs = [t90(df) for df in range(1, 200)]
    assert all(a >= b for a, b in zip(qs, qs[1:]))  # more degrees of freedom, a narrower interval
    assert 1.812 > t90(11) > 1.782 and 1.645 < t90(1000) < 1.66
    with pytest.raises(ValueError, match="df"):
        t90(0)


def test_pooled_sd_is_within_each_group():
    # Each group's two logs lie 0.2 apart: deviations of ±0.1, whatever the group's own level.
    sd, df = pooled_log_sd([[1.0, math.exp(0.2)], [5.0, 5.0 * math.exp(0.2)], [3.0]])
    assert df == 2 and sd == pytest.approx(math.sqrt(0.02))
    assert pooled_log_sd([[1.0], [2.0]]) == (None, 0)


def test_agrees_disagrees_and_cannot_tell():
    ok = judge(1.0, [1.0, 1.01, 0.99], 10.0, sd=0.01, df=8)
    assert ok.verdict == "agrees" and abs(ok.error_pct) < 1 and ok.low_pct < 0 < ok.high_pct
    off = judge(1.5, [1.0, 1.02, 0.98], 10.0, sd=0.02, df=8)
    assert off.verdict == "disagrees" and off.low_pct > 10
    fast = judge(0.5, [1.0, 1.02, 0.98], 10.0, sd=0.02, df=8)
    assert fast.verdict == "disagrees" and fast.high_pct < -10
    # One run, a 10 % spread taken as known: the interval is ±1.645 x 0.1 on the log scale.
    unsure = judge(1.08, [1.0], 10.0, sd=0.1, df=None, spread_source="assumed")
    assert unsure.verdict == "cannot tell"
    assert unsure.resolvable_pct == pytest.approx((math.exp(0.1645) - 1) * 100)
    assert unsure.runs_needed == math.ceil((0.1645 / math.log(1.1)) ** 2) == 3
    assert "cannot tell" in unsure.text() and "3 would show" in unsure.text()
    # The prediction's own seeds widen the interval.
    assert (
        judge(1.0, [1.0], 10.0, 0.05, None, sd_centre=0.2, seeds=1).high_pct
        > judge(1.0, [1.0], 10.0, 0.05, None).high_pct
    )


def test_more_runs_settle_what_one_cannot():
    rng = np.random.default_rng(7)
    runs = list(np.exp(rng.normal(0.0, 0.1, 40)))
    assert judge(1.03, runs[:1], 10.0, 0.1, None).verdict == "cannot tell"
    assert judge(1.03, runs, 10.0, 0.1, None).verdict == "agrees"
    assert runs_to_show(10.0, 0.1, None) < runs_to_show(5.0, 0.1, None)
    assert runs_to_show(10.0, 0.1, None, centre_var=0.1**2) is None  # the seeds alone fill ±10 %
    assert runs_to_show(10.0, 0.1, None, centre_var=0.01**2) > runs_to_show(10.0, 0.1, None)


def test_the_interval_holds_the_true_error_nine_times_in_ten():
    # Runs drawn with a known log-sd around a metric the prediction misses by 5 %: the 90 % interval
    # of the error, from 3 runs and the pooled spread of 8 degrees of freedom, holds +5 % in 88-92 %
    # of 4,000 trials.
    rng = np.random.default_rng(42)
    sd, held = 0.08, 0
    for _ in range(4000):
        groups = [list(np.exp(rng.normal(0.0, sd, 3))) for _ in range(4)]
        s, df = pooled_log_sd(groups)
        j = judge(1.05, groups[0], 10.0, s, df)
        held += j.low_pct <= 5.0 <= j.high_pct
    assert 0.88 <= held / 4000 <= 0.92


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"tolerance_pct": 0.0, "sd": 0.1, "df": None}, "tolerance_pct"),
        ({"tolerance_pct": 10.0, "sd": -0.1, "df": None}, "sd"),
        ({"tolerance_pct": 10.0, "sd": float("nan"), "df": None}, "sd"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, field):
    with pytest.raises(ValueError, match=field):
        judge(1.0, [1.0], **kwargs)


def test_nothing_to_judge_is_none_and_a_judgement_checks_itself():
    assert judge(1.0, [], 10.0, 0.1, None) is None and judge(0.0, [1.0], 10.0, 0.1, None) is None
    with pytest.raises(ValueError, match="verdict"):
        Judgement("maybe", 0, -1, 1, 10, 1, 1, 1, "")


def test_the_cannot_tell_line_gives_repeats_within_reach_and_says_when_none_would_do():
    from types import SimpleNamespace

    from realrun.judge.table import MANY_RUNS, machine_lines

    def j(need):
        return Judgement("cannot tell", 5.0, -30.0, 40.0, 10.0, 35.0, need, 2, "passes")

    def report(needs):
        rows = [
            SimpleNamespace(label=f"p{i}", judgements={"p50_e2e": j(n)}, causes={}, pass_level=None)
            for i, n in enumerate(needs)
        ]
        return SimpleNamespace(spread=None, move=None, rows=rows)

    (line,) = machine_lines(report([4, 9]), keys=("p50_e2e",))
    assert "9 runs would settle the hardest (p1 p50 E2E at ±10 %): --repeats 9" in line
    (line,) = machine_lines(report([4, 1048]), keys=("p50_e2e",))
    assert "--repeats 4" in line and "all but 1" in line and "--repeats 1048" not in line
    assert (
        f"1 would need more than {MANY_RUNS} runs (the hardest, p1 p50 E2E at ±10 %, 1048)" in line
    )
    (line,) = machine_lines(report([1048]), keys=("p50_e2e",))
    assert "--repeats" not in line and "not repeats" in line
