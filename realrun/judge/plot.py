"""The figure of ``realrun compare``: predicted against measured, the errors, and where they come
from.

Left, every latency metric of every policy, predicted (x) against measured (y) on log axes
(a 10 ms point and a 3 s point both readable); with step noise on, the predicted 90 % band
is a horizontal error bar and, with repeats, the repeats' range a vertical one. Middle, the
error of each metric per policy, with the ±10 % and ±20 % bands. Right, when the runs were
decomposed, the cost model's error on each kind of pass that ran.

A policy is one colour in every panel, the course's own (``POLICY_COLORS``: the taxi is
yellow), and a metric is a marker shape on the left and a place on the axis in the middle:
one encoding never stands for two things, so a reader who has learnt the colours in one panel
reads the next without a legend.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (for the annotations only: row needs nothing from here)
    from .row import CompareReport, CompareRow

__all__ = ["plot_compare", "draw_compare", "policy_colors", "METRIC_MARKERS"]

#: One marker shape per latency metric (mean, p50, p99 TTFT; TPOT; mean, p50, p99 E2E), none a
#: policy's.
METRIC_MARKERS = ("o", "s", "D", "^", "v", "P", "X")
#: For a policy the course has no colour for (a label of its own): greys, never a policy's colour.
_OTHER = ("0.25", "0.5", "0.7")


def policy_colors(rows) -> list[str]:
    """Each row's colour: its policy's in ``POLICY_COLORS`` (the label's first word: "taxi
    (hf-generate)" is the taxi), the same in every panel; a grey for one the course has none for."""
    from batchsim.teach.figures import POLICY_COLORS

    out, k = [], 0
    for row in rows:
        c = POLICY_COLORS.get(row.label.split()[0] if row.label else "")
        if c is None:
            c, k = _OTHER[k % len(_OTHER)], k + 1
        out.append(c)
    return out


def plot_compare(report: CompareReport, path: str | Path, title: str = "") -> Path:
    """``draw_compare``'s figure, saved at ``path`` (its folder made if need be)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    draw_compare(report, title).savefig(p, dpi=110)
    return p


def draw_compare(report: CompareReport, title: str = ""):
    """Left: predicted (x) against measured (y) on log axes, every latency metric of every policy.
    Middle: the error of each metric, per policy, with the ±10 % and ±20 % bands. Right (when
    decomposed): the cost model's error per kind of pass."""
    from matplotlib.figure import Figure

    decomposed = [r for r in report.rows if r.decomposition is not None]
    fig = Figure(figsize=(16 if decomposed else 12, 4.8), layout="constrained")
    if decomposed:
        ax, bx, cx = fig.subplots(1, 3, width_ratios=(1, 1.4, 1))
        _plot_decomposition(cx, decomposed)
    else:
        ax, bx = fig.subplots(1, 2, width_ratios=(1, 1.4))
    colors = policy_colors(report.rows)
    _plot_scatter(ax, report.rows, colors)
    _plot_errors(bx, report.rows, colors)
    fig.suptitle(title or "predicted vs measured", fontsize=11)
    return fig


def _plot_scatter(ax, rows: list[CompareRow], colors) -> None:
    """Predicted against measured, every latency metric of every policy, in ms on log axes, with the
    predicted band (x) and the repeats' range (y) as bars."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from .row import COMPARE_METRICS
    from .row import THROUGHPUT as _THROUGHPUT

    latency = [m for m in COMPARE_METRICS if m[0] not in _THROUGHPUT]
    vals = []
    for row, c in zip(rows, colors):
        for marker, (key, _label, _scale, _) in zip(METRIC_MARKERS, latency):
            p, m = row.predicted.get(key), row.measured.get(key)
            if p and m and p > 0 and m > 0:
                # every latency in ms (seconds in the summaries)
                ax.scatter([p * 1e3], [m * 1e3], marker=marker, color=c, s=40, zorder=3)
                vals += [p * 1e3, m * 1e3]
                band = row.band.get(key)
                reps = [r.get(key) for r in row.repeats if r.get(key)]
                xerr = [[max(p - band[0], 0) * 1e3], [max(band[1] - p, 0) * 1e3]] if band else None
                yerr = (
                    [[max(m - min(reps), 0) * 1e3], [max(max(reps) - m, 0) * 1e3]]
                    if len(reps) > 1
                    else None
                )
                if xerr or yerr:
                    ax.errorbar(
                        [p * 1e3],
                        [m * 1e3],
                        xerr=xerr,
                        yerr=yerr,
                        fmt="none",
                        ecolor=c,
                        elinewidth=1,
                        capsize=2,
                        zorder=2,
                    )
                    vals += [band[0] * 1e3, band[1] * 1e3] if band else []
    if vals:
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        x = np.geomspace(lo, hi, 50)
        ax.plot(x, x, color="0.3", lw=1, zorder=1)
        ax.fill_between(x, x / 1.1, x * 1.1, color="0.85", zorder=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted by batchsim (ms)")
    ax.set_ylabel("measured by realrun (ms)")
    ax.set_title(
        "every latency metric\n(grey: within 10 %; bars: 90 % band, repeats' range)", fontsize=10
    )
    # Policies as colour patches, metrics as grey markers: no legend entry borrows the other's
    # encoding.
    handles = [Patch(color=c, label=row.label) for row, c in zip(rows, colors)]
    handles += [
        Line2D(
            [],
            [],
            marker=marker,
            color="0.35",
            ls="none",
            label=label.replace(" ms", "").replace(" s", ""),
        )
        for marker, (_, label, _, _) in zip(METRIC_MARKERS, latency)
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", ncol=2, frameon=False)


def _plot_errors(bx, rows: list[CompareRow], colors) -> None:
    """The error of each metric, a bar per policy, over the ±10 % and ±20 % bands."""
    from .row import COMPARE_METRICS

    keys = list(COMPARE_METRICS)
    n = max(1, len(rows))
    width = 0.8 / n
    xs = np.arange(len(keys))
    for j, (row, c) in enumerate(zip(rows, colors)):
        errs = row.errors
        e = [errs[k] if errs[k] is not None else np.nan for k, *_ in keys]
        bx.bar(xs + (j - (n - 1) / 2) * width, e, width, label=row.label, color=c)
    bx.axhspan(-10, 10, color="0.9", zorder=0)
    bx.axhspan(-20, -10, color="0.95", zorder=0)
    bx.axhspan(10, 20, color="0.95", zorder=0)
    bx.axhline(0, color="k", lw=0.8)
    bx.set_xticks(
        xs,
        [m[1].replace(" ms", "").replace(" s", "") for m in keys],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    bx.set_ylabel("(predicted - measured) / measured, %")
    bx.set_title("error per metric (bands: ±10 %, ±20 %)", fontsize=10)
    bx.legend(fontsize=8, frameon=False)


def _plot_decomposition(ax, rows: list[CompareRow]) -> None:
    """Where the error comes from: the cost model's error on the time each kind of pass took, per
    policy."""
    parts = (
        ("decode", "decode passes"),
        ("prefill", "prefill passes"),
        ("step", "whole steps"),
        ("gap", "gaps"),
    )
    n = len(rows)
    width = 0.8 / n
    xs = np.arange(len(parts))
    for j, (row, c) in enumerate(zip(rows, policy_colors(rows))):
        d = row.decomposition
        vals = []
        for key, _ in parts:
            s = d.steps if key == "step" else d.gaps if key == "gap" else d.passes.get(key, {})
            vals.append(s.get("total_error_pct") if s.get("n") else np.nan)
        ax.bar(xs + (j - (n - 1) / 2) * width, vals, width, label=row.label, color=c)
    ax.axhspan(-10, 10, color="0.9", zorder=0)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(xs, [p[1] for p in parts], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("model - measured, % of the measured time")
    same = all(
        r.decomposition.replay_max_diff_s is not None and r.decomposition.replay_max_diff_s < 1e-9
        for r in rows
    )
    ax.set_title(
        "where it comes from: the cost model on what ran"
        + ("\n(replay of measured times: identical)" if same else ""),
        fontsize=10,
    )
