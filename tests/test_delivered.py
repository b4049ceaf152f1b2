"""First token produced against first token delivered: what a generate() user really waits for."""

from __future__ import annotations

import numpy as np
import pytest

from batchsim import Fixed, Poisson, Uniform, make_workload, simulate, summarize
from batchsim.core.metrics import SLO, TTFT_NOTE, format_table, streams_by_default, table_notes
from batchsim.core.policies import Continuous, Dynamic, PaddedBatchPolicy, Static, Taxi, make_policy
from batchsim.sim.steptime import LinearStepTime

STEP = LinearStepTime(0.01, 2e-5, 5e-4, 1e-7)


def _wl(n=64, seed=0):
    return make_workload(Poisson(20.0), Uniform(16, 256), Uniform(4, 64), n=n, seed=seed)


def test_delivered_ttft_of_a_static_batch_is_its_finish():
    res = simulate(_wl(), Static(8), STEP)
    r, s = res.records, summarize(res)
    assert s["streaming"] is False
    e2e = r.finish - r.arrival
    # Every row of a padded batch is delivered when the batch ends: delivered TTFT = E2E, exactly.
    assert s["mean_ttft_delivered"] == pytest.approx(float(e2e.mean()), rel=1e-12)
    assert s["p99_ttft_delivered"] == pytest.approx(float(np.percentile(e2e, 99)), rel=1e-12)
    assert s["p99_ttft_delivered"] == pytest.approx(s["p99_e2e"], rel=1e-12)
    # The token was produced earlier, at the end of the batch's prefill.
    multi = r.tokens > 1
    assert (
        np.all(r.first_token[multi] < r.finish[multi]) and s["mean_ttft"] < s["mean_ttft_delivered"]
    )
    # One batch: all its rows share one finish, so delivered TTFT is the same for all of them.
    one = simulate(
        make_workload(Poisson(1000.0), Fixed(64), Uniform(2, 40), n=8, seed=1), Static(8), STEP
    )
    assert np.ptp(one.records.finish) == 0.0
    assert summarize(one)["mean_ttft_delivered"] == pytest.approx(
        float((one.records.finish - one.records.arrival).mean())
    )


@pytest.mark.parametrize("policy", [Taxi(), Static(8), Dynamic(8, 0.05)])
def test_padded_policies_do_not_stream_unless_told(policy):
    res = simulate(_wl(seed=2), policy, STEP)
    quiet, streamed = summarize(res), summarize(res, streaming=True)
    assert quiet["streaming"] is False and streamed["streaming"] is True
    assert streamed["mean_ttft_delivered"] == pytest.approx(streamed["mean_ttft"])
    assert quiet["mean_ttft_delivered"] == pytest.approx(quiet["mean_e2e"])
    assert quiet["mean_ttft_delivered"] >= quiet["mean_ttft"]


def test_continuous_streams_unless_told_not_to():
    res = simulate(_wl(seed=3), Continuous(16), STEP)
    s, whole = summarize(res), summarize(res, streaming=False)
    assert s["streaming"] is True and s["mean_ttft_delivered"] == pytest.approx(s["mean_ttft"])
    assert whole["mean_ttft_delivered"] == pytest.approx(whole["mean_e2e"])


def test_a_padded_policy_of_ones_own_is_recognised():
    class Mine(PaddedBatchPolicy):
        name = "mine"

        def __init__(self):
            self.max_batch = 4

        def _ready(self, now):
            return True

    assert not streams_by_default(Mine().describe())
    assert not streams_by_default("static") and not streams_by_default("Static(max_batch=8)")
    assert streams_by_default(make_policy("continuous").describe()) and streams_by_default(
        "continuous"
    )


def test_the_ttft_slo_is_judged_on_the_delivered_token():
    res = simulate(
        make_workload(Poisson(1000.0), Uniform(16, 256), Uniform(20, 60), n=8, seed=4),
        Static(8),
        STEP,
    )
    s = summarize(res)
    # An SLO between the produced and the delivered TTFT of every request: met if we looked at
    # production, missed by everyone a user could ask.
    r = res.records
    produced, delivered = r.first_token - r.arrival, r.finish - r.arrival
    assert produced.max() < delivered.min()
    limit = float((produced.max() + delivered.min()) / 2)
    assert summarize(res, SLO(ttft=limit))["slo_attainment"] == 0.0
    assert summarize(res, SLO(ttft=limit), streaming=True)["slo_attainment"] == 1.0
    assert s["mean_step_time"] == pytest.approx(
        float(r.steps["duration"].sum() / r.steps["repeat"].sum())
    )


def test_tables_say_which_ttft_they_show_and_an_hour_is_not_printed_in_ms():
    rows = {
        "taxi": {"mean_ttft": 678.88, "mean_ttft_delivered": 680.5, "mean_tpot": 0.0065},
        "continuous": {"mean_ttft": 0.035, "mean_ttft_delivered": 0.035, "mean_tpot": 0.0081},
    }
    t = format_table(rows, ["mean_ttft", "mean_ttft_delivered", "mean_tpot"])
    head, _, taxi, cont = t.splitlines()
    assert "TTFT s" in head and "TTFT dlv s" in head and "TPOT ms" in head
    assert "679" in taxi and "680" in taxi and "0.035" in cont
    assert table_notes(["mean_ttft"]) == [TTFT_NOTE] and table_notes(["mean_e2e"]) == []
    small = format_table({"a": {"mean_ttft": 0.25}}, ["mean_ttft"])
    assert "TTFT ms" in small and "250" in small
