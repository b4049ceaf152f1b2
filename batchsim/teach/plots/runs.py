"""Pictures of one run's records: the latency distribution, the bus timeline, the batch and KV
memory over time."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from .canvas import COLORS, log_x, new_figure

__all__ = ["latency_cdf_figure", "timeline_figure", "step_series", "batch_kv_figure"]


# --- latency distribution ------------------------------------------------------------------


def latency_cdf_figure(results: dict, metric: str = "e2e", title: str = "") -> Figure:
    """Empirical CDFs of a latency (e2e, ttft or queue wait), one curve per run."""
    fig = new_figure(8.5, 4.5)
    ax = fig.add_subplot()
    lo = np.inf
    for i, (label, res) in enumerate(results.items()):
        r = res.records
        done = r.completed_mask
        start = {"e2e": r.finish, "ttft": r.first_token, "wait": r.start}[metric]
        v = np.sort((start - r.arrival)[done])
        if not len(v):
            continue
        v = np.maximum(v, 1e-4)
        lo = min(lo, v[0])
        ax.step(
            v, np.arange(1, len(v) + 1) / len(v), where="post", color=COLORS[i % 10], label=label
        )
    log_x(ax)
    ax.set_ylim(0, 1.01)
    ax.axhline(0.99, color="grey", lw=0.8, ls=":")
    ax.text(ax.get_xlim()[0], 0.985, " p99", va="top", fontsize=8, color="grey")
    names = {"e2e": "end-to-end latency", "ttft": "time to first token", "wait": "queue wait"}
    ax.set_xlabel(f"{names[metric]} (s, log scale)")
    ax.set_ylabel("share of requests")
    ax.set_title(
        title or f"{names[metric]}: further left is better, the tail is what users remember"
    )
    ax.grid(alpha=0.3, which="both")
    # Beside the axes, not on them: with several runs a legend inside covers the curves' tails.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


# --- the bus timeline -------------------------------------------------------------------------


def _streams(res) -> bool:
    from ...core.metrics import streams_by_default

    return streams_by_default(res.policy)


def _draw_timeline(ax, res, max_requests: int, first: int = 0) -> tuple[float, float] | None:
    """One run's Gantt chart on ``ax``; returns its time span (None when nothing finished)."""
    r = res.records
    n = len(r)
    ids = np.arange(first, min(n, first + max_requests))
    ids = ids[~np.isnan(r.finish[ids])]
    if not len(ids):
        ax.text(0.5, 0.5, "no completed requests", transform=ax.transAxes, ha="center")
        return None
    rows = np.arange(len(ids))
    wait = np.stack(
        [np.column_stack([r.arrival[ids], rows]), np.column_stack([r.start[ids], rows])], axis=1
    )
    ride = np.stack(
        [np.column_stack([r.start[ids], rows]), np.column_stack([r.finish[ids], rows])], axis=1
    )
    if _streams(res):
        # Continuous batching has no batches to tell apart: one bus that never stops, which each
        # request boards at the next step and leaves when its own answer ends. One colour says so.
        colors = [COLORS[4]] * len(ids)
    else:
        # A padded batch is the set of requests that boarded at the same instant (and leave
        # together).
        _, batch_of = np.unique(np.round(r.start[ids], 9), return_inverse=True)
        colors = [COLORS[b % 10] for b in batch_of]
    ax.add_collection(LineCollection(wait, colors="0.6", linewidths=1))
    ax.add_collection(LineCollection(ride, colors=colors, linewidths=4, capstyle="butt"))
    ax.scatter(r.first_token[ids], rows, marker="|", color="k", s=30, zorder=3)
    ax.set_ylim(len(ids) - 0.5, -0.5)
    ax.set_ylabel("request")
    return float(r.arrival[ids].min()), float(r.finish[ids].max())


def timeline_figure(results: dict, max_requests: int = 40, title: str = "") -> Figure:
    """Gantt chart per run of the first ``max_requests`` requests: wait (grey), ride (colour), first
    token (|).

    All runs share one time axis, so a run that takes twice as long looks twice as long."""
    k = min(len(results), 6)
    fig = new_figure(10, (2.4 if k <= 4 else 1.9) * k + 0.8)
    axes = fig.subplots(k, 1, squeeze=False, sharex=True)[:, 0]
    spans = []
    for ax, (label, res) in zip(axes, list(results.items())[:k]):
        span = _draw_timeline(ax, res, max_requests)
        if span is not None:
            spans.append(span)
        how = (
            "one colour: a bus that never stops, each leaves when done"
            if _streams(res)
            else "one colour per batch: boarded together, delivered together"
        )
        ax.set_title(f"{label}  ({how})", fontsize=9, loc="left")
        ax.grid(alpha=0.3, axis="x")
    if spans:
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        axes[0].set_xlim(lo, lo + (hi - lo) * 1.01 + 1e-9)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(
        title
        or f"the bus timeline (first {max_requests} requests): grey = waiting at the stop, "
        "bar = riding, | = first token produced",
        fontsize=10,
    )
    return fig


# --- batch size and KV memory over time ----------------------------------------------------------


def step_series(res, key: str):
    """A step function of a step-log column over time, dropping to 0 while the server idles."""
    st = res.records.steps
    start, end, v = st["start"], st["start"] + st["duration"], st[key].astype(float)
    n = len(start)
    gap = np.concatenate([start[1:] > end[:-1] + 1e-9, [True]]) if n else np.zeros(0, dtype=bool)
    t = np.empty(4 * n)
    y = np.empty(4 * n)
    t[0::4], t[1::4], t[2::4] = start, end, end
    t[3::4] = np.concatenate([start[1:], end[-1:]]) if n else t[3::4]
    y[0::4], y[1::4] = v, v
    y[2::4] = np.where(gap, 0.0, v)
    y[3::4] = np.where(gap, 0.0, v)
    return t, y


def batch_kv_figure(results: dict, title: str = "") -> Figure:
    """Per run: batch size (left axis) and KV cache in use (right axis, with the budget) over
    time."""
    k = min(len(results), 6)
    fig = new_figure(10, 2.0 * k + 0.6)
    axes = fig.subplots(k, 1, squeeze=False)[:, 0]
    for ax, (label, res) in zip(axes, list(results.items())[:k]):
        if not len(res.records.steps["start"]):
            continue
        t, b = step_series(res, "batch_size")
        ax.plot(t, b, color=COLORS[0], lw=0.8)
        ax.set_ylabel("batch", color=COLORS[0], fontsize=8)
        ax.set_ylim(0, max(1, b.max()) * 1.15)
        ax2 = ax.twinx()
        srv = res.meta.get("server")
        scale, unit = (srv.kv.bytes_per_token / 1e9, "GB") if srv is not None else (1.0, "tokens")
        tk, kv = step_series(res, "kv_in_use")
        kv = kv * scale
        ax2.plot(tk, kv, color=COLORS[1], lw=0.8)
        budget = res.kv_budget_tokens
        note = ""
        top = max(kv.max(), 1e-9) * 1.2
        if budget is not None:
            b_ = budget * scale
            if kv.max() >= 0.3 * b_:
                ax2.axhline(b_, color=COLORS[3], ls="--", lw=1)
                top = b_ * 1.1
                note = f"   (dashed: KV budget {b_:,.1f} {unit})"
            else:
                note = f"   (KV budget {b_:,.1f} {unit}, far above: memory is not the limit)"
        ax2.set_ylim(0, top)
        ax2.set_ylabel(f"KV ({unit})", color=COLORS[1], fontsize=8)
        ax.set_title(label + note, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(title or "batch size (blue) and KV memory in use (orange) over time", fontsize=10)
    return fig
