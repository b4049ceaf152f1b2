"""How many tokens of KV cache fit on the GPU: the size of the bus.

Every token a request has seen (its prompt and the answer so far) leaves a key and
a value in every layer: the KV cache. The GPU's memory holds the weights, the working
space of one forward pass (activations) and the cache, so the cache gets what is left,
as vLLM sizes it after its profiling run:

    KV budget (bytes)  = GPU memory x mem_util - weight bytes - activation reserve
    KV budget (tokens) = KV budget (bytes) // (2 x layers x kv_heads x head_dim x KV dtype bytes)

``mem_util`` (default 0.9) is vLLM's ``gpu_memory_utilization`` (the same default, vLLM
engine arguments documentation). The activation reserve is what vLLM's profiling run
measures: one forward pass of ``max_batched_tokens`` tokens (its peak is the residual
stream and the MLP's up/gate products of every token) plus the sampler's fp32 logits for
``max_seqs`` rows, plus a fixed 0.5 GiB ASSUMED for what PyTorch does not count (the CUDA
context, cuBLAS workspaces, CUDA graphs). Checked against vLLM's own logs
(vllm-project/vllm pull request 10511: Llama-3-8B on an H100, 0.9: activation peak 1.26 GiB,
KV 53.29 GiB; pull request 2031: Llama-2-7B on an A100-80GB, 7,351 blocks of 16 tokens);
``tests/test_gpu_model.py`` holds the model within 5 % of both.

With tensor parallelism over ``tp`` GPUs each GPU holds 1/tp of the weights and of every
token's KV heads, so the replica's budget is tp times one GPU's share. A batch whose rows
hold C tokens of context each fits while batch x C <= budget tokens: the *memory wall*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.errors import (
    MAX_KV_TOKENS,
    ConfigError,
    check_at_most,
    check_int_at_least,
    check_kv_tokens,
    check_positive,
    is_number,
    show,
)
from .specs import GPU, Model, check_kv_dtype, check_weights

__all__ = [
    "KVBudget",
    "kv_budget",
    "activation_bytes",
    "DEFAULT_MEM_UTIL",
    "MAX_KV_TOKENS",
    "check_kv_tokens",
    "PROFILE_TOKENS",
    "PROFILE_SEQS",
    "NON_TORCH_BYTES",
]

DEFAULT_MEM_UTIL = 0.9
#: vLLM's profiling pass: 8,192 tokens (its default max_num_batched_tokens for an OpenAI server on a
#: card of 70 GiB or more, vLLM engine arguments) and 256 sequences (its default max_num_seqs
#: there).
PROFILE_TOKENS = 8192
PROFILE_SEQS = 256
#: Memory PyTorch's peak does not show: CUDA context, library workspaces, CUDA graphs. ASSUMED.
NON_TORCH_BYTES = 0.5 * 2**30


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def activation_bytes(
    model: Model,
    tokens: int = PROFILE_TOKENS,
    seqs: int = PROFILE_SEQS,
    tp: int = 1,
    act_bytes: int = 2,
) -> float:
    """One GPU's activation reserve (bytes): the peak of a pass of ``tokens`` tokens, in 16-bit.

    Per token the peak holds the residual stream and its normalised copy, the attention's
    output and its projection (4 x hidden), and the MLP's gate, up and activated products
    (3 x intermediate, split over the tensor-parallel GPUs); the sampler holds fp32 logits
    for ``seqs`` rows and one working copy of them.
    """
    check_int_at_least("max-batched-tokens", tokens, 1)
    check_int_at_least("max-seqs", seqs, 1)
    per_token = (4 * model.hidden + 3 * model.mlp_width / tp) * act_bytes
    return tokens * per_token + 2 * seqs * model.vocab * 4 + NON_TORCH_BYTES


@dataclass(frozen=True)
class KVBudget:
    """The KV cache's share of a replica (all its GPUs), in bytes and tokens."""

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
        return f"{self.tokens:,} tokens = {_gb(self.tokens * self.bytes_per_token)}" + (
            f" ({self.explanation})" if self.explanation else ""
        )


def kv_bytes_per_token(model: Model, kv_dtype: str, tp: int = 1) -> int:
    """The replica's KV bytes per token: each GPU keeps ceil(kv_heads / tp) heads (replicated when
    there are fewer KV heads than GPUs, as vLLM does)."""
    check_kv_dtype(kv_dtype)
    per_gpu = model.kv_bytes_per_token(kv_dtype) // model.kv_heads * math.ceil(model.kv_heads / tp)
    return per_gpu * tp


def kv_budget(
    gpu: GPU,
    model: Model,
    dtype: str = "fp16",
    mem_util: float = DEFAULT_MEM_UTIL,
    override_tokens: int | None = None,
    override_bytes: float | None = None,
    *,
    weights: str | None = None,
    kv_dtype: str | None = None,
    tp: int = 1,
    max_batched_tokens: int = PROFILE_TOKENS,
    max_seqs: int = PROFILE_SEQS,
) -> KVBudget:
    """The KV budget of ``model`` on ``tp`` x ``gpu``; raises ConfigError naming both if the weights
    do not fit.

    ``weights``/``kv_dtype``: how weights and cache are stored (default: ``dtype``).
    """
    if not is_number(mem_util) or not (0 < mem_util <= 1):
        raise ConfigError(f"mem-util must be in (0, 1], got {show(mem_util)}")
    weights, kv_dtype = weights or dtype, kv_dtype or dtype
    check_weights(weights)
    check_int_at_least("tp", tp, 1)
    per_token = kv_bytes_per_token(model, kv_dtype, tp)
    w_gpu = model.weight_bytes(weights) / tp
    usable = gpu.memory_bytes * mem_util
    act = activation_bytes(model, max_batched_tokens, max_seqs, tp, 4 if dtype == "fp32" else 2)
    on = f"{tp} x {gpu.name}" if tp > 1 else f"gpu {gpu.name}"
    if w_gpu >= usable:
        split = f" (1/{tp} of them on each GPU)" if tp > 1 else ""
        raise ConfigError(
            f"model {model.name} does not fit on {on}: its {weights} weights need "
            f"{_gb(w_gpu)}{split}, the GPU offers {gpu.memory_label} x {mem_util:g} = {_gb(usable)}"
            + ("" if tp > 1 else "; try --tp or smaller --weights")
        )
    if override_tokens is not None and override_bytes is not None:
        raise ConfigError(
            f"give kv-budget-tokens or kv-budget-bytes, not both (got {show(override_tokens)} and "
            f"{show(override_bytes)})"
        )
    if override_tokens is not None:
        check_kv_tokens("kv-budget-tokens", override_tokens)
        return KVBudget(int(override_tokens) * per_token, per_token, "set with --kv-budget-tokens")
    if override_bytes is not None:
        check_positive("kv-budget-bytes", override_bytes)
        check_at_most("kv-budget-bytes", override_bytes, MAX_KV_TOKENS * per_token, "bytes")
        if override_bytes < per_token:
            raise ConfigError(
                f"kv-budget-bytes {show(override_bytes)} holds no token of {model.name}'s KV cache "
                f"({per_token:,} bytes per token in {kv_dtype})"
            )
        return KVBudget(float(override_bytes), per_token, "set with --kv-budget-bytes")
    free = usable - w_gpu - act
    if free * tp < per_token:
        raise ConfigError(
            f"model {model.name} leaves no room for a KV cache on {on}: {_gb(usable)} usable - "
            f"{_gb(w_gpu)} of weights - {_gb(act)} of activations"
        )
    each = " each" if tp > 1 else ""
    why = (
        f"{on} {gpu.memory_label}{each} x {mem_util:g} - {model.name} {weights} weights "
        f"{_gb(w_gpu)}{each} - activations {_gb(act)}{each} ({max_batched_tokens:,} tokens a step)"
        + (f"; KV cache in {kv_dtype}" if kv_dtype != weights else "")
    )
    return KVBudget(free * tp, per_token, why)
