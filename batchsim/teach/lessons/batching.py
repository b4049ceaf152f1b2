"""Notebooks 1 and 2: why batch at all, and static vs dynamic vs continuous."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Poisson
from ...core.errors import check_choice, check_int_at_least, check_nonneg, check_positive
from ...core.lengths import Uniform
from ...core.metrics import format_table
from ...core.policies import POLICY_NAMES, make_policy
from ...core.workload import make_workload
from ...machine.server import Server
from ..figures import POLICY_COLORS, draw_cdf, draw_timeline
from ..scenarios.base import column_notes
from ._common import LESSON_GPU, LESSON_MODEL, lesson_server, run_each, tick_labels


def why_batch(
    rate: float = 8.0,
    max_batch: int = 16,
    max_wait: float = 0.2,
    price_per_hour: float | None = None,
    requests: int = 400,
    seed: int = 0,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
) -> tuple[dict, Figure]:
    """The same traffic through a taxi, a bus that waits for N, and a bus with a timetable.

    Requests arrive at ``rate`` per second (Poisson) with chat-sized prompts (32-256
    tokens) and short answers (16-64 tokens). The taxi serves one at a time; the bus
    (``static``) leaves only with ``max_batch`` aboard; the bus with a timetable
    (``dynamic``) leaves when full or when its first passenger has waited ``max_wait``
    seconds. Returns each policy's throughput, mean and p99 latency, and dollars per
    request at ``price_per_hour`` (None: the GPU's catalog price).
    """
    check_positive("rate", rate)
    check_int_at_least("max_batch", max_batch, 1)
    check_nonneg("max_wait", max_wait)
    check_int_at_least("requests", requests, 1)
    server = lesson_server(gpu, model, price_per_hour)
    wl = make_workload(Poisson(rate), Uniform(32, 256), Uniform(16, 64), n=requests, seed=seed)
    policies = {
        "taxi": make_policy("taxi"),
        "static": make_policy("static", max_batch=max_batch),
        "dynamic": make_policy("dynamic", max_batch=max_batch, max_wait=max_wait),
    }
    results, rows = run_each(wl, policies, server)
    keys = [
        "request_throughput",
        "output_throughput",
        "mean_e2e",
        "p99_e2e",
        "mean_batch_size",
        "busy_fraction",
        "cost_per_request",
    ]
    taxi_capacity = 1.0 / _ride_seconds(server, 144, 40)
    edges = {n: _first_bus(results[n], rows[n]) for n in ("static", "dynamic")}
    summary = {
        "policies": rows,
        "table": format_table(rows, keys),
        "rate": rate,
        "price_per_hour": server.price,
        "taxi_capacity": taxi_capacity,
        "server": server.describe(),
        "edges": edges,
        "notes": [
            f"server: {server.describe()}",
            f"one taxi ride (a 144-token prompt, 40 tokens out) takes {1 / taxi_capacity:.2f} s, "
            f"so the taxi serves at most {taxi_capacity:.1f} requests/s",
            *_edge_notes(edges, max_batch),
        ],
    }

    fig = Figure(figsize=(10, 6.4), layout="constrained")
    axes = fig.subplots(2, 2)
    names = list(rows)
    colors = [POLICY_COLORS[n] for n in names]
    labels = ["taxi", f"bus: wait for {max_batch}", f"bus: {max_batch} or {max_wait:g} s"]
    ax = axes[0, 0]
    ax.bar(labels, [rows[n]["request_throughput"] for n in names], color=colors)
    ax.axhline(rate, color="k", ls="--", lw=1, label=f"arrivals: {rate:.3g}/s")
    ax.set_ylabel("requests served per second")
    ax.set_title("throughput")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[0, 1]
    x = np.arange(len(names))
    # Points joined by a line, not bars: a bar's length means nothing on a log axis, and the taxi's
    # minute-long queue needs one for the buses' seconds to show.
    for xi, n, c in zip(x, names, colors):
        mean, p99 = rows[n]["mean_e2e"], rows[n]["p99_e2e"]
        ax.plot([xi, xi], [mean, p99], color=c, lw=2)
        ax.plot([xi], [mean], "o", color=c, ms=9)
        ax.plot([xi], [p99], "^", color=c, ms=9, mfc="white", mew=2)
        ax.annotate(
            f"{mean:.3g} s", (xi, mean), textcoords="offset points", xytext=(8, -4), fontsize=8
        )
        ax.annotate(
            f"p99 {p99:.3g} s", (xi, p99), textcoords="offset points", xytext=(8, -4), fontsize=8
        )
    ax.set_xticks(x, labels)
    ax.set_xlim(-0.5, len(names) - 0.2)
    ax.set_yscale("log")
    ax.set_ylabel("seconds, arrival to last token (log)")
    ax.set_title("latency: mean (dot) and p99 (triangle)")
    ax = axes[1, 0]
    busy = [rows[n]["cost_per_request_busy"] * 1000 for n in names]
    idle = [(rows[n]["cost_per_request"] - rows[n]["cost_per_request_busy"]) * 1000 for n in names]
    ax.bar(labels, busy, color=colors, label="busy: running steps")
    ax.bar(
        labels,
        idle,
        bottom=busy,
        color=colors,
        alpha=0.3,
        hatch="//",
        edgecolor="0.5",
        label="idle: waiting for traffic",
    )
    ax.set_ylabel("dollars per 1,000 requests")
    ax.set_title(f"cost at \\${server.price:g}/hour: busy and idle time, both paid")
    ax.legend(fontsize=8, loc="upper right")
    ax = axes[1, 1]
    ax.bar(labels, [rows[n]["mean_batch_size"] for n in names], color=colors)
    ax.set_ylabel("requests per forward pass")
    ax.set_title("how full the bus really was")
    for ax in axes.flat:
        tick_labels(ax)
    fig.suptitle(
        f"{requests} requests at {rate:.3g}/s on {server.model.name}, {server.gpu.name}: the taxi "
        f"and the bus"
    )
    return summary, fig


#: A first bus that waits this share of the run (or more) for its passengers, on a server that is
#: then busy at least BUSY_AFTER of the time, makes a short run's req/s read as "cannot keep up":
#: the panel then says so. (On a quiet server the wait changes nothing that matters: it serves the
#: arrivals.)
EDGE_SHARE = 0.05
BUSY_AFTER = 0.9


def _first_bus(res, row: dict) -> dict:
    """When the first bus left, its share of the run, and the server's figures from then on."""
    first = float(np.nanmin(res.records.start))
    span = row["duration"]
    after = span - first
    busy = row["busy_fraction"] * span  # no step runs before the first bus leaves
    return {
        "first_departure_s": first,
        "share_of_run": first / span if span > 0 else 0.0,
        "busy_after": busy / after if after > 0 else 1.0,
        "throughput_after": row["completed"] / after if after > 0 else 0.0,
    }


def _edge_notes(edges: dict, max_batch: int) -> list[str]:
    """A line for each bus whose wait for its first passengers hides, in a short busy run, what it
    carries."""
    name = {"static": f"bus: wait for {max_batch}", "dynamic": "bus with a timetable"}
    return [
        f"{name[n]}: the GPU idled {e['first_departure_s']:.1f} s until the first bus left, "
        f"{e['share_of_run']:.0%} of this short run, so its req/s and busy understate the bus: "
        f"once running it was busy {e['busy_after']:.0%} of the time, serving "
        f"{e['throughput_after']:.1f} req/s. "
        "More REQUESTS give the long-run figure"
        for n, e in edges.items()
        if e["share_of_run"] >= EDGE_SHARE and e["busy_after"] >= BUSY_AFTER
    ]


def _ride_seconds(server: Server, prompt: int, output: int) -> float:
    """One request alone: its prefill, then output - 1 decode steps over a growing context."""
    st = server.step_time
    k = np.arange(output - 1, dtype=np.float64)
    decode = st.times(np.zeros(output - 1), np.ones(output - 1), prompt + k)
    return st.step_time(prefill_tokens=prompt) + float(decode.sum())


# -- notebook 2 ---------------------------------------------------------------------------------


def batching_policies(
    policy: str = "dynamic",
    rate: float = 4.0,
    max_batch: int = 16,
    max_wait: float = 0.5,
    max_seqs: int = 64,
    requests: int = 300,
    show: int = 40,
    seed: int = 0,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
) -> tuple[dict, Figure]:
    """Static, dynamic and continuous batching (and the taxi) on one workload of mixed answer
    lengths.

    The figure shows, for ``policy``, the bus timeline of the first ``show`` requests (who
    waits, who rides which batch, when each is delivered) and, for all four policies, the
    distribution of end-to-end latency. Answers range from 8 to 256 tokens, so padded
    batches carry finished rows to the end of their longest answer.
    """
    check_choice("policy", policy, POLICY_NAMES)
    check_positive("rate", rate)
    check_int_at_least("requests", requests, 1)
    check_int_at_least("show", show, 1)
    server = lesson_server(gpu, model)
    wl = make_workload(Poisson(rate), Uniform(32, 512), Uniform(8, 256), n=requests, seed=seed)
    policies = {
        n: make_policy(n, max_batch=max_batch, max_wait=max_wait, max_seqs=max_seqs)
        for n in POLICY_NAMES
    }
    results, rows = run_each(wl, policies, server)
    keys = [
        "request_throughput",
        "output_throughput",
        "mean_ttft",
        "mean_ttft_delivered",
        "mean_tpot",
        "mean_step_time",
        "mean_e2e",
        "p99_e2e",
        "mean_queue_wait",
        "mean_batch_size",
        "padded_row_fraction",
    ]
    summary = {
        "policies": rows,
        "table": format_table(rows, keys),
        "policy": policy,
        "notes": [
            f"server: {server.describe()}; {requests} requests at {rate:g}/s, answers 8-256 tokens",
            *column_notes(keys),
            "TPOT = (finish - first token) / (tokens - 1): for a padded batch it includes the wait "
            "for the batch's longest answer, so it is far above the step time (step ms)",
        ],
    }

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.3, 1])
    one_bus = policy == "continuous"
    draw_timeline(
        ax1,
        results[policy].records,
        first=show,
        one_bus=one_bus,
        title=f"{policy}: grey = waiting, "
        + ("colour = on the bus that never stops" if one_bus else "one colour per batch"),
    )
    for name in POLICY_NAMES:
        rec = results[name].records
        e2e = rec.finish - rec.arrival
        draw_cdf(ax2, e2e, name, POLICY_COLORS[name], lw=3 if name == policy else 1.2)
    ax2.set_xscale("log")
    ax2.set_xlabel("end-to-end latency (s)")
    ax2.set_ylabel("share of requests done within x")
    ax2.set_title("latency distribution (CDF), all four policies")
    ax2.axhline(0.99, color="0.5", ls=":", lw=1)
    ax2.text(ax2.get_xlim()[0], 0.99, " p99", va="bottom", fontsize=8, color="0.4")
    ax2.legend(fontsize=8, loc="lower right")
    s = rows[policy]
    fig.suptitle(
        f"{policy} at {rate:g} req/s: {s['request_throughput']:.2f} req/s served, mean batch "
        f"{s['mean_batch_size']:.1f}, p99 {s['p99_e2e']:.1f} s"
    )
    return summary, fig
