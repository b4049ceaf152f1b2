"""Notebook 7's lesson and panel, which live in realrun: the simulator calibrated against a real
model."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim import ConfigError  # noqa: E402
from realrun.classroom import lesson, widgets  # noqa: E402


@pytest.fixture(autouse=True)
def small_figures(monkeypatch):
    from batchsim.teach.widgets import LessonPanel

    monkeypatch.setattr(LessonPanel, "dpi", 30)


def test_predicted_vs_measured_on_the_tiny_real_model():
    s, fig = lesson.predicted_vs_measured(
        policy="static", rate=4.0, requests=6, max_batch=4, repeats=2
    )
    pred, meas = s["predicted"], s["measured"]
    # Same workload both ways: everyone served, nobody lost.
    assert pred["completed"] == meas["completed"] == 6
    assert pred["total_output_tokens"] == meas["total_output_tokens"]
    # At a light load both serve about the arrival rate (6 requests arriving over ~1.5 s).
    assert meas["request_throughput"] == pytest.approx(pred["request_throughput"], rel=0.5)
    for k, e in s["errors"].items():
        assert e == pytest.approx((pred[k] - meas[k]) / meas[k])
    # The same comparison as the command line, decomposition and replay included.
    assert s["decomposition"]["replay_max_diff_s"] < 1e-9
    assert "where the error comes from" in s["table"]
    assert "random" in s["model"]
    assert len(fig.axes) == 3


def test_predicted_vs_measured_names_a_bad_policy_before_loading_anything():
    with pytest.raises(ConfigError, match="policy must be one of"):
        lesson.predicted_vs_measured(policy="rickshaw")


def test_measured_panel_waits_for_the_button_then_runs_the_real_model():
    panel = widgets.measured_ui(requests=6, repeats=2, max_batch=4)
    assert panel.result is None and panel.calls == 0  # a real model runs only on request
    assert panel.image.layout.display == "none"  # no picture yet: hidden, not a broken-image icon
    panel.controls["policy"].value = "static"
    assert panel.calls == 0
    panel.run_button.click()
    assert panel.calls == 1 and panel.result[0]["policy"] == "static"
    assert panel.image.layout.display != "none" and panel.image.value[:4] == b"\x89PNG"
    # The notes in a student's words; the profile's every figure folded under "details".
    html = panel.table.value
    assert (
        "<details><summary>details</summary>" in html
        and "after sleeping" in html.split("<details>", 1)[1]
    )
    assert (
        "after sleeping" not in html.split("<details>", 1)[0] and "shapes it did not time" in html
    )
    first = panel.image.value
    panel.controls["policy"].value = "continuous"
    panel.run_button.click()
    assert panel.calls == 2 and panel.result[0]["policy"] == "continuous"
    assert panel.image.value != first
