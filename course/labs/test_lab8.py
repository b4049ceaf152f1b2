"""Checks for lab 8 (how sure can you be?). Run: pytest course/labs -k lab8"""

from __future__ import annotations

import math
import re
from itertools import pairwise

import numpy as np
import pytest

# What Part A gives on the shipped runs, worked out once: each metric's spread pooled over the four
# policies (the sd of ln(value)) and its degrees of freedom, and each policy's verdict at the
# metric's tolerance. Part A's steps are judged on their own: the verdicts use these spreads, not
# yours.
SPREAD = {
    "p50_e2e": (0.036380, 8),
    "p99_e2e": (0.062318, 8),
    "p50_ttft": (0.161007, 8),
    "request_throughput": (0.008854, 8),
}
VERDICTS = {
    "p50_e2e": {
        "taxi": "agrees",
        "static": "disagrees",
        "dynamic": "agrees",
        "continuous": "agrees",
    },
    "p99_e2e": {
        "taxi": "disagrees",
        "static": "agrees",
        "dynamic": "cannot tell",
        "continuous": "agrees",
    },
    "p50_ttft": {
        "taxi": "disagrees",
        "static": "cannot tell",
        "dynamic": "cannot tell",
        "continuous": "cannot tell",
    },
    "request_throughput": {
        "taxi": "agrees",
        "static": "cannot tell",
        "dynamic": "agrees",
        "continuous": "agrees",
    },
}
# Lesson 9's worked example: dynamic's p50 E2E, predicted 0.91 s, measured three times.
PREDICTED, MEASURED = 0.91, [0.88, 0.89, 0.95]
PCT = 0.01  # percentage points: the checks' tolerance on a per cent


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab8_how_sure")


def test_lab8_a_pooled_spread(lab):
    sd, df = lab.pooled_spread([[1.0, math.e]])
    assert df == 1 and sd == pytest.approx(1 / math.sqrt(2), rel=1e-6), (
        "one group, 1 and e: its logs are 0 and 1, so the sd is sqrt(0.5) on 1 degree of freedom"
    )
    sd, df = lab.pooled_spread([[1.0, 1.0], [5.0, 5.0, 5.0], [7.0]])
    assert (sd, df) == (pytest.approx(0.0, abs=1e-12), 3), (
        "each group around its own mean: two groups of equal runs have no spread, whatever their "
        "levels; the group of one run is skipped (1 + 2 = 3 degrees of freedom)"
    )
    assert lab.pooled_spread([[2.0], [3.0]]) == (None, 0), "no group of two runs: (None, 0)"
    for metric, (want_sd, want_df) in SPREAD.items():
        sd, df = lab.pooled_spread([lab.RUNS["measured"][p][metric] for p in lab.RUNS["measured"]])
        assert df == want_df, (
            f"{metric}: four policies of three runs, each losing one degree of freedom to its own "
            f"mean; you gave {df}"
        )
        assert sd == pytest.approx(want_sd, rel=1e-4), (
            f"{metric}: you gave {sd:.4f}, not the pooled sd of ln(value) over the shipped runs: "
            f"each policy's logs "
            "around their own mean, the squares summed over every policy, divided by the degrees "
            "of freedom, square-rooted"
        )


def test_lab8_a_error_interval_of_the_worked_example(lab):
    # The lesson's example alone (its own spread, 2 degrees of freedom), then with the spread pooled
    # over the four policies (8): the same centre, a narrower interval.
    for sd, df, low, high in ((0.041317, 2, -6.332, 7.670), (0.036380, 8, -3.423, 4.426)):
        err, lo, hi = lab.error_interval(PREDICTED, MEASURED, sd, df)
        assert err == pytest.approx(0.425, abs=PCT), (
            f"the error is the mean of ln(0.91 / run) over the runs, as per cent: +0.43 %, you "
            f"gave {err:+.2f} %"
        )
        assert (lo, hi) == (pytest.approx(low, abs=PCT), pytest.approx(high, abs=PCT)), (
            f"sd {sd}, {df} degrees of freedom, 3 runs: [{low:+.2f}, {high:+.2f}] %, you gave "
            f"[{lo:+.2f}, {hi:+.2f}]"
        )


def test_lab8_a_verdict_at_the_edges(lab):
    assert lab.verdict(-10.0, 10.0, 10.0) == "agrees", (
        "an interval that ends on the edge lies inside"
    )
    assert lab.verdict(-3.0, 4.0, 10.0) == "agrees"
    assert lab.verdict(-18.0, -11.0, 10.0) == "disagrees"
    assert lab.verdict(11.0, 30.0, 10.0) == "disagrees"
    assert lab.verdict(-22.0, -9.5, 10.0) == "cannot tell", (
        "the error may be outside, but not all of its interval is"
    )
    assert lab.verdict(-2.0, 12.0, 10.0) == "cannot tell", (
        "the error is inside, but not all of its interval"
    )
    assert lab.verdict(-25.0, 25.0, 10.0) == "cannot tell"


@pytest.mark.parametrize("metric", ["p50_e2e", "p99_e2e", "p50_ttft", "request_throughput"])
def test_lab8_a_verdicts_on_the_given_runs(lab, metric):
    sd, df = SPREAD[metric]
    tol = lab.TOLERANCE_PCT[metric]
    got = {}
    for policy, runs in lab.RUNS["measured"].items():
        err, lo, hi = lab.error_interval(
            lab.RUNS["predicted"][policy][metric], runs[metric], sd, df
        )
        assert lo <= err <= hi, (
            f"{metric}, {policy}: the error {err:+.1f} % must lie in its interval [{lo:+.1f}, "
            f"{hi:+.1f}]"
        )
        got[policy] = lab.verdict(lo, hi, tol)
    wrong = [p for p in got if got[p] != VERDICTS[metric][p]]
    assert not wrong, (
        f"{metric} at ±{tol:g} % (sd {sd}, {df} degrees of freedom): the verdict for "
        f"{', '.join(f'{p} (you: {got[p]})' for p in wrong)} is not what its interval against the "
        "tolerance gives"
    )


def test_lab8_a_smallest_difference_and_runs_needed(lab):
    sd, df = SPREAD["p50_ttft"]
    assert lab.smallest_difference(sd, df, 3) == pytest.approx(18.875, abs=PCT), (
        "3 runs with a spread of 16.1 % on 8 degrees of freedom show ±18.9 %: 1.860 x 0.161 / "
        "sqrt(3), as per cent"
    )
    assert lab.smallest_difference(0.15, None, 1) == pytest.approx(27.98, abs=PCT), (
        "one run, a spread of 15 % taken as known: 1.645 x 0.15, as per cent"
    )
    assert lab.runs_needed(15.0, sd, df) == 5, (
        "±15 % with a spread of 16.1 % (8 degrees of freedom) needs 5 runs"
    )
    assert lab.runs_needed(10.0, 0.041317, 2) == 2 and lab.runs_needed(5.0, 0.041317, 2) == 7
    assert lab.runs_needed(20.0, 0.01, 8) == 1, (
        "a spread far below the tolerance still needs one run"
    )
    for tol, sd, df in (
        (5.0, 0.15, None),
        (10.0, 0.15, None),
        (10.0, 0.05, 4),
        (20.0, 0.3, 8),
        (15.0, 0.2, 30),
    ):
        n = lab.runs_needed(tol, sd, df)
        assert lab.smallest_difference(sd, df, n) <= tol + 1e-9, (
            f"{n} runs must show ±{tol:g} % (sd {sd}, df {df})"
        )
        assert n == 1 or lab.smallest_difference(sd, df, n - 1) > tol, (
            f"{n - 1} runs already show ±{tol:g} %"
        )
    shrink = [lab.smallest_difference(0.1, 8, r) for r in (1, 2, 4, 16)]
    assert all(a > b for a, b in pairwise(shrink)), "more runs show smaller differences"


def test_lab8_a_one_run_interval(lab):
    lo, hi = lab.one_run_interval(0.91, 0.03, 1.0, 0.15)
    assert (lo, hi) == (pytest.approx(0.6397, rel=1e-3), pytest.approx(1.2945, rel=1e-3)), (
        "0.91 s, seeds 3 %, elasticity 1, level 15 %, one reference run: [0.640, 1.294] s; "
        f"you gave [{lo:.3f}, {hi:.3f}]"
    )
    lo, hi = lab.one_run_interval(0.91, 0.03, 2.0, 0.10, ref_runs=3)
    assert (lo, hi) == (pytest.approx(0.6204, rel=1e-3), pytest.approx(1.3348, rel=1e-3))
    seeds_only = lab.one_run_interval(0.91, 0.03, 1.0, 0.0)
    assert seeds_only == (pytest.approx(0.8662, rel=1e-3), pytest.approx(0.9560, rel=1e-3)), (
        "with no level from run to run, only the seeds' spread is left: 0.91 x exp(±1.645 x 0.03)"
    )
    assert lab.one_run_interval(0.91, 0.03, 0.0, 0.15) == pytest.approx(seeds_only), (
        "a metric with elasticity 0 ignores the level"
    )


def test_lab8_b_time_runs_times_each_call(lab):
    calls = []

    def work():
        calls.append(1)
        np.sort(np.arange(20_000)[::-1])  # some real work, so that a call takes a measurable time

    seconds = lab.time_runs(work, 4)
    assert len(seconds) == 4, f"4 runs give 4 durations, you gave {len(seconds)}"
    assert all(isinstance(s, float) and math.isfinite(s) and s > 0 for s in seconds), (
        f"durations in seconds: {seconds}"
    )
    assert len(calls) >= 4, (
        f"work() must be called for each run (and once more to warm up): called {len(calls)} times"
    )


def test_lab8_b_machine_spread(lab):
    sd, df = lab.machine_spread([0.20, 0.22, 0.21, 0.25])
    assert df == 3 and sd == pytest.approx(0.095813, rel=1e-4), (
        f"0.20, 0.22, 0.21, 0.25 s: the sd of their logs is 0.0958 on 3 degrees of freedom; you "
        f"gave {sd}, {df}"
    )
    assert lab.machine_spread([0.3, 0.3, 0.3]) == (pytest.approx(0.0, abs=1e-12), 2)
    assert lab.machine_spread([0.3]) == (0.0, 0), "one run has no spread to tell: (0.0, 0)"


def test_lab8_b_on_your_machine(lab):
    # Your machine, for real: what it measured is yours, so only its shape is checked, never a
    # speed.
    seconds = lab.time_runs(lab.work, 5)
    assert len(seconds) == 5 and all(math.isfinite(s) and s > 0 for s in seconds), seconds
    sd, df = lab.machine_spread(seconds)
    assert df == 4 and math.isfinite(sd) and sd >= 0, (sd, df)


def test_lab8_c_is_written(lab):
    # Self-assessed: what the answer says is graded by a person. The check only refuses a gap, a
    # list of keywords, or an answer that names no number, no spread and no run.
    text = " ".join(lab.ANSWER.split()).lower()
    assert "your answer here" not in text
    sentences = [s for s in re.split(r"[.?!](?:\s|$)", text) if len(s.split()) >= 6]
    assert len(sentences) >= 3, "at least three sentences of your own (six words or more each)"
    assert re.search(r"\d", text), (
        "give numbers: your spread, the interval, the runs you would ask for"
    )
    assert "run" in text and ("spread" in text or "level" in text), (
        "say how far runs move on your machine"
    )
    assert "seed" in text, "say why the simulation's seeds alone are not enough"
