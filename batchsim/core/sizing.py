"""How big a run is, before it runs: requests, tokens, memory and time, held against this machine.

A typo such as ``--duration 1e7`` or ``--output-len 1000000000`` asks for billions of
events; without a check the program works for half a minute and dies of MemoryError,
or runs for days. ``estimate`` sizes a run from what is known before any work (the
request count or duration x rate, the mean lengths, the number of policies) with
costs measured on this simulator (``bench/`` style, 2-core VM, 2026):

- about 400 bytes of memory per request while a policy runs (the workload's arrays, the
  records' arrays, two steps of step log; token events are folded in bounded chunks),
  40 in a summary-only run, and 250 per request kept for each finished policy's records;
- 48 bytes per token of one answer (a run of decode steps is priced as arrays of that
  many step times, a few at once);
- about 60 microseconds per request per policy, and 0.1 microsecond per output token
  (the taxi's worst case: one row per step).
(``bench/sim_speed.py`` prints the measured figures.)

``check`` refuses a run whose estimate passes 80 % of this machine's memory or an hour
of work, with one line that says which flag to change and that ``--no-size-check``
runs it anyway. The figures are estimates: they are meant to catch a factor of a
thousand, not to predict the second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import ConfigError

__all__ = [
    "Size",
    "estimate",
    "combined",
    "check",
    "machine_memory",
    "OVERRIDE_FLAG",
    "LIMIT_SECONDS",
]

OVERRIDE_FLAG = "--no-size-check"
#: The longest a run may be estimated to take before it is refused (an hour).
LIMIT_SECONDS = 3600.0
_BYTES_PER_REQUEST_RUNNING = 400
_BYTES_PER_REQUEST_SUMMARY = 40
_BYTES_PER_REQUEST_KEPT = 250
_BYTES_PER_TOKEN = 48
_SECONDS_PER_REQUEST = 6e-5
_SECONDS_PER_TOKEN = 1e-7


def machine_memory() -> float | None:
    """Physical memory in bytes, or None where the system does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Size:
    requests: float
    output_tokens: float
    runs: int
    memory_bytes: float
    seconds: float

    def describe(self) -> str:
        return (
            f"{self.requests:,.0f} requests x {self.runs} run{'s' if self.runs != 1 else ''}, "
            f"{self.output_tokens:,.0f} output tokens each run: about {_bytes(self.memory_bytes)} "
            f"and {_duration(self.seconds)}"
        )


def _bytes(n: float) -> str:
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= f:
            return f"{n / f:,.1f} {unit}"
    return f"{n / 1e3:,.0f} kB"


def _duration(s: float) -> str:
    if s >= 86400 * 365:
        return f"{s / (86400 * 365):,.0f} years"
    if s >= 86400:
        return f"{s / 86400:,.1f} days"
    if s >= 3600:
        return f"{s / 3600:,.1f} h"
    if s >= 60:
        return f"{s / 60:,.0f} min"
    return f"{s:,.0f} s"


def estimate(
    requests: float, mean_output_tokens: float, runs: int = 1, summary_only: bool = False
) -> Size:
    """The size of ``runs`` simulations of one workload, kept together as a report keeps them."""
    tokens = requests * mean_output_tokens
    per_request = _BYTES_PER_REQUEST_SUMMARY if summary_only else _BYTES_PER_REQUEST_RUNNING
    running = requests * per_request + mean_output_tokens * _BYTES_PER_TOKEN
    kept = 0.0 if summary_only else (runs - 1) * requests * _BYTES_PER_REQUEST_KEPT
    seconds = runs * (requests * _SECONDS_PER_REQUEST + tokens * _SECONDS_PER_TOKEN)
    return Size(requests, tokens, runs, running + kept, seconds)


def combined(sizes: list[Size], parallel: int = 1) -> Size:
    """Several runs (a sweep's values), ``parallel`` of them at a time in separate processes."""
    parallel = max(1, min(parallel, len(sizes)))
    biggest = max(sizes, key=lambda z: z.memory_bytes)
    return Size(
        biggest.requests,
        biggest.output_tokens,
        sum(z.runs for z in sizes),
        biggest.memory_bytes * parallel,
        sum(z.seconds for z in sizes) / parallel,
    )


def check(
    size: Size,
    memory: float | None = None,
    limit_seconds: float = LIMIT_SECONDS,
    extent_flag: str = "--requests",
) -> None:
    """Refuse a run far beyond this machine, naming the flag to change (``extent_flag``: the one
    that set the request count, --requests or --duration)."""
    memory = machine_memory() if memory is None else memory
    too_big = memory is not None and size.memory_bytes > 0.8 * memory
    too_long = size.seconds > limit_seconds
    if not (too_big or too_long):
        return
    if too_big:
        token_bound = (
            size.output_tokens / max(size.requests, 1) * _BYTES_PER_TOKEN > size.memory_bytes / 2
        )
    else:
        token_bound = size.output_tokens * _SECONDS_PER_TOKEN > size.requests * _SECONDS_PER_REQUEST
    change = f"--output-len (or {extent_flag})" if token_bound else extent_flag
    if too_big:
        limit = f"more than this machine's {_bytes(memory)} of memory"
    else:
        limit = f"more than the {_duration(limit_seconds)} a run may take"
    raise ConfigError(
        f"run too large: {size.describe()}, {limit}; lower {change}, or pass {OVERRIDE_FLAG} to "
        f"run it anyway"
    )
