"""Batching policies: the taxi, the bus, the bus with a timetable, and the bus that never stops."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import ConfigError, show
from ..knobs import DEFAULTS, KNOBS, POLICY_NAMES, READS
from ..notes import note
from .base import Policy
from .blocks import BlockPool
from .continuous import Continuous
from .padded import Dynamic, PaddedBatchPolicy, Static, Taxi
from .rows import RunningRows
from .vllm_v1 import SCHEDULERS, VLLMV1

__all__ = [
    "BlockPool",
    "RunningRows",
    "Policy",
    "PaddedBatchPolicy",
    "Taxi",
    "Static",
    "Dynamic",
    "Continuous",
    "VLLMV1",
    "SCHEDULERS",
    "POLICY_NAMES",
    "READS",
    "make_policy",
]

_CLASSES = {"taxi": Taxi, "static": Static, "dynamic": Dynamic, "continuous": Continuous}
# the continuous policy's other schedulers (ContinuousKnobs.scheduler)
_FLAVOURS = {"vllm-v1": VLLMV1}


def make_policy(name: str, **knobs: Any) -> Policy:
    """Build a policy by name; each takes only the knobs that concern it (``READS``), each knob not
    given (or given as None) at its default; the knobs, their defaults and their checks are the
    dataclasses of ``batchsim.core.knobs`` (``StaticKnobs``, ..., ``ContinuousKnobs``).

    ``scheduler`` (continuous only): ``"batchsim"``, the textbook scheduler, or ``"vllm-v1"``, the
    order vLLM's V1 scheduler works in (``policies.vllm_v1``).

    Knobs given of which the policy reads none (``make_policy("continuous", max_wait=0.1)``,
    ``make_policy("taxi", max_batch=4)``) are a ``BatchsimNote`` warning that names them: a warning,
    not an error, because the policy built is still the one asked for, and one set given to every
    policy (``{n: make_policy(n, **knobs) for n in POLICY_NAMES}``) is an idiom of the lessons and
    benches; but a word, because a knob that changes nothing is most often a mistake (the taxi
    batches nothing: ``max_batch`` there is a misunderstanding worth naming). The idiom stays quiet:
    a policy that reads one of the knobs passes; so does the taxi, which reads none, when the set is
    one for every policy (each policy that reads knobs reads one of it). ``warnings.simplefilter(
    "ignore", BatchsimNote)`` silences the note.
    """
    for k in knobs:
        if k not in DEFAULTS:  # as Python says it of a misspelt keyword
            raise TypeError(f"make_policy() got an unexpected keyword argument {k!r}")
    given = {k: v for k, v in knobs.items() if v is not None}
    if name not in KNOBS:
        raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
    reads = READS[name]
    for_every_policy = all(set(given) & set(r) for r in READS.values() if r)
    if given and not set(given) & set(reads) and not (not reads and for_every_policy):
        shown = ", ".join(f"{k}={show(v)}" for k, v in given.items())
        what = (
            f"reads only {', '.join(reads)}"
            if reads
            else "reads no knob (it serves one request at a time)"
        )
        note(f"make_policy({name!r}) ignores {shown}: {name} {what}")
    chosen = KNOBS[name](**{k: v for k, v in given.items() if k in reads})  # checks each knob
    kw = {f.name: getattr(chosen, f.name) for f in fields(chosen)}
    cls = _FLAVOURS.get(kw.pop("scheduler", None), _CLASSES[name])
    return cls(**kw)
