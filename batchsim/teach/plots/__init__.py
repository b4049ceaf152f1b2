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
size to that size: a slide shows a figure scaled down, and its text must still read from the back
row. ``slide.slide_parts`` redraws a figure for the slides, a row of its panels or fewer at a time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .canvas import raise_text, save, texts
from .roofline import roofline_figure
from .runs import batch_kv_figure, latency_cdf_figure, timeline_figure
from .summaries import batch_sweep_figure, cost_figure, sweep_figure, tradeoff_figure

__all__ = [
    "tradeoff_figure",
    "sweep_figure",
    "batch_sweep_figure",
    "latency_cdf_figure",
    "timeline_figure",
    "batch_kv_figure",
    "cost_figure",
    "roofline_figure",
    "figures_for_report",
    "save",
    "texts",
    "raise_text",
]


# --- per scenario ---------------------------------------------------------------------------------

_DEFAULT_FIGURES = ("latency_cdf", "timeline", "batch_kv", "cost", "roofline")


def figures_for_report(report, out_dir: str | Path) -> list[Path]:
    """Write the figures that tell ``report``'s story as PNGs under ``out_dir``; return their
    paths."""
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
        elif kind == "cost" and any(
            s.get("cost_per_request") is not None for s in summaries.values()
        ):
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
            fig = tradeoff_figure(
                summaries,
                latency_key=metric,
                slo=sw.get("slo"),
                best=best_label,
                title=f"{report.name}: throughput vs {metric.replace('_', ' ')}",
            )
        elif kind == "roofline" and server is not None:
            r = first.records
            ctx = float(np.mean(r.prompt_tokens + r.output_tokens / 2)) if len(r) else 0.0
            fig = roofline_figure(
                server.step_time,
                context=round(ctx),
                max_batch_memory=server.kv.max_batch(max(ctx, 1)),
            )
        if fig is not None:
            paths.append(save(fig, out / f"{kind}.png"))
    return paths
