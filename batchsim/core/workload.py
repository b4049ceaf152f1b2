"""A workload: who arrives when, with how long a prompt and how long an answer.

One seed in; ``numpy.random.SeedSequence(seed).spawn`` gives independent streams
for arrivals, prompt lengths and output lengths, so changing the output-length
distribution does not move the arrival times. Same seed, same workload on every
machine.

Request ids are 0..n-1 in arrival order; the simulator and the real runner both
rely on that to keep per-request records in arrays, and the workload itself is three
arrays (a million requests are 24 MB, not a million objects). Arrival times must be finite
and sorted: ``nan`` passes a plain order check (``nan < x`` is false) and would
then spin a wall-clock runner or poison every statistic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .arrivals import ArrivalProcess
from .errors import ConfigError, check_int_at_least, check_positive
from .lengths import LengthDist
from .traces import Trace

__all__ = ["Request", "Workload", "make_workload", "trace_workload", "seeded_prompt"]


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    text: str | None = None


class Workload:
    """Requests in arrival order, kept as three arrays (24 bytes a request, not a Python object each).

    ``Workload(requests, description)`` takes ``Request`` objects (a hand-made workload, a text
    prompt); ``Workload.from_arrays`` takes the arrays themselves. ``requests`` is a read-only
    sequence that makes each ``Request`` when it is asked for, so a million-request run never
    holds a million objects: the driver asks for one at its arrival, and the policy lets it go
    when it is served.
    """

    __slots__ = ("arrivals", "prompt_tokens", "output_tokens", "texts", "description")

    def __init__(self, requests=(), description: str = "") -> None:
        reqs = tuple(requests)
        for i, r in enumerate(reqs):
            if r.id != i:
                raise ConfigError(f"request ids must be 0..n-1 in order, got id {r.id} at position {i}")
        texts = tuple(r.text for r in reqs) if any(r.text is not None for r in reqs) else None
        self._set(np.fromiter((r.arrival for r in reqs), dtype=np.float64, count=len(reqs)),
                  np.fromiter((r.prompt_tokens for r in reqs), dtype=np.int64, count=len(reqs)),
                  np.fromiter((r.output_tokens for r in reqs), dtype=np.int64, count=len(reqs)), texts, description)

    def _set(self, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, texts, description: str) -> None:
        if not (len(arrivals) == len(prompts) == len(outputs)):
            raise ConfigError(f"arrivals, prompts and outputs must be as long as each other, got "
                              f"{len(arrivals)}, {len(prompts)} and {len(outputs)}")
        bad = np.flatnonzero(~np.isfinite(arrivals))
        if len(bad):
            i = int(bad[0])
            raise ConfigError(f"arrival times must be finite, got {float(arrivals[i])!r} for request {i}")
        late = np.flatnonzero(arrivals[1:] < arrivals[:-1])
        if len(late):
            i = int(late[0]) + 1
            raise ConfigError(f"arrivals must be sorted, request {i} arrives before request {i - 1}")
        for name, a in (("arrivals", arrivals), ("prompt_tokens", prompts), ("output_tokens", outputs)):
            a.setflags(write=False)  # shared with every run's records: nobody may move a request
            object.__setattr__(self, name, a)
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "description", description)

    def __setattr__(self, name, value):
        raise AttributeError(f"a Workload is immutable ({name})")

    def __len__(self) -> int:
        return len(self.arrivals)

    def __repr__(self) -> str:
        return f"Workload({len(self)} requests, {self.description!r})"

    @property
    def requests(self) -> "_Requests":
        return _Requests(self)

    def request(self, i: int) -> Request:
        """Request ``i`` as an object (made now, not stored)."""
        return Request(i, self.arrivals.item(i), self.prompt_tokens.item(i), self.output_tokens.item(i),
                       None if self.texts is None else self.texts[i])

    def subset(self, ids, description: str | None = None) -> "Workload":
        """The requests ``ids`` (in order), renumbered 0..k-1: what one replica of a fleet was given."""
        ids = np.asarray(ids, dtype=np.int64)
        texts = None if self.texts is None else tuple(self.texts[i] for i in ids.tolist())
        return Workload._of(self.arrivals[ids], self.prompt_tokens[ids], self.output_tokens[ids], texts,
                            self.description if description is None else description)

    @classmethod
    def _of(cls, arrivals, prompts, outputs, texts, description: str) -> "Workload":
        wl = object.__new__(cls)
        wl._set(np.array(arrivals, dtype=np.float64), np.array(prompts, dtype=np.int64),
                np.array(outputs, dtype=np.int64), texts, description)
        return wl

    @classmethod
    def from_arrays(cls, arrivals, prompts, outputs, description: str = "") -> "Workload":
        return cls._of(arrivals, prompts, outputs, None, description)


class _Requests(Sequence):
    """``workload.requests``: each Request made when it is read."""

    __slots__ = ("_wl",)

    def __init__(self, wl: Workload) -> None:
        self._wl = wl

    def __len__(self) -> int:
        return len(self._wl)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._wl.request(j) for j in range(*i.indices(len(self._wl))))
        n = len(self._wl)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("request index out of range")
        return self._wl.request(i)

    def __iter__(self):
        return (self._wl.request(i) for i in range(len(self._wl)))


def seeded_prompt(seed: int, request_id: int, n: int, vocab: int = 256) -> list[int]:
    """A request's prompt when it has no text: ``n`` ids from (seed, request id), below 256 (and the
    vocabulary), so every engine, every policy and every load generator send the same prompt for the
    same request, and any GPT-2-sized or byte-level vocabulary accepts it."""
    return np.random.default_rng([seed, request_id]).integers(0, min(256, vocab), n).tolist()


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
