"""Predicted against measured: the simulator's forecast held up to the real server.

For each policy, the same workload runs twice: once through ``batchsim.simulate`` with a
step-time model calibrated on this machine (``realrun.profile``), once through the
wall-clock runner on the real model. Both go through the same driver loop under the same
server limits and produce batchsim records, so one ``summarize`` reads both, and the gap
between them is the cost model's error (the scheduling is literally the same code: the
decomposition, ``realrun.decompose``, checks that on every run by replaying the measured
step times).

The table gives, per policy, predicted and measured throughput, TTFT, TPOT and E2E
latency with the error in percent of the measured value; the figure plots predicted
against measured on log axes (a 10 ms point and a 3 s point are both readable) beside the
errors per metric. When the measured run was cut short (Ctrl-C), both sides are compared
over the requests the measured run finished, and throughput is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from batchsim.core.limits import ServerLimits
from batchsim.core.metrics import SLO, summarize
from batchsim.core.policies import Policy
from batchsim.core.records import SimResult
from batchsim.core.workload import Workload
from batchsim.sim.simulator import simulate
from batchsim.sim.steptime import StepTimeModel

from .decompose import Decomposition, decompose, format_decomposition

__all__ = ["COMPARE_METRICS", "CompareRow", "CompareReport", "compare_policies", "error_pct", "format_compare",
           "plot_compare", "worst_error"]

#: (summary key, label, display scale, format)
COMPARE_METRICS = (
    ("request_throughput", "req/s", 1.0, "{:.2f}"),
    ("output_throughput", "output tok/s", 1.0, "{:.0f}"),
    ("mean_ttft", "mean TTFT ms", 1e3, "{:.1f}"),
    ("p50_ttft", "p50 TTFT ms", 1e3, "{:.1f}"),
    ("p99_ttft", "p99 TTFT ms", 1e3, "{:.1f}"),
    ("mean_tpot", "mean TPOT ms", 1e3, "{:.2f}"),
    ("mean_e2e", "mean E2E s", 1.0, "{:.3f}"),
    ("p50_e2e", "p50 E2E s", 1.0, "{:.3f}"),
    ("p99_e2e", "p99 E2E s", 1.0, "{:.3f}"),
)
_THROUGHPUT = ("request_throughput", "output_throughput")


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
    decomposition: Decomposition | None = None
    partial: bool = False  # the measured run was cut short: compared over what it finished

    @property
    def errors(self) -> dict[str, float | None]:
        return {k: (None if self.partial and k in _THROUGHPUT else error_pct(self.predicted.get(k), self.measured.get(k)))
                for k, *_ in COMPARE_METRICS}

    @property
    def busy(self) -> float:
        return float(self.measured.get("busy_fraction") or 0.0)


@dataclass
class CompareReport:
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    config: dict = field(default_factory=dict)


def _over(result: SimResult, keep: np.ndarray) -> SimResult:
    """The result with only the ``keep`` requests counted (the others set aside, with a reason)."""
    r = result.records
    recs = replace(r, start=np.where(keep, r.start, np.nan), first_token=np.where(keep, r.first_token, np.nan),
                   finish=np.where(keep, r.finish, np.nan), last_token=np.where(keep, r.last_token, np.nan),
                   tokens=np.where(keep, r.tokens, 0),
                   rejected=[x if k else (x or "set aside: the measured run did not finish it") for x, k in zip(r.rejected, keep)])
    return replace(result, records=recs)


def compare_policies(
    workload: Workload,
    pairs: list[tuple[str, Policy, Policy]],
    measure,
    step_time: StepTimeModel | dict[str, StepTimeModel],
    kv_budget_tokens: int | None = None,
    slo: SLO | None = None,
    limits: ServerLimits | None = None,
    replay_policy=None,
    speed_check=None,
) -> CompareReport:
    """``pairs``: (label, policy for the simulator, fresh identical policy for the real run).

    ``measure(label, policy) -> SimResult`` runs the real side (the runner with an engine, or a
    baseline); the simulated side is ``simulate`` with ``step_time`` (one model, or one per label)
    under the same ``limits``. When the measured result kept its trace, the error is decomposed;
    ``replay_policy(label)`` makes the fresh policy the replay needs. ``speed_check(model) ->
    (model, note)``, when given, runs just before each policy's prediction and measurement and
    returns the model at the machine's speed of now (``realrun.drift.speed_check``).
    """
    limits = limits or ServerLimits(kv_budget_tokens=kv_budget_tokens)
    report = CompareReport()
    for label, sim_policy, real_policy in pairs:
        st = step_time[label] if isinstance(step_time, dict) else step_time
        if speed_check is not None:
            st, note = speed_check(st)
            report.notes.append(f"{label}: {note}")
        sim = simulate(workload, sim_policy, st, limits=limits)
        real = measure(label, real_policy)
        stopped = str(real.meta.get("stopped") or "")
        partial = bool(stopped)
        if partial:
            both = real.records.completed_mask & sim.records.completed_mask
            pred, meas = summarize(_over(sim, both), slo), summarize(_over(real, both), slo)
            report.notes.append(f"{label}: the measured run stopped early ({stopped}); compared over the "
                                f"{int(both.sum())} requests it finished, throughput not compared")
        else:
            pred, meas = summarize(sim, slo), summarize(real, slo)
        row = CompareRow(label, repr(sim_policy), pred, meas, sim, real, partial=partial)
        if real.meta.get("trace") is not None and replay_policy is not None and not partial:
            row.decomposition = decompose(workload, replay_policy(label), real, st, limits)
        report.rows.append(row)
        if stopped.startswith("interrupted"):
            report.notes.append(f"interrupted during {label}: the policies after it were not measured")
            break
    return report


def worst_error(report: CompareReport) -> tuple[str, str, float] | None:
    """(policy, metric, error %) of the largest error in the report."""
    worst = None
    for row in report.rows:
        for k, e in row.errors.items():
            if e is not None and (worst is None or abs(e) > abs(worst[2])):
                worst = (row.label, k, e)
    return worst


def format_compare(report: CompareReport, decomposition: bool = True) -> str:
    """One block per policy: metric, predicted, measured, error; then where the error came from."""
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
        lines.append(("", f"(done {extra['completed']}, rejected {extra['rejected']}, mean batch "
                          f"{extra['mean_batch_size']:.1f}, busy {extra['busy_fraction']:.0%})", "", "", ""))
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)] if lines else [len(h) for h in head]

    def fmt_line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [fmt_line(head), "  ".join("-" * w for w in widths)] + [fmt_line(r) for r in lines]
    if decomposition:
        for row in report.rows:
            if row.decomposition is not None:
                out += [""] + format_decomposition(row.label, row.decomposition)
    return "\n".join(out)


def plot_compare(report: CompareReport, path: str | Path, title: str = "") -> Path:
    """Left: predicted (x) against measured (y) on log axes, every latency metric of every policy.
    Right: the error of each metric, per policy, with the ±10 % and ±20 % bands."""
    from matplotlib.figure import Figure

    latency = [m for m in COMPARE_METRICS if m[0] not in _THROUGHPUT]
    decomposed = [r for r in report.rows if r.decomposition is not None]
    fig = Figure(figsize=(16 if decomposed else 12, 4.8), layout="constrained")
    if decomposed:
        ax, bx, cx = fig.subplots(1, 3, width_ratios=(1, 1.4, 1))
        _plot_decomposition(cx, decomposed)
    else:
        ax, bx = fig.subplots(1, 2, width_ratios=(1, 1.4))
    markers = "osD^vP*X"
    colors = [f"C{i}" for i in range(len(latency))]
    vals = []
    for j, row in enumerate(report.rows):
        for c, (key, label, scale, _) in zip(colors, latency):
            p, m = row.predicted.get(key), row.measured.get(key)
            if p and m and p > 0 and m > 0:
                # every latency in ms (seconds in the summaries)
                ax.scatter([p * 1e3], [m * 1e3], marker=markers[j % len(markers)], color=c, s=40, zorder=3)
                vals += [p * 1e3, m * 1e3]
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
    ax.set_title("every latency metric (grey: within 10 %)", fontsize=10)
    for j, row in enumerate(report.rows):
        ax.scatter([], [], marker=markers[j % len(markers)], color="0.4", label=row.label)
    for c, (_, label, _, _) in zip(colors, latency):
        ax.scatter([], [], marker="s", color=c, label=label.replace(" ms", "").replace(" s", ""))
    ax.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)
    keys = [m for m in COMPARE_METRICS]
    n = max(1, len(report.rows))
    width = 0.8 / n
    xs = np.arange(len(keys))
    for j, row in enumerate(report.rows):
        errs = row.errors
        e = [errs[k] if errs[k] is not None else np.nan for k, *_ in keys]
        bx.bar(xs + (j - (n - 1) / 2) * width, e, width, label=row.label, color=f"C{j}")
    bx.axhspan(-10, 10, color="0.9", zorder=0)
    bx.axhspan(-20, -10, color="0.95", zorder=0)
    bx.axhspan(10, 20, color="0.95", zorder=0)
    bx.axhline(0, color="k", lw=0.8)
    bx.set_xticks(xs, [m[1].replace(" ms", "").replace(" s", "") for m in keys], rotation=30, ha="right", fontsize=8)
    bx.set_ylabel("(predicted - measured) / measured, %")
    bx.set_title("error per metric (bands: ±10 %, ±20 %)", fontsize=10)
    bx.legend(fontsize=8, frameon=False)
    fig.suptitle(title or "predicted vs measured", fontsize=11)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    return p


def _plot_decomposition(ax, rows: list[CompareRow]) -> None:
    """Where the error comes from: the cost model's error on the time each kind of pass took, per policy."""
    parts = (("decode", "decode passes"), ("prefill", "prefill passes"), ("step", "whole steps"), ("gap", "gaps"))
    n = len(rows)
    width = 0.8 / n
    xs = np.arange(len(parts))
    for j, row in enumerate(rows):
        d = row.decomposition
        vals = []
        for key, _ in parts:
            s = d.steps if key == "step" else d.gaps if key == "gap" else d.passes.get(key, {})
            vals.append(s.get("total_error_pct") if s.get("n") else np.nan)
        ax.bar(xs + (j - (n - 1) / 2) * width, vals, width, label=row.label, color=f"C{j}")
    ax.axhspan(-10, 10, color="0.9", zorder=0)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(xs, [p[1] for p in parts], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("model - measured, % of the measured time")
    same = all(r.decomposition.replay_max_diff_s is not None and r.decomposition.replay_max_diff_s < 1e-9 for r in rows)
    ax.set_title("where it comes from: the cost model on what ran" + ("\n(replay of measured times: identical)" if same else ""),
                 fontsize=10)
