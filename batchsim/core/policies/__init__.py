"""Batching policies: the taxi, the bus, the bus with a timetable, and the bus that never stops."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Policy
from .blocks import BlockPool, RunningRows
from .continuous import Continuous
from .padded import Dynamic, PaddedBatchPolicy, Static, Taxi
from .vllm_v1 import SCHEDULERS, VLLMV1

__all__ = ["BlockPool", "RunningRows", "Policy", "PaddedBatchPolicy", "Taxi", "Static", "Dynamic", "Continuous", "VLLMV1", "SCHEDULERS",
           "POLICY_NAMES", "make_policy"]

POLICY_NAMES = ("taxi", "static", "dynamic", "continuous")


def make_policy(
    name: str,
    max_batch: int = 8,
    max_wait: float = 0.05,
    max_seqs: int = 64,
    max_batched_tokens: int = 2048,
    block_size: int = 16,
    chunked_prefill: bool = True,
    scheduler: str = "batchsim",
) -> Policy:
    """Build a policy by name; each takes only the knobs that concern it.

    ``scheduler`` (continuous only): ``"batchsim"``, the textbook scheduler, or ``"vllm-v1"``, the
    order vLLM's V1 scheduler works in (``policies.vllm_v1``)."""
    if name == "taxi":
        return Taxi()
    if name == "static":
        return Static(max_batch)
    if name == "dynamic":
        return Dynamic(max_batch, max_wait)
    if name == "continuous":
        if scheduler not in SCHEDULERS:
            raise ConfigError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
        cls = VLLMV1 if scheduler == "vllm-v1" else Continuous
        return cls(max_seqs, max_batched_tokens, block_size, chunked_prefill)
    raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
