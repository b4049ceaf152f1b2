"""Notebook 7: the simulator, calibrated, against a real model on the wall clock."""

from __future__ import annotations

import functools

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Poisson
from ...core.errors import ConfigError, check_choice, check_int_at_least, check_positive
from ...core.lengths import Uniform
from ..figures import draw_cdf
from ...core.metrics import summarize
from ...core.policies import POLICY_NAMES, make_policy
from ...sim.simulator import simulate
from ...core.workload import make_workload


@functools.lru_cache(maxsize=2)
def _engine(model: str, device: str):
    """A loaded model and its engine, kept between calls: loading takes seconds, a slider move should not."""
    try:
        from realrun.engine import Engine
        from realrun.model import load_model
    except ModuleNotFoundError as e:  # batchsim itself never needs torch
        raise ConfigError(f"model {model!r} needs realrun's dependencies (pip install -e '.[real]'): {e.name} is missing") from None
    return Engine(load_model(model, device))


@functools.lru_cache(maxsize=8)
def _calibration(model: str, device: str, grid):
    """Profile the engine over ``grid`` and fit the linear step-time model (cached per grid)."""
    from realrun.profile import profile

    return profile(_engine(model, device), grid)


def predicted_vs_measured(policy: str = "continuous", rate: float = 4.0, requests: int = 24, model: str = "tiny-gpt2",
                          device: str = "cpu", max_batch: int = 8, seed: int = 0,
                          repeats: int = 3) -> tuple[dict, Figure]:
    """Calibrate the simulator on a real model, then serve one workload both ways and compare.

    realrun profiles ``model`` on ``device`` over the shapes this workload will need
    (``repeats`` timings per shape, medians kept) and fits batchsim's linear step-time
    model. Then the same ``policy`` (batches of ``max_batch``; continuous with up to
    ``max_batch`` running) serves the same ``requests`` arriving at ``rate`` per second,
    once simulated with the calibration and once for real on the wall clock. The default
    model is tiny and random (no download): timing is real, the text is not.
    """
    check_choice("policy", policy, POLICY_NAMES)
    check_positive("rate", rate)
    check_int_at_least("requests", requests, 1)
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("repeats", repeats, 1)
    engine = _engine(model, device)
    from realrun.profile import grid_for_workload
    from realrun.runner import run_real

    wl = make_workload(Poisson(rate), Uniform(8, 64), Uniform(8, 48), n=requests, seed=seed)
    prof = _calibration(model, device, grid_for_workload(wl, max_batch, 512, repeats))
    cal = prof.model

    def make():
        return make_policy(policy, max_batch=max_batch, max_wait=0.1, max_seqs=max_batch)

    predicted = simulate(wl, make(), cal)
    measured = run_real(wl, make(), engine)
    rows = {"predicted": summarize(predicted), "measured": summarize(measured)}
    metrics = ("request_throughput", "output_throughput", "mean_ttft", "p50_e2e", "p99_e2e")
    errors = {}
    for k in metrics:
        p, m = rows["predicted"][k], rows["measured"][k]
        errors[k] = (p - m) / m if m else float("nan")
    rows["error"] = {k: errors[k] for k in metrics}
    lines = [f"{'':10s} {'req/s':>8s} {'tok/s':>8s} {'TTFT ms':>9s} {'p50 E2E s':>10s} {'p99 E2E s':>10s}"]
    for label in ("predicted", "measured"):
        r = rows[label]
        lines.append(f"{label:10s} {r['request_throughput']:8.2f} {r['output_throughput']:8.1f} "
                     f"{r['mean_ttft'] * 1e3:9.1f} {r['p50_e2e']:10.2f} {r['p99_e2e']:10.2f}")
    e = errors
    lines.append(f"{'error':10s} {e['request_throughput']:8.0%} {e['output_throughput']:8.0%} {e['mean_ttft']:9.0%} "
                 f"{e['p50_e2e']:10.0%} {e['p99_e2e']:10.0%}")
    summary = {
        "policy": policy, "predicted": rows["predicted"], "measured": rows["measured"], "errors": errors,
        "table": "\n".join(lines),
        "calibration": {"c0": cal.c0, "c1": cal.c1, "c2": cal.c2, "c3": cal.c3},
        "profile_heldout_error_pct": prof.heldout_mean_pct, "model": engine.lm.describe(),
        "notes": [engine.lm.describe(), prof.text().replace("\n", "; "),
                  f"{policy} (batch {max_batch}), {requests} requests at {rate:g}/s; error = (predicted - measured) / measured"],
    }

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    names = ["req/s", "tok/s", "mean TTFT", "p50 E2E", "p99 E2E"]
    vals = [errors[k] * 100 for k in metrics]
    ax1.bar(names, vals, color=["tab:green" if abs(v) <= 10 else "tab:orange" if abs(v) <= 25 else "tab:red" for v in vals])
    ax1.axhline(0, color="k", lw=1)
    ax1.set_ylabel("prediction error, % of measured")
    ax1.set_title("predicted vs measured")
    ax1.tick_params(axis="x", labelsize=8, rotation=30)
    X = np.array([[q.prefill_tokens, q.decode_rows, q.kv_read, q.seconds] for q in prof.points])
    fitted = cal.times(X[:, 0], X[:, 1], X[:, 2])
    ax2.plot(X[:, 3] * 1e3, fitted * 1e3, "o", ms=4, color="tab:blue")
    lo, hi = float(min(X[:, 3].min(), fitted.min())) * 1e3, float(max(X[:, 3].max(), fitted.max())) * 1e3
    ax2.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax2.set_xlabel("measured step (ms, median)")
    ax2.set_ylabel("calibrated model (ms)")
    ax2.set_title(f"calibration: {float(np.mean(np.abs(fitted - X[:, 3]) / X[:, 3])):.0%} mean error")
    for label, res, color in (("predicted", predicted, "tab:blue"), ("measured", measured, "tab:red")):
        r = res.records
        draw_cdf(ax3, r.finish - r.arrival, label, color)
    ax3.set_xlabel("end-to-end latency (s)")
    ax3.set_ylabel("share of requests")
    ax3.set_title("latency: simulated and real")
    ax3.legend(fontsize=8)
    fig.suptitle(f"{policy} on {engine.lm.name} ({engine.lm.device}): the simulator against the wall clock")
    return summary, fig
