"""Where a prediction's error comes from: the step times, the schedule, or what is left.

A student who sees a 15 % gap between predicted and measured should be able to say where
it came from. The measured run kept every step (when it was decided, its shape, when it
started and ended) and every pass the engine ran (its planned shape and its time), so the
gap splits in three:

(a) **step-time error**: the cost model's price of the very passes the real run executed,
    against their measured durations, per kind of pass; and the same for whole steps and
    the gaps between them (the driver's own time);
(b) **replay**: the simulator driven by the measured step times instead of a model's must
    reproduce the measured per-request latencies to within float rounding. It does when
    the two clocks schedule identically, which the shared driver loop guarantees; this
    checks it on every run;
(c) **the rest**: with (b) at zero, what remains between the full prediction and the
    measurement is the cost model's error of (a), compounded through the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchsim.core.driver import drive
from batchsim.core.limits import ServerLimits
from batchsim.core.records import Records
from batchsim.sim.simulator import ReplayDiverged, ReplayExecutor
from batchsim.sim.steptime import StepTimeModel

from ..timing.pass_level import priced_passes

__all__ = [
    "Decomposition",
    "decompose",
    "format_decomposition",
    "error_summary",
    "priced_by_kind",
    "pass_errors",
]

_TIMES = ("start", "first_token", "finish", "last_token")


@dataclass
class Decomposition:
    """(a) by pass kind: passes, measured s, predicted s, error of the total %, mean |error| %;
    steps and gaps likewise; (b) the replay's largest difference in seconds (None: it diverged)."""

    passes: dict[str, dict] = field(default_factory=dict)
    steps: dict = field(default_factory=dict)
    gaps: dict = field(default_factory=dict)
    replay_max_diff_s: float | None = None
    replay_note: str = ""

    def as_dict(self) -> dict:
        return {
            "passes": self.passes,
            "steps": self.steps,
            "gaps": self.gaps,
            "replay_max_diff_s": self.replay_max_diff_s,
            "replay_note": self.replay_note,
        }


def error_summary(pred: np.ndarray, meas: np.ndarray) -> dict:
    """Predicted against measured seconds of some passes or steps: their count, totals, the total's
    error and the mean absolute error per item, in percent (what decomposition (a) reports per
    kind)."""
    if not len(meas):
        return {"n": 0}
    tot_m, tot_p = float(meas.sum()), float(pred.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(pred - meas) / meas
    return {
        "n": int(len(meas)),
        "measured_s": tot_m,
        "predicted_s": tot_p,
        "total_error_pct": (tot_p - tot_m) / tot_m * 100 if tot_m else None,
        "mean_abs_error_pct": float(np.nanmean(rel) * 100),
    }


def priced_by_kind(real, model: StepTimeModel) -> dict[str, np.ndarray]:
    """Each kind of pass of a measured ``real`` -> its passes' (priced, measured) seconds, a row
    each, priced as the simulator prices them (``priced_passes``: a cold start after an idle, a
    step's first passes included)."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for p, priced, secs in priced_passes(real, model):
        kinds.setdefault(p.kind, []).append((priced, secs))
    return {kind: np.array(pairs) for kind, pairs in sorted(kinds.items())}


def pass_errors(real, model: StepTimeModel) -> dict[str, dict]:
    """Decomposition (a) by kind of pass: ``error_summary`` of each kind's passes."""
    return {
        kind: error_summary(a[:, 0], a[:, 1]) for kind, a in priced_by_kind(real, model).items()
    }


def decompose(
    workload, policy, real, step_time: StepTimeModel, limits: ServerLimits
) -> Decomposition:
    """Split the prediction error of ``real`` (a run with ``meta['trace']`` and ``meta['passes']``).

    ``policy``: a fresh policy identical to the one the real run used (the replay runs it again).
    """
    model = step_time.for_policy(policy.name)
    out = Decomposition()
    out.passes = pass_errors(real, model)
    trace = real.meta.get("trace") or []
    if trace:
        pred = np.array(
            [float(model.durations(step, len(ends)).sum()) for _, step, _, ends in trace]
        )
        meas = np.array([float(ends[-1] - t_start) for _, _, t_start, ends in trace])
        out.steps = error_summary(pred, meas)
        gaps = np.array([t_start - decided for decided, _, t_start, _ in trace])
        out.gaps = error_summary(np.full(len(gaps), model.step_gap), gaps)
        try:
            run = drive(workload, policy, ReplayExecutor(trace), limits)
            out.replay_max_diff_s = _max_diff(run.recorder.records(), real.records)
            out.replay_note = f"replayed {len(trace)} steps"
        except ReplayDiverged as e:
            out.replay_note = f"the replay diverged: {e}"
    return out


def _max_diff(a: Records, b: Records) -> float:
    worst = 0.0
    for k in _TIMES:
        x, y = getattr(a, k), getattr(b, k)
        both = ~(np.isnan(x) | np.isnan(y))
        if (np.isnan(x) != np.isnan(y)).any():
            return float("inf")
        if both.any():
            worst = max(worst, float(np.max(np.abs(x[both] - y[both]))))
    return worst


def format_decomposition(label: str, d: Decomposition) -> list[str]:
    """Lines for the table under compare's: one per pass kind, steps, gaps, and the replay."""
    lines = []

    def row(name: str, s: dict) -> None:
        if s.get("n"):
            lines.append(
                f"  {name:<12s} {s['n']:>6d} {s['measured_s']:>10.3f} {s['predicted_s']:>10.3f} "
                f"{s['total_error_pct']:>+8.1f}% {s['mean_abs_error_pct']:>8.1f}%"
            )

    lines.append(
        f"{label}: where the error comes from  (a) the cost model on the passes and steps that ran"
    )
    lines.append(
        f"  {'':<12s} {'count':>6s} {'meas. s':>10s} {'model s':>10s} {'total':>9s} {'mean|e|':>9s}"
    )
    for kind, s in d.passes.items():
        row(f"{kind} pass", s)
    row("whole step", d.steps)
    row("gap between", d.gaps)
    if d.replay_max_diff_s is None:
        lines.append(f"  (b) replay: {d.replay_note or 'no trace kept'}")
    else:
        same = "identical schedule" if d.replay_max_diff_s < 1e-9 else "the schedules differ"
        lines.append(
            f"  (b) replay with the measured step times: largest difference "
            f"{d.replay_max_diff_s:.1e} s ({same})"
        )
    return lines
