"""Lab 3, solution: memory and money, by hand.

The claim's two halves both imply $3,600 per GPU-hour, a thousand times a real
on-demand price (a few dollars). The *ratio* (10x) is plausible; the absolute
figures are not. Checking a cost claim takes one multiplication.
"""

from __future__ import annotations


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def max_batch(
    memory_gb: float, mem_util: float, weights_gb: float, context: int, bytes_per_token: int
) -> int:
    free = memory_gb * 1e9 * mem_util - weights_gb * 1e9
    if free <= 0:
        return 0
    return int(free // bytes_per_token) // context


def cost_per_request(price_per_hour: float, requests_per_s: float) -> float:
    return price_per_hour / 3600.0 / requests_per_s


def implied_price_per_hour(requests_per_s: float, dollars_per_request: float) -> float:
    return requests_per_s * 3600.0 * dollars_per_request


def claim_check() -> tuple[float, float]:
    return implied_price_per_hour(10, 0.10), implied_price_per_hour(100, 0.01)
