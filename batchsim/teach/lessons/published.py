"""How far is the roofline from a real engine? Lesson 2's check against what engines published.

The roofline prices a step from a card's datasheet and two efficiencies.
``batchsim.machine.validation`` runs it on every measurement in ``published.json`` (NVIDIA's
TensorRT-LLM tables, vLLM's benchmark pages: the same card, model, precision, lengths and
concurrency, each with its source), and this lesson draws the answer: batchsim's figure against the
published one, on log axes so a 200 tokens/s point and a 30,000 one are both readable, and each
point's error against the tolerance the course holds it to. The KV budgets against vLLM's own memory
logs come with it.
"""

from __future__ import annotations

import statistics

from matplotlib.figure import Figure

from ...machine import validation

__all__ = ["published_record"]

#: The course's targets for a preset (issue 39): median |error| within these, no point beyond
#: ``WORST``.
TARGET = {"throughput": 0.15, "TPOT": 0.15, "TTFT": 0.25}
WORST = 0.40
_MARKERS = {"trt-llm": ("o", "tab:green"), "vllm": ("s", "tab:purple")}


def published_record() -> tuple[dict, Figure]:
    """Every published point predicted; the summary per engine and family, the KV budgets, and a
    figure."""
    rows = validation.table()
    per = validation.summary(rows)
    held = validation.held_out_summary(rows)
    kv = [{**k, "predicted": validation.kv_predict(k)} for k in validation.kv_points()]
    for k in kv:
        k["error"] = k["predicted"] / k["kv_tokens"] - 1
    errors = [abs(r["error"]) for r in rows]
    summary = {
        "points": len(rows),
        "engines": sorted({r["engine"] for r in rows}),
        "median_abs_error": statistics.median(errors),
        "worst_abs_error": max(errors),
        "within_target": sum(abs(r["error"]) <= TARGET[r["family"]] for r in rows),
        "beyond_worst": sum(abs(r["error"]) > WORST for r in rows),
        "per_engine": {f"{e} {f}": s for (e, f), s in per.items()},
        "held_out": held,
        "kv": kv,
        "rows": rows,
        "table": _table(per, held, kv),
    }
    return summary, _figure(rows)


def _table(per: dict, held: dict, kv: list[dict]) -> str:
    lines = [f"{'engine':<8} {'figure':<11} {'points':>6} {'median |error|':>15} {'worst':>7}"]
    lines += [
        f"{e:<8} {f:<11} {s['points']:>6} {s['median']:>15.1%} {s['worst']:>7.1%}"
        for (e, f), s in per.items()
    ]
    # The points a preset was not fitted to, apart: how far its fit carries.
    lines += [
        f"{e:<8} {'held out':<11} {s['points']:>6} {s['median']:>15.1%} {s['worst']:>7.1%}"
        for e, s in held.items()
    ]
    lines += [
        f"KV budget {k['hardware']} {k['model']}: batchsim {k['predicted']:,} tokens, vLLM logged "
        f"{k['kv_tokens']:,} ({k['error']:+.1%})"
        for k in kv
    ]
    return "\n".join(lines)


def _figure(rows: list[dict]) -> Figure:
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=(1, 1.5))
    lo = (
        min(min(r["measured"], r["predicted"]) for r in rows if r["metric"] == "output_throughput")
        / 1.5
    )
    hi = (
        max(max(r["measured"], r["predicted"]) for r in rows if r["metric"] == "output_throughput")
        * 1.5
    )
    for engine, (marker, color) in _MARKERS.items():
        pts = [r for r in rows if r["engine"] == engine and r["metric"] == "output_throughput"]
        if pts:
            ax1.loglog(
                [r["measured"] for r in pts],
                [r["predicted"] for r in pts],
                marker,
                color=color,
                ms=5,
                label=f"{engine} ({len(pts)})",
                alpha=0.8,
            )
    ax1.plot([lo, hi], [lo, hi], "k-", lw=1)
    for f, style in ((TARGET["throughput"], "--"), (WORST, ":")):
        ax1.plot([lo, hi], [lo * (1 + f), hi * (1 + f)], "k" + style, lw=0.8)
        ax1.plot([lo, hi], [lo * (1 - f), hi * (1 - f)], "k" + style, lw=0.8)
    ax1.set(
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="published output tokens/s",
        ylabel="batchsim output tokens/s",
        title="throughput: batchsim vs published",
    )
    ax1.legend(loc="upper left", title="engine (points)")
    order = sorted(rows, key=lambda r: r["error"])
    colors = [_MARKERS[r["engine"]][1] for r in order]
    ax2.bar(range(len(order)), [100 * r["error"] for r in order], color=colors)
    for f, style in ((TARGET["throughput"], "--"), (WORST, ":")):
        for s in (1, -1):
            ax2.axhline(100 * s * f, color="k", ls=style, lw=0.8)
    ax2.axhline(0, color="k", lw=1)
    from matplotlib.patches import Patch

    ax2.legend(
        handles=[
            Patch(color=c, label=f"{e}: {sum(r['engine'] == e for r in rows)}")
            for e, (_, c) in _MARKERS.items()
            if any(r["engine"] == e for r in rows)
        ],
        loc="upper left",
        title="engine: points",
    )
    ax2.set(
        xticks=[],
        xlabel=f"each published point ({len(rows)}), sorted by error",
        ylabel="batchsim / published - 1 (%)",
        title="errors: target ±15 % (dashed), none beyond ±40 % (dotted)",
    )
    return fig
