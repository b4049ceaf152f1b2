"""Batching policies: the taxi, the bus, the bus with a timetable, and the bus that never stops."""

from __future__ import annotations

import logging

from ..errors import ConfigError, show
from .base import Policy
from .blocks import BlockPool
from .continuous import Continuous
from .padded import Dynamic, PaddedBatchPolicy, Static, Taxi
from .rows import RunningRows
from .vllm_v1 import SCHEDULERS, VLLMV1

__all__ = ["BlockPool", "RunningRows", "Policy", "PaddedBatchPolicy", "Taxi", "Static", "Dynamic", "Continuous", "VLLMV1", "SCHEDULERS",
           "POLICY_NAMES", "READS", "make_policy"]

POLICY_NAMES = ("taxi", "static", "dynamic", "continuous")


#: The knobs each policy reads (make_policy takes them all, so that one set can build every policy).
READS = {"taxi": (), "static": ("max_batch",), "dynamic": ("max_batch", "max_wait"),
         "continuous": ("max_seqs", "max_batched_tokens", "block_size", "chunked_prefill", "scheduler")}
_DEFAULTS = {"max_batch": 8, "max_wait": 0.05, "max_seqs": 64, "max_batched_tokens": 2048, "block_size": 16,
             "chunked_prefill": True, "scheduler": "batchsim"}
_log = logging.getLogger("batchsim")


def make_policy(
    name: str,
    max_batch: int | None = None,
    max_wait: float | None = None,
    max_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    block_size: int | None = None,
    chunked_prefill: bool | None = None,
    scheduler: str | None = None,
) -> Policy:
    """Build a policy by name; each takes only the knobs that concern it (defaults: max_batch 8,
    max_wait 0.05, max_seqs 64, max_batched_tokens 2048, block_size 16, chunked_prefill True).

    ``scheduler`` (continuous only): ``"batchsim"``, the textbook scheduler, or ``"vllm-v1"``, the
    order vLLM's V1 scheduler works in (``policies.vllm_v1``).

    Knobs given that the policy does not read are the Python form of the command line's note:
    one set given to every policy (``{n: make_policy(n, **knobs) for n in POLICY_NAMES}``) is an
    idiom, and passes quietly as long as the policy reads one of them; a set of which it reads
    none (``make_policy("continuous", max_wait=0.1)``) is a note on the ``batchsim`` logger. A
    note, not a warning: warnings are errors in this package's tests and in strict notebooks,
    and an ignored knob is not an error. The taxi reads no knob, so it takes any set quietly.
    """
    given = {k: v for k, v in (("max_batch", max_batch), ("max_wait", max_wait), ("max_seqs", max_seqs),
                               ("max_batched_tokens", max_batched_tokens), ("block_size", block_size),
                               ("chunked_prefill", chunked_prefill), ("scheduler", scheduler)) if v is not None}
    if name in READS and READS[name] and given and not set(given) & set(READS[name]):
        knobs = ", ".join(f"{k}={show(v)}" for k, v in given.items())
        _log.warning(f"note: make_policy({name!r}) ignores {knobs}: {name} reads only {', '.join(READS[name])}")
    k = {**_DEFAULTS, **given}
    if name == "taxi":
        return Taxi()
    if name == "static":
        return Static(k["max_batch"])
    if name == "dynamic":
        return Dynamic(k["max_batch"], k["max_wait"])
    if name == "continuous":
        if k["scheduler"] not in SCHEDULERS:
            raise ConfigError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {k['scheduler']!r}")
        cls = VLLMV1 if k["scheduler"] == "vllm-v1" else Continuous
        return cls(k["max_seqs"], k["max_batched_tokens"], k["block_size"], k["chunked_prefill"])
    raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
