"""`plan` answers for the rate it names, in steady state (issue 38 item 2), and takes run's machine
flags (issue 39).

A finite run of a fleet too small for its traffic can still meet a latency objective if the
run ends before the queue gets long: the plan sizes its runs, holds every fleet to theory's
capacity, measures the queue's growth, and says which it did.
"""

from __future__ import annotations

import json

import pytest

from batchsim.cli import build_parser, main
from batchsim.cli.capacity import plan
from batchsim.cli.plan_machine import PLAN_MAX_REQUESTS, size_for_steady_state
from batchsim.core.config import WorkloadConfig
from batchsim.core.flags import given
from batchsim.teach.scenarios.capacity import Candidate, Objective, evaluate
from batchsim.teach.scenarios.steady import steady_misses


def _wl(rate: float, requests: int = 2000):
    flags = {"rate": rate, "requests": requests}
    return flags, WorkloadConfig.from_flags(given(flags)).build()


def test_a_low_rate_run_spans_several_objectives_and_says_so():
    flags, wl = _wl(50.0)
    wl2, line, load = size_for_steady_state(flags, wl, Objective(p99_e2e=20.0))
    assert load == 1.0
    # 3 x 20 s x 50/s = 3,000 requests, and 10 % more so that random arrivals still span 60 s
    assert 3250 <= len(wl2) <= 3350 and "warning" not in line and "steady state:" in line
    assert float(wl2.arrivals[-1] - wl2.arrivals[0]) >= 3 * 20.0 * 0.95


def test_a_high_rate_run_is_capped_and_warns_that_it_is_shorter_than_the_objective():
    flags, wl = _wl(5000.0)
    wl2, line, load = size_for_steady_state(flags, wl, Objective(p99_e2e=10.0))
    assert len(wl2) == PLAN_MAX_REQUESTS and load == 0.9
    assert line.startswith("steady state: warning:") and "--requests" in line and "growing" in line


def test_a_short_run_keeps_headroom_below_theorys_capacity():
    o = Objective(p99_e2e=10.0)
    # a long enough run: 95 % load is judged by measurement
    assert steady_misses({}, 10, 10.0, 95.0, o) == []
    assert steady_misses({}, 10, 10.0, 95.0, o, max_load=0.9)[0].startswith(
        "loaded to 95% of theory's capacity"
    )


def test_theory_refuses_a_fleet_that_carries_less_than_the_traffic():
    o = Objective(p99_e2e=10.0)
    assert steady_misses({}, 4, 10.0, 50.0, o)[0].startswith("cannot keep up: 4 x 10")
    assert steady_misses({}, 5, 10.0, 50.0, o) == []


def test_a_growing_queue_is_measured_and_a_steady_one_is_not():
    o = Objective(p99_e2e=60.0)
    flags = {"rate": 40.0, "requests": 1500}
    cand = Candidate("A100-80GB", "continuous", 32)
    _, small = evaluate(
        ("small", flags, cand.defaults("llama-3-8b", 1, "least-loaded", 0.1), "continuous")
    )
    _, big = evaluate(
        ("big", flags, cand.defaults("llama-3-8b", 8, "least-loaded", 0.1), "continuous")
    )
    # one A100 at 40 requests/s: the queue grows all run
    assert small["e2e_last"] > 1.25 * small["e2e_mid"]
    assert any(m.startswith("queue grows") for m in steady_misses(small, 1, None, 40.0, o))
    assert steady_misses(big, 8, None, 40.0, o) == []


def test_an_unreachable_rate_is_refused_in_one_line(capsys):
    assert main(["plan", "--rate", "1e9", "--slo-p99-e2e", "10", "--scheduler", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "steady state cannot be reached" in err[0]
        and "4,096 a plan may try" in err[0]
    )


def test_a_rate_beyond_the_fleets_tried_names_the_fleet_that_cannot_keep_up(capsys):
    argv = [
        "plan",
        "--rate",
        "400",
        "--requests",
        "2000",
        "--gpus",
        "A100-80GB",
        "--policies",
        "continuous",
        "--batch-sizes",
        "32",
        "--tp",
        "1",
        "--max-replicas",
        "4",
        "--scheduler",
        "none",
        "--slo-p99-e2e",
        "10",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no configuration meets" in err[0] and "cannot keep up" in err[0]


def test_the_plan_prints_how_it_judged_steady_state(capsys):
    argv = [
        "plan",
        "--rate",
        "12",
        "--gpus",
        "A100-80GB",
        "--policies",
        "continuous",
        "--batch-sizes",
        "32",
        "--tp",
        "1",
        "--scheduler",
        "none",
        "--slo-p99-e2e",
        "20",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["steady_state"].startswith("steady state:")
    assert any(n.startswith("steady state:") for n in out["notes"])
    assert out["config"]["requests"] >= 3 * 20 * 12 * 0.95  # the arrivals span three objectives


def test_a_70b_model_plans_over_tensor_parallel_splits_and_pays_for_every_gpu(capsys):
    argv = [
        "plan",
        "--model",
        "llama-3-70b",
        "--gpus",
        "H100-SXM",
        "--rate",
        "2",
        "--requests",
        "300",
        "--policies",
        "continuous",
        "--batch-sizes",
        "32",
        "--scheduler",
        "none",
        "--slo-p99-e2e",
        "60",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # the two smallest splits that hold 141 GB of weights
    assert out["config"]["tp"] == {"H100-SXM": [2, 4]}
    ans = out["answer"]
    assert "TP" in ans["config"]
    tp = int(ans["config"].split("TP")[1].split()[0])
    assert ans["cost_per_hour"] == pytest.approx(ans["servers"] * tp * 3.50)


def test_plan_takes_runs_machine_flags(capsys):
    argv = [
        "plan",
        "--model",
        "llama-3-70b",
        "--gpus",
        "H100-SXM",
        "--rate",
        "2",
        "--requests",
        "300",
        "--tp",
        "4",
        "--weights",
        "fp8",
        "--kv-dtype",
        "fp8",
        "--engine-profile",
        "vllm",
        "--compute-eff",
        "0.5",
        "--policies",
        "continuous",
        "--batch-sizes",
        "32",
        "--scheduler",
        "none",
        "--slo-p99-e2e",
        "60",
        "--json",
    ]
    assert main(argv) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    assert cfg["tp"] == {"H100-SXM": [4]}
    m = cfg["machine"]
    assert (m["weights"], m["kv_dtype"], m["engine_profile"], m["compute_eff"]) == (
        "fp8",
        "fp8",
        "vllm",
        0.5,
    )
    from batchsim.machine.engines import engine_profile

    # the preset's, where no flag overrides it
    assert m["memory_eff"] == engine_profile("vllm").memory_eff


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--tp", "3", "--model", "llama-3-70b", "--gpus", "H100-SXM"], "tp"),
        (["--weights", "fp4"], "weights"),
        (["--tp", "1", "--model", "llama-3-70b", "--gpus", "A100-80GB,H100-SXM"], "--tp"),
        (["--engine-profile", "tgi"], "engine-profile"),
    ],
)
def test_bad_machine_flags_of_plan_are_one_line(capsys, argv, field):
    assert main(["plan", "--rate", "2", "--slo-p99-e2e", "20", "--scheduler", "none", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


def test_plan_parser_accepts_every_machine_flag_of_run():
    args = build_parser().parse_args(
        [
            "plan",
            "--slo-p99-e2e",
            "5",
            "--calibration",
            "x.json",
            "--weights",
            "int4",
            "--kv-dtype",
            "fp8",
            "--tp",
            "2",
            "--engine-profile",
            "trt-llm",
            "--compute-eff",
            "0.5",
            "--memory-eff",
            "0.7",
            "--step-overhead",
            "0.001",
            "--mem-util",
            "0.85",
        ]
    )
    assert (args.weights, args.kv_dtype, args.tp, args.engine_profile, args.calibration) == (
        "int4",
        "fp8",
        2,
        "trt-llm",
        "x.json",
    )
    assert plan  # the entry point the CLI calls
