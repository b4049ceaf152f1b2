"""Every notebook panel, built headlessly: set a control, the picture and the numbers change.

A panel calls its lesson function with the controls' values and nothing else, so
each test also checks that calling the function directly with ``panel.values()``
gives the very table the panel shows. Sizes are reduced through the builders'
keyword arguments, as the notebooks' parameters cells do.
"""

from __future__ import annotations

import ipywidgets as W
import pytest

from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.teach import lessons, widgets


@pytest.fixture(autouse=True)
def _quick_pictures(monkeypatch):
    # The pictures only need to exist and differ; a coarse PNG is as good a witness and faster.
    monkeypatch.setattr(widgets.LessonPanel, "dpi", 30)


SMALL = {
    "why_batch": {"requests": 80},
    "batching_policies": {"requests": 80, "show": 20},
    "memory_wall": {"requests": 24},
    "cost": {"requests": 32},
    "roofline": {"max_batch": 256},
    "theory_vs_simulation": {"requests": 200, "replications": 3},
    "real_day": {"minutes": 0.5, "trace": "synthetic"},
    "prefill_stall": {"output_tokens": 120},
    "fleet": {"requests": 200},
}


def _changed(panel: widgets.LessonPanel, **values) -> tuple[dict, dict]:
    """(summary before, summary after) setting the controls; asserts one recompute and a new
    picture."""
    before_img, before, calls = panel.image.value, panel.result[0], panel.calls
    for name, v in values.items():
        panel.controls[name].value = v
    assert panel.error == ""
    assert panel.calls == calls + len(values)
    assert panel.image.value != before_img and panel.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    return before, panel.result[0]


def _same_as_direct_call(panel: widgets.LessonPanel) -> None:
    summary, _ = panel.fn(**panel.fixed, **panel.values())
    assert summary["table"] == panel.result[0]["table"]
    assert summary["table"] in panel.table.value.replace("&gt;", ">").replace("&lt;", "<").replace(
        "&#x27;", "'"
    )


def test_every_lesson_has_a_panel_whose_sliders_do_not_update_continuously():
    for name, build in widgets.PANELS.items():
        assert callable(getattr(lessons, name))
        panel = build(**SMALL[name])
        assert panel.fn is getattr(lessons, name)
        for control in panel.controls.values():
            if isinstance(control, (W.IntSlider, W.FloatSlider, W.FloatLogSlider)):
                assert control.continuous_update is False, (name, control.description)
        if hasattr(panel, "run_button"):
            assert panel.calls == 0  # runs a real model on a click: tested below
        else:
            assert panel.calls == 1 and panel.result is not None


def test_why_batch_panel_more_traffic_more_taxi_latency():
    panel = widgets.why_batch_ui(rate=1.0, **SMALL["why_batch"])
    before, after = _changed(panel, rate=20.0)
    assert after["policies"]["taxi"]["p99_e2e"] > 5 * before["policies"]["taxi"]["p99_e2e"]
    assert after["rate"] == pytest.approx(20.0)
    _same_as_direct_call(panel)
    before, after = _changed(panel, price_per_hour=5.0)
    assert after["policies"]["static"]["cost_per_request"] == pytest.approx(
        before["policies"]["static"]["cost_per_request"] * 5.0 / before["price_per_hour"]
    )


def test_policies_panel_switches_the_timeline():
    panel = widgets.policies_ui(**SMALL["batching_policies"])
    assert panel.result[0]["policy"] == "dynamic"
    _, after = _changed(panel, policy="continuous")
    assert after["policy"] == "continuous"
    assert "continuous" in panel.result[1].axes[0].get_title()
    before, after = _changed(panel, rate=10.0)
    assert after["policies"]["taxi"]["mean_e2e"] > before["policies"]["taxi"]["mean_e2e"]
    _same_as_direct_call(panel)


def test_memory_panel_more_budget_more_rows():
    panel = widgets.memory_ui(**SMALL["memory_wall"])
    before, after = _changed(panel, kv_budget_gb=16.0)
    assert after["rows_that_fit"] > before["rows_that_fit"]
    before, after = _changed(panel, model="llama-3-8b")
    assert after["kv_bytes_per_token"] * 4 == before["kv_bytes_per_token"]
    _same_as_direct_call(panel)


def test_memory_panel_shows_a_bad_combination_as_one_line():
    panel = widgets.memory_ui(**SMALL["memory_wall"])
    good = panel.result
    panel.set_values(kv_budget_gb=1.0, prompt_tokens=4096, output_tokens=2048)
    assert "kv_budget_gb must hold one request" in panel.error
    assert "kv_budget_gb" in panel.status.value
    assert panel.result is good  # the last good picture stays


def test_cost_panel_gpu_brings_its_price_and_a_smaller_batch_costs_more():
    panel = widgets.cost_ui(**SMALL["cost"])
    panel.controls["gpu"].value = "H100-SXM"
    assert panel.controls["price_per_hour"].value == DEFAULT_CATALOG.gpu("H100-SXM").price_per_hour
    assert panel.result[0]["price_per_hour"] == DEFAULT_CATALOG.gpu("H100-SXM").price_per_hour
    before, after = _changed(panel, max_batch=8)
    assert after["cost_per_request"] > 2 * before["cost_per_request"]
    _same_as_direct_call(panel)


def test_fleet_panel_more_gpus_cost_more_and_the_router_changes_the_split():
    panel = widgets.fleet_ui(**SMALL["fleet"])
    before, after = _changed(panel, replicas=2)
    mine = lambda s: next(iter(s["rows"].values()))  # noqa: E731 - the fleet the sliders describe
    assert mine(after)["replicas"] == 2 and mine(before)["replicas"] == 4
    assert mine(after)["cost_total"] < mine(before)["cost_total"]
    split = lambda s: [p["completed"] for p in next(iter(s["servers"].values()))]  # noqa: E731
    before, after = _changed(panel, router="random")
    assert split(before) == [100, 100]  # least-loaded, at light load: in turn
    assert sum(split(after)) == 200 and split(after) != [100, 100]  # random: as the dice fall
    _same_as_direct_call(panel)


def test_fleet_panel_reaches_the_rate_where_the_one_gpu_falls_behind_and_shows_its_numbers():
    # The flip is found at whole rates the slider stops at; setting the slider there (and one below)
    # shows the very p99s the package reports. A lower ratio keeps the runs small and fast.
    flip = lessons.fleet_flip(requests=200, ratio=1.2)
    assert flip["rate"] == flip["below"] + 1
    panel = widgets.fleet_ui(**SMALL["fleet"])
    slider = panel.controls["rate"]
    assert (
        slider.min <= flip["below"]
        and slider.max >= lessons.FLIP_MAX_RATE >= flip["rate"]
        and slider.step == 1
    )
    p99 = lambda s: [r["p99_e2e"] for r in list(s["rows"].values())[:2]]  # noqa: E731 - the fleet, the one GPU
    _, at = _changed(panel, rate=flip["rate"])
    assert p99(at) == [flip["many_p99"], flip["big_p99"]] and p99(at)[1] > 1.2 * p99(at)[0]
    _, below = _changed(panel, rate=flip["below"])
    assert (
        p99(below) == [flip["below_many_p99"], flip["below_big_p99"]]
        and p99(below)[1] <= 1.2 * p99(below)[0]
    )


def test_roofline_panel_bigger_batch_more_tokens():
    panel = widgets.roofline_ui(**SMALL["roofline"])
    before, after = _changed(panel, batch=128)
    assert after["tokens_per_s"] > before["tokens_per_s"]
    before, after = _changed(panel, gpu="H100-SXM")
    assert after["tokens_per_s"] > before["tokens_per_s"]
    _same_as_direct_call(panel)


def test_theory_panel_more_load_longer_wait():
    panel = widgets.theory_ui(**SMALL["theory_vs_simulation"])
    before, after = _changed(panel, load=0.9)
    t0, t1 = before["rows"]["taxi (M/D/1)"], after["rows"]["taxi (M/D/1)"]
    assert t1["theory"] > 3 * t0["theory"] and t1["simulated"] > 2 * t0["simulated"]
    _same_as_direct_call(panel)


def test_real_day_panel_tighter_slo_fewer_requests_within_it():
    panel = widgets.real_day_ui(**SMALL["real_day"])
    before, after = _changed(panel, slo_ttft=0.2)
    assert after["slo_attainment"]["continuous"] <= before["slo_attainment"]["continuous"]
    before, after = _changed(panel, max_batch=2)
    assert after["slo_attainment"]["continuous"] < before["slo_attainment"]["continuous"]
    _same_as_direct_call(panel)


def test_prefill_stall_panel_chunks_shorten_the_stall():
    panel = widgets.prefill_stall_ui(**SMALL["prefill_stall"])
    before, after = _changed(panel, chunk_tokens=2048)
    assert (
        after["modes"]["chunks of 2048"]["worst_gap_ms"]
        > before["modes"]["chunks of 512"]["worst_gap_ms"]
    )
    _same_as_direct_call(panel)


def test_roofline_panel_has_a_prefill_slider():
    panel = widgets.roofline_ui(**SMALL["roofline"])
    before, after = _changed(panel, prompt=4096)
    assert after["prefill_ms"] > 4 * before["prefill_ms"]
