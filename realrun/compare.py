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

With ``seeds`` > 1 and a model that carries its profiled spread, the prediction is the median
of that many simulations, each pass's time drawn from the spread with its own seed
(``batchsim.sim.sampled``), and each metric has a 90 % band; with ``repeats`` > 1 each policy
is measured that many times, interleaved (rounds, the policies' order shuffled per round by a
seeded generator, as Google Benchmark's random interleaving does, so a slow minute of the
machine spreads over every policy instead of spoiling one), with a short canary of fixed
passes timed before and after each run. Each metric then gets a verdict (``realrun.verdict``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import numpy as np

from batchsim.core.limits import ServerLimits
from batchsim.core.metrics import SLO, summarize
from batchsim.core.policies import Policy
from batchsim.core.result import RunResult
from batchsim.core.workload import Workload
from batchsim.sim.sampled import with_noise
from batchsim.sim.simulator import simulate
from batchsim.sim.steptime import StepTimeModel

from .compare_plot import plot_compare
from .decompose import Decomposition, decompose, format_decomposition
from .verdict import TARGETS, band_of, median_summary, noise_pct, verdict

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
_KEYS = tuple(k for k, *_ in COMPARE_METRICS)


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured in percent; None when either is missing or measured is 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


@dataclass
class CompareRow:
    """One policy: ``predicted`` (median over seeds), ``band`` ({metric: [low, high]}, with seeds),
    ``measured`` (median over repeats) and ``repeats`` (every repeat's summary)."""

    label: str
    policy: str
    predicted: dict
    measured: dict
    sim: RunResult | None = None
    real: RunResult | None = None
    decomposition: Decomposition | None = None
    partial: bool = False  # the measured run was cut short: compared over what it finished
    band: dict = field(default_factory=dict)
    repeats: list = field(default_factory=list)
    canary: list = field(default_factory=list)  # (seconds before, seconds after) of each run's canary
    seeds: int = 1

    @property
    def errors(self) -> dict[str, float | None]:
        return {k: (None if self.partial and k in _THROUGHPUT else error_pct(self.predicted.get(k), self.measured.get(k)))
                for k in _KEYS}

    @property
    def noise(self) -> dict[str, float | None]:
        """How far the repeats lie from their median, % per metric (None with one repeat)."""
        return noise_pct(self.repeats, _KEYS)

    @property
    def verdicts(self) -> dict[str, str | None]:
        errs, noise = self.errors, self.noise
        return {k: verdict(errs[k], TARGETS[k], noise[k]) for k in _KEYS}

    @property
    def in_band(self) -> dict[str, bool | None]:
        """Whether the median measurement lies inside the predicted 90 % band (None: no band)."""
        out = {}
        for k in _KEYS:
            b, m = self.band.get(k), self.measured.get(k)
            out[k] = None if b is None or m is None or (self.partial and k in _THROUGHPUT) else bool(b[0] <= m <= b[1])
        return out

    @property
    def busy(self) -> float:
        return float(self.measured.get("busy_fraction") or 0.0)

    def as_dict(self) -> dict:
        return {"predicted": self.predicted, "predicted_band": self.band, "measured": self.measured,
                "repeats": self.repeats, "error_pct": self.errors, "repeat_spread_pct": self.noise,
                "verdict": self.verdicts, "in_band": self.in_band, "seeds": self.seeds,
                "canary_s": [list(c) for c in self.canary]}


@dataclass
class CompareReport:
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list = field(default_factory=list)
    config: dict = field(default_factory=dict)


def _over(result: RunResult, keep: np.ndarray) -> RunResult:
    """The result with only the ``keep`` requests counted (the others set aside, with a reason)."""
    r = result.records
    recs = replace(r, start=np.where(keep, r.start, np.nan), first_token=np.where(keep, r.first_token, np.nan),
                   finish=np.where(keep, r.finish, np.nan), last_token=np.where(keep, r.last_token, np.nan),
                   tokens=np.where(keep, r.tokens, 0),
                   rejected=[x if k else (x or "set aside: the measured run did not finish it") for x, k in zip(r.rejected, keep)])
    return replace(result, records=recs)


def compare_policies(
    workload: Workload | dict[str, Workload],
    pairs: list[tuple[str, Policy, Policy]],
    measure,
    step_time: StepTimeModel | dict[str, StepTimeModel],
    kv_budget_tokens: int | None = None,
    slo: SLO | None = None,
    limits: ServerLimits | None = None,
    replay_policy=None,
    speed_check=None,
    seeds: int = 1,
    repeats: int = 1,
    order_seed: int = 0,
    canary=None,
) -> CompareReport:
    """``pairs``: (label, policy for the simulator, fresh identical policy for the real run).

    ``measure(label, policy) -> RunResult`` runs the real side (the runner with an engine, or a
    baseline); the simulated side is ``simulate`` with ``step_time`` (one model, or one per label)
    under the same ``limits``; ``workload`` is one for every policy, or one per label (``--busy``
    sets each policy's own rate). When the measured result kept its trace, the error is decomposed;
    ``replay_policy(label)`` makes the fresh policy the replay needs. ``speed_check(model) ->
    (model, note)``, when given, runs just before each measurement and returns the model at the
    machine's speed of now (``realrun.drift.speed_check``); the prediction uses the first.

    ``seeds`` > 1: that many simulations, passes sampled from the model's spread, seeds 0..seeds-1
    (``ConfigError`` if the model has none). ``repeats`` > 1: that many measurements per policy,
    interleaved, the order of each round shuffled by ``numpy.random.default_rng(order_seed)``.
    ``canary() -> seconds``, when given, is timed before and after every measured run.
    """
    limits = limits or ServerLimits(kv_budget_tokens=kv_budget_tokens)
    report = CompareReport()
    wl_of = (lambda label: workload[label]) if isinstance(workload, dict) else (lambda label: workload)
    # Fresh policies for the later repeats and seeds, copied before any run touches the originals.
    spare_real = {label: [copy.deepcopy(p) for _ in range(repeats - 1)] for label, _, p in pairs}
    spare_sim = {label: [copy.deepcopy(p) for _ in range(seeds - 1)] for label, p, _ in pairs}
    runs: dict[str, list[RunResult]] = {label: [] for label, _, _ in pairs}
    models: dict[str, StepTimeModel] = {}
    canaries: dict[str, list] = {label: [] for label, _, _ in pairs}
    rng = np.random.default_rng(order_seed)
    stop = False
    for r in range(repeats):
        order = rng.permutation(len(pairs)) if repeats > 1 else range(len(pairs))
        for i in order:
            label, _, real_policy = pairs[int(i)]
            st = step_time[label] if isinstance(step_time, dict) else step_time
            if speed_check is not None:
                st, note = speed_check(st)
                report.notes.append(f"{label}{f' (run {r + 1})' if repeats > 1 else ''}: {note}")
            models.setdefault(label, st)
            before = canary() if canary is not None else None
            real = measure(label, real_policy if r == 0 else spare_real[label][r - 1])
            if canary is not None:
                canaries[label].append((before, canary()))
            runs[label].append(real)
            stopped = str(real.meta.get("stopped") or "")
            if stopped:
                stop = True
                if stopped.startswith("interrupted"):
                    report.notes.append(f"interrupted during {label}: the runs after it were not measured")
                break
        if stop:
            break
    for label, sim_policy, _ in pairs:
        if runs[label]:
            report.rows.append(_row(label, sim_policy, spare_sim[label], runs[label], models[label], wl_of(label), limits,
                                    slo, seeds, replay_policy, canaries[label], report.notes))
    return report


def _row(label, sim_policy, spares, reals, st, workload, limits, slo, seeds, replay_policy, canary, notes) -> CompareRow:
    sims = [simulate(workload, p, with_noise(st, k) if seeds > 1 else st, limits=limits)
            for k, p in enumerate([sim_policy, *spares])]
    first = reals[0]
    stopped = str(reals[-1].meta.get("stopped") or "")
    if stopped:  # compare over what the cut run finished, on its first prediction only
        real = reals[-1]
        both = real.records.completed_mask & sims[0].records.completed_mask
        pred, meas = summarize(_over(sims[0], both), slo), summarize(_over(real, both), slo)
        notes.append(f"{label}: the measured run stopped early ({stopped}); compared over the "
                     f"{int(both.sum())} requests it finished, throughput not compared")
        return CompareRow(label, repr(sim_policy), pred, meas, sims[0], real, partial=True, canary=canary)
    preds = [summarize(x, slo) for x in sims]
    meas = [summarize(x, slo) for x in reals]
    row = CompareRow(label, repr(sim_policy), median_summary(preds), median_summary(meas), sims[0], first,
                     band=band_of(preds, _KEYS) if seeds > 1 else {}, repeats=meas, canary=canary, seeds=seeds)
    if first.meta.get("trace") is not None and replay_policy is not None:
        row.decomposition = decompose(workload, replay_policy(label), first, st, limits)
    return row


def worst_error(report: CompareReport) -> tuple[str, str, float] | None:
    """(policy, metric, error %) of the largest error in the report."""
    worst = None
    for row in report.rows:
        for k, e in row.errors.items():
            if e is not None and (worst is None or abs(e) > abs(worst[2])):
                worst = (row.label, k, e)
    return worst


_SHORT = {"agrees": "agrees", "within noise": "in noise", "disagrees": "DISAGREES"}


def format_compare(report: CompareReport, decomposition: bool = True) -> str:
    """One block per policy: metric, predicted (and its band), measured (and the repeats' spread),
    error and verdict; then where the error came from."""
    banded = any(r.band for r in report.rows)
    repeated = any(len(r.repeats) > 1 for r in report.rows)
    head = ("policy", "metric", "predicted", *(("90% band",) if banded else ()), "measured",
            *(("repeats ±",) if repeated else ()), "error", "verdict")
    lines: list[tuple[str, ...]] = []
    for row in report.rows:
        errs, noise, verdicts, inside = row.errors, row.noise, row.verdicts, row.in_band
        for i, (key, label, scale, fmt) in enumerate(COMPARE_METRICS):
            p, m, e, b = row.predicted.get(key), row.measured.get(key), errs[key], row.band.get(key)
            v = _SHORT.get(verdicts[key] or "", "-")
            if inside[key] is not None:
                v += ", in band" if inside[key] else ", outside band"
            lines.append((
                row.label if i == 0 else "",
                label,
                "-" if p is None else fmt.format(p * scale),
                *((f"{fmt.format(b[0] * scale)}-{fmt.format(b[1] * scale)}" if b else "-",) if banded else ()),
                "-" if m is None else fmt.format(m * scale),
                *(("-" if noise[key] is None else f"{noise[key]:.1f}%",) if repeated else ()),
                "-" if e is None else f"{e:+.0f}%",
                v,
            ))
        extra = row.measured
        runs = f", {len(row.repeats)} runs" if len(row.repeats) > 1 else ""
        seeds = f", {row.seeds} seeds" if row.seeds > 1 else ""
        lines.append(("", f"(done {extra['completed']}, rejected {extra['rejected']}, mean batch "
                          f"{extra['mean_batch_size']:.1f}, busy {extra['busy_fraction']:.0%}{runs}{seeds})"))
    cells = [r for r in lines if len(r) == len(head)]  # the "(done ...)" lines run across the columns
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)] if cells else [len(h) for h in head]

    def fmt_line(cells):
        if len(cells) < len(head):
            return " " * widths[0] + "  " + cells[1]
        return "  ".join(c.ljust(w) if i < 2 or i == len(cells) - 1 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [fmt_line(head), "  ".join("-" * w for w in widths)] + [fmt_line(r) for r in lines]
    if report.rows:
        counts = {v: sum(r.verdicts[k] == v for r in report.rows for k in _KEYS) for v in _SHORT}
        band = [x for r in report.rows for x in r.in_band.values() if x is not None]
        out.append("verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items())
                   + (f"; measured median inside the predicted 90 % band in {sum(band)} of {len(band)}" if band else "")
                   + " (targets: " + ", ".join(f"{k} {t:g} %" for k, t in TARGETS.items() if k in
                                              ("p50_e2e", "p99_e2e", "p50_ttft", "mean_tpot", "request_throughput")) + ")")
    if decomposition:
        for row in report.rows:
            if row.decomposition is not None:
                out += [""] + format_decomposition(row.label, row.decomposition)
    return "\n".join(out)
