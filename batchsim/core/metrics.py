"""From records to the numbers people quote: throughput, latency, utilisation, goodput.

Names follow vLLM's serving benchmark so figures can be compared with it:

- request_throughput: completed requests per second of the run (the makespan,
  from the first arrival to the last completion).
- output_throughput: output tokens of completed requests per second.
- TTFT (time to first token): arrival to the first output token being produced.
  For padded batches (taxi, static, dynamic) that token exists at the end of the
  batch's prefill even though, as with ``generate()``, it is delivered only when
  the batch ends; TTFT is when it was produced.
- TTFT delivered (``mean_ttft_delivered``, ``p50_``, ``p90_``, ``p99_ttft_delivered``):
  arrival to the first token reaching the user. A streaming server delivers each
  token as it is produced, so it equals TTFT; a server that returns whole answers
  (padded batches, like ``generate()``) delivers at the request's finish. By default
  padded policies do not stream and continuous batching does (as vLLM's server
  does); ``summarize(..., streaming=True/False)`` says otherwise. The SLO's TTFT is
  checked on the delivered one: it is what the user waits for. Tables say which
  one they show (``table_notes``).
- mean_step_time: busy time over steps, the length of one forward pass. A padded
  batch's TPOT is far above it, because a row's tokens are spread over the wait
  for the batch's longest answer.
- TPOT (time per output token): (finish - first token) / (tokens - 1), per request,
  over requests with more than one token. It includes any wait for a padded
  batch's longest row, because the request is delivered only then.
- ITL (inter-token latency): gaps between consecutive tokens of a request.
  ``mean_itl`` pools every gap of every request (exact); ``p99_itl_max`` is the
  99th percentile over requests of their worst gap (a stall such as a preemption).
- E2E: arrival to finish. queue_wait: arrival to the start of the request's first step.
- busy_fraction: share of the makespan the server spent running steps.
- goodput: completed requests per second that met every SLO given.

``summarize`` returns a flat dict of plain floats and ints (JSON-ready), with the
conservation check ``arrived == completed + rejected`` asserted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import check_positive
from .result import RunResult

__all__ = ["SLO", "summarize", "latency_stats", "format_table", "SUMMARY_KEYS", "streams_by_default", "table_notes",
           "TTFT_NOTE"]


@dataclass(frozen=True)
class SLO:
    """Service-level objectives in seconds; None means no objective on that metric."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft", "tpot", "e2e"):
            v = getattr(self, name)
            if v is not None:
                check_positive(f"slo_{name}", v)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft, self.tpot, self.e2e))

    def met(self, delivered: np.ndarray, e2e: np.ndarray, decode_time: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Per finished request: whether it met every objective set (``summarize`` and the summary-only
        records count goodput with this one rule). ``decode_time`` is first token to finish; a
        one-token request's TPOT is taken over one gap, so it is 0 and always met."""
        ok = np.ones(len(e2e), dtype=bool)
        if self.ttft is not None:
            ok &= delivered <= self.ttft
        if self.e2e is not None:
            ok &= e2e <= self.e2e
        if self.tpot is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                ok &= decode_time / np.maximum(tokens - 1, 1) <= self.tpot
        return ok


def step_fields(totals, makespan: float, result) -> dict:
    """The figures a run's step totals give (``StepTotals``): busy share, steps, batch sizes; and the
    result's memory, preemptions and servers. Shared by ``summarize`` and the summary-only summary."""
    reps = totals.reps
    return {
        "busy_fraction": totals.busy / (makespan * result.replicas) if makespan > 0 else 0.0,
        "steps": reps,
        "mean_step_time": totals.busy / reps if reps else None,
        "mean_batch_size": float(totals.batch_reps / reps) if reps else 0.0,
        "max_batch_size": totals.max_batch,
        "batch_size_hist": dict(sorted(totals.batch_hist.items())),
        "padded_row_fraction": float(totals.padded_reps / max(1, totals.decode_reps)),
        "kv_peak_tokens": int(result.kv_peak_tokens),
        "kv_budget_tokens": result.kv_budget_tokens,
        "preemptions": int(result.preemptions),
        "replicas": int(result.replicas),
    }


def latency_stats(name: str, values: np.ndarray) -> dict[str, float | None]:
    """mean, p50, p90 and p99 of the finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if not len(v):
        return {f"mean_{name}": None, f"p50_{name}": None, f"p90_{name}": None, f"p99_{name}": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {f"mean_{name}": float(v.mean()), f"p50_{name}": float(p50), f"p90_{name}": float(p90), f"p99_{name}": float(p99)}


def streams_by_default(policy: str) -> bool:
    """Whether a policy's server streams tokens unless told otherwise: padded batches (every subclass
    of ``PaddedBatchPolicy``) return whole answers, as ``generate()`` does.

    ``policy`` is how a ``RunResult`` names it: its ``describe()`` ("Static(max_batch=16)", or an
    object's default repr), or its short ``name`` ("static")."""
    from .policies import PaddedBatchPolicy

    padded, todo = set(), [PaddedBatchPolicy]
    while todo:
        cls = todo.pop()
        padded.update((cls.__name__, cls.name))
        todo.extend(cls.__subclasses__())
    m = re.search(r"(\w+) object at ", policy) or re.match(r"\s*(\w+)", policy)
    return not (m and m.group(1) in padded)


def summarize(result: RunResult, slo: SLO | None = None, streaming: bool | None = None) -> dict:
    """The run's figures (a fleet's: ``busy_fraction`` is the share of server-time spent busy)."""
    r = result.records
    if r.summary_only:
        from .stream_summary import summarize_stream

        return summarize_stream(result, slo, streaming)
    done = r.completed_mask
    rejected = r.rejected_mask
    arrived = len(r)
    completed = int(done.sum())
    n_rejected = int(rejected.sum())
    in_flight = arrived - completed - n_rejected
    if in_flight != 0:
        raise AssertionError(f"conservation broken: {arrived} arrived, {completed} completed, {n_rejected} rejected")
    makespan = result.makespan
    out_tokens = int(r.tokens[done].sum())
    ttft = (r.first_token - r.arrival)[done]
    streams = streams_by_default(result.policy) if streaming is None else bool(streaming)
    ttft_delivered = ttft if streams else (r.finish - r.arrival)[done]
    e2e = (r.finish - r.arrival)[done]
    wait = (r.start - r.arrival)[done]
    multi = done & (r.tokens > 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = ((r.finish - r.first_token) / (r.tokens - 1))[multi]
    gaps = int((r.tokens[done] - 1).sum())
    gap_time = float((r.last_token - r.first_token)[done].sum())
    s: dict = {
        "arrived": arrived,
        "completed": completed,
        "rejected": n_rejected,
        "duration": makespan,
        "request_throughput": completed / makespan if makespan > 0 else 0.0,
        "output_throughput": out_tokens / makespan if makespan > 0 else 0.0,
        "total_output_tokens": out_tokens,
    }
    s.update(latency_stats("ttft", ttft))
    s.update(latency_stats("ttft_delivered", ttft_delivered))
    s["streaming"] = streams
    s.update(latency_stats("tpot", tpot))
    s["mean_itl"] = gap_time / gaps if gaps else None
    itl_max = r.itl_max[done]
    itl_max = itl_max[np.isfinite(itl_max)]
    s["p99_itl_max"] = float(np.percentile(itl_max, 99)) if len(itl_max) else None
    s.update(latency_stats("e2e", e2e))
    s.update(latency_stats("queue_wait", wait))
    s.update(step_fields(r.step_totals(), makespan, result))
    if slo is not None and slo.any:
        ok = slo.met(ttft_delivered, e2e, (r.finish - r.first_token)[done], r.tokens[done])
        s["goodput"] = int(ok.sum()) / makespan if makespan > 0 else 0.0
        s["slo_attainment"] = float(ok.mean()) if completed else 0.0
    return s


SUMMARY_KEYS = (
    "completed", "rejected", "request_throughput", "output_throughput", "mean_ttft", "p99_ttft",
    "mean_tpot", "mean_e2e", "p50_e2e", "p99_e2e", "mean_queue_wait", "busy_fraction",
    "mean_batch_size", "kv_peak_tokens", "preemptions",
)

# How each column is shown: (header, key, format, scale)
_COLUMNS = {
    "replicas": ("servers", "{:.0f}", 1),
    "completed": ("done", "{:.0f}", 1),
    "rejected": ("rej", "{:.0f}", 1),
    "request_throughput": ("req/s", "{:.2f}", 1),
    "output_throughput": ("tok/s", "{:.0f}", 1),
    "mean_ttft": ("TTFT ms", "{:.0f}", 1e3),
    "p99_ttft": ("p99 TTFT ms", "{:.0f}", 1e3),
    "mean_tpot": ("TPOT ms", "{:.1f}", 1e3),
    "mean_e2e": ("E2E s", "{:.2f}", 1),
    "p50_e2e": ("p50 E2E s", "{:.2f}", 1),
    "p99_e2e": ("p99 E2E s", "{:.2f}", 1),
    "mean_queue_wait": ("wait s", "{:.2f}", 1),
    "busy_fraction": ("busy", "{:.0%}", 1),
    "mean_batch_size": ("batch", "{:.1f}", 1),
    "kv_peak_tokens": ("KV peak", "{:.0f}", 1),
    "preemptions": ("preempt", "{:.0f}", 1),
    "goodput": ("goodput/s", "{:.2f}", 1),
    "cost_per_request": ("$/req", "{:.5f}", 1),
    "cost_per_1m_tokens": ("$/1M tok", "{:.2f}", 1),
    "cost_total": ("bill $", "{:.2f}", 1),
    "p99_tpot": ("p99 TPOT ms", "{:.1f}", 1e3),
    "p90_e2e": ("p90 E2E s", "{:.2f}", 1),
    "slo_attainment": ("SLO met", "{:.0%}", 1),
    "padded_row_fraction": ("padded", "{:.0%}", 1),
    "kv_peak_gb": ("KV peak GB", "{:.1f}", 1),
    "max_batch_size": ("max batch", "{:.0f}", 1),
    "mean_ttft_delivered": ("TTFT dlv ms", "{:.0f}", 1e3),
    "p99_ttft_delivered": ("p99 TTFT dlv ms", "{:.0f}", 1e3),
    "mean_step_time": ("step ms", "{:.1f}", 1e3),
    "cost_per_request_busy": ("busy $/req", "{:.5f}", 1),
    "cost_per_1m_tokens_busy": ("busy $/1M", "{:.2f}", 1),
}

#: What a table's TTFT columns mean; ``table_notes`` adds it under any table that shows one.
TTFT_NOTE = ("TTFT = first token produced; TTFT dlv = first token delivered to the user (padded batches, like "
             "generate(), deliver when the batch ends; a streaming server as soon as it is produced)")

# A column in ms whose values reach this many ms is shown in seconds instead: a TTFT of 678880 ms
# is read more easily as 678.9 s.
_TO_SECONDS_MS = 100_000


def _SIGNIFICANT(x: float) -> str:
    """Three significant figures without an exponent: 0.0324, 3.26, 188, 6,790."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def table_notes(keys) -> list[str]:
    """The lines that say what a table's columns mean (today: which TTFT it shows)."""
    return [TTFT_NOTE] if any("ttft" in k for k in keys) else []


def format_table(rows: dict[str, dict], keys: tuple[str, ...] | list[str] = SUMMARY_KEYS) -> str:
    """A fixed-width table: one line per labelled summary, one column per key."""
    keys = [k for k in keys if any(k in s for s in rows.values())]
    columns = {}
    for k in keys:
        head, fmt, scale = _COLUMNS.get(k, (k, "{}", 1))
        top = max((abs(s[k]) for s in rows.values() if isinstance(s.get(k), (int, float))), default=0.0)
        if scale == 1e3 and head.endswith(" ms") and top * 1e3 >= _TO_SECONDS_MS:
            head, fmt, scale = head[:-3] + " s", _SIGNIFICANT, 1
        columns[k] = (head, fmt, scale)
    heads = ["policy"] + [columns[k][0] for k in keys]
    body = []
    for label, s in rows.items():
        line = [label]
        for k in keys:
            head, fmt, scale = columns[k]
            v = s.get(k)
            x = v * scale if scale != 1 and v is not None else v
            line.append("-" if v is None else fmt(x) if callable(fmt) else fmt.format(x))
        body.append(line)
    widths = [max(len(str(r[i])) for r in [heads] + body) for i in range(len(heads))]
    fmt_line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt_line(heads), "  ".join("-" * w for w in widths)] + [fmt_line(r) for r in body])
