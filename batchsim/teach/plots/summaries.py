"""Pictures of several runs' summaries: throughput against latency across a knob, the bill per
policy, a batch-size sweep."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .canvas import COLORS, log_x, new_figure, plain

__all__ = ["tradeoff_figure", "sweep_figure", "cost_figure", "batch_sweep_figure"]


# --- throughput vs latency -----------------------------------------------------------------


def tradeoff_figure(
    summaries: dict[str, dict],
    latency_key: str = "p99_e2e",
    throughput_key: str = "output_throughput",
    slo: float | None = None,
    best: str | None = None,
    title: str = "",
) -> Figure:
    """One point per run (labelled), joined in order: what each step along the knob buys and
    costs."""
    fig = new_figure(7, 4.5)
    ax = fig.add_subplot()
    labels = [k for k, s in summaries.items() if s.get(latency_key) is not None]
    x = np.array([summaries[k][latency_key] for k in labels], dtype=float)
    y = np.array([summaries[k][throughput_key] for k in labels], dtype=float)
    ax.plot(x, y, "-o", color=COLORS[0])
    for k, xi, yi in zip(labels, x, y):
        ax.annotate(
            k.split()[-1] if " " in k else k,
            (xi, yi),
            textcoords="offset points",
            xytext=(6, -10),
            fontsize=8,
        )
    if best is not None and best in summaries:
        ax.plot(
            [summaries[best][latency_key]],
            [summaries[best][throughput_key]],
            "o",
            ms=14,
            mfc="none",
            mec=COLORS[3],
            mew=2,
            label=f"largest meeting the SLO: {best}",
        )
    if slo is not None:
        ax.axvline(slo, color=COLORS[3], ls="--", lw=1, label=f"SLO: {latency_key} <= {slo:g} s")
    if len(x) and np.nanmax(x) / max(np.nanmin(x), 1e-9) > 30:
        log_x(ax)
    ax.set_xlabel(f"{latency_key.replace('_', ' ')} (s)")
    ax.set_ylabel(
        throughput_key.replace("_", " ")
        + (" (tokens/s)" if "output" in throughput_key else " (req/s)")
    )
    ax.set_title(title or "throughput vs latency: what a bigger batch buys and costs")
    ax.grid(alpha=0.3)
    if slo is not None or best is not None:
        ax.legend(fontsize=8, loc="best")
    return fig


def sweep_figure(
    summaries: dict[str, dict],
    policies: list[str],
    knob: str,
    latency_key: str = "p99_e2e",
    throughput_key: str = "output_throughput",
) -> Figure:
    """Throughput against latency, one curve per policy, each point labelled with the knob's value.

    Labels are "knob=value policy", as ``python -m batchsim sweep`` writes them.
    """
    fig = new_figure(7.5, 4.8)
    ax = fig.add_subplot()
    xs = []
    for i, pol in enumerate(policies):
        labels = [
            k
            for k, s in summaries.items()
            if k.endswith(" " + pol) and s.get(latency_key) is not None
        ]
        x = np.array([summaries[k][latency_key] for k in labels], dtype=float)
        y = np.array([summaries[k][throughput_key] for k in labels], dtype=float)
        xs.extend(x.tolist())
        ax.plot(x, y, "-o", color=COLORS[i % 10], label=pol)
        for k, xi, yi in zip(labels, x, y):
            ax.annotate(
                k.split(" ")[0].split("=", 1)[-1],
                (xi, yi),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=7,
                color=COLORS[i % 10],
            )
    if xs and max(xs) / max(min(xs), 1e-9) > 30:
        log_x(ax)
    ax.set_xlabel(f"{latency_key.replace('_', ' ')} (s)")
    ax.set_ylabel(
        throughput_key.replace("_", " ")
        + (" (tokens/s)" if "output" in throughput_key else " (req/s)")
    )
    ax.set_title(
        f"sweep of {knob}: throughput vs {latency_key.replace('_', ' ')} (points labelled with "
        f"{knob})"
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


# --- dollars ------------------------------------------------------------------------------------


def cost_figure(summaries: dict[str, dict], title: str = "") -> Figure:
    """$/request per run, split into busy time (running steps) and idle time (waiting for traffic).

    Two runs' bills differ for two reasons: how well the GPU works (busy) and how much traffic
    there is to work on (idle). The split keeps a quiet service from looking like a bad policy."""
    labels = [k for k, s in summaries.items() if s.get("cost_per_request") is not None]
    fig = new_figure(max(7, 1.3 * len(labels) + 2.5), 4.4)
    ax = fig.add_subplot()
    v = np.array([summaries[k]["cost_per_request"] for k in labels], dtype=float)
    busy = np.array(
        [
            summaries[k].get("cost_per_request_busy", summaries[k]["cost_per_request"])
            for k in labels
        ],
        dtype=float,
    )
    x = np.arange(len(labels))
    colors = [COLORS[i % 10] for i in range(len(labels))]
    ax.bar(x, busy, color=colors, label="busy: running steps")
    ax.bar(
        x,
        v - busy,
        bottom=busy,
        color=colors,
        alpha=0.3,
        hatch="//",
        edgecolor="0.5",
        label="idle: waiting for traffic",
    )
    for i, k in enumerate(labels):
        s = summaries[k]
        per_m, per_m_busy = s.get("cost_per_1m_tokens"), s.get("cost_per_1m_tokens_busy")
        text = f"${v[i]:.5f}"
        if per_m is not None:
            text += f"\n${per_m:.2f}/1M tok"
            if per_m_busy is not None:
                text += f"\n(busy ${per_m_busy:.2f})"
        ax.annotate(text, (i, v[i]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("$ per request")
    ax.set_ylim(0, (v.max() if len(v) else 1) * 1.45)
    ax.legend(fontsize=8, loc="upper right")
    price = next(
        (
            s.get("gpu_price_per_hour")
            for s in summaries.values()
            if s.get("gpu_price_per_hour") is not None
        ),
        None,
    )
    ax.set_title(
        title
        or (
            f"what a request costs at ${price:.2f}/GPU-hour: busy and idle"
            if price is not None
            else "what a request costs"
        ),
        fontsize=10,
    )
    ax.grid(alpha=0.3, axis="y")
    return fig


def batch_sweep_figure(report) -> Figure:
    """A batch-size sweep at one arrival rate: latency and throughput against the seats on the bus.

    Left, p50 and p99 end-to-end latency (log scale) with the SLO: a U, too small a bus drowns,
    too big a bus waits to fill. Right, throughput with the arrival rate and each size's capacity:
    it rises until the bus carries the traffic, then stays at the arrival rate."""
    sw = report.config["sweep"]
    b = np.array(sw["values"])
    s = [report.summaries[k] for k in sw["labels"]]
    fig = new_figure(10, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    short = b[np.array(sw["capacity"]) < sw["rate"]]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(b, [str(x) for x in b])
        ax.set_xlabel("seats on the bus (batch size)")
        ax.grid(alpha=0.3, which="both")
        if len(short):
            ax.axvspan(b.min() / 1.3, short.max() * 1.3, color="0.88", label="cannot keep up")
    ax1.plot(b, [x["p99_e2e"] for x in s], "o-", color=COLORS[3], label="p99")
    ax1.plot(b, [x["p50_e2e"] for x in s], "s--", color=COLORS[0], label="p50")
    if sw.get("slo") is not None and sw["slo_metric"] == "p99_e2e":
        ax1.axhline(sw["slo"], color="k", ls=":", lw=1, label=f"SLO {sw['slo']:g} s")
    ax1.set_yscale("log")
    ax1.yaxis.set_major_formatter(FuncFormatter(plain))
    ax1.set_ylabel("end-to-end latency (s)")
    ax1.set_title("latency: too small drowns, too big waits to fill", fontsize=9)
    ax1.legend(fontsize=8, loc="upper center")
    ax2.plot(b, [x["request_throughput"] for x in s], "o-", color=COLORS[2], label="served")
    ax2.plot(b, sw["capacity"], "^:", color="0.4", label="what the bus can carry")
    ax2.axhline(sw["rate"], color="k", ls="--", lw=1, label=f"arrivals: {sw['rate']:g}/s")
    ax2.set_ylim(0, max(sw["capacity"]) * 1.1)
    ax2.set_ylabel("requests per second")
    ax2.set_title("throughput: capped by the bus, then by the traffic", fontsize=9)
    ax2.legend(fontsize=8, loc="upper left")
    best = sw.get("best")
    fig.suptitle(
        f"{report.name}: {sw['policy']} batches at one arrival rate ({sw['rate']:g} req/s)"
        + (
            f"; the largest meeting the SLO: {best}" if best is not None else "; none meets the SLO"
        ),
        fontsize=10,
    )
    return fig
