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
  the policy's ``streams`` decides: padded policies do not stream and continuous
  batching does (as vLLM's server does); ``summarize(..., streaming=True/False)`` says otherwise.
  The SLO's TTFT is checked on the delivered one: it is what the user waits for. Tables say which
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
conservation check ``arrived == completed + rejected`` asserted. A summary-only run is
summarised from its sums and sketches (``batchsim.core.stream_summary``); what the two
share, keys and order included, is ``batchsim.core.summary_fields``.
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError, check_bool, show
from .result import RunResult
from .stream_summary import summarize_stream
from .summary_fields import SLO, latency_stats, step_fields, streams_by_default, summary_of  # noqa: F401 - re-exported

__all__ = [
    "SLO",
    "summarize",
    "latency_stats",
    "format_table",
    "SUMMARY_KEYS",
    "streams_by_default",
    "table_notes",
    "TTFT_NOTE",
]


def summarize(result: RunResult, slo: SLO | None = None, streaming: bool | None = None) -> dict:
    """The run's figures (a fleet's: ``busy_fraction`` is the share of server-time spent busy)."""
    _check_summarize_args(result, slo, streaming)
    r = result.records
    if r.summary_only:
        return summarize_stream(result, slo, streaming)
    done = r.completed_mask
    rejected = r.rejected_mask
    arrived = len(r)
    completed = int(done.sum())
    n_rejected = int(rejected.sum())
    in_flight = arrived - completed - n_rejected
    if in_flight != 0:
        raise AssertionError(
            f"conservation broken: {arrived} arrived, {completed} completed, {n_rejected} rejected"
        )
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
    itl_max = r.itl_max[done]
    itl_max = itl_max[np.isfinite(itl_max)]
    latency = {
        name: latency_stats(name, v)
        for name, v in (
            ("ttft", ttft),
            ("ttft_delivered", ttft_delivered),
            ("tpot", tpot),
            ("e2e", e2e),
            ("queue_wait", wait),
        )
    }
    itl = (
        gap_time / gaps if gaps else None,
        float(np.percentile(itl_max, 99)) if len(itl_max) else None,
    )
    goodput = None
    if slo is not None and slo.any:
        ok = slo.met(ttft_delivered, e2e, (r.finish - r.first_token)[done], r.tokens[done])
        goodput = (int(ok.sum()), float(ok.mean()) if completed else 0.0)
    return summary_of(
        result,
        (arrived, completed, n_rejected),
        out_tokens,
        latency,
        streams,
        itl,
        r.step_totals(),
        goodput,
    )


def _check_summarize_args(result, slo, streaming) -> None:
    # Duck-typed, as the summary reads it: a result of another package's making with records is
    # welcome.
    if isinstance(result, (str, bytes, int, float, dict, list, tuple)) or not hasattr(
        result, "records"
    ):
        raise ConfigError(
            f"result must be a finished run (what simulate or run_real returns), got {show(result)}"
        )
    if slo is not None and not isinstance(slo, SLO):
        raise ConfigError(
            f"slo must be an SLO (SLO(ttft=0.5, e2e=10), in seconds) or None, got {show(slo)}"
        )
    if streaming is not None:
        check_bool("streaming", streaming)


SUMMARY_KEYS = (
    "completed",
    "rejected",
    "request_throughput",
    "output_throughput",
    "mean_ttft",
    "p99_ttft",
    "mean_tpot",
    "mean_e2e",
    "p50_e2e",
    "p99_e2e",
    "mean_queue_wait",
    "busy_fraction",
    "mean_batch_size",
    "kv_peak_tokens",
    "preemptions",
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
TTFT_NOTE = (
    "TTFT = first token produced; TTFT dlv = first token delivered to the user (padded batches, "
    "like generate(), deliver when the batch ends; a streaming server as soon as it is produced)"
)

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
        top = max(
            (abs(s[k]) for s in rows.values() if isinstance(s.get(k), (int, float))), default=0.0
        )
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

    def fmt_line(r):
        return "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        )

    return "\n".join(
        [fmt_line(heads), "  ".join("-" * w for w in widths)] + [fmt_line(r) for r in body]
    )
