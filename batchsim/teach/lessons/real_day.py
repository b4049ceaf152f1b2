"""Notebook 8: a real day of traffic (the Azure conversation trace, which ships with batchsim)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Gamma
from ...core.errors import (
    ConfigError,
    check_choice,
    check_int_at_least,
    check_nonneg,
    check_positive,
)
from ...core.lengths import LogNormal
from ...core.metrics import SLO, format_table, streams_by_default
from ...core.policies import POLICY_NAMES, make_policy
from ...core.traces import Trace, read_trace
from ...core.workload import Workload, make_workload, trace_workload
from ...traces import AZURE_TRACE, find_trace
from ..figures import POLICY_COLORS, draw_cdf
from ..scenarios.base import column_notes
from ._common import LESSON_GPU, LESSON_MODEL, lesson_server, run_each

#: A synthetic stand-in for the Azure 2023 conversation trace, for ``trace="synthetic"`` (or a
#: package built without its data), fitted to the statistics in batchsim/traces/README.md: about
#: 5.5 requests/s with inter-arrival CV about 1.1; prompt tokens mean 1,155 (median 1,020);
#: output tokens mean 211 (median 129).
AZURE_FIT = {
    "rate": 5.5,
    "cv": 1.1,
    "prompt_mean": 1155,
    "prompt_median": 1020,
    "output_mean": 211,
    "output_median": 129,
}


def _day_workload(
    minutes: float, start_minute: float, trace: str | Path | None, seed: int
) -> tuple[Workload, str]:
    """The trace window; the synthetic fit when ``trace`` is "synthetic" (or None and the package
    has no trace)."""
    if trace is None:
        path = find_trace()
    elif str(trace) == "synthetic":
        path = None
    else:
        path = Path(trace)
        if not path.is_file():
            raise ConfigError(
                f"trace must be a trace file, 'synthetic' or None, got {str(trace)!r} (no such "
                f"file; None replays {AZURE_TRACE}, which ships with batchsim)"
            )
    if path is not None:
        tr = read_trace(path)
        t0 = start_minute * 60.0
        keep = (tr.arrival_s >= t0) & (tr.arrival_s < t0 + minutes * 60.0)
        if not keep.any():
            raise ConfigError(
                f"start_minute must fall inside the trace ({tr.duration / 60:.0f} minutes), got "
                f"{start_minute!r}"
            )
        window = Trace(
            tr.path, tr.arrival_s[keep] - t0, tr.prompt_tokens[keep], tr.output_tokens[keep]
        )
        name = (
            "Azure LLM trace 2023 (conversation)"
            if path.name == AZURE_TRACE
            else f"the trace {path.name}"
        )
        return trace_workload(
            window
        ), f"{name}, minutes {start_minute:g}-{start_minute + minutes:g}"
    f = AZURE_FIT
    wl = make_workload(
        Gamma(f["rate"], f["cv"]),
        LogNormal(f["prompt_mean"], f["prompt_median"]),
        LogNormal(f["output_mean"], f["output_median"]),
        duration=minutes * 60.0,
        seed=seed,
    )
    # Said on the figure and in the notes: a fit's numbers are not the lesson's, and nothing else
    # would tell.
    why = (
        ""
        if trace is not None
        else (
            f" ({AZURE_TRACE} is missing from this installation: "
            "python -m batchsim.traces fetch azure-2023-conv)"
        )
    )
    return wl, f"synthetic fit of the Azure conversation trace, {minutes:g} minutes{why}"


def _delivered_ttft(res) -> np.ndarray:
    """Time to the first token the user receives: the SLO's TTFT (padded batches deliver at their
    end)."""
    r = res.records
    return (r.first_token if streams_by_default(res.policy) else r.finish) - r.arrival


def real_day(
    policy: str = "continuous",
    max_batch: int = 64,
    slo_ttft: float = 2.0,
    slo_tpot_ms: float = 100.0,
    minutes: float = 5.0,
    start_minute: float = 0.0,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
    trace: str | Path | None = None,
    seed: int = 0,
) -> tuple[dict, Figure]:
    """A real day of traffic: replay the Azure conversation trace and ask which policy meets the
    SLO.

    ``trace``: a trace file, "synthetic" (a workload fitted to the Azure trace's published
    statistics), or None (the Azure trace that ships with batchsim; see ``batchsim.traces``).
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
    server = lesson_server(gpu, model)
    slo = SLO(ttft=slo_ttft, tpot=slo_tpot_ms / 1000.0)
    policies = {
        n: make_policy(
            n,
            max_batch=max_batch,
            max_wait=0.5,
            max_seqs=max_batch,
            max_batched_tokens=8192,
            chunked_prefill=True,
        )
        for n in POLICY_NAMES
    }
    results, rows = run_each(wl, policies, server, slo=slo)
    keys = [
        "completed",
        "request_throughput",
        "p99_ttft_delivered",
        "mean_tpot",
        "p99_e2e",
        "mean_batch_size",
        "goodput",
        "cost_per_request",
    ]
    best = max(rows, key=lambda k: (rows[k]["slo_attainment"], -rows[k]["cost_per_request"]))
    summary = {
        "policies": rows,
        "table": format_table(rows, keys),
        "source": source,
        "requests": len(wl),
        "slo_attainment": {k: v["slo_attainment"] for k, v in rows.items()},
        "best": best,
        "notes": [
            f"traffic: {source}, {len(wl)} requests; server: {server.describe()}",
            f"SLO: first token within {slo_ttft:g} s and {slo_tpot_ms:g} ms per token after it; "
            f"best here: {best} ({rows[best]['slo_attainment']:.1%} of requests within it)",
            *column_notes(keys),
        ],
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
    ttft = _delivered_ttft(results[policy])
    done = np.isfinite(ttft)
    ax.plot(rec.arrival[done] / 60.0, ttft[done], ".", ms=2, color=POLICY_COLORS[policy], alpha=0.6)
    ax.axhline(slo_ttft, color="tab:red", ls="--", lw=1, label=f"SLO {slo_ttft:g} s")
    ax.set_yscale("log")
    ax.set_xlabel("arrival minute")
    ax.set_ylabel("time to first token delivered (s)")
    ax.set_title(f"{policy}: does the queue keep up?")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    for name in POLICY_NAMES:
        draw_cdf(
            ax,
            _delivered_ttft(results[name]),
            name,
            POLICY_COLORS[name],
            lw=3 if name == policy else 1.2,
        )
    ax.axvline(slo_ttft, color="tab:red", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token delivered (s)")
    ax.set_ylabel("share of requests")
    ax.set_title("TTFT distribution, all policies")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    names = list(POLICY_NAMES)
    ax.bar(
        names,
        [rows[n]["slo_attainment"] * 100 for n in names],
        color=[POLICY_COLORS[n] for n in names],
        edgecolor=["k" if n == policy else "none" for n in names],
        linewidth=2,
    )
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of requests within the SLO")
    ax.set_title(f"who meets the SLO (batch {max_batch})")
    fig.suptitle(f"{source}: {len(wl)} requests on {server.model.name}, {server.gpu.name}")
    return summary, fig
