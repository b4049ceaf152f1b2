"""Predicted against measured: the simulator's forecast held up to the real server.

For each policy, the same workload runs twice: once through ``batchsim.simulate`` with
a step-time model calibrated on this machine (``realrun.profile``), once through the
wall-clock runner on the real model. Both produce batchsim records, so one
``summarize`` reads both, and the gap between them is the cost model's error (the
scheduling is literally the same code).

The table gives, per policy, predicted and measured request throughput, output token
throughput, TTFT (mean, p50, p99) and E2E latency (mean, p50, p99) with the error in
percent of the measured value; the figure plots predicted against measured with the
diagonal where they would agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from batchsim.core.metrics import SLO, summarize
from batchsim.core.policies import Policy
from batchsim.sim.simulator import SimResult, simulate
from batchsim.sim.steptime import StepTimeModel
from batchsim.core.workload import Workload

__all__ = ["COMPARE_METRICS", "CompareRow", "CompareReport", "compare_policies", "error_pct", "format_compare", "plot_compare"]

#: (summary key, label, display scale, format)
COMPARE_METRICS = (
    ("request_throughput", "req/s", 1.0, "{:.2f}"),
    ("output_throughput", "output tok/s", 1.0, "{:.0f}"),
    ("mean_ttft", "mean TTFT ms", 1e3, "{:.0f}"),
    ("p50_ttft", "p50 TTFT ms", 1e3, "{:.0f}"),
    ("p99_ttft", "p99 TTFT ms", 1e3, "{:.0f}"),
    ("mean_e2e", "mean E2E s", 1.0, "{:.2f}"),
    ("p50_e2e", "p50 E2E s", 1.0, "{:.2f}"),
    ("p99_e2e", "p99 E2E s", 1.0, "{:.2f}"),
)


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured in percent; None when either is missing or measured is 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


@dataclass
class CompareRow:
    label: str
    policy: str
    predicted: dict
    measured: dict
    sim: SimResult | None = None
    real: SimResult | None = None

    @property
    def errors(self) -> dict[str, float | None]:
        return {k: error_pct(self.predicted.get(k), self.measured.get(k)) for k, *_ in COMPARE_METRICS}


@dataclass
class CompareReport:
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    config: dict = field(default_factory=dict)


def compare_policies(
    workload: Workload,
    pairs: list[tuple[str, Policy, Policy]],
    measure,
    step_time: StepTimeModel | dict[str, StepTimeModel],
    kv_budget_tokens: int | None = None,
    slo: SLO | None = None,
) -> CompareReport:
    """``pairs``: (label, policy for the simulator, fresh identical policy for the real run).

    ``measure(label, policy) -> SimResult`` runs the real side (the runner with an engine, or a
    baseline); the simulated side is ``simulate`` with ``step_time`` (one model, or one per label).
    """
    report = CompareReport()
    for label, sim_policy, real_policy in pairs:
        st = step_time[label] if isinstance(step_time, dict) else step_time
        sim = simulate(workload, sim_policy, st, kv_budget_tokens=kv_budget_tokens)
        real = measure(label, real_policy)
        report.rows.append(CompareRow(label, repr(sim_policy), summarize(sim, slo), summarize(real, slo), sim, real))
        if str(real.meta.get("stopped") or "").startswith("interrupted"):
            report.notes.append(f"interrupted during {label}: the policies after it were not measured")
            break
    return report


def format_compare(report: CompareReport) -> str:
    """One block per policy: metric, predicted, measured, error."""
    head = ("policy", "metric", "predicted", "measured", "error")
    lines: list[tuple[str, ...]] = []
    for row in report.rows:
        errs = row.errors
        for i, (key, label, scale, fmt) in enumerate(COMPARE_METRICS):
            p, m, e = row.predicted.get(key), row.measured.get(key), errs[key]
            lines.append((
                row.label if i == 0 else "",
                label,
                "-" if p is None else fmt.format(p * scale),
                "-" if m is None else fmt.format(m * scale),
                "-" if e is None else f"{e:+.0f}%",
            ))
        extra = row.measured
        lines.append(("", f"(done {extra['completed']}, rejected {extra['rejected']}, mean batch {extra['mean_batch_size']:.1f})", "", "", ""))
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]

    def fmt_line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt_line(head), "  ".join("-" * w for w in widths)] + [fmt_line(r) for r in lines])


def plot_compare(report: CompareReport, path: str | Path, title: str = "") -> Path:
    """Predicted (x) against measured (y), one panel per metric, one marker per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = COMPARE_METRICS
    cols = 4
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    markers = "osD^vP*X"
    for ax, (key, label, scale, _) in zip(axes.flat, metrics):
        vals = []
        for j, row in enumerate(report.rows):
            p, m = row.predicted.get(key), row.measured.get(key)
            if p is None or m is None:
                continue
            ax.scatter([p * scale], [m * scale], marker=markers[j % len(markers)], s=50, label=row.label, zorder=3)
            vals += [p * scale, m * scale]
        if vals:
            lo, hi = min(vals), max(vals)
            pad = 0.1 * (hi - lo) if hi > lo else max(abs(hi), 1e-9) * 0.1
            x = np.array([lo - pad, hi + pad])
            ax.plot(x, x, color="0.3", lw=1, zorder=1)
            ax.fill_between(x, 0.9 * x, 1.1 * x, color="0.85", zorder=0, label="±10 %")
            ax.set_xlim(*x)
            ax.set_ylim(*x)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("predicted (batchsim)", fontsize=8)
        ax.set_ylabel("measured (realrun)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.suptitle(title or "predicted vs measured", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
