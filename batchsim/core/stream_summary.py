"""The summary of a summary-only run: ``summarize``'s keys, from running sums and sketches.

Counts, totals and means are exact; percentiles come from the quantile sketches, each
within their stated relative error (``sketch_relative_error``, 0.5 % by default) of the
exact percentile; goodput is exact for the SLO the run was started with. What this
summary shares with the one of every request's records (the keys, their order, who
streams) is ``batchsim.core.summary_fields``.
"""

from __future__ import annotations

from .errors import ConfigError
from .stream import StreamRecords
from .summary_fields import streams_by_default, summary_of

__all__ = ["summarize_stream"]


def summarize_stream(result, slo=None, streaming: bool | None = None) -> dict:
    """``summarize`` for a summary-only run: the same keys, percentiles from the sketches."""
    r: StreamRecords = result.records
    streams = streams_by_default(result.policy) if streaming is None else bool(streaming)
    if streams != r.streaming:
        raise ConfigError(
            "a summary-only run fixed at its start whether tokens count as delivered when produced "
            f"(streaming={r.streaming}); summarize it the same way"
        )
    given = slo is not None and slo.any
    if given and slo != r.slo:
        raise ConfigError(
            f"a summary-only run counts goodput for the SLO it was started with ({r.slo}), not "
            f"another ({slo}): run it again with this one"
        )
    st = r.fleet_stats()
    rejected = sum(r.rejected.values())
    if st.completed + rejected != r.arrived:
        raise AssertionError(
            f"conservation broken: {r.arrived} arrived, {st.completed} completed, {rejected} "
            f"rejected"
        )

    def stats(name: str, key: str) -> dict:
        total, count = st.sums[key]
        sk = st.sketches[key]
        if not count:
            return {
                f"mean_{name}": None,
                f"p50_{name}": None,
                f"p90_{name}": None,
                f"p99_{name}": None,
            }
        return {
            f"mean_{name}": total / count,
            f"p50_{name}": sk.quantile(0.5),
            f"p90_{name}": sk.quantile(0.9),
            f"p99_{name}": sk.quantile(0.99),
        }

    latency = {
        "ttft": stats("ttft", "ttft"),
        "ttft_delivered": stats("ttft_delivered", "ttft" if streams else "e2e"),
        "tpot": stats("tpot", "tpot"),
        "e2e": stats("e2e", "e2e"),
        "queue_wait": stats("queue_wait", "queue_wait"),
    }
    itl = (st.gap_time / st.gaps if st.gaps else None, st.sketches["itl_max"].quantile(0.99))
    goodput = (st.slo_met, st.slo_met / st.completed if st.completed else 0.0) if given else None
    return summary_of(
        result,
        (r.arrived, st.completed, rejected),
        st.output_tokens,
        latency,
        streams,
        itl,
        r.step_totals(),
        goodput,
        {"summary_only": True, "sketch_relative_error": st.alpha},
    )
