"""Dollars: the bill is $/hour x the whole makespan, idle time included; and the cost-10x claim."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchsim import ConstantStepTime, Workload, make_policy, simulate, summarize
from batchsim.cli import main
from batchsim.core.errors import ConfigError
from batchsim.machine.cost import cost_summary, implied_price_per_hour, required_throughput


def _small_run():
    # Three requests of 2 output tokens (a prefill and one decode step of 0.5 s each) on a taxi:
    # request 0 runs 0-1 s, request 1 arrives at 1 s and runs 1-2 s, request 2 arrives at 5 s and
    # runs 5-6 s.
    wl = Workload.from_arrays([0.0, 1.0, 5.0], [10, 10, 10], [2, 2, 2])
    return summarize(simulate(wl, make_policy("taxi"), ConstantStepTime(0.5)))


def test_cost_per_request_by_hand_idle_time_included():
    s = _small_run()
    assert (
        s["duration"] == pytest.approx(6.0)
        and s["completed"] == 3
        and s["total_output_tokens"] == 6
    )
    c = cost_summary(s, price_per_hour=3.6)  # $0.001 per second
    assert c["cost_total"] == pytest.approx(0.006)  # 6 s, of which 3 s idle, all paid
    assert c["cost_per_request"] == pytest.approx(0.002)
    assert c["cost_per_1m_tokens"] == pytest.approx(0.006 / 6 * 1e6)
    assert c["cost_per_request"] == pytest.approx(3.6 * s["duration"] / 3600 / s["completed"])


def test_free_gpu_and_bad_prices():
    assert cost_summary(_small_run(), 0.0)["cost_per_request"] == 0.0
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="gpu-price must be >= 0"):
            cost_summary(_small_run(), bad)


def test_required_throughput_and_implied_price():
    assert required_throughput(2.5, 0.01) == pytest.approx(2.5 / 3600 / 0.01)
    assert implied_price_per_hour(10, 0.10) == pytest.approx(3600.0)
    assert implied_price_per_hour(100, 0.01) == pytest.approx(3600.0)
    # round trip: the throughput a price needs, at that price, gives back the target
    assert implied_price_per_hour(required_throughput(1.8, 0.002), 0.002) == pytest.approx(1.8)
    with pytest.raises(ConfigError):
        required_throughput(2.5, 0)


def test_cli_adds_cost_columns_that_match_the_hand_formula(capsys):
    argv = [
        "run",
        "--policy",
        "taxi,continuous",
        "--requests",
        "60",
        "--rate",
        "4",
        "--gpu",
        "A100-80GB",
        "--model",
        "gpt2",
        "--gpu-price",
        "2.0",
        "--json",
        "--no-plots",
    ]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    for run in obj["runs"]:
        s = run["summary"]
        assert s["gpu_price_per_hour"] == 2.0
        assert s["cost_per_request"] == pytest.approx(2.0 * s["duration"] / 3600 / s["completed"])
    assert main(argv[:-2] + ["--no-plots"]) == 0
    assert "$/req" in capsys.readouterr().out


def test_catalog_price_is_used_when_no_price_is_given(capsys):
    assert (
        main(
            [
                "run",
                "--policy",
                "taxi",
                "--requests",
                "20",
                "--gpu",
                "H100-SXM",
                "--model",
                "gpt2",
                "--json",
                "--no-plots",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["gpu_price_per_hour"] == 3.50


def test_no_price_no_cost_columns(capsys):
    assert (
        main(
            [
                "run",
                "--policy",
                "taxi",
                "--requests",
                "20",
                "--step-time",
                "0.01",
                "--json",
                "--no-plots",
            ]
        )
        == 0
    )
    assert "cost_per_request" not in json.loads(capsys.readouterr().out)["summary"]


@pytest.mark.parametrize(
    "argv,field",
    [
        (["run", "--gpu-price", "-1", "--gpu", "A100-80GB"], "gpu-price must be >= 0, got -1.0"),
        (["run", "--gpu-price", "-2"], "gpu-price must be >= 0, got -2.0"),
    ],
)
def test_negative_price_exits_2_with_one_line(argv, field, capsys):
    assert main(argv + ["--requests", "10", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_cost_10x_reproduces_the_ratio_and_prints_the_implied_price(tmp_path, capsys):
    assert main(["run", "cost-10x", "--requests", "96", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "$3,600/hour" in out and "A100-80GB rents for about $2.50/hour" in out
    from batchsim.cli import build_parser
    from batchsim.teach.scenarios import get_scenario

    report = get_scenario("cost-10x").run(
        build_parser().parse_args(["run", "cost-10x", "--requests", "96"])
    )
    c = report.config["cost10x"]
    assert 7 <= c["ratio"] <= 14  # the claim's "10x", from physics rather than from the claim
    s = report.summaries
    assert s["taxi"]["cost_per_request"] / s["static-32"]["cost_per_request"] == pytest.approx(
        c["ratio"], rel=0.01
    )
    # continuous batching does better than the claim's bus
    assert c["ratio_continuous"] > c["ratio"]
    assert c["implied_price_per_hour"] == pytest.approx(3600.0)
    # A different price moves dollars, not the ratio.
    r2 = get_scenario("cost-10x").run(
        build_parser().parse_args(["run", "cost-10x", "--requests", "96", "--gpu-price", "5"])
    )
    assert r2.config["cost10x"]["ratio"] == pytest.approx(c["ratio"])
    assert r2.summaries["taxi"]["cost_per_request"] == pytest.approx(
        2 * s["taxi"]["cost_per_request"]
    )
    assert np.isfinite(c["ratio"])


def test_busy_and_idle_cost_by_hand():
    c = cost_summary(_small_run(), price_per_hour=3.6)  # 6 s of run, 3 s of steps
    assert c["cost_busy"] == pytest.approx(0.003) and c["cost_idle"] == pytest.approx(0.003)
    assert c["cost_busy"] + c["cost_idle"] == pytest.approx(c["cost_total"])
    assert c["cost_per_request_busy"] == pytest.approx(0.001)
    assert c["cost_per_1m_tokens_busy"] == pytest.approx(0.003 / 6 * 1e6)


def test_busy_cost_measures_the_work_idle_cost_the_traffic():
    # The same requests, served one at a time, arriving ten times further apart: the bill grows
    # with the idle time; what the work itself costs does not move.
    from batchsim import Fixed, Poisson, make_workload

    costs = {}
    for rate in (5.0, 0.5):
        wl = make_workload(Poisson(rate), Fixed(64), Fixed(8), n=200, seed=3)
        costs[rate] = cost_summary(
            summarize(simulate(wl, make_policy("taxi"), ConstantStepTime(0.01))), 3.6
        )
    busy, quiet = costs[5.0], costs[0.5]
    assert quiet["cost_per_1m_tokens"] > 5 * busy["cost_per_1m_tokens"]
    assert quiet["cost_per_1m_tokens_busy"] == pytest.approx(
        busy["cost_per_1m_tokens_busy"], rel=1e-9
    )
    assert quiet["cost_idle"] > 5 * busy["cost_idle"]
