"""Notebook 4, second panel: more buses or bigger buses? A fleet of GPUs behind a router."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Poisson
from ...core.config import FleetConfig
from ...core.errors import check_int_at_least, check_positive
from ...core.fleet import fleet_summaries
from ...core.lengths import LogNormal, Uniform
from ...core.metrics import format_table
from ...core.policies import Continuous, Taxi
from ...core.workload import make_workload
from ...machine.cost import cost_summary
from ...sim.simulator import simulate
from ._common import LESSON_GPU, LESSON_MODEL, lesson_server

__all__ = ["fleet", "fleet_flip", "FLIP_RATIO", "FLIP_MAX_RATE"]

#: The one big bus "falls behind" the fleet once its p99 E2E is more than this many times the
#: fleet's.
FLIP_RATIO = 1.5
#: The highest arrival rate the fleet panel offers (and ``fleet_flip`` tries): past every flip of
#: its default settings, which lies between the one GPU's capacity and the fleet's.
FLIP_MAX_RATE = 40


def _workload(rate: float, requests: int, seed: int):
    return make_workload(Poisson(rate), Uniform(32, 512), LogNormal(128, 96), n=requests, seed=seed)


def _fleets(
    server,
    replicas: int,
    router: str,
    max_batch: int,
    rate: float,
    requests: int,
    seed: int,
    taxis: bool = True,
) -> tuple[dict, dict]:
    """({label: the fleet's summary with dollars}, {label: each server's summary}) for the three
    fleets (the first two only, without ``taxis``), on one workload."""
    wl = _workload(rate, requests, seed)
    runs = {
        f"{replicas} GPUs x batch {max_batch}": (Continuous(max_seqs=max_batch), replicas),
        f"1 GPU x batch {replicas * max_batch}": (Continuous(max_seqs=replicas * max_batch), 1),
    }
    if taxis:
        runs[f"{replicas} taxis"] = (Taxi(), replicas)
    rows, servers = {}, {}
    for label, (policy, n) in runs.items():
        res = simulate(
            wl,
            policy,
            server.step_time,
            kv_budget_tokens=server.kv.tokens,
            replicas=n,
            router=router,
            router_seed=seed,
        )
        whole, parts = fleet_summaries(res)
        whole.update(cost_summary(whole, server.price * n))
        rows[label], servers[label] = whole, parts
    return rows, servers


def fleet(
    replicas: int = 4,
    router: str = "least-loaded",
    max_batch: int = 8,
    rate: float = 2.0,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
    requests: int = 600,
    seed: int = 0,
) -> tuple[dict, Figure]:
    """The same traffic on three fleets: ``replicas`` GPUs with batches of ``max_batch`` (behind
    ``router``), one GPU with batches of ``replicas x max_batch`` (the same seats, one bus), and
    ``replicas`` taxis. The bill is servers x $/hour over the run."""
    FleetConfig(replicas, router)  # checks both, naming the field
    check_int_at_least("max_batch", max_batch, 1)
    check_positive("rate", rate)
    server = lesson_server(gpu, model)
    rows, servers = _fleets(server, replicas, router, max_batch, rate, requests, seed)
    mine = next(iter(rows))
    keys = [
        "replicas",
        "request_throughput",
        "p99_ttft",
        "p99_e2e",
        "busy_fraction",
        "mean_batch_size",
        "cost_total",
        "cost_per_1m_tokens",
    ]
    big = list(rows)[1]
    summary = {
        "rows": rows,
        "servers": servers,
        "table": format_table(rows, keys),
        "price_per_hour": server.price,
        "notes": [
            f"{server.describe()}; {requests} requests at {rate:g}/s; the fleets are routed "
            f"{router}",
            f"{mine}: ${rows[mine]['cost_per_1m_tokens']:.2f} per 1M tokens, p99 E2E "
            f"{rows[mine]['p99_e2e']:.2f} s; {big}: ${rows[big]['cost_per_1m_tokens']:.2f}, p99 "
            f"E2E {rows[big]['p99_e2e']:.2f} s",
        ],
    }

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    labels = list(rows)
    colors = ["tab:blue", "tab:green", "tab:orange"]
    ax1.bar(range(3), [rows[k]["cost_per_1m_tokens"] for k in labels], color=colors)
    ax1.set_title("\\$ per 1M output tokens")
    ax2.bar(range(3), [rows[k]["p99_e2e"] for k in labels], color=colors)
    ax2.set_title("p99 end to end (s)")
    for ax in (ax1, ax2):
        ax.set_xticks(range(3), [k.replace(" x ", "\nx ") for k in labels], fontsize=8)
    served = np.array([s["completed"] for s in servers[mine]])
    busy = np.array([s["busy_fraction"] for s in servers[mine]])
    x = np.arange(len(served))
    ax3.bar(x, served, color="tab:blue")
    ax3.set_xticks(x, [f"GPU {i}" for i in x], fontsize=8)
    ax3.set_ylabel("requests served")
    for i, b in zip(x, busy):
        ax3.text(i, served[i], f"{b:.0%} busy", ha="center", va="bottom", fontsize=8)
    ax3.set_title(f"{router}: requests per GPU", fontsize=11)
    fig.suptitle(
        f"More buses or bigger buses? {requests} requests at {rate:g}/s on {server.gpu.name} "
        f"(${server.price:.2f}/GPU-hour)"
    )
    return summary, fig


def fleet_flip(
    replicas: int = 4,
    router: str = "least-loaded",
    max_batch: int = 8,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
    requests: int = 600,
    seed: int = 0,
    ratio: float = FLIP_RATIO,
    max_rate: int = FLIP_MAX_RATE,
) -> dict:
    """Where the one GPU falls behind the fleet: a whole arrival rate (requests/s) at which its p99
    E2E is more than ``ratio`` times the fleet's, while at one request/s less it is not.

    The rate doubles from 1 until the ratio is passed, then rises one request/s at a time from the
    last rate within (a handful of runs instead of one per rate). Whole rates are what the fleet
    panel's slider stops at, so a student sets it to ``below`` and to ``rate`` and reads the same
    four p99s. The ratio grows with the rate until both fleets are overloaded, so this is the first
    crossing (the rates tried and their ratios come back to show it).

    Returns {"rate", "big_p99", "many_p99" (at it), "below", "below_big_p99", "below_many_p99" (one
    request/s less; None when ``rate`` is 1), "ratios": {rate tried: one GPU's p99 / the fleet's}};
    "rate" is None when no rate up to ``max_rate`` passes the ratio.
    """
    FleetConfig(replicas, router)
    check_int_at_least("max_batch", max_batch, 1)
    check_positive("ratio", ratio)
    check_int_at_least("max_rate", max_rate, 1)
    server = lesson_server(gpu, model)
    p99s: dict[int, tuple[float, float]] = {}  # rate -> (one GPU's p99, the fleet's)

    def behind(rate: int) -> bool:
        rows, _ = _fleets(
            server, replicas, router, max_batch, float(rate), requests, seed, taxis=False
        )
        many, big = rows.values()
        p99s[rate] = (big["p99_e2e"], many["p99_e2e"])
        return big["p99_e2e"] > ratio * many["p99_e2e"]

    lo, hi = 0, 1  # not behind at lo (0: no traffic), to be tried at hi
    while not behind(hi):
        if hi >= max_rate:
            return {
                "rate": None,
                "big_p99": None,
                "many_p99": None,
                "below": hi,
                "below_big_p99": p99s[hi][0],
                "below_many_p99": p99s[hi][1],
                "ratios": {r: b / m for r, (b, m) in sorted(p99s.items())},
            }
        lo, hi = hi, min(2 * hi, max_rate)
    # Upward from the last rate within, not by halving: the crossing tends to lie just past it (the
    # one GPU's capacity), so this tries fewer rates, and every rate below the answer is within.
    rate = lo + 1
    while rate < hi and not behind(rate):
        rate += 1
    lo, hi = rate - 1, rate
    big, many = p99s[hi]
    below = p99s.get(lo, (None, None))
    return {
        "rate": hi,
        "big_p99": big,
        "many_p99": many,
        "below": lo or None,
        "below_big_p99": below[0],
        "below_many_p99": below[1],
        "ratios": {r: b / m for r, (b, m) in sorted(p99s.items())},
    }
