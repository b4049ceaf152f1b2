"""Figures: built without pyplot, written as real PNGs, drawing what they claim; and the sweep
command."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from batchsim import ConstantStepTime, Workload, make_policy, simulate, summarize
from batchsim.cli import build_parser, main
from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.machine.roofline import RooflineStepTime, knee_batch
from batchsim.teach import plots
from batchsim.teach.scenarios import get_scenario

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results():
    wl = Workload.from_arrays(np.linspace(0, 10, 60), np.full(60, 50), np.tile([2, 10, 30], 20))
    st = ConstantStepTime(0.05)
    out = {}
    for name in ("taxi", "static", "continuous"):
        res = simulate(wl, make_policy(name, max_batch=4, max_seqs=8), st, kv_budget_tokens=2000)
        res.meta["server"] = None
        out[name] = res
    return out


def _png_ok(path):
    data = path.read_bytes()
    return data[:8] == PNG and len(data) > 5000


def test_plots_module_does_not_touch_pyplot():
    # Headless-safe by construction: no pyplot, no backend choice, no global figure registry.
    code = "import batchsim.teach.plots, sys; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"


def test_each_figure_function_returns_a_figure_and_writes_a_png(results, tmp_path):
    sums = {k: summarize(r) for k, r in results.items()}
    for k, s in sums.items():
        s.update(
            cost_per_request=0.001 * (1 + len(k)), cost_per_1m_tokens=1.0, gpu_price_per_hour=2.0
        )
    st = RooflineStepTime(DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("gpt2"))
    figs = {
        "tradeoff": plots.tradeoff_figure(sums, slo=5.0, best="static"),
        "cdf": plots.latency_cdf_figure(results),
        "timeline": plots.timeline_figure(results, max_requests=12),
        "batch_kv": plots.batch_kv_figure(results),
        "cost": plots.cost_figure(sums),
        "roofline": plots.roofline_figure(st, context=0, max_batch_memory=300),
        "sweep": plots.sweep_figure(
            {f"max_batch={b} static": sums["static"] for b in (1, 2)}, ["static"], "max_batch"
        ),
    }
    for name, fig in figs.items():
        assert isinstance(fig, Figure)
        assert _png_ok(plots.save(fig, tmp_path / f"{name}.png")), name


def test_timeline_draws_at_most_the_requests_asked_for(results):
    fig = plots.timeline_figure(results, max_requests=12)
    axes = [ax for ax in fig.axes if ax.collections]
    assert len(axes) == 3
    for ax in axes:
        lines = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert [len(c.get_segments()) for c in lines] == [12, 12]  # waits and rides
    # static boards in batches of 4: its 12 rides use 3 colours, one per batch
    static_ax = axes[1]
    ride = [c for c in static_ax.collections if isinstance(c, LineCollection)][1]
    assert len({tuple(c) for c in ride.get_colors()}) == 3


def test_batch_series_drops_to_zero_while_idle(results):
    t, y = plots.runs.step_series(results["taxi"], "batch_size")
    assert np.all(np.diff(t) >= -1e-12)
    assert y.max() == 1 and y.min() == 0  # arrivals every 0.17 s, service shorter: the taxi idles


def test_roofline_figure_marks_the_knee():
    st = RooflineStepTime(DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("gpt2"))
    fig = plots.roofline_figure(st, context=0)
    knee = knee_batch(st, 0)
    ax = fig.axes[0]
    vlines = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1]
    assert [ln.get_xdata()[0] for ln in vlines] == [knee]
    assert f"knee at batch {knee}" in ax.get_title()


def test_figures_for_report_picks_by_scenario(tmp_path):
    args = build_parser().parse_args(
        ["run", "--policy", "taxi,static", "--requests", "30", "--step-time", "0.01"]
    )
    from batchsim.cli import _CUSTOM

    rep = _CUSTOM.run(args)
    paths = plots.figures_for_report(rep, tmp_path / "custom")
    # no price, no GPU
    assert [p.name for p in paths] == [
        "latency_cdf.png",
        "timeline.png",
        "batch_kv.png",
    ]
    assert all(_png_ok(p) for p in paths)
    rep = get_scenario("batch-size-sweep").run(
        build_parser().parse_args(["run", "batch-size-sweep", "--requests", "40"])
    )
    paths = plots.figures_for_report(rep, tmp_path / "sweep")
    assert [p.name for p in paths] == ["batch_sweep.png", "roofline.png", "cost.png"]


def test_sweep_command_parallel_equals_serial_and_writes_the_tradeoff(tmp_path, capsys):
    base = ["sweep", "max_batch=1,4,16", "--scenario", "taxi-vs-bus", "--requests", "60", "--json"]
    assert main(base + ["--out", str(tmp_path)]) == 0
    par = json.loads(capsys.readouterr().out)
    assert main(base + ["--jobs", "1", "--no-plots"]) == 0
    ser = json.loads(capsys.readouterr().out)
    assert par["runs"] == ser["runs"]
    labels = [r["label"] for r in par["runs"]]
    assert labels == [
        "max_batch=1 static",
        "max_batch=4 static",
        "max_batch=16 static",
        "max_batch=1 dynamic",
        "max_batch=4 dynamic",
        "max_batch=16 dynamic",
    ]
    tput = [r["summary"]["request_throughput"] for r in par["runs"][:3]]
    assert tput[0] < tput[1] < tput[2] * 1.01  # a bigger bus carries more
    assert _png_ok(tmp_path / "sweep_max_batch.png")


def test_sweep_of_the_rate_and_of_a_length_spec(capsys):
    assert (
        main(
            [
                "sweep",
                "rate=1,3",
                "--policy",
                "taxi",
                "--requests",
                "40",
                "--step-time",
                "0.01",
                "--no-plots",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "rate=1.0 taxi" in out and "rate=3.0 taxi" in out
    assert (
        main(
            [
                "sweep",
                "output_len=8;uniform:5,50",
                "--policy",
                "continuous",
                "--requests",
                "30",
                "--no-plots",
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert "output_len=uniform:5,50 continuous" in capsys.readouterr().out


@pytest.mark.parametrize(
    "spec,field",
    [
        ("max_batch", "sweep must look like KNOB=v1,v2"),
        ("colour=1,2", "sweep knob must be one of"),
        ("max_batch=1,two", "max_batch values must be ints, got 'two'"),
        ("max_batch=0,4", "max_batch must be an integer >= 1, got 0"),
    ],
)
def test_sweep_bad_input_exits_2_with_one_line(spec, field, capsys):
    assert main(["sweep", spec, "--requests", "10", "--no-plots", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_timelines_of_one_scenario_share_their_time_axis():
    rep = get_scenario("taxi-vs-bus").run(
        build_parser().parse_args(["run", "taxi-vs-bus", "--requests", "60"])
    )
    fig = plots.timeline_figure(rep.results)
    axes = [ax for ax in fig.axes if ax.get_ylabel() == "request"]
    assert len(axes) == 4
    spans = {tuple(np.round(ax.get_xlim(), 9)) for ax in axes}
    assert len(spans) == 1, spans
    lo, hi = spans.pop()
    # The shared range covers the slowest run (the taxi), not only the fastest.
    finish = max(float(np.nanmax(r.records.finish[:40])) for r in rep.results.values())
    assert hi >= finish and lo <= min(float(r.records.arrival[0]) for r in rep.results.values())
    titles = [ax.get_title(loc="left") for ax in axes]
    assert "one colour per batch" in titles[1] and "never stops" in titles[3]


def test_batch_sweep_figure_shows_the_u_and_the_arrival_rate():
    rep = get_scenario("batch-size-sweep").run(
        build_parser().parse_args(["run", "batch-size-sweep", "--requests", "200"])
    )
    fig = plots.batch_sweep_figure(rep)
    left, right = fig.axes[:2]
    p99 = left.get_lines()[0].get_ydata()
    assert p99.argmin() not in (0, len(p99) - 1)  # falls, then rises: the U
    assert any(
        abs(ln.get_ydata()[0] - 4.0) < 1e-9
        for ln in right.get_lines()
        if len(set(ln.get_ydata())) == 1
    )


def test_cost_figure_splits_busy_from_idle():
    rep = get_scenario("chat-vs-offline").run(
        build_parser().parse_args(["run", "chat-vs-offline", "--requests", "60"])
    )
    fig = plots.cost_figure(rep.summaries)
    ax = fig.axes[0]
    n = len(rep.summaries)
    heights = [p.get_height() for p in ax.patches]
    busy, idle = heights[:n], heights[n : 2 * n]
    for (k, s), b, i in zip(rep.summaries.items(), busy, idle):
        assert b + i == pytest.approx(s["cost_per_request"]), k
        assert b == pytest.approx(s["cost_per_request_busy"]), k


def test_log_axes_never_label_a_tick_0():
    assert (
        plots.canvas.plain(0.0001) == "0.0001"
        and plots.canvas.plain(0.5) == "0.5"
        and plots.canvas.plain(2000) == "2,000"
    )
    rep = get_scenario("azure-conv").run(
        build_parser().parse_args(["run", "azure-conv", "--duration", "20"])
    )
    fig = plots.latency_cdf_figure(rep.results)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert labels and "0" not in labels, labels
