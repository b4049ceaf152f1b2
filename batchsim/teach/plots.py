"""Pictures of a run: the bus timetable, latency curves, the batch breathing, the bill, the roof.

Every function returns a matplotlib ``Figure`` built without pyplot, so it works
headless (no display, no backend to choose) and in a notebook alike, and leaves no
global state behind; ``save(fig, path)`` writes it as a PNG.

- ``tradeoff_figure``: throughput against p99 latency across batch sizes (or any knob).
- ``latency_cdf_figure``: the distribution of E2E (or TTFT) latency, one curve per policy.
- ``timeline_figure``: the bus timeline, a Gantt chart: each request waits at the stop
  (thin line), rides (thick bar: one colour per padded batch; one colour for continuous
  batching, whose bus never stops) and gets off. All runs share one time axis.
- ``batch_sweep_figure``: a batch-size sweep at one arrival rate, latency and throughput.
- ``batch_kv_figure``: batch size and KV memory in use over time, with the budget.
- ``cost_figure``: dollars per request (and per million output tokens) per policy, busy and idle.
- ``roofline_figure``: step time and tokens/s against decode batch size, with the knee.

``figures_for_report(report, out_dir)`` picks the figures that tell a scenario's story.
``texts(fig)`` lists the text a figure draws and ``raise_text(fig, floor_pt)`` sets what is under a
size to that size: a slide shows a figure scaled down, and its text must still read from the back row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter

__all__ = [
    "tradeoff_figure", "sweep_figure", "batch_sweep_figure", "latency_cdf_figure", "timeline_figure", "batch_kv_figure", "cost_figure",
    "roofline_figure", "figures_for_report", "save", "texts", "raise_text",
]

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _plain(x: float, _pos=None) -> str:
    """A tick label as prose writes the number: 0.001, 0.5, 20, 1,000 (never "0" for 0.0001)."""
    return f"{x:,.0f}" if x >= 1 else f"{x:.{max(0, -int(np.floor(np.log10(x))))}f}" if x > 0 else "0"


def _log_x(ax) -> None:
    """A log x axis with plain numbers (0.01, 2, 5, 10, 20) rather than 2x10^0."""
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.xaxis.set_minor_formatter(NullFormatter())


def save(fig: Figure, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    return p


def texts(fig: Figure) -> list[Text]:
    """Every text ``fig`` draws: titles, axis and tick labels, legends, annotations (visible, not blank)."""
    # Tick labels exist only once the axes are laid out: a draw makes them, as saving the figure would.
    fig.draw_without_rendering()
    # An axis keeps the labels of ticks that fell outside its view, undrawn: they are not on the page.
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - eps <= tick.get_loc() <= hi + eps:
                    undrawn.update((id(tick.label1), id(tick.label2)))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in undrawn]


def raise_text(fig: Figure, floor_pt: float) -> Figure:
    """``fig`` with every text smaller than ``floor_pt`` set to ``floor_pt``; larger text keeps its size.

    Tick labels are raised through their axis, not one label at a time: the axis makes new labels
    from its own settings when the ticks change, and chooses how many ticks by the labels' size.
    Constrained layout then makes room for the larger text when the figure is drawn. An axis label
    that the larger size makes longer than its axes (a y label of a short panel) is broken onto two
    lines at its middle space, or it would run into the panel above or the title.
    """
    fig.draw_without_rendering()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                if any(t.get_fontsize() < floor_pt for t in axis.get_ticklabels(which=which)):
                    axis.set_tick_params(which=which, labelsize=floor_pt)
    for t in texts(fig):
        if t.get_fontsize() < floor_pt:
            t.set_fontsize(floor_pt)
    fig.draw_without_rendering()
    for ax in fig.axes:
        box = ax.get_window_extent()
        for label, room in ((ax.xaxis.label, box.width), (ax.yaxis.label, box.height)):
            ext, words = label.get_window_extent(), label.get_text()
            if max(ext.width, ext.height) > room and " " in words and "\n" not in words:
                mid = min((i for i, c in enumerate(words) if c == " "), key=lambda i: abs(i - len(words) / 2))
                label.set_text(words[:mid] + "\n" + words[mid + 1:])
    return fig


# --- throughput vs latency -----------------------------------------------------------------

def tradeoff_figure(summaries: dict[str, dict], latency_key: str = "p99_e2e", throughput_key: str = "output_throughput",
                    slo: float | None = None, best: str | None = None, title: str = "") -> Figure:
    """One point per run (labelled), joined in order: what each step along the knob buys and costs."""
    fig = _figure(7, 4.5)
    ax = fig.add_subplot()
    labels = [k for k, s in summaries.items() if s.get(latency_key) is not None]
    x = np.array([summaries[k][latency_key] for k in labels], dtype=float)
    y = np.array([summaries[k][throughput_key] for k in labels], dtype=float)
    ax.plot(x, y, "-o", color=_COLORS[0])
    for k, xi, yi in zip(labels, x, y):
        ax.annotate(k.split()[-1] if " " in k else k, (xi, yi), textcoords="offset points", xytext=(6, -10), fontsize=8)
    if best is not None and best in summaries:
        ax.plot([summaries[best][latency_key]], [summaries[best][throughput_key]], "o", ms=14, mfc="none",
                mec=_COLORS[3], mew=2, label=f"largest meeting the SLO: {best}")
    if slo is not None:
        ax.axvline(slo, color=_COLORS[3], ls="--", lw=1, label=f"SLO: {latency_key} <= {slo:g} s")
    if len(x) and np.nanmax(x) / max(np.nanmin(x), 1e-9) > 30:
        _log_x(ax)
    ax.set_xlabel(f"{latency_key.replace('_', ' ')} (s)")
    ax.set_ylabel(throughput_key.replace("_", " ") + (" (tokens/s)" if "output" in throughput_key else " (req/s)"))
    ax.set_title(title or "throughput vs latency: what a bigger batch buys and costs")
    ax.grid(alpha=0.3)
    if slo is not None or best is not None:
        ax.legend(fontsize=8, loc="best")
    return fig


def sweep_figure(summaries: dict[str, dict], policies: list[str], knob: str, latency_key: str = "p99_e2e",
                 throughput_key: str = "output_throughput") -> Figure:
    """Throughput against latency, one curve per policy, each point labelled with the knob's value.

    Labels are "knob=value policy", as ``python -m batchsim sweep`` writes them.
    """
    fig = _figure(7.5, 4.8)
    ax = fig.add_subplot()
    xs = []
    for i, pol in enumerate(policies):
        labels = [k for k, s in summaries.items() if k.endswith(" " + pol) and s.get(latency_key) is not None]
        x = np.array([summaries[k][latency_key] for k in labels], dtype=float)
        y = np.array([summaries[k][throughput_key] for k in labels], dtype=float)
        xs.extend(x.tolist())
        ax.plot(x, y, "-o", color=_COLORS[i % 10], label=pol)
        for k, xi, yi in zip(labels, x, y):
            ax.annotate(k.split(" ")[0].split("=", 1)[-1], (xi, yi), textcoords="offset points", xytext=(5, 4),
                        fontsize=7, color=_COLORS[i % 10])
    if xs and max(xs) / max(min(xs), 1e-9) > 30:
        _log_x(ax)
    ax.set_xlabel(f"{latency_key.replace('_', ' ')} (s)")
    ax.set_ylabel(throughput_key.replace("_", " ") + (" (tokens/s)" if "output" in throughput_key else " (req/s)"))
    ax.set_title(f"sweep of {knob}: throughput vs {latency_key.replace('_', ' ')} (points labelled with {knob})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


# --- latency distribution ------------------------------------------------------------------

def latency_cdf_figure(results: dict, metric: str = "e2e", title: str = "") -> Figure:
    """Empirical CDFs of a latency (e2e, ttft or queue wait), one curve per run."""
    fig = _figure(8.5, 4.5)
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
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color=_COLORS[i % 10], label=label)
    _log_x(ax)
    ax.set_ylim(0, 1.01)
    ax.axhline(0.99, color="grey", lw=0.8, ls=":")
    ax.text(ax.get_xlim()[0], 0.985, " p99", va="top", fontsize=8, color="grey")
    names = {"e2e": "end-to-end latency", "ttft": "time to first token", "wait": "queue wait"}
    ax.set_xlabel(f"{names[metric]} (s, log scale)")
    ax.set_ylabel("share of requests")
    ax.set_title(title or f"{names[metric]}: further left is better, the tail is what users remember")
    ax.grid(alpha=0.3, which="both")
    # Beside the axes, not on them: with several runs a legend inside covers the curves' tails.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


# --- the bus timeline -------------------------------------------------------------------------

def _streams(res) -> bool:
    from ..core.metrics import streams_by_default

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
    wait = np.stack([np.column_stack([r.arrival[ids], rows]), np.column_stack([r.start[ids], rows])], axis=1)
    ride = np.stack([np.column_stack([r.start[ids], rows]), np.column_stack([r.finish[ids], rows])], axis=1)
    if _streams(res):
        # Continuous batching has no batches to tell apart: one bus that never stops, which each
        # request boards at the next step and leaves when its own answer ends. One colour says so.
        colors = [_COLORS[4]] * len(ids)
    else:
        # A padded batch is the set of requests that boarded at the same instant (and leave together).
        _, batch_of = np.unique(np.round(r.start[ids], 9), return_inverse=True)
        colors = [_COLORS[b % 10] for b in batch_of]
    ax.add_collection(LineCollection(wait, colors="0.6", linewidths=1))
    ax.add_collection(LineCollection(ride, colors=colors, linewidths=4, capstyle="butt"))
    ax.scatter(r.first_token[ids], rows, marker="|", color="k", s=30, zorder=3)
    ax.set_ylim(len(ids) - 0.5, -0.5)
    ax.set_ylabel("request")
    return float(r.arrival[ids].min()), float(r.finish[ids].max())


def timeline_figure(results: dict, max_requests: int = 40, title: str = "") -> Figure:
    """Gantt chart per run of the first ``max_requests`` requests: wait (grey), ride (colour), first token (|).

    All runs share one time axis, so a run that takes twice as long looks twice as long."""
    k = min(len(results), 6)
    fig = _figure(10, (2.4 if k <= 4 else 1.9) * k + 0.8)
    axes = fig.subplots(k, 1, squeeze=False, sharex=True)[:, 0]
    spans = []
    for ax, (label, res) in zip(axes, list(results.items())[:k]):
        span = _draw_timeline(ax, res, max_requests)
        if span is not None:
            spans.append(span)
        how = ("one colour: a bus that never stops, each leaves when done" if _streams(res)
               else "one colour per batch: boarded together, delivered together")
        ax.set_title(f"{label}  ({how})", fontsize=9, loc="left")
        ax.grid(alpha=0.3, axis="x")
    if spans:
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        axes[0].set_xlim(lo, lo + (hi - lo) * 1.01 + 1e-9)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(title or f"the bus timeline (first {max_requests} requests): grey = waiting at the stop, "
                          "bar = riding, | = first token produced", fontsize=10)
    return fig


# --- batch size and KV memory over time ----------------------------------------------------------

def _step_series(res, key: str):
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
    """Per run: batch size (left axis) and KV cache in use (right axis, with the budget) over time."""
    k = min(len(results), 6)
    fig = _figure(10, 2.0 * k + 0.6)
    axes = fig.subplots(k, 1, squeeze=False)[:, 0]
    for ax, (label, res) in zip(axes, list(results.items())[:k]):
        if not len(res.records.steps["start"]):
            continue
        t, b = _step_series(res, "batch_size")
        ax.plot(t, b, color=_COLORS[0], lw=0.8)
        ax.set_ylabel("batch", color=_COLORS[0], fontsize=8)
        ax.set_ylim(0, max(1, b.max()) * 1.15)
        ax2 = ax.twinx()
        srv = res.meta.get("server")
        scale, unit = (srv.kv.bytes_per_token / 1e9, "GB") if srv is not None else (1.0, "tokens")
        tk, kv = _step_series(res, "kv_in_use")
        kv = kv * scale
        ax2.plot(tk, kv, color=_COLORS[1], lw=0.8)
        budget = res.kv_budget_tokens
        note = ""
        top = max(kv.max(), 1e-9) * 1.2
        if budget is not None:
            b_ = budget * scale
            if kv.max() >= 0.3 * b_:
                ax2.axhline(b_, color=_COLORS[3], ls="--", lw=1)
                top = b_ * 1.1
                note = f"   (dashed: KV budget {b_:,.1f} {unit})"
            else:
                note = f"   (KV budget {b_:,.1f} {unit}, far above: memory is not the limit)"
        ax2.set_ylim(0, top)
        ax2.set_ylabel(f"KV ({unit})", color=_COLORS[1], fontsize=8)
        ax.set_title(label + note, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(title or "batch size (blue) and KV memory in use (orange) over time", fontsize=10)
    return fig


# --- dollars ------------------------------------------------------------------------------------

def cost_figure(summaries: dict[str, dict], title: str = "") -> Figure:
    """$/request per run, split into busy time (running steps) and idle time (waiting for traffic).

    Two runs' bills differ for two reasons: how well the GPU works (busy) and how much traffic
    there is to work on (idle). The split keeps a quiet service from looking like a bad policy."""
    labels = [k for k, s in summaries.items() if s.get("cost_per_request") is not None]
    fig = _figure(max(7, 1.3 * len(labels) + 2.5), 4.4)
    ax = fig.add_subplot()
    v = np.array([summaries[k]["cost_per_request"] for k in labels], dtype=float)
    busy = np.array([summaries[k].get("cost_per_request_busy", summaries[k]["cost_per_request"]) for k in labels],
                    dtype=float)
    x = np.arange(len(labels))
    colors = [_COLORS[i % 10] for i in range(len(labels))]
    ax.bar(x, busy, color=colors, label="busy: running steps")
    ax.bar(x, v - busy, bottom=busy, color=colors, alpha=0.3, hatch="//", edgecolor="0.5", label="idle: waiting for traffic")
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
    price = next((s.get("gpu_price_per_hour") for s in summaries.values() if s.get("gpu_price_per_hour") is not None), None)
    ax.set_title(title or (f"what a request costs at ${price:.2f}/GPU-hour: busy and idle" if price is not None
                           else "what a request costs"), fontsize=10)
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
    fig = _figure(10, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    short = b[np.array(sw["capacity"]) < sw["rate"]]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(b, [str(x) for x in b])
        ax.set_xlabel("seats on the bus (batch size)")
        ax.grid(alpha=0.3, which="both")
        if len(short):
            ax.axvspan(b.min() / 1.3, short.max() * 1.3, color="0.88", label="cannot keep up")
    ax1.plot(b, [x["p99_e2e"] for x in s], "o-", color=_COLORS[3], label="p99")
    ax1.plot(b, [x["p50_e2e"] for x in s], "s--", color=_COLORS[0], label="p50")
    if sw.get("slo") is not None and sw["slo_metric"] == "p99_e2e":
        ax1.axhline(sw["slo"], color="k", ls=":", lw=1, label=f"SLO {sw['slo']:g} s")
    ax1.set_yscale("log")
    ax1.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax1.set_ylabel("end-to-end latency (s)")
    ax1.set_title("latency: too small drowns, too big waits to fill", fontsize=9)
    ax1.legend(fontsize=8, loc="upper center")
    ax2.plot(b, [x["request_throughput"] for x in s], "o-", color=_COLORS[2], label="served")
    ax2.plot(b, sw["capacity"], "^:", color="0.4", label="what the bus can carry")
    ax2.axhline(sw["rate"], color="k", ls="--", lw=1, label=f"arrivals: {sw['rate']:g}/s")
    ax2.set_ylim(0, max(sw["capacity"]) * 1.1)
    ax2.set_ylabel("requests per second")
    ax2.set_title("throughput: capped by the bus, then by the traffic", fontsize=9)
    ax2.legend(fontsize=8, loc="upper left")
    best = sw.get("best")
    fig.suptitle(f"{report.name}: {sw['policy']} batches at one arrival rate ({sw['rate']:g} req/s)"
                 + (f"; the largest meeting the SLO: {best}" if best is not None else "; none meets the SLO"),
                 fontsize=10)
    return fig


# --- the roofline ---------------------------------------------------------------------------------

def roofline_figure(model, batches=None, context: float = 0.0, max_batch_memory: int | None = None,
                    title: str = "", max_batch: int = 512) -> Figure:
    """Decode step time (compute and memory sides) and tokens/s against batch size, with the knee."""
    from ..machine.roofline import knee_batch

    if batches is None:
        batches = np.unique(np.round(np.geomspace(1, max(2, max_batch), 120)).astype(int))
    b = np.asarray(batches)
    t = model.decode(b, context)
    knee = knee_batch(model, context)
    fig = _figure(10, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(b, t["step_s"] * 1e3, color="k", lw=2, label=f"step time (max + {model.overhead * 1e3:g} ms overhead)")
    ax1.plot(b, t["memory_s"] * 1e3, color=_COLORS[1], ls="--", label="memory side (weights + KV)")
    ax1.plot(b, t["compute_s"] * 1e3, color=_COLORS[0], ls="--", label="compute side (FLOPs)")
    ax2.plot(b, t["tokens_per_s"], color=_COLORS[2], lw=2)
    memory_full = max_batch_memory is not None and max_batch_memory <= b.max()
    ticks = [x for x in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if b.min() <= x <= b.max()]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(x) for x in ticks])
        ax.set_xlabel("decode batch size (rows)")
        ax.grid(alpha=0.3, which="both")
        if knee is not None and knee <= b.max():
            ax.axvline(knee, color=_COLORS[3], ls=":", lw=1.5, label=f"knee: batch {knee}")
        if memory_full:
            ax.axvspan(max(max_batch_memory, 1), b.max(), color="0.85", alpha=0.6, label="KV cache does not fit")
    ax1.set_yscale("log")
    ax1.set_ylabel("ms per step")
    ax1.legend(fontsize=8, loc="upper left")
    ax2.set_ylabel("output tokens/s")
    knee_txt = f"knee at batch {knee}" if knee is not None else "never compute-bound"
    ax1.set_title(f"step time: flat while memory-bound ({knee_txt})", fontsize=9)
    mid = len(b) // 2
    gain = t["tokens_per_s"][-1] / t["tokens_per_s"][mid]
    ax2.set_title(f"tokens/s: batch {b[mid]} -> {b[-1]} (x{b[-1] / b[mid]:.0f} rows) buys x{gain:.1f}", fontsize=9)
    if (knee is not None and knee <= b.max()) or memory_full:
        ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle(title or f"roofline: {model.model.name} ({model.dtype}) on {model.gpu.name}, context {context:g} tokens", fontsize=10)
    return fig


# --- per scenario -----------------------------------------------------------------------------------

_DEFAULT_FIGURES = ("latency_cdf", "timeline", "batch_kv", "cost", "roofline")


def figures_for_report(report, out_dir: str | Path) -> list[Path]:
    """Write the figures that tell ``report``'s story as PNGs under ``out_dir``; return their paths."""
    out = Path(out_dir)
    results, summaries, cfg = report.results, report.summaries, report.config
    if not results:
        return []
    kinds = list(cfg.get("figures") or _DEFAULT_FIGURES)
    first = next(iter(results.values()))
    server = first.meta.get("server")
    paths = []
    for kind in kinds:
        fig = None
        if kind == "latency_cdf":
            fig = latency_cdf_figure(results, title=f"{report.name}: end-to-end latency")
        elif kind == "timeline":
            fig = timeline_figure(results)
        elif kind == "batch_kv":
            fig = batch_kv_figure(results)
        elif kind == "cost" and any(s.get("cost_per_request") is not None for s in summaries.values()):
            fig = cost_figure(summaries)
        elif kind == "batch_sweep" and "sweep" in cfg:
            fig = batch_sweep_figure(report)
        elif kind == "tradeoff":
            sw = cfg.get("sweep", {})
            metric = sw.get("slo_metric", "p99_e2e")
            best = sw.get("best")
            best_label = None
            if best is not None:
                best_label = next((k for k in summaries if k.endswith(f"={best}")), None)
            fig = tradeoff_figure(summaries, latency_key=metric, slo=sw.get("slo"), best=best_label,
                                  title=f"{report.name}: throughput vs {metric.replace('_', ' ')}")
        elif kind == "roofline" and server is not None:
            r = first.records
            ctx = float(np.mean(r.prompt_tokens + r.output_tokens / 2)) if len(r) else 0.0
            fig = roofline_figure(server.step_time, context=round(ctx), max_batch_memory=server.kv.max_batch(max(ctx, 1)))
        if fig is not None:
            paths.append(save(fig, out / f"{kind}.png"))
    return paths
