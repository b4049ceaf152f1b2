"""The lessons' functions say what the course says: numbers that move the right way and add up.

Each notebook is a thin driver over one function in ``batchsim.teach.lessons``; these
tests call the functions directly at reduced size and hold them to the claims the
lessons make (the taxi saturates at its ride time, padded batches waste rows,
memory caps the batch at budget / context, dollars scale with the price, theory
agrees with simulation), plus seed stability and clear errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from batchsim.core.errors import ConfigError
from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.teach import lessons
from batchsim.traces import AZURE_TRACE, SHIPPED


def test_why_batch_taxi_saturates_at_its_ride_time_and_the_bus_keeps_up():
    s, fig = lessons.why_batch(rate=20.0, max_batch=16, max_wait=0.2, requests=200)
    p = s["policies"]
    # Overloaded, the taxi serves as fast as one ride allows (the notes' capacity), within 15 %:
    # the capacity is computed for the mean lengths, the run has random ones.
    assert p["taxi"]["request_throughput"] == pytest.approx(s["taxi_capacity"], rel=0.15)
    assert p["static"]["request_throughput"] > 3 * p["taxi"]["request_throughput"]
    assert p["taxi"]["p99_e2e"] > 10 * p["dynamic"]["p99_e2e"]
    assert p["taxi"]["cost_per_request"] > 3 * p["static"]["cost_per_request"]
    assert isinstance(fig, Figure) and len(fig.axes) == 4


def test_why_batch_at_low_load_the_timetable_beats_waiting_for_a_full_bus():
    s, _ = lessons.why_batch(rate=1.0, max_batch=16, max_wait=0.2, requests=120)
    p = s["policies"]
    # Waiting for 15 more passengers at 1/s takes ~7.5 s on average; the timetable caps it at 0.2 s.
    assert p["static"]["mean_e2e"] > 5.0
    assert p["dynamic"]["mean_e2e"] < 0.2 * p["static"]["mean_e2e"]
    # Nobody is turned away and everyone is served, whatever the policy.
    assert all(r["completed"] == 120 and r["rejected"] == 0 for r in p.values())


def test_why_batch_says_when_a_short_runs_first_bus_hides_what_the_bus_carries():
    # 64 seats at 30 requests/s: the GPU idles until 64 passengers came (about 64 / 30 s), a visible
    # share of a 400-request run, so the run's req/s and busy read low; the note gives the figures
    # from the first departure on, which a longer run approaches (notebook 1, question 3).
    s, _ = lessons.why_batch(rate=30.0, max_batch=64, requests=400)
    e, st = s["edges"]["static"], s["policies"]["static"]
    from batchsim import Poisson, Uniform, make_workload

    arrivals = make_workload(
        Poisson(30.0), Uniform(32, 256), Uniform(16, 64), n=400, seed=0
    ).arrivals
    # the 64th passenger's arrival
    assert e["first_departure_s"] == pytest.approx(float(arrivals[63]))
    assert e["share_of_run"] > 0.1 and st["busy_fraction"] < 0.9 < e["busy_after"]
    assert e["throughput_after"] > st["request_throughput"] + 3
    note = next(n for n in s["notes"] if n.startswith("bus: wait for 64"))
    assert f"{e['first_departure_s']:.1f} s" in note and "More REQUESTS" in note
    # Where the start changes nothing that matters, no note: the defaults, and a bus that is always
    # behind.
    for kw in ({}, {"rate": 30.0, "max_batch": 4}, {"rate": 1.0}):
        r, _ = lessons.why_batch(requests=200, **kw)
        assert not any(n.startswith("bus") for n in r["notes"]), kw


def test_why_batch_dollars_scale_with_the_price_and_runs_repeat_with_the_seed():
    a, _ = lessons.why_batch(rate=5.0, requests=100, price_per_hour=2.0, seed=3)
    b, _ = lessons.why_batch(rate=5.0, requests=100, price_per_hour=4.0, seed=3)
    c, _ = lessons.why_batch(rate=5.0, requests=100, price_per_hour=2.0, seed=3)
    for k in a["policies"]:
        assert b["policies"][k]["cost_per_request"] == pytest.approx(
            2 * a["policies"][k]["cost_per_request"]
        )
        s = a["policies"][k]
        assert s["cost_per_request"] == pytest.approx(2.0 / 3600 * s["duration"] / s["completed"])
    assert a["table"] == c["table"]
    d, _ = lessons.why_batch(rate=5.0, requests=100, price_per_hour=2.0, seed=4)
    assert d["table"] != a["table"]


def test_batching_policies_padding_waste_and_continuous_wins_on_mixed_lengths():
    s, fig = lessons.batching_policies(policy="static", rate=3.0, requests=150, show=20)
    p = s["policies"]
    assert p["continuous"]["padded_row_fraction"] == 0.0
    assert p["static"]["padded_row_fraction"] > 0.2  # answers 8..256 in one padded batch
    assert p["continuous"]["mean_e2e"] < p["dynamic"]["mean_e2e"] < p["taxi"]["mean_e2e"]
    assert p["continuous"]["mean_ttft"] < p["static"]["mean_ttft"]
    timeline = fig.axes[0]
    assert "static" in timeline.get_title()
    # one waiting line and one riding line per drawn request
    assert sum(len(c.get_segments()) for c in timeline.collections) == 2 * 20


def test_batching_policies_rejects_an_unknown_policy():
    with pytest.raises(ConfigError, match="policy must be one of"):
        lessons.batching_policies(policy="tram")


def test_memory_wall_matches_the_hand_computation():
    s, _ = lessons.memory_wall(
        kv_budget_gb=8, prompt_tokens=1024, output_tokens=512, max_batch=32, requests=40
    )
    # Llama-2-7B fp16: 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 524,288 bytes per token.
    assert s["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2
    assert s["kv_budget_tokens"] == int(8e9 // 524_288) == 15_258
    assert s["rows_that_fit"] == 15_258 // 1536 == 9
    assert s["memory_bound"]
    p = s["policies"]
    assert p["static"]["max_batch_size"] == 9
    for r in p.values():
        assert r["kv_peak_tokens"] <= s["kv_budget_tokens"]
        assert r["completed"] == 40
    # Continuous allocates as tokens come: more rows at once, paid for with preemptions.
    assert p["continuous"]["max_batch_size"] > 9
    assert p["continuous"]["preemptions"] > 0


def test_the_two_kv_layouts_count_what_a_hand_count_gives():
    # Rows of 10, 40 and 25 tokens in blocks of 16: a rectangle 3 x 40 = 120 slots; blocks 1 + 3 + 2
    # = 6 = 96.
    s, fig = lessons.kv_layouts(
        requests=((4, 6), (30, 10), (20, 5)), block_size=16, blocks_per_line=4
    )
    assert (s["tokens"], s["rectangle_tokens"], s["blocks"], s["block_tokens"]) == (75, 120, 6, 96)
    assert s["rectangle_padding_pct"] == pytest.approx(100 * 45 / 120) and s[
        "block_waste_pct"
    ] == pytest.approx(100 * 21 / 96)
    assert "3 x 40 = 120" in s["table"] and len(fig.axes) == 2
    # Equal lengths pad nothing; a spread of lengths pads the rectangle, never the blocks past one
    # per row.
    even, _ = lessons.kv_layouts(requests=((16, 16),) * 4)
    assert even["rectangle_padding_pct"] == 0 and even["block_waste_pct"] == 0
    wide, _ = lessons.kv_layouts(requests=((1, 0), (500, 0)), block_size=16)
    assert wide["rectangle_padding_pct"] > 49 and wide["block_tokens"] - wide["tokens"] < 2 * 16
    with pytest.raises(ConfigError, match="requests must be"):
        lessons.kv_layouts(requests=((0, 3),))


def test_memory_wall_moves_with_budget_and_with_grouped_query_attention():
    roomy, _ = lessons.memory_wall(kv_budget_gb=40, max_batch=16, requests=32)
    assert not roomy["memory_bound"]
    assert roomy["policies"]["static"]["max_batch_size"] == 16
    assert roomy["policies"]["continuous"]["preemptions"] == 0
    gqa, _ = lessons.memory_wall(kv_budget_gb=8, max_batch=64, requests=40, model="llama-3-8b")
    # 8 KV heads instead of 32: a quarter of the bytes per token, four times the rows.
    assert gqa["kv_bytes_per_token"] * 4 == 2 * 32 * 32 * 128 * 2
    assert gqa["rows_that_fit"] == int(8e9 // gqa["kv_bytes_per_token"]) // 1536 == 39


def test_memory_wall_refuses_a_budget_smaller_than_one_request():
    with pytest.raises(ConfigError, match="kv_budget_gb must hold one request"):
        lessons.memory_wall(kv_budget_gb=0.1, prompt_tokens=1024, output_tokens=512)


def test_cost_falls_with_batch_and_adds_up():
    s, fig = lessons.cost(gpu="A100-80GB", max_batch=32, requests=64)
    rows = s["batches"]
    per_req = [rows[f"batch {b}"]["cost_per_request"] for b in (1, 2, 4, 8, 16, 32)]
    assert all(x > y for x, y in zip(per_req, per_req[1:]))
    b32 = rows["batch 32"]
    price = DEFAULT_CATALOG.gpu("A100-80GB").price_per_hour
    assert s["price_per_hour"] == price
    # $/request = $/hour x hours / requests, and $/1M tokens likewise (128 tokens per request here)
    assert b32["cost_per_request"] == pytest.approx(
        price * b32["duration"] / 3600 / b32["completed"]
    )
    assert b32["cost_per_1m_tokens"] == pytest.approx(b32["cost_per_request"] / 128 * 1e6)
    assert s["saving"] == pytest.approx(
        rows["batch 1"]["cost_per_request"] / b32["cost_per_request"]
    )
    assert s["saving"] > 10
    assert len(fig.axes) == 3


def test_cost_checks_the_claim_and_follows_the_price():
    s, _ = lessons.cost(max_batch=8, requests=16, price_per_hour=1.0)
    t, _ = lessons.cost(max_batch=8, requests=16, price_per_hour=3.0)
    # "10 RPS = $0.10/request" is $1 a second: 10 x 3600 x 0.10 = $3,600 an hour; so is 100 x 3600 x
    # 0.01.
    assert s["claim_implied_price"] == pytest.approx(3600.0)
    assert s["claim_implied_price_batch"] == pytest.approx(3600.0)
    assert s["claim_ratio"] == pytest.approx(10.0)
    assert t["cost_per_request"] == pytest.approx(3 * s["cost_per_request"])
    assert t["saving"] == pytest.approx(s["saving"])


def test_roofline_memory_bound_at_batch_one_and_the_knee():
    s1, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=0)
    gpu, model = DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("llama-3-8b")
    weights_read = model.weight_bytes("fp16") / (gpu.bandwidth * 0.8)
    assert s1["bound"] == "memory"
    assert s1["step_ms"] / 1e3 == pytest.approx(weights_read, rel=0.2)
    s64, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=64, context=0)
    assert s64["tokens_per_s"] > 40 * s1["tokens_per_s"]  # the weights are shared by 64 rows
    big, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1024, context=0)
    assert big["bound"] == "compute"
    knee = s1["knee"]
    assert knee is not None and 64 < knee < 1024
    ctx, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=2048)
    assert ctx["knee"] is None or ctx["knee"] > knee  # KV reads push the knee out


def test_theory_agrees_with_simulation_within_the_stated_tolerance():
    s, fig = lessons.theory_vs_simulation(load=0.5, replications=8, seats=8, requests=1500, seed=1)
    for name, r in s["rows"].items():
        # M/D/1 and bus-fill means from 8 x 1500 requests: within 10 % of theory.
        assert abs(r["error"]) < 0.10, (name, r)
        assert r["ci95"] > 0
    # (N-1)/(2 lambda), lambda = 0.5/0.02
    assert s["rows"]["bus of 8"]["theory"] == pytest.approx(7 / (2 * 25.0))
    assert len(fig.axes) == 3


def test_theory_confidence_interval_narrows_with_replications():
    few, _ = lessons.theory_vs_simulation(load=0.6, replications=4, requests=400, seed=2)
    many, _ = lessons.theory_vs_simulation(load=0.6, replications=16, requests=400, seed=2)
    # The half-width goes as t / sqrt(R): from R=4 to R=16 it should about halve (and more, t
    # shrinks).
    assert many["rows"]["taxi (M/D/1)"]["ci95"] < 0.8 * few["rows"]["taxi (M/D/1)"]["ci95"]
    one, _ = lessons.theory_vs_simulation(load=0.6, replications=1, requests=200)
    assert math.isnan(one["rows"]["taxi (M/D/1)"]["ci95"])


def test_theory_refuses_an_unstable_load():
    with pytest.raises(ConfigError, match="load must be in"):
        lessons.theory_vs_simulation(load=1.0)


def test_real_day_synthetic_continuous_meets_a_chat_slo_and_padded_batches_do_not():
    s, fig = lessons.real_day(policy="continuous", max_batch=64, minutes=1.0, trace="synthetic")
    att = s["slo_attainment"]
    assert "synthetic" in s["source"]
    assert att["continuous"] > 0.9
    assert att["static"] < 0.5 and att["taxi"] < 0.5
    assert s["best"] == "continuous"
    strict, _ = lessons.real_day(
        policy="continuous",
        max_batch=64,
        minutes=1.0,
        trace="synthetic",
        slo_ttft=0.2,
        slo_tpot_ms=20.0,
    )
    assert all(strict["slo_attainment"][k] <= att[k] for k in att)
    assert len(fig.axes) == 4


def test_real_day_replays_the_azure_trace():
    s, _ = lessons.real_day(minutes=1.0, start_minute=10.0, trace=SHIPPED / AZURE_TRACE)
    assert "Azure" in s["source"]
    # about 5.5 requests per second in the published trace
    assert 200 < s["requests"] < 500
    assert all(r["rejected"] == 0 for r in s["policies"].values())


def test_real_day_names_a_missing_trace():
    with pytest.raises(ConfigError, match="no such file"):
        lessons.real_day(trace="/nonexistent/trace.csv")


def test_find_trace_honours_the_environment(tmp_path, monkeypatch):
    f = tmp_path / lessons.AZURE_TRACE
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n")
    monkeypatch.setenv("BATCHSIM_TRACES", str(tmp_path))
    assert lessons.find_trace() == f.resolve()


def test_lesson_figures_ci_uses_student_t():
    from batchsim.teach.figures import mean_ci

    m, h = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0
    assert h == pytest.approx(4.303 * 1.0 / np.sqrt(3))


def test_prefill_is_compute_bound_from_the_start_and_decode_is_not():
    s, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=0, prompt=2048)
    gpu, model = DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("llama-3-8b")
    assert s["bound"] == "memory" and s["prefill_bound"] == "compute"
    # 2 FLOPs per weight per prompt token at 60 % of peak, plus attention: within 15 %.
    by_hand = 2 * model.params * 2048 / (gpu.tflops * 1e12 * 0.6)
    assert s["prefill_ms"] / 1e3 == pytest.approx(by_hand, rel=0.15)
    # One prefill of 2,048 tokens computes ~ as many tokens per second as a decode batch at the
    # knee.
    assert s["prefill_tokens_per_s"] > 50 * s["tokens_per_s"]
    # The prefill's knee is the GPU's ridge, the same as decode's with no context.
    assert s["prefill_knee"] == pytest.approx(s["knee_no_context"], rel=0.1)
    short, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=0, prompt=16)
    assert short["prefill_bound"] == "memory"


def test_a_long_prompt_stalls_everyone_unless_chunked():
    s, fig = lessons.prefill_stall(
        prompt_tokens=8192, running=16, chunk_tokens=512, output_tokens=200
    )
    whole, chunked = s["modes"]["whole prompt"], s["modes"]["chunks of 512"]
    # Whole: the running requests' worst gap is the prefill itself (one step holds all of it).
    assert whole["stall_steps"] == 1 and chunked["stall_steps"] == 16
    assert whole["worst_gap_ms"] == pytest.approx(s["whole_prefill_ms"] + s["decode_ms"], rel=0.15)
    # Chunked: the worst gap is one decode step plus one chunk's prefill, a tenth of the stall.
    assert chunked["worst_gap_ms"] < whole["worst_gap_ms"] / 8
    assert chunked["worst_gap_ms"] > s["decode_ms"]
    # The price: the newcomer's own first token comes a little later.
    assert whole["long_ttft_ms"] <= chunked["long_ttft_ms"] < 1.3 * whole["long_ttft_ms"]
    smaller, _ = lessons.prefill_stall(
        prompt_tokens=8192, running=16, chunk_tokens=256, output_tokens=200
    )
    assert smaller["modes"]["chunks of 256"]["worst_gap_ms"] < chunked["worst_gap_ms"]
    assert isinstance(fig, Figure)
    with pytest.raises(ConfigError, match="chunk_tokens"):
        lessons.prefill_stall(chunk_tokens=0)


def test_published_record_is_the_validation_table_drawn():
    """Lesson 2's check against published engines: the same rows as python -m
    batchsim.machine.validation, the counts the lesson quotes computed from them, the KV budgets
    against vLLM's logs, two panels."""
    from batchsim.machine import validation
    from batchsim.teach.lessons import published_record
    from batchsim.teach.lessons.published import TARGET, WORST

    s, fig = published_record()
    rows = validation.table()
    assert s["points"] == len(rows) == len(validation.points())
    assert [r["error"] for r in s["rows"]] == [r["error"] for r in rows]
    assert s["within_target"] == sum(abs(r["error"]) <= TARGET[r["family"]] for r in rows)
    # the course's bound holds
    assert s["beyond_worst"] == sum(abs(r["error"]) > WORST for r in rows) == 0
    assert s["per_engine"]["trt-llm throughput"]["median"] <= TARGET["throughput"]
    assert len(s["kv"]) == len(validation.kv_points()) and all(
        abs(k["error"]) <= 0.05 for k in s["kv"]
    )
    assert "median |error|" in s["table"] and len(fig.axes) == 2
