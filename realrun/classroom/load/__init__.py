"""``realrun load``: an open-loop load generator for any OpenAI-compatible server.

The other side of ``realrun serve``: batchsim's workload (any arrival process it knows, or
a trace) becomes HTTP requests, each sent at its own arrival time and streamed back, and
the client measures what a user would: time to first token, the gaps between tokens, the
whole answer. The figures carry ``vllm bench serve``'s names, so a run against our server
and a run of vLLM's own benchmark against ``vllm serve`` lie side by side.

    from batchsim.core.config import WorkloadConfig
    from realrun.classroom.load import run_load, format_report

    report = run_load("http://127.0.0.1:8000", WorkloadConfig(rate=4, requests=32).build())
    print(format_report(report)); report.summary()["p99_ttft_ms"]

httpx is imported only when a load runs, so importing this package needs none.
"""

from .client import RequestResult, prompt_for
from .metrics import LoadReport, format_report
from .runner import DEFAULT_URL, ENDPOINTS, LoadConfig, run_load

__all__ = [
    "DEFAULT_URL",
    "ENDPOINTS",
    "LoadConfig",
    "LoadReport",
    "RequestResult",
    "format_report",
    "prompt_for",
    "run_load",
]
