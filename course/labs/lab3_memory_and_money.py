"""Lab 3: memory and money, by hand.

Two sums every inference engineer does on the back of an envelope, checked here
against the package's catalog. Use only the arguments: no lookups.

1. ``kv_bytes_per_token``: a key and a value, per layer, per KV head, of
   ``head_dim`` numbers of ``dtype_bytes`` bytes each.
2. ``max_batch``: the GPU offers ``memory_gb`` x ``mem_util`` (decimal GB, 1e9
   bytes); the weights take ``weights_gb``; the rest holds the KV cache. How many
   requests of ``context`` tokens fit at once? (Whole requests: round down.)
3. ``cost_per_request``: a GPU rented at ``price_per_hour`` serving ``requests_per_s``.
4. ``implied_price_per_hour``: the hourly price a claimed throughput and
   $/request add up to.
5. ``claim_check``: the seed material says "Without batching: 1 GPU serves 10 RPS =
   $0.10/request. With batching (size=32): 1 GPU serves 100 RPS = $0.01/request."
   Return the hourly GPU prices the two halves imply, as a tuple (taxi, batched).

Check your work:  pytest course/labs -k lab3
"""

from __future__ import annotations


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    # --- your code here ---
    raise NotImplementedError("your code here: kv_bytes_per_token")


def max_batch(
    memory_gb: float, mem_util: float, weights_gb: float, context: int, bytes_per_token: int
) -> int:
    # --- your code here ---
    raise NotImplementedError("your code here: max_batch")


def cost_per_request(price_per_hour: float, requests_per_s: float) -> float:
    # --- your code here ---
    raise NotImplementedError("your code here: cost_per_request")


def implied_price_per_hour(requests_per_s: float, dollars_per_request: float) -> float:
    # --- your code here ---
    raise NotImplementedError("your code here: implied_price_per_hour")


def claim_check() -> tuple[float, float]:
    # --- your code here ---
    raise NotImplementedError("your code here: claim_check")
