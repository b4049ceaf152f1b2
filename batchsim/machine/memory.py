"""How many tokens of KV cache fit on the GPU: the size of the bus.

Every token a request has seen (its prompt and the answer so far) leaves a key and
a value in every layer: the KV cache. The GPU's memory holds the weights, the
cache and some working space, so the cache gets what is left:

    KV budget (bytes)  = GPU memory x mem_util - weight bytes
    KV budget (tokens) = KV budget (bytes) // (2 x layers x kv_heads x head_dim x dtype bytes)

``mem_util`` (default 0.9) is the share of memory the server may use at all, the
rest left for activations, the CUDA context and fragmentation; vLLM's
``gpu_memory_utilization`` defaults to the same 0.9 (vLLM engine arguments
documentation). A batch whose rows hold C tokens of context each fits while
batch x C <= budget tokens: that is the *memory wall*, the other limit on batching
beside the latency a user tolerates.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import GPU, Model
from ..core.errors import (
    MAX_KV_TOKENS, ConfigError, check_at_most, check_int_at_least, check_kv_tokens, check_positive, is_number, show,
)

__all__ = ["KVBudget", "kv_budget", "DEFAULT_MEM_UTIL", "MAX_KV_TOKENS", "check_kv_tokens"]

DEFAULT_MEM_UTIL = 0.9


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


@dataclass(frozen=True)
class KVBudget:
    """The KV cache's share of a GPU, in bytes and tokens."""

    bytes: float
    bytes_per_token: int
    explanation: str = ""

    def __post_init__(self) -> None:
        check_int_at_least("kv bytes per token", self.bytes_per_token, 1)
        if not self.bytes > 0:
            raise ConfigError(f"kv budget must be > 0 bytes, got {self.bytes!r}")

    @property
    def tokens(self) -> int:
        return int(self.bytes // self.bytes_per_token)

    def max_batch(self, tokens_per_row: float) -> int:
        """The most rows of ``tokens_per_row`` cached tokens each that fit at once."""
        if tokens_per_row <= 0:
            raise ConfigError(f"tokens per row must be > 0, got {tokens_per_row!r}")
        return int(self.tokens // tokens_per_row)

    def describe(self) -> str:
        return f"{self.tokens:,} tokens = {_gb(self.tokens * self.bytes_per_token)}" + (f" ({self.explanation})" if self.explanation else "")


def kv_budget(gpu: GPU, model: Model, dtype: str = "fp16", mem_util: float = DEFAULT_MEM_UTIL,
              override_tokens: int | None = None, override_bytes: float | None = None) -> KVBudget:
    """The KV budget of ``model`` on ``gpu``; raises ConfigError naming both if the weights do not fit."""
    if not is_number(mem_util) or not (0 < mem_util <= 1):
        raise ConfigError(f"mem-util must be in (0, 1], got {show(mem_util)}")
    per_token = model.kv_bytes_per_token(dtype)
    weights = model.weight_bytes(dtype)
    usable = gpu.memory_bytes * mem_util
    if weights >= usable:
        raise ConfigError(
            f"model {model.name} does not fit on gpu {gpu.name}: its {dtype} weights need {_gb(weights)}, "
            f"the GPU offers {_gb(gpu.memory_bytes)} x {mem_util:g} = {_gb(usable)}"
        )
    if override_tokens is not None and override_bytes is not None:
        raise ConfigError(f"give kv-budget-tokens or kv-budget-bytes, not both (got {show(override_tokens)} and {show(override_bytes)})")
    if override_tokens is not None:
        check_kv_tokens("kv-budget-tokens", override_tokens)
        return KVBudget(int(override_tokens) * per_token, per_token, "set with --kv-budget-tokens")
    if override_bytes is not None:
        check_positive("kv-budget-bytes", override_bytes)
        check_at_most("kv-budget-bytes", override_bytes, MAX_KV_TOKENS * per_token, "bytes")
        if override_bytes < per_token:
            raise ConfigError(f"kv-budget-bytes {show(override_bytes)} holds no token of {model.name}'s KV cache "
                              f"({per_token:,} bytes per token in {dtype})")
        return KVBudget(float(override_bytes), per_token, "set with --kv-budget-bytes")
    free = usable - weights
    if free < per_token:
        raise ConfigError(
            f"model {model.name} leaves no room for a KV cache on gpu {gpu.name}: "
            f"{_gb(usable)} usable - {_gb(weights)} of weights"
        )
    why = f"{gpu.name} {_gb(gpu.memory_bytes)} x {mem_util:g} - {model.name} {dtype} weights {_gb(weights)}"
    return KVBudget(free, per_token, why)
