"""``GET /metrics``: the server's counters in Prometheus's text format, with vLLM's names where one
exists.

So a dashboard or a scraper built for ``vllm serve`` reads ours as well: requests running
and waiting, KV cache use, prompt and generated tokens, time to first token. What vLLM has
no name for is ours, under ``realrun:``: the seconds of one pass, the KV blocks in use.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

__all__ = ["Histogram", "ServerMetrics", "prometheus_text", "TTFT_BUCKETS", "STEP_BUCKETS"]

#: vLLM's buckets for time to first token (seconds), so the two servers' histograms line up.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
#: One pass: a millisecond on a GPU, a few hundred on a laptop's CPU.
STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass
class Histogram:
    """A cumulative histogram as Prometheus keeps one: counts per upper bound, the sum, the
    count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if list(self.buckets) != sorted(self.buckets) or not self.buckets:
            raise ValueError(f"buckets must be a rising sequence, got {self.buckets!r}")
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, x: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, x)] += 1
            self.total += x
            self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        with self._lock:
            counts, total, n = list(self.counts), self.total, self.n
        out, cum = [], 0
        for b, c in zip(self.buckets, counts):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {n}')
        out.append(f"{name}_sum{{{labels}}} {total}")
        out.append(f"{name}_count{{{labels}}} {n}")
        return out


@dataclass
class ServerMetrics:
    """The histograms the engine thread fills; the gauges are read from the server when scraped."""

    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    step: Histogram = field(default_factory=lambda: Histogram(STEP_BUCKETS))


def prometheus_text(server, model: str) -> str:
    """The exposition text of ``server`` (a ``LiveServer``) now."""
    labels = f'model_name="{model}"'
    running, waiting = server.counts()
    used, total = server.kv()
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, value) -> None:
        lines.extend(
            (f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}")
        )

    metric("vllm:num_requests_running", "gauge", "Requests in the batch now.", running)
    metric("vllm:num_requests_waiting", "gauge", "Requests waiting for the batch.", waiting)
    metric(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "Share of the KV budget in use (0 when the budget is unlimited).",
        0.0 if not total else used / total,
    )
    metric("realrun:kv_blocks_in_use", "gauge", "KV blocks held by the batch.", used)
    # without a KV budget there is no total: the series is absent, never a -1 block count
    if total is not None:
        metric("realrun:kv_blocks_total", "gauge", "KV blocks in the budget.", total)
    metric(
        "vllm:prompt_tokens_total", "counter", "Prompt tokens admitted.", server.prompt_tokens_total
    )
    metric("vllm:generation_tokens_total", "counter", "Tokens generated.", server.tokens_total)
    metric(
        "vllm:request_success_total", "counter", "Requests served to their end.", server.finished
    )
    for name, h, help_ in (
        ("vllm:time_to_first_token_seconds", server.metrics.ttft, "Time to first token."),
        ("realrun:step_duration_seconds", server.metrics.step, "Seconds of one forward pass."),
    ):
        lines.extend((f"# HELP {name} {help_}", f"# TYPE {name} histogram"))
        lines.extend(h.lines(name, labels))
    return "\n".join(lines) + "\n"
