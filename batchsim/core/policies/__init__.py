"""Batching policies: the taxi, the bus, the bus with a timetable, and the bus that never stops."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Policy
from .blocks import BlockPool, RunningRows
from .continuous import Continuous
from .padded import Dynamic, PaddedBatchPolicy, Static, Taxi

__all__ = ["BlockPool", "RunningRows", "Policy", "PaddedBatchPolicy", "Taxi", "Static", "Dynamic", "Continuous", "POLICY_NAMES", "make_policy"]

POLICY_NAMES = ("taxi", "static", "dynamic", "continuous")


def make_policy(
    name: str,
    max_batch: int = 8,
    max_wait: float = 0.05,
    max_seqs: int = 64,
    max_batched_tokens: int = 2048,
    block_size: int = 16,
    chunked_prefill: bool = True,
) -> Policy:
    """Build a policy by name; each takes only the knobs that concern it."""
    if name == "taxi":
        return Taxi()
    if name == "static":
        return Static(max_batch)
    if name == "dynamic":
        return Dynamic(max_batch, max_wait)
    if name == "continuous":
        return Continuous(max_seqs, max_batched_tokens, block_size, chunked_prefill)
    raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
