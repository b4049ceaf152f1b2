"""Notebook 6: queueing theory against the simulator."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Poisson
from ...core.errors import ConfigError, check_int_at_least, check_positive
from ...core.lengths import Fixed
from ...core.metrics import summarize
from ...core.policies import Static, make_policy
from ...core.workload import make_workload
from ...sim.simulator import simulate
from ...sim.steptime import ConstantStepTime
from ...sim.theory import MD1, bus_fill_wait
from ..figures import mean_ci


def theory_vs_simulation(
    load: float = 0.7,
    replications: int = 10,
    seats: int = 8,
    requests: int = 2000,
    service_ms: float = 20.0,
    seed: int = 0,
) -> tuple[dict, Figure]:
    """Queueing theory against the simulator, with confidence intervals from replications.

    Left: the taxi on a server whose every ride takes exactly ``service_ms`` (one token
    per request, a constant step time) is the M/D/1 queue; its mean wait is
    rho S / (2 (1 - rho)). Right: a bus of ``seats`` that waits to fill, at the same
    arrival rate, has mean wait (N - 1) / (2 lambda). Each side is simulated
    ``replications`` times with independent seeds; the error bar is the 95 % interval
    of the mean across replications, and it narrows as 1 / sqrt(replications).
    """
    if not (isinstance(load, (int, float)) and 0 < load < 1):
        raise ConfigError(f"load must be in (0, 1), got {load!r}")
    check_int_at_least("replications", replications, 1)
    check_int_at_least("seats", seats, 1)
    check_int_at_least("requests", requests, 10)
    check_positive("service_ms", service_ms)
    s = service_ms / 1000.0
    lam = load / s
    step = ConstantStepTime(s)
    md1 = MD1(lam, s).mean_wait
    bus = bus_fill_wait(seats, lam)
    seeds = np.random.SeedSequence(seed).generate_state(replications)
    taxi_means, bus_means = [], []
    for sd in seeds:
        wl = make_workload(Poisson(lam), Fixed(1), Fixed(1), n=requests, seed=int(sd))
        taxi_means.append(summarize(simulate(wl, make_policy("taxi"), step))["mean_queue_wait"])
        bus_means.append(summarize(simulate(wl, Static(seats), step))["mean_queue_wait"])
    tm, th = mean_ci(taxi_means)
    bm, bh = mean_ci(bus_means)
    rows = {
        "taxi (M/D/1)": {"theory": md1, "simulated": tm, "ci95": th},
        f"bus of {seats}": {"theory": bus, "simulated": bm, "ci95": bh},
    }
    for r in rows.values():
        r["error"] = (r["simulated"] - r["theory"]) / r["theory"] if r["theory"] else float("nan")
        r["inside"] = (
            bool(abs(r["simulated"] - r["theory"]) <= r["ci95"]) if np.isfinite(r["ci95"]) else None
        )
    lines = [f"{'':14s} {'theory ms':>10s} {'simulated ms':>13s} {'+/- 95% ms':>11s} {'error':>7s}"]
    for k, r in rows.items():
        ci = f"{r['ci95'] * 1e3:11.2f}" if np.isfinite(r["ci95"]) else f"{'-':>11s}"
        lines.append(
            f"{k:14s} {r['theory'] * 1e3:10.2f} {r['simulated'] * 1e3:13.2f} {ci} {r['error']:7.1%}"
        )
    summary = {
        "rows": rows,
        "arrival_rate": lam,
        "table": "\n".join(lines),
        "taxi_replications": taxi_means,
        "bus_replications": bus_means,
        "notes": [
            f"{replications} replications of {requests} requests at {lam:.1f} req/s (load "
            f"{load:.2f} on a {service_ms:g} ms server)"
        ],
    }

    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    rho = np.linspace(0.02, 0.97, 200)
    ax1.plot(rho, rho * s / (2 * (1 - rho)) * 1e3, color="k", label="M/D/1 theory")
    ax1.errorbar(
        [load],
        [tm * 1e3],
        yerr=[th * 1e3] if np.isfinite(th) else None,
        fmt="o",
        color="tab:red",
        capsize=4,
        label="simulated, 95% CI",
    )
    ax1.set_yscale("log")
    ax1.set_xlabel("load (utilisation)")
    ax1.set_ylabel("mean wait in queue (ms)")
    ax1.set_title("the taxi: waiting explodes near full load")
    ax1.legend(fontsize=8)
    n = np.arange(1, 33)
    ax2.plot(n, (n - 1) / (2 * lam) * 1e3, color="k", label="(N-1)/(2 lambda)")
    ax2.errorbar(
        [seats],
        [bm * 1e3],
        yerr=[bh * 1e3] if np.isfinite(bh) else None,
        fmt="o",
        color="tab:blue",
        capsize=4,
        label="simulated, 95% CI",
    )
    ax2.set_xlabel("seats on the bus (N)")
    ax2.set_ylabel("mean wait for the bus to fill (ms)")
    ax2.set_title(f"the bus at {lam:.0f} arrivals/s")
    ax2.legend(fontsize=8)
    ax3.plot(
        np.arange(1, replications + 1),
        np.array(taxi_means) / md1,
        "o",
        color="tab:red",
        ms=4,
        label="taxi",
    )
    ax3.plot(
        np.arange(1, replications + 1),
        np.array(bus_means) / bus,
        "s",
        color="tab:blue",
        ms=4,
        label="bus",
    )
    ax3.axhline(1.0, color="k", lw=1)
    ax3.set_xlabel("replication")
    ax3.set_ylabel("simulated / theory")
    ax3.set_title("each run is noisy; their mean is not")
    ax3.legend(fontsize=8)
    fig.suptitle(
        f"theory meets simulation: load {load:.2f}, {replications} replications of {requests} "
        f"requests"
    )
    return summary, fig
