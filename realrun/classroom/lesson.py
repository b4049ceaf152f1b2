"""Notebook 7's lesson: the simulator, calibrated, against a real model on the wall clock.

It is ``realrun compare`` for one policy at slider size: the same profile, the same
comparison and decomposition (``realrun.judge.compare``), so the notebook and the command line
cannot disagree. batchsim never imports realrun, so the lesson lives here.
"""

from __future__ import annotations

import functools

import numpy as np
from matplotlib.figure import Figure

from batchsim.core.arrivals import Poisson
from batchsim.core.errors import check_choice, check_int_at_least, check_positive
from batchsim.core.lengths import Uniform
from batchsim.core.policies import POLICY_NAMES, make_policy
from batchsim.core.workload import make_workload
from batchsim.teach.figures import draw_cdf

from ..judge.compare import COMPARE_METRICS, compare_policies, format_compare
from ..timing.grid import grid_for_workload
from ..timing.profile import pass_errors

__all__ = ["predicted_vs_measured"]


@functools.lru_cache(maxsize=2)
def _engine(model: str, device: str):
    """A loaded model and its engine, kept between calls: loading takes seconds, a slider move
    should not."""
    from ..engine.engine import Engine
    from ..engine.model import load_model

    return Engine(load_model(model, device))


@functools.lru_cache(maxsize=8)
def _calibration(model: str, device: str, grid, policy: str, max_batch: int):
    """Profile the engine over ``grid`` (cached per grid and policy)."""
    from ..timing.profile import profile

    return profile(_engine(model, device), grid, policies={policy: _policy(policy, max_batch)})


def _policy(policy: str, max_batch: int):
    return make_policy(policy, max_batch=max_batch, max_wait=0.1, max_seqs=max_batch)


def predicted_vs_measured(
    policy: str = "continuous",
    rate: float = 4.0,
    requests: int = 24,
    model: str = "tiny-gpt2",
    device: str = "cpu",
    max_batch: int = 8,
    seed: int = 0,
    repeats: int = 3,
) -> tuple[dict, Figure]:
    """Calibrate the simulator on a real model, then serve one workload both ways and compare.

    realrun profiles ``model`` on ``device`` over the shapes this workload will need
    (``repeats`` timings per shape) and builds batchsim's profiled step-time model. Then
    the same ``policy`` (batches of ``max_batch``; continuous with up to ``max_batch``
    running) serves the same ``requests`` arriving at ``rate`` per second, once simulated
    and once for real on the wall clock. The default model is tiny and random (no
    download): timing is real, the text is not.
    """
    check_choice("policy", policy, POLICY_NAMES)
    check_positive("rate", rate)
    check_int_at_least("requests", requests, 1)
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("repeats", repeats, 1)
    engine = _engine(model, device)
    from ..clock.runner import limits_for, run_real

    wl = make_workload(Poisson(rate), Uniform(8, 64), Uniform(8, 48), n=requests, seed=seed)
    grid = grid_for_workload(
        wl, max_batch, max_batch * 64, policies=(policy,), repeats=repeats, rounds=1
    )
    prof = _calibration(model, device, grid, policy, max_batch)
    limits = limits_for(engine.lm)
    report = compare_policies(
        wl,
        [(policy, _policy(policy, max_batch), _policy(policy, max_batch))],
        lambda label, p: run_real(wl, p, engine, limits=limits, trace=True),
        prof.model,
        limits=limits,
        replay_policy=lambda label: _policy(policy, max_batch),
    )
    row = report.rows[0]
    errors = {k: (e / 100 if e is not None else float("nan")) for k, e in row.errors.items()}
    summary = {
        "policy": policy,
        "predicted": row.predicted,
        "measured": row.measured,
        "errors": errors,
        "table": format_compare(report, explain=True),
        "decomposition": row.decomposition.as_dict() if row.decomposition else None,
        "profile_heldout_error_pct": prof.heldout_mean_pct,
        "model": engine.lm.describe(),
        "notes": [
            f"{policy} (batch {max_batch}), {requests} requests at {rate:g}/s; error = (predicted "
            f"- measured) / "
            "measured, so a negative error is a prediction below what was measured",
            f"the calibration timed {len(prof.points)} shapes of pass on this machine in "
            f"{prof.seconds:.0f} s; on shapes it did not time it is off by "
            f"{prof.heldout_mean_pct:.0f} % on average",
        ],
        "details": [engine.lm.describe(), *prof.text().splitlines()],
    }
    return summary, _figure(policy, engine.lm, errors, prof, row)


def _figure(policy: str, lm, errors: dict, prof, row) -> Figure:
    """The lesson's three panels: each metric's error, the calibration's fit, and the latency
    CDFs."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    keys = [m for m in COMPARE_METRICS]
    vals = [errors[k] * 100 for k, *_ in keys]
    ax1.bar(
        [m[1].replace(" ms", "").replace(" s", "") for m in keys],
        vals,
        color=[
            "tab:green" if abs(v) <= 10 else "tab:orange" if abs(v) <= 25 else "tab:red"
            for v in vals
        ],
    )
    ax1.axhline(0, color="k", lw=1)
    ax1.set_ylabel("prediction error, % of measured")
    ax1.set_title("predicted vs measured")
    ax1.tick_params(axis="x", labelsize=8, rotation=30)
    grid_pts = [q for q in prof.points if q.kind in ("decode", "prefill")]
    meas = np.array([q.seconds for q in grid_pts]) * 1e3
    fitted = meas * (1 + pass_errors(prof.model, grid_pts) / 100)
    ax2.loglog(meas, fitted, "o", ms=4, color="tab:blue")
    lo, hi = float(min(meas.min(), fitted.min())) / 1.3, float(max(meas.max(), fitted.max())) * 1.3
    ax2.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax2.set_xlabel("measured pass (ms)")
    ax2.set_ylabel("profiled model (ms)")
    ax2.set_title(f"calibration: held out {prof.heldout_mean_pct:.0f} % mean error")
    for label, res, color in (
        ("predicted", row.sim, "tab:blue"),
        ("measured", row.real, "tab:red"),
    ):
        r = res.records
        draw_cdf(ax3, r.finish - r.arrival, label, color)
    ax3.set_xlabel("end-to-end latency (s)")
    ax3.set_ylabel("share of requests")
    ax3.set_title("latency: simulated and real")
    ax3.legend(fontsize=8)
    fig.suptitle(f"{policy} on {lm.name} ({lm.device}): the simulator against the wall clock")
    return fig
