"""A workload: who arrives when, with how long a prompt and how long an answer.

One seed in; ``numpy.random.SeedSequence(seed).spawn`` gives independent streams
for arrivals, prompt lengths and output lengths, so changing the output-length
distribution does not move the arrival times. Same seed, same workload on every
machine.

Request ids are 0..n-1 in arrival order; the simulator and the real runner both
rely on that to keep per-request records in arrays. Arrival times must be finite
and sorted: ``nan`` passes a plain order check (``nan < x`` is false) and would
then spin a wall-clock runner or poison every statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .arrivals import ArrivalProcess
from .errors import ConfigError, check_int_at_least, check_positive
from .lengths import LengthDist
from .traces import Trace

__all__ = ["Request", "Workload", "make_workload", "trace_workload"]


@dataclass(frozen=True)
class Request:
    id: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    text: str | None = None


@dataclass(frozen=True)
class Workload:
    requests: tuple[Request, ...]
    description: str = ""

    def __post_init__(self) -> None:
        for i, r in enumerate(self.requests):
            if r.id != i:
                raise ConfigError(f"request ids must be 0..n-1 in order, got id {r.id} at position {i}")
            if not math.isfinite(r.arrival):
                raise ConfigError(f"arrival times must be finite, got {r.arrival!r} for request {i}")
            if i and r.arrival < self.requests[i - 1].arrival:
                raise ConfigError(f"arrivals must be sorted, request {i} arrives before request {i - 1}")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def arrivals(self) -> np.ndarray:
        return np.fromiter((r.arrival for r in self.requests), dtype=np.float64, count=len(self.requests))

    @property
    def prompt_tokens(self) -> np.ndarray:
        return np.fromiter((r.prompt_tokens for r in self.requests), dtype=np.int64, count=len(self.requests))

    @property
    def output_tokens(self) -> np.ndarray:
        return np.fromiter((r.output_tokens for r in self.requests), dtype=np.int64, count=len(self.requests))

    @classmethod
    def from_arrays(cls, arrivals, prompts, outputs, description: str = "") -> "Workload":
        reqs = tuple(
            Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))
        )
        return cls(reqs, description)


def make_workload(
    arrival: ArrivalProcess,
    prompt_len: LengthDist,
    output_len: LengthDist,
    n: int | None = None,
    duration: float | None = None,
    seed: int = 0,
) -> Workload:
    """N requests, or all that arrive within ``duration`` seconds."""
    check_int_at_least("seed", seed, 0)
    a_rng, p_rng, o_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    times = arrival.times(a_rng, n=n, duration=duration)
    k = len(times)
    desc = f"{arrival!r}, prompt {prompt_len!r}, output {output_len!r}, seed {seed}"
    return Workload.from_arrays(times, prompt_len.sample(p_rng, k), output_len.sample(o_rng, k), desc)


def trace_workload(trace: Trace, n: int | None = None, duration: float | None = None, speedup: float = 1.0) -> Workload:
    """Replay a trace: its own arrivals and lengths, the first ``n`` rows or ``duration`` seconds.

    ``speedup`` > 1 compresses time (2.0 replays an hour of traffic in half an hour, at twice the rate).
    """
    check_positive("speedup", speedup)
    if n is not None:
        check_int_at_least("requests", n, 1)
    if duration is not None:
        check_positive("duration", duration)
    with np.errstate(over="ignore"):
        t = trace.arrival_s / speedup
    if len(t) and not np.isfinite(t[-1]):
        raise ConfigError(f"speedup {speedup!r} is too small: the replayed arrivals overflow to infinity")
    keep = np.ones(len(t), dtype=bool)
    if duration is not None:
        keep &= t < duration
    idx = np.nonzero(keep)[0]
    if n is not None:
        idx = idx[:n]
    return Workload.from_arrays(t[idx], trace.prompt_tokens[idx], trace.output_tokens[idx], f"{trace!r} x{speedup:g}")
