"""What both summaries of a run share: the objectives, the figures' names and their order.

A run keeps its records one of two ways: every request (``Records``, summarised by
``batchsim.core.metrics.summarize``) or running sums and quantile sketches
(``StreamRecords``, ``batchsim.core.stream_summary``). Each reads its own figures from
its own records; this module is what they have in common, so that the two give the same
keys in the same order, judge the same objectives and agree on who streams:

- ``SLO``: the objectives, and the one rule that says whether a request met them;
- ``latency_stats``: a latency's mean, p50, p90 and p99, from values;
- ``step_fields``: what the step totals and the result's server give (busy share, batches);
- ``streams_by_default``: whether a policy's server delivers each token as it is produced;
- ``summary_of``: the summary's dict laid out from those figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import check_positive
from .policies.base import Policy

__all__ = ["SLO", "latency_stats", "step_fields", "streams_by_default", "summary_of"]


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

    def met(
        self, delivered: np.ndarray, e2e: np.ndarray, decode_time: np.ndarray, tokens: np.ndarray
    ) -> np.ndarray:
        """Per finished request: whether it met every objective set (``summarize`` and the
        summary-only records count goodput with this one rule). ``decode_time`` is first token to
        finish; a one-token request's TPOT is taken over one gap, so it is 0 and always met."""
        ok = np.ones(len(e2e), dtype=bool)
        if self.ttft is not None:
            ok &= delivered <= self.ttft
        if self.e2e is not None:
            ok &= e2e <= self.e2e
        if self.tpot is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                ok &= decode_time / np.maximum(tokens - 1, 1) <= self.tpot
        return ok


def latency_stats(name: str, values: np.ndarray) -> dict[str, float | None]:
    """mean, p50, p90 and p99 of the finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if not len(v):
        return {f"mean_{name}": None, f"p50_{name}": None, f"p90_{name}": None, f"p99_{name}": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {
        f"mean_{name}": float(v.mean()),
        f"p50_{name}": float(p50),
        f"p90_{name}": float(p90),
        f"p99_{name}": float(p99),
    }


def step_fields(totals, makespan: float, result) -> dict:
    """The figures a run's step totals give (``StepTotals``): busy share, steps, batch sizes; and
    the result's memory, preemptions and servers."""
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


# The class a policy's description names: "Static(max_batch=16)", "static", or an object's
# default repr ("<mod.Mine object at 0x...>"). A RunResult keeps only that text, not the policy.
_OBJECT_REPR = re.compile(r"(\w+) object at ")
_LEADING_NAME = re.compile(r"\s*(\w+)")


def streams_by_default(policy: Policy | str) -> bool:
    """Whether a policy's server streams tokens unless told otherwise: its ``streams`` (padded
    batches return whole answers, as ``generate()`` does; ``Policy.streams``).

    ``policy`` is the policy itself, or how a ``RunResult`` names it: its ``describe()``
    ("Static(max_batch=16)", or an object's default repr), or its short ``name`` ("static"). A
    name that any policy class which does not stream goes by means no; any other text, yes."""
    if isinstance(policy, Policy):
        return bool(policy.streams)
    whole, todo = set(), [Policy]
    while todo:
        cls = todo.pop()
        if not cls.streams:
            whole.update((cls.__name__, cls.name))
        todo.extend(cls.__subclasses__())
    m = _OBJECT_REPR.search(policy) or _LEADING_NAME.match(policy)
    return not (m and m.group(1) in whole)


def summary_of(
    result,
    counts: tuple[int, int, int],
    output_tokens: int,
    latency: dict[str, dict],
    streams: bool,
    itl: tuple[float | None, float | None],
    totals,
    goodput: tuple[int, float] | None,
    extra: dict | None = None,
) -> dict:
    """A run's summary, in the one order both kinds of records give it.

    ``counts``: (arrived, completed, rejected); ``latency``: each of ttft, ttft_delivered, tpot,
    e2e and queue_wait's four figures (``latency_stats``' keys); ``itl``: (mean_itl, p99_itl_max);
    ``totals``: the step totals; ``goodput``: (requests that met the SLO, the share that did), or
    None when no SLO was given; ``extra``: keys of the records' own, before the goodput."""
    arrived, completed, rejected = counts
    makespan = result.makespan
    s: dict = {
        "arrived": arrived,
        "completed": completed,
        "rejected": rejected,
        "duration": makespan,
        "request_throughput": completed / makespan if makespan > 0 else 0.0,
        "output_throughput": output_tokens / makespan if makespan > 0 else 0.0,
        "total_output_tokens": output_tokens,
    }
    s.update(latency["ttft"])
    s.update(latency["ttft_delivered"])
    s["streaming"] = streams
    s.update(latency["tpot"])
    s["mean_itl"], s["p99_itl_max"] = itl
    s.update(latency["e2e"])
    s.update(latency["queue_wait"])
    s.update(step_fields(totals, makespan, result))
    if extra:
        s.update(extra)
    if goodput is not None:
        met, attainment = goodput
        s["goodput"] = met / makespan if makespan > 0 else 0.0
        s["slo_attainment"] = attainment
    return s
