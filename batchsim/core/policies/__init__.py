"""Batching policies: the taxi, the bus, the bus with a timetable, and the bus that never stops."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from ..errors import ConfigError, show
from ..knobs import DEFAULTS, KNOBS, POLICY_NAMES, READS
from .base import Policy
from .blocks import BlockPool
from .continuous import Continuous
from .padded import Dynamic, PaddedBatchPolicy, Static, Taxi
from .rows import RunningRows
from .vllm_v1 import SCHEDULERS, VLLMV1

__all__ = ["BlockPool", "RunningRows", "Policy", "PaddedBatchPolicy", "Taxi", "Static", "Dynamic", "Continuous", "VLLMV1", "SCHEDULERS",
           "POLICY_NAMES", "READS", "make_policy"]

_CLASSES = {"taxi": Taxi, "static": Static, "dynamic": Dynamic, "continuous": Continuous}
_FLAVOURS = {"vllm-v1": VLLMV1}  # the continuous policy's other schedulers (ContinuousKnobs.scheduler)
_log = logging.getLogger("batchsim")


def make_policy(name: str, **knobs: Any) -> Policy:
    """Build a policy by name; each takes only the knobs that concern it (``READS``), each knob not
    given (or given as None) at its default; the knobs, their defaults and their checks are the
    dataclasses of ``batchsim.core.knobs`` (``StaticKnobs``, ..., ``ContinuousKnobs``).

    ``scheduler`` (continuous only): ``"batchsim"``, the textbook scheduler, or ``"vllm-v1"``, the
    order vLLM's V1 scheduler works in (``policies.vllm_v1``).

    Knobs given that the policy does not read are the Python form of the command line's note:
    one set given to every policy (``{n: make_policy(n, **knobs) for n in POLICY_NAMES}``) is an
    idiom, and passes quietly as long as the policy reads one of them; a set of which it reads
    none (``make_policy("continuous", max_wait=0.1)``) is a note on the ``batchsim`` logger. A
    note, not a warning: warnings are errors in this package's tests and in strict notebooks,
    and an ignored knob is not an error. The taxi reads no knob, so it takes any set quietly.
    """
    for k in knobs:
        if k not in DEFAULTS:  # as Python says it of a misspelt keyword
            raise TypeError(f"make_policy() got an unexpected keyword argument {k!r}")
    given = {k: v for k, v in knobs.items() if v is not None}
    if name not in KNOBS:
        raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
    reads = READS[name]
    if reads and given and not set(given) & set(reads):
        shown = ", ".join(f"{k}={show(v)}" for k, v in given.items())
        _log.warning(f"note: make_policy({name!r}) ignores {shown}: {name} reads only {', '.join(reads)}")
    chosen = KNOBS[name](**{k: v for k, v in given.items() if k in reads})  # checks each knob
    kw = {f.name: getattr(chosen, f.name) for f in fields(chosen)}
    cls = _FLAVOURS.get(kw.pop("scheduler", None), _CLASSES[name])
    return cls(**kw)
