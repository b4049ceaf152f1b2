"""Named scenarios: each runs at reduced size, writes its figures, and tells the story it claims."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest

from batchsim.cli import build_parser, main
from batchsim.cli.options import (
    kv_budget_from_args,
    price_from_args,
    server_from_args,
    step_time_from_args,
)
from batchsim.core.errors import ConfigError
from batchsim.machine.roofline import RooflineStepTime
from batchsim.sim.steptime import ConstantStepTime, LinearStepTime
from batchsim.teach.scenarios import FLAGSHIP, SCENARIOS, get_scenario
from batchsim.traces import AZURE_TRACE, SHIPPED

NAMES = (
    "taxi-vs-bus",
    "laundromat",
    "rush-hour",
    "chat-vs-offline",
    "memory-wall",
    "mixed-lengths",
    "cost-10x",
    "azure-conv",
    "batch-size-sweep",
)
PNG = b"\x89PNG\r\n\x1a\n"


def run(name: str, *flags: str):
    return get_scenario(name).run(build_parser().parse_args(["run", name, *flags]))


def test_all_named_scenarios_are_registered_with_a_story():
    assert set(NAMES) <= set(SCENARIOS)
    assert FLAGSHIP == "taxi-vs-bus"
    for name in NAMES:
        s = SCENARIOS[name]
        assert len(s.summary) > 20 and len(s.story) > 200
        assert "gpu" in s.defaults and "model" in s.defaults


@pytest.mark.parametrize("name", NAMES)
def test_every_scenario_runs_small_and_writes_non_empty_pngs(name, tmp_path, capsys):
    size = ["--duration", "20"] if name in ("rush-hour", "azure-conv") else ["--requests", "48"]
    assert main(["run", name, *size, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(name)
    pngs = sorted((tmp_path / name).glob("*.png"))  # --out DIR writes DIR/<scenario>/
    assert len(pngs) >= 3, pngs
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 5000, p
    assert "figures: " in out and str(pngs[0]) in out


def test_scenarios_list(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out


def test_flags_override_scenario_defaults():
    r = run(
        "taxi-vs-bus",
        "--requests",
        "40",
        "--gpu",
        "H100-SXM",
        "--model",
        "mistral-7b",
        "--policy",
        "taxi",
    )
    assert r.config["server"]["gpu"] == "H100-SXM" and r.config["server"]["model"] == "mistral-7b"
    assert r.summaries["taxi"]["gpu_price_per_hour"] == 3.50
    r = run("taxi-vs-bus", "--requests", "40", "--step-time", "0.02", "--policy", "taxi")
    assert "ConstantStepTime(seconds=0.02)" in r.config["step_time"]
    # the KV budget still follows the scenario's GPU and model
    # 80 GiB x 0.9 - weights - activations (batchsim.machine.memory)
    assert r.config["kv_budget_tokens"] == 453_767


def _ns(**kw):
    return argparse.Namespace(**kw)


def test_step_time_precedence(tmp_path):
    cal = tmp_path / "cal.json"
    LinearStepTime(0.003, 1e-5).to_json(cal)
    scen = {"gpu": "A100-80GB", "model": "gpt2"}
    assert isinstance(
        step_time_from_args(_ns(calibration=str(cal), step_time=0.1, gpu="H200"), scen),
        LinearStepTime,
    )
    assert isinstance(step_time_from_args(_ns(step_time=0.1, gpu="H200"), scen), ConstantStepTime)
    st = step_time_from_args(_ns(gpu="H200"), {**scen, "step_time_model": ConstantStepTime(1.0)})
    assert isinstance(st, RooflineStepTime) and st.gpu.name == "H200" and st.model.name == "gpt2"
    assert step_time_from_args(
        _ns(), {**scen, "step_time_model": ConstantStepTime(1.0)}
    ) == ConstantStepTime(1.0)
    st = step_time_from_args(_ns(), scen)
    assert isinstance(st, RooflineStepTime) and st.gpu.name == "A100-80GB"
    assert step_time_from_args(_ns(), {}).source == "illustrative default"
    # Naming only a model runs it on the default GPU; efficiencies come through.
    st = step_time_from_args(_ns(sim_model="gpt2-xl", compute_eff=0.3, step_overhead=0.002), {})
    assert (st.gpu.name, st.model.name, st.compute_eff, st.overhead) == (
        "A100-80GB",
        "gpt2-xl",
        0.3,
        0.002,
    )


def test_kv_budget_precedence_and_bytes():
    scen = {"gpu": "A100-80GB", "model": "gpt2"}
    # the activation reserve (machine.memory)
    act = 8192 * (4 * 768 + 3 * 3072) * 2 + 2 * 256 * 50257 * 4 + 2**29
    assert kv_budget_from_args(_ns(), scen) == 2_067_583
    assert kv_budget_from_args(_ns(kv_budget_tokens=1000), scen) == 1000
    assert kv_budget_from_args(_ns(kv_budget_bytes="1GB"), scen) == 1_000_000_000 // 36_864
    assert kv_budget_from_args(_ns(kv_budget_bytes="1GiB"), scen) == 2**30 // 36_864
    assert kv_budget_from_args(_ns(mem_util=0.5), scen) == int(
        (40 * 2**30 - 248_879_616 - act) // 36_864
    )
    assert kv_budget_from_args(_ns(), {**scen, "kv_budget_tokens": 777}) == 777
    assert kv_budget_from_args(_ns(), {}) is None
    with pytest.raises(ConfigError, match="kv-budget-bytes needs a server"):
        kv_budget_from_args(_ns(kv_budget_bytes="1GB"), {})
    with pytest.raises(ConfigError, match="kv-budget-bytes must be a number"):
        kv_budget_from_args(_ns(kv_budget_bytes="lots"), scen)
    assert server_from_args(_ns(), {}) is None
    assert price_from_args(_ns(), scen) == 2.50
    assert price_from_args(_ns(gpu_price=0.5), {}) == 0.5


@pytest.mark.parametrize(
    "argv,field",
    [
        (
            ["run", "taxi-vs-bus", "--gpu", "V100"],
            "gpu must be one of T4, L4, A10G, L40S, A100-40GB, A100-80GB, H100-SXM, H200, MI300X, "
            "cpu, got 'V100'",
        ),
        (["run", "taxi-vs-bus", "--model", "gpt5"], "model must be one of distilgpt2"),
        (
            ["run", "--gpu", "T4", "--model", "llama-3-8b"],
            "model llama-3-8b does not fit on gpu T4",
        ),
        (
            ["run", "--gpu", "A100-80GB", "--dtype", "fp8"],
            "dtype must be one of fp32, fp16, bf16, got 'fp8'",
        ),
        (["run", "--gpu", "A100-80GB", "--mem-util", "1.5"], "mem-util must be in (0, 1], got 1.5"),
        (["run", "taxi-vs-bus", "--gpu-price", "-1"], "gpu-price must be >= 0, got -1.0"),
        (["run", "nope"], "scenario must be one of"),
    ],
)
def test_bad_server_input_exits_2_with_one_line(argv, field, capsys):
    assert main(argv + ["--requests", "10", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


# --- the stories hold -------------------------------------------------------------------------


def test_taxi_vs_bus_taxi_saturates_and_batching_copes():
    s = run("taxi-vs-bus", "--requests", "200").summaries
    # ~0.73 req/s < 2 arriving
    assert s["taxi"]["busy_fraction"] > 0.99 and s["taxi"]["request_throughput"] < 1.0
    for p in ("static", "dynamic", "continuous"):
        assert s[p]["request_throughput"] > 1.8 * s["taxi"]["request_throughput"]
        assert s[p]["mean_e2e"] < s["taxi"]["mean_e2e"] / 5
        assert s[p]["cost_per_request"] < s["taxi"]["cost_per_request"]
    assert s["continuous"]["mean_e2e"] < s["dynamic"]["mean_e2e"] < s["static"]["mean_e2e"]


def test_laundromat_answer_flips_with_load():
    s = run("laundromat", "--requests", "96").summaries
    # waiting for 8 loads hurts when quiet
    assert s["low: taxi"]["mean_e2e"] < s["low: static-8"]["mean_e2e"] / 4
    # the taxi falls behind when busy
    assert s["high: taxi"]["mean_e2e"] > s["high: static-8"]["mean_e2e"] * 2
    assert s["high: dynamic-8"]["mean_e2e"] <= s["high: static-8"]["mean_e2e"]


def test_rush_hour_max_wait_saves_the_quiet_hours():
    s = run("rush-hour", "--duration", "60").summaries
    assert s["dynamic"]["mean_ttft"] < s["static"]["mean_ttft"] / 1.5
    assert s["continuous"]["mean_ttft"] < s["dynamic"]["mean_ttft"]


def test_mixed_lengths_continuous_wins_most():
    s = run("mixed-lengths", "--requests", "200").summaries
    assert s["continuous"]["request_throughput"] > 1.15 * s["static"]["request_throughput"]
    assert s["continuous"]["padded_row_fraction"] == 0 and s["static"]["padded_row_fraction"] > 0.25
    assert s["continuous"]["mean_e2e"] < s["static"]["mean_e2e"] / 2


def test_memory_wall_long_contexts_cap_the_batch_and_preempt():
    r = run("memory-wall", "--requests", "80", "--rate", "1.0")
    s = r.summaries
    assert (
        s["short: continuous-128"]["preemptions"] == 0
        and s["long: continuous-128"]["preemptions"] > 0
    )
    budget = r.config["kv_budget_tokens"]
    # (40 GiB x 0.9 - 13,476,831,232 of weights - 1,411,907,584 of activations) // 524,288
    assert budget == 45_329
    for _label, x in s.items():
        assert x["kv_peak_tokens"] <= budget
    # memory, not max_batch=64, caps it
    assert s["long: dynamic-64"]["max_batch_size"] <= budget // 1800 + 1
    assert s["long: dynamic-64"]["kv_peak_tokens"] > 0.8 * budget
    # The notes count in words that agree with the counts, and the rows a full cache holds are
    # memory's budget over the tokens each held then: one arithmetic, not two numbers for one limit.
    res = r.results["long: continuous-128"]
    hit = np.bincount(res.records.preemptions)
    evicted = next(
        n for n in r.notes if n.startswith("long: continuous-128: ") and "for 80 requests" in n
    )
    many = int((res.records.preemptions > 0).sum())
    assert (f"the worst {len(hit) - 1} times" in evicted) == (len(hit) > 2)
    assert (
        f"{many} requests evicted once each" in evicted or many == 1 or len(hit) > 2
    ) and "1 times" not in evicted
    full = next((n for n in r.notes if "% full for" in n), None)
    if full is not None:
        m = re.search(
            r"Then it holds (\d+) rows of about ([\d,]+) tokens each, all that fits in 90-100 % of "
            r"memory's ([\d,]+) tokens",
            full,
        )
        rows, held, total = int(m[1]), int(m[2].replace(",", "")), int(m[3].replace(",", ""))
        assert total == budget and 0.85 * budget <= rows * held <= 1.05 * budget, full


def test_chat_vs_offline_notes_and_batches():
    r = run("chat-vs-offline", "--requests", "80")
    s = r.summaries
    assert (
        s["offline: continuous-256"]["output_throughput"]
        > s["offline: continuous-16"]["output_throughput"]
    )
    assert s["offline: continuous-256"]["mean_batch_size"] > 16
    assert "goodput" in s["chat: continuous-16"]
    assert any(n.startswith("price of latency") for n in r.notes)


def test_batch_size_sweep_at_one_rate_finds_the_largest_batch_meeting_the_slo():
    r = run("batch-size-sweep", "--requests", "300")
    sw = r.config["sweep"]
    s = list(r.summaries.values())
    # One workload for every size: same count, same arrivals.
    assert {x["arrived"] for x in s} == {300}
    arrivals = {tuple(res.records.arrival) for res in r.results.values()}
    assert len(arrivals) == 1
    rate, cap = sw["rate"], sw["capacity"]
    tput = [x["request_throughput"] for x in s]
    for c, t in zip(cap, tput):
        if c < 0.9 * rate:
            assert t == pytest.approx(c, rel=0.15)  # a bus too small serves what it can carry
        elif c > 1.5 * rate:
            assert t == pytest.approx(rate, rel=0.15)  # a big enough bus serves the traffic
    p99 = [x["p99_e2e"] for x in s]
    low = int(np.argmin(p99))
    # the U: drowns, then waits to fill
    assert 0 < low < len(p99) - 1 and p99[0] > p99[low] < p99[-1]
    meets = [b for b, x in zip(sw["values"], s) if x["p99_e2e"] <= sw["slo"]]
    assert sw["best"] == max(meets)
    r2 = run("batch-size-sweep", "--requests", "300", "--slo-e2e", "1000")
    assert r2.config["sweep"]["best"] == 128


def test_azure_conv_replays_the_trace_when_it_is_present(tmp_path, monkeypatch):
    from batchsim.core.traces import read_trace

    azure_trace = tmp_path / AZURE_TRACE  # a folder of one's own, found before the package's copy
    azure_trace.write_bytes((SHIPPED / AZURE_TRACE).read_bytes())
    monkeypatch.setenv("BATCHSIM_TRACES", str(tmp_path))
    rep = run("azure-conv", "--duration", "30")
    where = str(azure_trace.resolve())  # the scenario names the file it read
    assert rep.config["traffic"] == {"source": "trace", "path": where}
    assert where in rep.notes[0] and "synthetic" in rep.notes[0]  # says how to get the other
    tr = read_trace(azure_trace)
    r = rep.results["continuous"].records
    expected = tr.arrival_s[tr.arrival_s < 30.0]
    assert len(r) == len(expected)
    assert list(r.prompt_tokens[:20]) == list(tr.prompt_tokens[:20])  # the file's own token counts


def test_azure_conv_says_when_it_uses_the_synthetic_fit(monkeypatch, tmp_path):
    import sys

    # a wheel without its data
    monkeypatch.setattr(sys.modules["batchsim.traces"], "find_trace", lambda *a, **k: None)
    syn = run("azure-conv", "--duration", "30")
    assert syn.config["traffic"]["source"] == "synthetic fit"
    assert (
        "synthetic" in syn.notes[0]
        and "no trace file" in syn.notes[0]
        and "batchsim.traces fetch" in syn.notes[0]
    )
    chosen = run("azure-conv", "--duration", "30", "--arrival", "gamma:1.1")
    assert (
        chosen.config["traffic"]["source"] == "synthetic fit"
        and "--arrival given" in chosen.notes[0]
    )


def test_azure_conv_replays_a_trace_given_with_the_flag():
    rep = run("azure-conv", "--trace", str(SHIPPED / AZURE_TRACE), "--requests", "100")
    assert (
        rep.summaries["continuous"]["completed"] == 100
        and rep.config["traffic"]["source"] == "trace"
    )


def test_a_served_record_replayed_says_it_is_not_a_prediction_of_the_room(tmp_path):
    """A `realrun serve --record` CSV (its sidecar names the real model) replayed by batchsim runs
    on the simulated server: the notes say so and name the command that predicts the record; a trace
    with no sidecar gets no such note, nor one whose sidecar is not a server's."""
    import shutil
    from pathlib import Path

    lab = Path(__file__).resolve().parents[1] / "course" / "labs" / "data" / "class-static.csv"
    rep = run("azure-conv", "--trace", str(lab), "--requests", "20")
    note = next(n for n in rep.notes if "is a record of a real server" in n)
    assert "tiny-gpt2 on cpu, static" in note and f"python -m realrun predict {lab}" in note
    bare = tmp_path / "room.csv"
    shutil.copy(lab, bare)
    assert not any(
        "record of a real server" in n
        for n in run("azure-conv", "--trace", str(bare), "--requests", "20").notes
    )
    (tmp_path / "room.csv.json").write_text("[1, 2]")
    assert not any(
        "record of a real server" in n
        for n in run("azure-conv", "--trace", str(bare), "--requests", "20").notes
    )


def test_same_seed_same_table_and_json_shape(capsys):
    assert main(["run", "laundromat", "--requests", "40", "--json", "--no-plots"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["run", "laundromat", "--requests", "40", "--json", "--no-plots"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert a["runs"] == b["runs"] and len(a["runs"]) == 6
    assert a["config"]["server"]["gpu"] == "A100-80GB"


def test_column_notes_explain_only_the_kinds_of_ttft_a_table_shows():
    from batchsim.core.metrics import TTFT_NOTE
    from batchsim.teach.scenarios.base import column_notes

    produced, delivered = (
        column_notes(["mean_ttft", "p99_ttft"]),
        column_notes(["p99_ttft_delivered"]),
    )
    assert produced[0].startswith("TTFT = first token produced") and "TTFT dlv" not in produced[0]
    assert (
        delivered[0].startswith("TTFT dlv = first token delivered") and "TTFT =" not in delivered[0]
    )
    assert column_notes(["mean_ttft", "mean_ttft_delivered"]) == [TTFT_NOTE]
    assert column_notes(["p99_e2e"]) == []
