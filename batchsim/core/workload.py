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
from .errors import ConfigError, check_int_at_least, check_nonneg, check_positive, show
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

    def __post_init__(self) -> None:
        # Every arrival makes one (``Workload.request``): plain ints and floats in range pass on one
        # comparison chain; anything else (numpy numbers, a wrong value) takes the slow path that
        # names it.
        if not (
            type(self.id) is int
            and self.id >= 0
            and type(self.arrival) is float
            and 0.0 <= self.arrival < _INF
            and type(self.prompt_tokens) is int
            and self.prompt_tokens >= 1
            and type(self.output_tokens) is int
            and self.output_tokens >= 1
        ):
            _check_request(self)


_INF = float("inf")


def _check_request(r: Request) -> None:
    check_int_at_least("id", r.id, 0)
    check_nonneg("arrival", r.arrival)
    check_int_at_least("prompt_tokens", r.prompt_tokens, 1)
    check_int_at_least("output_tokens", r.output_tokens, 1)
    if r.text is not None and not isinstance(r.text, str):
        raise ConfigError(f"text must be a string or None, got {show(r.text)}")


class Workload:
    """Requests in arrival order, kept as three arrays (24 bytes a request, not a Python object
    each).

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
                raise ConfigError(
                    f"request ids must be 0..n-1 in order, got id {r.id} at position {i}"
                )
        texts = tuple(r.text for r in reqs) if any(r.text is not None for r in reqs) else None
        self._set(
            np.fromiter((r.arrival for r in reqs), dtype=np.float64, count=len(reqs)),
            np.fromiter((r.prompt_tokens for r in reqs), dtype=np.int64, count=len(reqs)),
            np.fromiter((r.output_tokens for r in reqs), dtype=np.int64, count=len(reqs)),
            texts,
            description,
        )

    def _set(
        self,
        arrivals: np.ndarray,
        prompts: np.ndarray,
        outputs: np.ndarray,
        texts,
        description: str,
    ) -> None:
        if not (len(arrivals) == len(prompts) == len(outputs)):
            raise ConfigError(
                f"arrivals, prompts and outputs must be as long as each other, got "
                f"{len(arrivals)}, {len(prompts)} and {len(outputs)}"
            )
        bad = np.flatnonzero(~np.isfinite(arrivals))
        if len(bad):
            i = int(bad[0])
            raise ConfigError(
                f"arrival times must be finite, got {float(arrivals[i])!r} for request {i}"
            )
        if len(arrivals) and arrivals[0] < 0:
            raise ConfigError(
                f"arrival times must be >= 0, got {float(arrivals[0])!r} for request 0"
            )
        # Named as from_arrays names them (a Request checks its own fields when it is made).
        for name, a in (("prompts", prompts), ("outputs", outputs)):
            # Fewer than one token is no request: taxi and continuous would count it differently.
            small = np.flatnonzero(a < 1)
            if len(small):
                i = int(small[0])
                raise ConfigError(f"{name} must be >= 1 token, got {int(a[i])} for request {i}")
        late = np.flatnonzero(arrivals[1:] < arrivals[:-1])
        if len(late):
            i = int(late[0]) + 1
            raise ConfigError(
                f"arrivals must be sorted, request {i} arrives before request {i - 1}"
            )
        for name, a in (
            ("arrivals", arrivals),
            ("prompt_tokens", prompts),
            ("output_tokens", outputs),
        ):
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
    def requests(self) -> _Requests:
        return _Requests(self)

    def request(self, i: int) -> Request:
        """Request ``i`` as an object (made now, not stored)."""
        return Request(
            i,
            self.arrivals.item(i),
            self.prompt_tokens.item(i),
            self.output_tokens.item(i),
            None if self.texts is None else self.texts[i],
        )

    def subset(self, ids, description: str | None = None) -> Workload:
        """The requests ``ids`` (in order), renumbered 0..k-1: what one replica of a fleet was
        given."""
        ids = np.asarray(ids, dtype=np.int64)
        texts = None if self.texts is None else tuple(self.texts[i] for i in ids.tolist())
        return Workload._of(
            self.arrivals[ids],
            self.prompt_tokens[ids],
            self.output_tokens[ids],
            texts,
            self.description if description is None else description,
        )

    @classmethod
    def _of(cls, arrivals, prompts, outputs, texts, description: str) -> Workload:
        wl = object.__new__(cls)
        wl._set(
            _array("arrivals", arrivals, np.float64),
            _array("prompts", prompts, np.int64),
            _array("outputs", outputs, np.int64),
            texts,
            description,
        )
        return wl

    @classmethod
    def from_arrays(cls, arrivals, prompts, outputs, description: str = "") -> Workload:
        return cls._of(arrivals, prompts, outputs, None, description)


def _array(name: str, values, dtype) -> np.ndarray:
    """``values`` as a 1-D array of ``dtype``; token counts must be whole (2.5 would be cut to 2
    silently)."""
    try:
        a = np.asarray(values)
        out = a.astype(dtype)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be numbers, got {show(values)}") from None
    if out.ndim != 1:
        raise ConfigError(f"{name} must be one number per request (1-D), got shape {a.shape}")
    if dtype is np.int64 and a.dtype.kind not in "iu":
        frac = np.flatnonzero(~np.isfinite(a.astype(np.float64)) | (a.astype(np.float64) != out))
        if a.dtype.kind in "bc" or len(frac):
            i = int(frac[0]) if len(frac) else 0
            raise ConfigError(
                f"{name} must be whole numbers of tokens, got {show(a[i].item())} for request {i}"
            )
    return out


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
    if not isinstance(arrival, ArrivalProcess):
        hint = (
            f" (parse_arrival({arrival!r}, rate) reads the command line's form)"
            if isinstance(arrival, str)
            else ""
        )
        raise ConfigError(
            f"arrival must be an arrival process such as Poisson(5.0){hint}, got {show(arrival)}"
        )
    for name, dist in (("prompt_len", prompt_len), ("output_len", output_len)):
        if not isinstance(dist, LengthDist):
            hint = (
                f" (parse_length({dist!r}) reads the command line's form)"
                if isinstance(dist, str)
                else ""
            )
            raise ConfigError(
                f"{name} must be a length distribution such as Uniform(16, 128){hint}, got "
                f"{show(dist)}"
            )
    check_int_at_least("seed", seed, 0)
    a_rng, p_rng, o_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    times = arrival.times(a_rng, n=n, duration=duration)
    k = len(times)
    desc = f"{arrival!r}, prompt {prompt_len!r}, output {output_len!r}, seed {seed}"
    return Workload.from_arrays(
        times, prompt_len.sample(p_rng, k), output_len.sample(o_rng, k), desc
    )


def trace_workload(
    trace: Trace, n: int | None = None, duration: float | None = None, speedup: float = 1.0
) -> Workload:
    """Replay a trace: its own arrivals and lengths, the first ``n`` rows or ``duration`` seconds.

    ``speedup`` > 1 compresses time (2.0 replays an hour of traffic in half an hour, at twice the
    rate).
    """
    check_positive("speedup", speedup)
    if n is not None:
        check_int_at_least("requests", n, 1)
    if duration is not None:
        check_positive("duration", duration)
    with np.errstate(over="ignore"):
        t = trace.arrival_s / speedup
    if len(t) and not np.isfinite(t[-1]):
        raise ConfigError(
            f"speedup {speedup!r} is too small: the replayed arrivals overflow to infinity"
        )
    keep = np.ones(len(t), dtype=bool)
    if duration is not None:
        keep &= t < duration
    idx = np.nonzero(keep)[0]
    if n is not None:
        idx = idx[:n]
    return Workload.from_arrays(
        t[idx], trace.prompt_tokens[idx], trace.output_tokens[idx], f"{trace!r} x{speedup:g}"
    )
