"""From what each request measured to the figures ``vllm bench serve`` prints, under its names.

The names and definitions are vLLM's (``vllm/benchmarks/serve.py``), so the JSON of one tool
lies beside the other's: ``duration`` is from the first request sent to the last answer;
throughputs count completed requests only; TPOT is ``(e2e - ttft) / (tokens - 1)`` over
requests of two tokens or more; ITL pools every gap between token chunks of every request;
``e2el`` is the end-to-end latency; ``*_ms`` figures are milliseconds, the per-request lists
(``ttfts``, ``itls``, ``latencies``) seconds. Percentiles are batchsim's (``latency_stats``).

Where vLLM writes 0 for a figure with no data (``mean_ttft_ms`` when every request failed),
this writes null: a zero TTFT would read as a fast server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from batchsim.core.metrics import latency_stats
from batchsim.core.workload import Workload

from .client import RequestResult

__all__ = ["LoadReport", "format_report", "METRICS"]

#: vLLM's short names for the latencies, and how this table heads them.
METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


@dataclass(frozen=True)
class LoadReport:
    """One load run: what was asked of whom, and every finished request's result, in id order."""

    url: str
    endpoint: str
    model: str | None
    workload: str
    requests: int
    results: tuple[RequestResult, ...]
    duration: float
    interrupted: bool = False
    max_concurrency: int | None = None
    # What the workload asked for, in vLLM's terms; the caller that built the workload knows them.
    request_rate: float | str | None = None
    burstiness: float | None = None

    def __post_init__(self) -> None:
        ids = [r.id for r in self.results]
        if ids != sorted(set(ids)):
            raise ValueError(f"results must be one per request in id order, got ids {ids[:10]}...")
        if self.duration < 0:
            raise ValueError(f"duration must be >= 0, got {self.duration!r}")

    @classmethod
    def of(
        cls,
        cfg,
        wl: Workload,
        model: str | None,
        results: list[RequestResult],
        duration: float,
        interrupted: bool,
    ) -> LoadReport:
        return cls(
            url=cfg.url,
            endpoint=cfg.endpoint,
            model=model,
            workload=wl.description,
            requests=len(wl),
            results=tuple(results),
            duration=max(0.0, duration),
            interrupted=interrupted,
            max_concurrency=cfg.max_concurrency,
        )

    @property
    def completed(self) -> int:
        return sum(r.success for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.completed

    def samples(self) -> dict[str, np.ndarray]:
        """Seconds, per metric: ttft, tpot and e2el per completed request; itl per gap."""
        ok = [r for r in self.results if r.success]
        return {
            "ttft": np.array([r.ttft for r in ok], dtype=float),
            "tpot": np.array([r.tpot for r in ok if r.tpot is not None], dtype=float),
            "itl": np.array([g for r in ok for g in r.itl], dtype=float),
            "e2el": np.array([r.latency for r in ok], dtype=float),
        }

    def summary(self) -> dict:
        """The figures, named as ``vllm bench serve --save-result --save-detailed`` names them."""
        ok = [r for r in self.results if r.success]
        total_in = sum(r.prompt_len for r in ok)
        total_out = sum(r.output_tokens for r in ok)
        per_s = (lambda x: x / self.duration) if self.duration > 0 else (lambda x: None)  # noqa: E731
        out: dict = {
            "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
            "backend": "realrun-load",
            "base_url": self.url,
            "endpoint": self.endpoint,
            "model_id": self.model,
            "num_prompts": self.requests,
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "workload": self.workload,
            "interrupted": self.interrupted,
            "duration": self.duration,
            "completed": len(ok),
            "failed": self.failed,
            "total_input_tokens": total_in,
            "total_output_tokens": total_out,
            "request_throughput": per_s(len(ok)),
            "output_throughput": per_s(total_out),
            "total_token_throughput": per_s(total_in + total_out),
        }
        for name, values in self.samples().items():
            out.update(_stats_ms(name, values))
        out.update(
            {
                "input_lens": [r.prompt_len for r in self.results],
                "output_lens": [r.output_tokens if r.success else 0 for r in self.results],
                "ttfts": [r.ttft for r in self.results],
                "itls": [list(r.itl) for r in self.results],
                "latencies": [r.latency for r in self.results],
                "start_times": [r.start for r in self.results],
                "queue_times": [max(0.0, r.start - r.arrival) for r in self.results],
                "errors": [r.error for r in self.results],
            }
        )
        return out


def _stats_ms(name: str, seconds: np.ndarray) -> dict:
    """mean, median, std, p90, p99 in ms, under vLLM's names; batchsim's percentiles, plus the
    spread."""
    s = latency_stats(name, seconds * 1000.0)
    ms = lambda k: s[f"{k}_{name}"]  # noqa: E731
    std = float(np.std(seconds * 1000.0)) if len(seconds) else None
    top = float(np.max(seconds * 1000.0)) if len(seconds) else None
    return {
        f"mean_{name}_ms": ms("mean"),
        f"median_{name}_ms": ms("p50"),
        f"std_{name}_ms": std,
        f"p90_{name}_ms": ms("p90"),
        f"p99_{name}_ms": ms("p99"),
        f"max_{name}_ms": top,
    }


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_report(report: LoadReport) -> str:
    """The table: counts and throughputs, then each latency's mean, spread and tail, in ms."""
    s = report.summary()
    head = f"load on {report.url}{report.endpoint}, model {report.model}"
    if report.interrupted:
        head += f" (interrupted: {len(report.results)} of {report.requests} requests finished)"
    rows = [
        head,
        f"  workload                {report.workload}",
        f"  completed / failed      {s['completed']} / {s['failed']}",
        f"  duration                {s['duration']:.2f} s",
        f"  request throughput      {_fmt(s['request_throughput'])} req/s",
        f"  output throughput       {_fmt(s['output_throughput'])} tok/s",
        f"  total token throughput  {_fmt(s['total_token_throughput'])} tok/s",
        "",
        f"  {'(ms)':<6}{'mean':>10}{'std':>10}{'median':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for name, label in METRICS.items():
        cells = "".join(
            f"{_fmt(s[f'{k}_{name}_ms']):>10}"
            for k in ("mean", "std", "median", "p90", "p99", "max")
        )
        rows.append(f"  {label:<6}{cells}")
    errors = [r.error for r in report.results if not r.success]
    if errors:
        common = max(set(errors), key=errors.count)
        times = errors.count(common)
        rows.append(
            f"  errors: {len(errors)}; "
            + (f"{times} of them: {common}" if times > 1 else f"the first: {errors[0]}")
        )
    lag = max((r.start - r.arrival for r in report.results), default=0.0)
    if lag > 0.05 and report.max_concurrency is None:
        rows.append(
            f"  note: a request left up to {lag * 1000:.0f} ms after its arrival time: the client "
            f"fell "
            "behind, so the load was lighter than asked"
        )
    return "\n".join(rows)
