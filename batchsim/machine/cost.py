"""Dollars: what a request costs when you rent the GPU by the hour.

A rented GPU is paid for every second of the run, busy or idle, so

    $/request          = $/hour x makespan (h) / completed requests
    $/1M output tokens = $/hour x makespan (h) / output tokens x 10^6

and the throughput a price needs is the same sum turned round:

    requests/s needed for a target $/request = ($/hour / 3600) / target.

Busy and idle: the bill splits into the GPU-seconds spent running steps (busy) and the
seconds it waited for traffic (idle). Comparing two services by their whole bill mostly
compares their traffic (a quiet chat pays for an idle GPU); comparing their busy cost
per token compares how well each uses the GPU while it works. ``cost_summary`` gives both.

The last line is the check every cost claim deserves. "1 GPU serves 10 requests/s
at $0.10 a request" means the GPU costs 10 x 3600 x $0.10 = $3,600 an hour: a
thousand times what one rents for. ``implied_price_per_hour`` does that sum.
"""

from __future__ import annotations

from ..core.errors import check_nonneg, check_positive

__all__ = ["cost_summary", "required_throughput", "implied_price_per_hour", "check_price"]


def check_price(price: float) -> None:
    check_nonneg("gpu-price", price)


def cost_summary(summary: dict, price_per_hour: float) -> dict:
    """$/request, $/1M output tokens and the run's bill from a ``summarize`` dict (idle time is
    paid), and the same split into busy (running steps) and idle (waiting for traffic) time."""
    check_price(price_per_hour)
    hours = summary["duration"] / 3600.0
    bill = price_per_hour * hours
    busy = bill * min(1.0, max(0.0, summary.get("busy_fraction", 1.0)))
    done, tokens = summary["completed"], summary["total_output_tokens"]
    return {
        "gpu_price_per_hour": float(price_per_hour),
        "cost_total": bill,
        "cost_per_request": bill / done if done else None,
        "cost_per_1m_tokens": bill / tokens * 1e6 if tokens else None,
        "cost_busy": busy,
        "cost_idle": bill - busy,
        "cost_per_request_busy": busy / done if done else None,
        "cost_per_1m_tokens_busy": busy / tokens * 1e6 if tokens else None,
    }


def required_throughput(price_per_hour: float, target_per_request: float) -> float:
    """Requests per second a GPU at ``price_per_hour`` must serve to cost ``target_per_request``
    each."""
    check_price(price_per_hour)
    check_positive("target $/request", target_per_request)
    return price_per_hour / 3600.0 / target_per_request


def implied_price_per_hour(requests_per_s: float, per_request: float) -> float:
    """The hourly price that a claimed throughput and $/request add up to."""
    check_positive("requests/s", requests_per_s)
    check_positive("$/request", per_request)
    return requests_per_s * 3600.0 * per_request
