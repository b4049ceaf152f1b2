"""The summary of a summary-only run: ``summarize``'s keys, from running sums and sketches.

Counts, totals and means are exact; percentiles come from the quantile sketches, each
within their stated relative error (``sketch_relative_error``, 0.5 % by default) of the
exact percentile; goodput is exact for the SLO the run was started with.
"""

from __future__ import annotations

from .stream import StreamRecords

__all__ = ["summarize_stream"]


def summarize_stream(result, slo=None, streaming: bool | None = None) -> dict:
    """``summarize`` for a summary-only run: the same keys, percentiles from the sketches."""
    from .errors import ConfigError
    from .metrics import step_fields, streams_by_default

    r: StreamRecords = result.records
    streams = streams_by_default(result.policy) if streaming is None else bool(streaming)
    if streams != r.streaming:
        raise ConfigError("a summary-only run fixed at its start whether tokens count as delivered when produced "
                          f"(streaming={r.streaming}); summarize it the same way")
    given = slo is not None and slo.any
    if given and slo != r.slo:
        raise ConfigError(f"a summary-only run counts goodput for the SLO it was started with ({r.slo}), "
                          f"not another ({slo}): run it again with this one")
    st = r.fleet_stats()
    rejected = sum(r.rejected.values())
    if st.completed + rejected != r.arrived:
        raise AssertionError(f"conservation broken: {r.arrived} arrived, {st.completed} completed, {rejected} rejected")
    makespan = result.makespan
    out: dict = {
        "arrived": r.arrived, "completed": st.completed, "rejected": rejected, "duration": makespan,
        "request_throughput": st.completed / makespan if makespan > 0 else 0.0,
        "output_throughput": st.output_tokens / makespan if makespan > 0 else 0.0,
        "total_output_tokens": st.output_tokens,
    }

    def stats(name: str, key: str) -> dict:
        total, count = st.sums[key]
        sk = st.sketches[key]
        if not count:
            return {f"mean_{name}": None, f"p50_{name}": None, f"p90_{name}": None, f"p99_{name}": None}
        return {f"mean_{name}": total / count, f"p50_{name}": sk.quantile(0.5), f"p90_{name}": sk.quantile(0.9),
                f"p99_{name}": sk.quantile(0.99)}

    out.update(stats("ttft", "ttft"))
    out.update(stats("ttft_delivered", "ttft" if streams else "e2e"))
    out["streaming"] = streams
    out.update(stats("tpot", "tpot"))
    out["mean_itl"] = st.gap_time / st.gaps if st.gaps else None
    out["p99_itl_max"] = st.sketches["itl_max"].quantile(0.99)
    out.update(stats("e2e", "e2e"))
    out.update(stats("queue_wait", "queue_wait"))
    out.update(step_fields(r.step_totals(), makespan, result))
    out.update({
        "summary_only": True,
        "sketch_relative_error": st.alpha,
    })
    if given:
        out["goodput"] = st.slo_met / makespan if makespan > 0 else 0.0
        out["slo_attainment"] = st.slo_met / st.completed if st.completed else 0.0
    return out
