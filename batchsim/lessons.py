"""The lessons' experiments, one function per notebook, each returning numbers and a picture.

Every notebook of the course is a thin driver over a function here. A function
takes plain arguments (a rate, a batch size, a GPU's name), runs the simulator or
the formulas, and returns ``(summary, figure)``: a dict of the figures the lesson
talks about (with a printable ``table``) and a matplotlib ``Figure``. The sliders
in ``batchsim.widgets`` call these functions and nothing else; the tests call
them directly and check that the numbers move the way the lesson says they do.

The simulated server is a GPU running a model from ``batchsim.catalog``, timed by
the roofline model, with the KV budget its memory leaves (``batchsim.server``):
by default Llama-3-8B in fp16 on an A100-80GB, the scenarios' server. Figures are
``matplotlib.figure.Figure`` objects built without pyplot, so redrawing a panel a
hundred times leaves no figure behind.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .arrivals import Constant, Gamma, Poisson
from .cost import cost_summary, implied_price_per_hour
from .errors import ConfigError, check_choice, check_int_at_least, check_nonneg, check_positive
from .lengths import Fixed, LogNormal, Uniform
from .lesson_figures import POLICY_COLORS, draw_cdf, draw_step_series, draw_timeline, mean_ci
from .metrics import SLO, format_table, summarize
from .policies import POLICY_NAMES, Continuous, Static, make_policy
from .roofline import knee_batch
from .server import Server
from .simulator import simulate
from .steptime import ConstantStepTime
from .theory import MD1, bus_fill_wait
from .traces import Trace, read_trace
from .workload import Workload, make_workload, trace_workload

__all__ = [
    "why_batch", "batching_policies", "memory_wall", "cost", "roofline", "theory_vs_simulation",
    "predicted_vs_measured", "real_day", "find_trace", "LESSON_GPU", "LESSON_MODEL", "POLICY_COLORS", "CLAIM",
]

#: The lessons' server, the same as the named scenarios': Llama-3-8B in fp16 on one A100-80GB.
LESSON_GPU = "A100-80GB"
LESSON_MODEL = "llama-3-8b"

#: The claim the course teaches students to check (from the project's seed material):
#: "Without batching: 1 GPU serves 10 RPS = $0.10/request. With batching (size=32):
#: 1 GPU serves 100 RPS = $0.01/request. Savings: 10x."
CLAIM = {"taxi_rps": 10.0, "taxi_per_request": 0.10, "batch": 32, "batch_rps": 100.0, "batch_per_request": 0.01}


def _server(gpu: str, model: str, price_per_hour: float | None = None, **kw) -> Server:
    return Server.named(gpu, model, price_per_hour=price_per_hour, **kw)


def _run(wl: Workload, policies: dict, server: Server, slo: SLO | None = None, price: float | None = None):
    """Simulate each policy on the same workload; return ({label: SimResult}, {label: summary with dollars})."""
    results, rows = {}, {}
    price = server.price if price is None else price
    for label, policy in policies.items():
        res = simulate(wl, policy, server.step_time, kv_budget_tokens=server.kv.tokens)
        s = summarize(res, slo)
        s.update(cost_summary(s, price))
        results[label], rows[label] = res, s
    return results, rows


def _bar_labels(ax) -> None:
    ax.tick_params(axis="x", labelsize=8)


# -- notebook 1 ---------------------------------------------------------------------------------

def why_batch(rate: float = 8.0, max_batch: int = 16, max_wait: float = 0.2, price_per_hour: float | None = None,
              requests: int = 400, seed: int = 0, gpu: str = LESSON_GPU, model: str = LESSON_MODEL) -> tuple[dict, Figure]:
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
    server = _server(gpu, model, price_per_hour)
    wl = make_workload(Poisson(rate), Uniform(32, 256), Uniform(16, 64), n=requests, seed=seed)
    policies = {"taxi": make_policy("taxi"), "static": make_policy("static", max_batch=max_batch),
                "dynamic": make_policy("dynamic", max_batch=max_batch, max_wait=max_wait)}
    _, rows = _run(wl, policies, server)
    keys = ["request_throughput", "output_throughput", "mean_e2e", "p99_e2e", "mean_batch_size", "busy_fraction",
            "cost_per_request"]
    taxi_capacity = 1.0 / _ride_seconds(server, 144, 40)
    summary = {"policies": rows, "table": format_table(rows, keys), "rate": rate, "price_per_hour": server.price,
               "taxi_capacity": taxi_capacity, "server": server.describe(),
               "notes": [f"server: {server.describe()}",
                         f"one taxi ride (a 144-token prompt, 40 tokens out) takes {1 / taxi_capacity:.2f} s, "
                         f"so the taxi serves at most {taxi_capacity:.1f} requests/s"]}

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
    ax.bar(x - 0.2, [rows[n]["mean_e2e"] for n in names], width=0.4, color=colors)
    ax.bar(x + 0.2, [rows[n]["p99_e2e"] for n in names], width=0.4, color=colors, alpha=0.5, hatch="//")
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("seconds, arrival to last token")
    ax.set_title("latency: mean (solid) and p99 (hatched)")
    ax = axes[1, 0]
    ax.bar(labels, [rows[n]["cost_per_request"] * 1000 for n in names], color=colors)
    ax.set_ylabel("dollars per 1,000 requests")
    ax.set_title(f"cost at \\${server.price:g}/hour (idle time is paid too)")
    ax = axes[1, 1]
    ax.bar(labels, [rows[n]["mean_batch_size"] for n in names], color=colors)
    ax.set_ylabel("requests per forward pass")
    ax.set_title("how full the bus really was")
    for ax in axes.flat:
        _bar_labels(ax)
    fig.suptitle(f"{requests} requests at {rate:.3g}/s on {server.model.name}, {server.gpu.name}: the taxi and the bus")
    return summary, fig


def _ride_seconds(server: Server, prompt: int, output: int) -> float:
    """One request alone: its prefill, then output - 1 decode steps over a growing context."""
    st = server.step_time
    k = np.arange(output - 1, dtype=np.float64)
    decode = st.times(np.zeros(output - 1), np.ones(output - 1), prompt + k)
    return st.step_time(prefill_tokens=prompt) + float(decode.sum())


# -- notebook 2 ---------------------------------------------------------------------------------

def batching_policies(policy: str = "dynamic", rate: float = 4.0, max_batch: int = 16, max_wait: float = 0.5,
                      max_seqs: int = 64, requests: int = 300, show: int = 40, seed: int = 0,
                      gpu: str = LESSON_GPU, model: str = LESSON_MODEL) -> tuple[dict, Figure]:
    """Static, dynamic and continuous batching (and the taxi) on one workload of mixed answer lengths.

    The figure shows, for ``policy``, the bus timeline of the first ``show`` requests (who
    waits, who rides which batch, when each is delivered) and, for all four policies, the
    distribution of end-to-end latency. Answers range from 8 to 256 tokens, so padded
    batches carry finished rows to the end of their longest answer.
    """
    check_choice("policy", policy, POLICY_NAMES)
    check_positive("rate", rate)
    check_int_at_least("requests", requests, 1)
    check_int_at_least("show", show, 1)
    server = _server(gpu, model)
    wl = make_workload(Poisson(rate), Uniform(32, 512), Uniform(8, 256), n=requests, seed=seed)
    policies = {n: make_policy(n, max_batch=max_batch, max_wait=max_wait, max_seqs=max_seqs) for n in POLICY_NAMES}
    results, rows = _run(wl, policies, server)
    keys = ["request_throughput", "output_throughput", "mean_ttft", "mean_e2e", "p99_e2e", "mean_queue_wait",
            "mean_batch_size", "padded_row_fraction"]
    summary = {"policies": rows, "table": format_table(rows, keys), "policy": policy,
               "notes": [f"server: {server.describe()}; {requests} requests at {rate:g}/s, answers 8-256 tokens"]}

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.3, 1])
    draw_timeline(ax1, results[policy].records, first=show,
                  title=f"{policy}: grey = waiting at the stop, colour = riding a batch")
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
    fig.suptitle(f"{policy} at {rate:g} req/s: {s['request_throughput']:.2f} req/s served, "
                 f"mean batch {s['mean_batch_size']:.1f}, p99 {s['p99_e2e']:.1f} s")
    return summary, fig


# -- notebook 3 ---------------------------------------------------------------------------------

def memory_wall(kv_budget_gb: float = 8.0, prompt_tokens: int = 1024, output_tokens: int = 512, max_batch: int = 32,
                requests: int = 96, gpu: str = LESSON_GPU, model: str = "llama-2-7b",
                block_size: int = 16) -> tuple[dict, Figure]:
    """How many requests fit in the KV cache: the memory wall, and preemption in continuous batching.

    A burst of ``requests`` identical requests (``prompt_tokens`` in, ``output_tokens``
    out) arrives almost at once, as in an offline job. The KV cache gets ``kv_budget_gb``
    gigabytes (at the model's bytes per token). A padded batch reserves prompt + output
    for every row when it forms, so at most budget / (prompt + output) rows ride. A
    continuous batch allocates blocks as tokens are produced: it admits more rows, and
    when the blocks run out it preempts the newest request, which later recomputes.
    """
    check_positive("kv_budget_gb", kv_budget_gb)
    check_int_at_least("prompt_tokens", prompt_tokens, 1)
    check_int_at_least("output_tokens", output_tokens, 1)
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("requests", requests, 1)
    server = _server(gpu, model, kv_bytes=kv_budget_gb * 1e9)
    budget = server.kv.tokens
    context = prompt_tokens + output_tokens
    if context > budget:
        raise ConfigError(f"kv_budget_gb must hold one request of {context} tokens "
                          f"({context * server.kv.bytes_per_token / 1e9:.2f} GB), got {kv_budget_gb!r}")
    wl = make_workload(Constant(1000.0), Fixed(prompt_tokens), Fixed(output_tokens), n=requests, seed=0)
    policies = {"static": Static(max_batch),
                "continuous": Continuous(max_seqs=max_batch, max_batched_tokens=max(2048, prompt_tokens),
                                         block_size=block_size)}
    results, rows = _run(wl, policies, server)
    fits = budget // context
    keys = ["completed", "output_throughput", "mean_e2e", "p99_e2e", "mean_batch_size", "max_batch_size",
            "kv_peak_tokens", "preemptions"]
    summary = {
        "policies": rows, "table": format_table(rows, keys), "kv_budget_tokens": budget,
        "kv_bytes_per_token": server.kv.bytes_per_token, "rows_that_fit": int(fits),
        "memory_bound": fits < max_batch,
        "notes": [f"{server.model.name}: {server.kv.bytes_per_token / 1024:.0f} KiB of KV per token; "
                  f"{kv_budget_gb:g} GB holds {budget:,} tokens = {fits} requests of {context} tokens",
                  f"you asked for {max_batch} rows: " + (f"memory caps a padded batch at {fits}" if fits < max_batch
                                                           else "memory is not the limit")],
    }

    fig = Figure(figsize=(11, 7.2), layout="constrained")
    axes = fig.subplots(2, 2)
    ax = axes[0, 0]
    ctx = np.linspace(128, max(8192, 2 * context), 200)
    ax.plot(ctx, budget / ctx, color="k", lw=1.5, label=f"rows that fit in {kv_budget_gb:g} GB")
    ax.axhline(max_batch, color="tab:red", ls="--", lw=1, label=f"batch you asked for ({max_batch})")
    ax.plot([context], [fits], "o", color="tab:red", ms=8)
    ax.fill_between(ctx, budget / ctx, max(max_batch, fits) * 4, color="tab:red", alpha=0.08)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(0.5, max(max_batch, fits) * 4)
    ax.set_xlabel("context per request (prompt + output tokens)")
    ax.set_ylabel("requests in the batch")
    ax.set_title("the memory wall: above the line does not fit")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    for name, res in results.items():
        draw_step_series(ax, res.records, "kv_in_use", name, POLICY_COLORS[name])
    ax.axhline(budget, color="k", ls="--", lw=1, label="budget")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV tokens in use")
    ax.set_title("KV cache in use (padded batches reserve up front)")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    for name, res in results.items():
        draw_step_series(ax, res.records, "batch_size", name, POLICY_COLORS[name])
    ax.axhline(max_batch, color="tab:red", ls="--", lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("rows in the step")
    ax.set_title("batch size over time")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    names = list(rows)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [rows[n]["output_throughput"] for n in names], width=0.4,
           color=[POLICY_COLORS[n] for n in names])
    ax.set_ylabel("output tokens/s")
    ax2 = ax.twinx()
    ax2.bar(x + 0.2, [rows[n]["preemptions"] for n in names], width=0.4, color="0.6")
    ax2.set_ylabel("preemptions (grey)")
    ax.set_xticks(x, names)
    ax.set_title("throughput (colour) and preemptions (grey)")
    fig.suptitle(f"{server.model.name}: {kv_budget_gb:g} GB of KV cache, {context}-token requests, batch {max_batch}")
    return summary, fig


# -- notebook 4 ---------------------------------------------------------------------------------

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


def cost(gpu: str = LESSON_GPU, price_per_hour: float | None = None, max_batch: int = 32, model: str = LESSON_MODEL,
         requests: int = 256, prompt_tokens: int = 256, output_tokens: int = 128) -> tuple[dict, Figure]:
    """Dollars per request and per million tokens against batch size, on a GPU kept busy.

    A backlog of ``requests`` identical requests is served in static batches of each size
    in 1, 2, 4, ..., 128; a rented GPU is paid by the hour, so $/request = $/hour /
    (3600 x requests per second). Also checks the seed material's claim ("10 RPS =
    $0.10/request ... 100 RPS = $0.01/request"): what hourly price do those figures imply?
    """
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("requests", requests, 1)
    server = _server(gpu, model, price_per_hour)
    price = server.price
    wl = make_workload(Constant(1000.0), Fixed(prompt_tokens), Fixed(output_tokens), n=requests, seed=0)
    batches = sorted(set(b for b in BATCHES if b <= max(max_batch, 1)) | {1, max_batch})
    _, rows = _run(wl, {f"batch {b}": Static(b) for b in batches}, server, price=price)
    taxi, chosen = rows["batch 1"], rows[f"batch {max_batch}"]
    claim_price = implied_price_per_hour(CLAIM["taxi_rps"], CLAIM["taxi_per_request"])
    claim_price_batch = implied_price_per_hour(CLAIM["batch_rps"], CLAIM["batch_per_request"])
    ratio = taxi["cost_per_request"] / chosen["cost_per_request"]
    keys = ["request_throughput", "output_throughput", "mean_batch_size", "cost_per_request", "cost_per_1m_tokens"]
    summary = {
        "batches": rows, "table": format_table(rows, keys), "price_per_hour": price, "saving": ratio,
        "cost_per_request": chosen["cost_per_request"], "cost_per_1m_tokens": chosen["cost_per_1m_tokens"],
        "claim_implied_price": claim_price, "claim_implied_price_batch": claim_price_batch,
        "claim_ratio": CLAIM["taxi_per_request"] / CLAIM["batch_per_request"],
        "notes": [
            f"{server.describe()}",
            f"batch {max_batch} is {ratio:.1f}x cheaper per request than batch 1 on this GPU "
            f"(${chosen['cost_per_request'] * 1000:.3f} vs ${taxi['cost_per_request'] * 1000:.3f} per 1,000 requests)",
            f"the claim '10 RPS = $0.10/request' implies 10 x 3600 x $0.10 = ${claim_price:,.0f} per GPU-hour; "
            f"this GPU is assumed to cost ${price:.2f}",
        ],
    }

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[1.2, 1.2, 1])
    b = np.array(batches)
    per_req = np.array([rows[f"batch {k}"]["cost_per_request"] for k in batches])
    per_tok = np.array([rows[f"batch {k}"]["cost_per_1m_tokens"] for k in batches])
    ax1.plot(b, per_req * 1000, "o-", color="tab:blue")
    ax1.plot([max_batch], [chosen["cost_per_request"] * 1000], "o", color="tab:red", ms=10)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("batch size")
    ax1.set_ylabel("\\$ per 1,000 requests")
    ax1.set_title(f"\\$ per request at \\${price:.2f}/hour")
    ax2.plot(b, per_tok, "s-", color="tab:green")
    ax2.plot([max_batch], [chosen["cost_per_1m_tokens"]], "s", color="tab:red", ms=10)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("batch size")
    ax2.set_ylabel("\\$ per 1M output tokens")
    ax2.set_title(f"{max_batch} vs 1: {ratio:.1f}x cheaper")
    ax3.bar(["claim\n(10 RPS at \\$0.10)", f"{server.gpu.name}\n(assumed)"], [claim_price, price],
            color=["tab:red", "tab:blue"])
    ax3.set_yscale("log")
    ax3.set_ylabel("\\$ per GPU-hour")
    ax3.set_title("the price the claim implies")
    for x, v in enumerate([claim_price, price]):
        ax3.text(x, v, f"\\${v:,.2f}" if v < 100 else f"\\${v:,.0f}", ha="center", va="bottom", fontsize=9)
    fig.suptitle(f"{server.model.name} on {server.gpu.name}: a backlog of {requests} requests, "
                 f"{prompt_tokens} tokens in, {output_tokens} out")
    return summary, fig


# -- notebook 5 ---------------------------------------------------------------------------------

def roofline(gpu: str = LESSON_GPU, model: str = LESSON_MODEL, batch: int = 32, context: int = 512,
             dtype: str | None = None, max_batch: int = 1024) -> tuple[dict, Figure]:
    """Step time and tokens/s of one decode step against batch size: why batching works.

    Below the knee the step is memory-bound (every step reads all the weights, however
    many rows share it), so tokens/s grows almost in proportion to the batch. Past the
    knee it is compute-bound and tokens/s flattens. ``context``: cached tokens per row,
    whose KV reads grow with the batch and push the knee out (or remove it).
    """
    check_int_at_least("batch", batch, 1)
    check_nonneg("context", context)
    check_int_at_least("max_batch", max_batch, 2)
    server = Server.named(gpu, model, dtype=dtype)
    st = server.step_time
    b = np.unique(np.round(np.logspace(0, np.log10(max_batch), 120)).astype(int))
    t = st.decode(b, context)
    at = st.decode(np.array([batch]), context)
    knee = knee_batch(st, context)
    knee0 = knee_batch(st, 0)
    one = st.decode(np.array([1]), context)
    summary = {
        "knee": knee, "knee_no_context": knee0, "batch": batch,
        "step_ms": float(at["step_s"][0] * 1e3), "tokens_per_s": float(at["tokens_per_s"][0]),
        "bound": "compute" if bool(at["compute_bound"][0]) else "memory",
        "speedup_vs_batch1": float(at["tokens_per_s"][0] / one["tokens_per_s"][0]),
        "weight_gb": server.model.weight_bytes(server.dtype) / 1e9,
        "table": "\n".join([
            f"{server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached tokens per row",
            f"batch {batch}: step {at['step_s'][0] * 1e3:.2f} ms ({'compute' if at['compute_bound'][0] else 'memory'}-bound), "
            f"{at['tokens_per_s'][0]:,.0f} tokens/s = {at['tokens_per_s'][0] / one['tokens_per_s'][0]:.1f}x batch 1",
            f"knee (first compute-bound batch): {knee if knee is not None else 'none: KV reads keep it memory-bound'}"
            f"; with no context: {knee0}",
        ]),
    }
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(b, t["step_s"] * 1e3, color="k", lw=2, label="step time")
    ax1.plot(b, t["memory_s"] * 1e3, color="tab:blue", ls="--", label="memory: weights + KV")
    ax1.plot(b, t["compute_s"] * 1e3, color="tab:orange", ls="--", label="compute: FLOPs")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("decode batch size")
    ax1.set_ylabel("ms per step")
    ax1.set_title("one decode step: the slower side wins")
    ax2.plot(b, t["tokens_per_s"], color="tab:purple", lw=2)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("decode batch size")
    ax2.set_ylabel("tokens per second")
    ax2.set_title("throughput: grows with the batch, then flattens")
    for ax in (ax1, ax2):
        if knee is not None:
            ax.axvline(knee, color="tab:red", ls=":", lw=1.5, label=f"knee: {knee}")
        ax.axvline(batch, color="0.3", lw=1, alpha=0.6)
    ax1.plot([batch], at["step_s"] * 1e3, "o", color="tab:red")
    ax2.plot([batch], at["tokens_per_s"], "o", color="tab:red")
    ax1.legend(fontsize=8)
    fig.suptitle(f"roofline: {server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached tokens per row")
    return summary, fig


# -- notebook 6 ---------------------------------------------------------------------------------

def theory_vs_simulation(load: float = 0.7, replications: int = 10, seats: int = 8, requests: int = 2000,
                         service_ms: float = 20.0, seed: int = 0) -> tuple[dict, Figure]:
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
        r["inside"] = bool(abs(r["simulated"] - r["theory"]) <= r["ci95"]) if np.isfinite(r["ci95"]) else None
    lines = [f"{'':14s} {'theory ms':>10s} {'simulated ms':>13s} {'+/- 95% ms':>11s} {'error':>7s}"]
    for k, r in rows.items():
        ci = f"{r['ci95'] * 1e3:11.2f}" if np.isfinite(r["ci95"]) else f"{'-':>11s}"
        lines.append(f"{k:14s} {r['theory'] * 1e3:10.2f} {r['simulated'] * 1e3:13.2f} {ci} {r['error']:7.1%}")
    summary = {"rows": rows, "arrival_rate": lam, "table": "\n".join(lines),
               "taxi_replications": taxi_means, "bus_replications": bus_means,
               "notes": [f"{replications} replications of {requests} requests at {lam:.1f} req/s "
                         f"(load {load:.2f} on a {service_ms:g} ms server)"]}

    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    rho = np.linspace(0.02, 0.97, 200)
    ax1.plot(rho, rho * s / (2 * (1 - rho)) * 1e3, color="k", label="M/D/1 theory")
    ax1.errorbar([load], [tm * 1e3], yerr=[th * 1e3] if np.isfinite(th) else None, fmt="o", color="tab:red",
                 capsize=4, label="simulated, 95% CI")
    ax1.set_yscale("log")
    ax1.set_xlabel("load (utilisation)")
    ax1.set_ylabel("mean wait in queue (ms)")
    ax1.set_title("the taxi: waiting explodes near full load")
    ax1.legend(fontsize=8)
    n = np.arange(1, 33)
    ax2.plot(n, (n - 1) / (2 * lam) * 1e3, color="k", label="(N-1)/(2 lambda)")
    ax2.errorbar([seats], [bm * 1e3], yerr=[bh * 1e3] if np.isfinite(bh) else None, fmt="o", color="tab:blue",
                 capsize=4, label="simulated, 95% CI")
    ax2.set_xlabel("seats on the bus (N)")
    ax2.set_ylabel("mean wait for the bus to fill (ms)")
    ax2.set_title(f"the bus at {lam:.0f} arrivals/s")
    ax2.legend(fontsize=8)
    ax3.plot(np.arange(1, replications + 1), np.array(taxi_means) / md1, "o", color="tab:red", ms=4, label="taxi")
    ax3.plot(np.arange(1, replications + 1), np.array(bus_means) / bus, "s", color="tab:blue", ms=4, label="bus")
    ax3.axhline(1.0, color="k", lw=1)
    ax3.set_xlabel("replication")
    ax3.set_ylabel("simulated / theory")
    ax3.set_title("each run is noisy; their mean is not")
    ax3.legend(fontsize=8)
    fig.suptitle(f"theory meets simulation: load {load:.2f}, {replications} replications of {requests} requests")
    return summary, fig


# -- notebook 7 ---------------------------------------------------------------------------------

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


# -- notebook 8 ---------------------------------------------------------------------------------

AZURE_TRACE = "azure_llm_2023_conv.csv"

#: A synthetic stand-in for the Azure 2023 conversation trace when the file is absent, fitted to
#: the statistics stated in ../shared/traces/README.md: about 5.5 requests/s with inter-arrival
#: CV about 1.1; prompt tokens mean 1,155 (median 1,020); output tokens mean 211 (median 129).
AZURE_FIT = {"rate": 5.5, "cv": 1.1, "prompt_mean": 1155, "prompt_median": 1020, "output_mean": 211,
             "output_median": 129}


def find_trace(name: str = AZURE_TRACE) -> Path | None:
    """The trace file: $BATCHSIM_TRACES/NAME, else ../shared/traces/NAME from the working folder
    or any folder above it (a notebook runs in notebooks/), else from the package's checkout."""
    places = []
    if os.environ.get("BATCHSIM_TRACES"):
        places.append(Path(os.environ["BATCHSIM_TRACES"]) / name)
    for base in [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[1]]:
        places.append(base / ".." / "shared" / "traces" / name)
        places.append(base / "shared" / "traces" / name)
    for p in places:
        if p.is_file():
            return p.resolve()
    return None


def _day_workload(minutes: float, start_minute: float, trace: str | Path | None, seed: int) -> tuple[Workload, str]:
    """The trace window, or the synthetic fit when ``trace`` is "synthetic" or None and no file is found."""
    if trace is None:
        path = find_trace()
    elif str(trace) == "synthetic":
        path = None
    else:
        path = Path(trace)
        if not path.is_file():
            raise ConfigError(f"trace must be a trace file, 'synthetic' or None, got {str(trace)!r} (no such file)")
    if path is not None:
        tr = read_trace(path)
        t0 = start_minute * 60.0
        keep = (tr.arrival_s >= t0) & (tr.arrival_s < t0 + minutes * 60.0)
        if not keep.any():
            raise ConfigError(f"start_minute must fall inside the trace ({tr.duration / 60:.0f} minutes), got {start_minute!r}")
        window = Trace(tr.path, tr.arrival_s[keep] - t0, tr.prompt_tokens[keep], tr.output_tokens[keep])
        return trace_workload(window), f"Azure LLM trace 2023 (conversation), minutes {start_minute:g}-{start_minute + minutes:g}"
    f = AZURE_FIT
    wl = make_workload(Gamma(f["rate"], f["cv"]), LogNormal(f["prompt_mean"], f["prompt_median"]),
                       LogNormal(f["output_mean"], f["output_median"]), duration=minutes * 60.0, seed=seed)
    return wl, f"synthetic fit of the Azure conversation trace, {minutes:g} minutes"


def real_day(policy: str = "continuous", max_batch: int = 64, slo_ttft: float = 2.0, slo_tpot_ms: float = 100.0,
             minutes: float = 5.0, start_minute: float = 0.0, gpu: str = LESSON_GPU, model: str = LESSON_MODEL,
             trace: str | Path | None = None, seed: int = 0) -> tuple[dict, Figure]:
    """A real day of traffic: replay the Azure conversation trace and ask which policy meets the SLO.

    ``trace``: a trace file, "synthetic" (a workload fitted to the Azure trace's published
    statistics), or None (the Azure trace from ``find_trace``, else the synthetic fit).
    ``minutes`` of the trace from ``start_minute`` go through all four policies (static
    and dynamic batches of ``max_batch``, continuous with ``max_batch`` rows). A request
    meets the SLO when its first token comes within ``slo_ttft`` seconds and its tokens
    then follow at most ``slo_tpot_ms`` apart on average. Shows the traffic, the chosen
    policy's latency over time, and every policy's share of requests within the SLO.
    """
    check_choice("policy", policy, POLICY_NAMES)
    check_int_at_least("max_batch", max_batch, 1)
    check_positive("minutes", minutes)
    check_nonneg("start_minute", start_minute)
    wl, source = _day_workload(minutes, start_minute, trace, seed)
    if not len(wl):
        raise ConfigError(f"minutes must cover at least one request, got {minutes!r}")
    server = _server(gpu, model)
    slo = SLO(ttft=slo_ttft, tpot=slo_tpot_ms / 1000.0)
    policies = {n: make_policy(n, max_batch=max_batch, max_wait=0.5, max_seqs=max_batch,
                               max_batched_tokens=8192, chunked_prefill=True) for n in POLICY_NAMES}
    results, rows = _run(wl, policies, server, slo=slo)
    keys = ["completed", "request_throughput", "p99_ttft", "mean_tpot", "p99_e2e", "mean_batch_size",
            "goodput", "cost_per_request"]
    best = max(rows, key=lambda k: (rows[k]["slo_attainment"], -rows[k]["cost_per_request"]))
    summary = {
        "policies": rows, "table": format_table(rows, keys), "source": source, "requests": len(wl),
        "slo_attainment": {k: v["slo_attainment"] for k, v in rows.items()}, "best": best,
        "notes": [f"traffic: {source}, {len(wl)} requests; server: {server.describe()}",
                  f"SLO: first token within {slo_ttft:g} s and {slo_tpot_ms:g} ms per token after it; "
                  f"best here: {best} ({rows[best]['slo_attainment']:.1%} of requests within it)"],
    }

    fig = Figure(figsize=(11, 7.0), layout="constrained")
    axes = fig.subplots(2, 2)
    rec = results[policy].records
    span = minutes * 60.0
    edges = np.arange(0.0, span + 10.0, 10.0)
    ax = axes[0, 0]
    counts, _ = np.histogram(rec.arrival, edges)
    ax.step(edges[:-1] / 60.0, counts / 10.0, where="post", color="k", lw=1)
    ax.set_xlabel("minute")
    ax.set_ylabel("arrivals per second (10 s bins)")
    ax.set_title("the traffic")
    ax = axes[0, 1]
    ttft = rec.first_token - rec.arrival
    done = np.isfinite(ttft)
    ax.plot(rec.arrival[done] / 60.0, ttft[done], ".", ms=2, color=POLICY_COLORS[policy], alpha=0.6)
    ax.axhline(slo_ttft, color="tab:red", ls="--", lw=1, label=f"SLO {slo_ttft:g} s")
    ax.set_yscale("log")
    ax.set_xlabel("arrival minute")
    ax.set_ylabel("time to first token (s)")
    ax.set_title(f"{policy}: does the queue keep up?")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    for name in POLICY_NAMES:
        r = results[name].records
        draw_cdf(ax, r.first_token - r.arrival, name, POLICY_COLORS[name], lw=3 if name == policy else 1.2)
    ax.axvline(slo_ttft, color="tab:red", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("share of requests")
    ax.set_title("TTFT distribution, all policies")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    names = list(POLICY_NAMES)
    ax.bar(names, [rows[n]["slo_attainment"] * 100 for n in names], color=[POLICY_COLORS[n] for n in names],
           edgecolor=["k" if n == policy else "none" for n in names], linewidth=2)
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of requests within the SLO")
    ax.set_title(f"who meets the SLO (batch {max_batch})")
    fig.suptitle(f"{source}: {len(wl)} requests on {server.model.name}, {server.gpu.name}")
    return summary, fig
