"""When requests arrive: the timetable at the bus stop.

Each arrival process is a small frozen dataclass with ``times(rng, n=..., duration=...)``
returning sorted arrival times in seconds, a ``mean_rate`` and a readable repr, so
tests can hold simulation against theory (Ciw's habit). Randomness comes only from
the ``numpy.random.Generator`` passed in.

- ``Poisson(rate)``: independent arrivals, exponential gaps (the M in M/D/1).
- ``Gamma(rate, cv)``: bursty arrivals; cv=1 is Poisson, cv>1 clumps requests together.
- ``Constant(rate)``: a perfectly regular timetable (the D in D/D/1).
- ``RushHour(phases)``: piecewise-constant Poisson rate, e.g. quiet, peak, quiet.

Every number is checked at both ends, not only for sign: a rate of 1e-308 makes
gaps of 1e308 seconds whose sum overflows, and a CV of 1e308 makes a gamma shape
of zero. The bounds (``MIN_RATE`` .. ``MAX_RATE``, ``MIN_CV`` .. ``MAX_CV``) are far
beyond any real service and far inside what floating point survives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, check_at_most, check_int_at_least, check_positive, show

__all__ = [
    "ArrivalProcess",
    "Poisson",
    "Gamma",
    "Constant",
    "RushHour",
    "parse_arrival",
    "MIN_RATE",
    "MAX_RATE",
    "MIN_CV",
    "MAX_CV",
    "MAX_REQUESTS",
]

#: One request in 30 years .. a billion a second: beyond both, the arithmetic of times breaks first.
MIN_RATE, MAX_RATE = 1e-9, 1e9
#: CV 0.01 is a metronome (use ``constant``), 100 a few huge bursts; beyond, the gamma shape 1/CV^2
#: underflows or overflows.
MIN_CV, MAX_CV = 0.01, 100.0
#: No machine holds a workload of more requests than this (a Request is about 200 bytes in Python).
MAX_REQUESTS = 100_000_000


def check_rate(field: str, rate) -> None:
    check_positive(field, rate)
    if not (MIN_RATE <= float(rate) <= MAX_RATE):
        raise ConfigError(
            f"{field} must be between {MIN_RATE:g} and {MAX_RATE:g} requests per second, got "
            f"{show(rate)}"
        )


def _check_extent(n: int | None, duration: float | None, mean_rate: float) -> None:
    if (n is None) == (duration is None):
        raise ConfigError("give exactly one of requests (n) or duration")
    if n is not None:
        check_int_at_least("requests", n, 1)
        check_at_most("requests", n, MAX_REQUESTS, "more than any machine holds")
    if duration is not None:
        check_positive("duration", duration)
        if duration * mean_rate > MAX_REQUESTS:
            raise ConfigError(
                f"duration {show(duration)} s at {mean_rate:g} requests/s would make "
                f"{duration * mean_rate:.3g} requests, more than the {MAX_REQUESTS:,} any machine "
                f"holds"
            )


class ArrivalProcess:
    """Base: renewal processes generate gaps; ``times`` cumulates them."""

    mean_rate: float

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def times(
        self, rng: np.random.Generator, n: int | None = None, duration: float | None = None
    ) -> np.ndarray:
        _check_extent(n, duration, self.mean_rate)
        if n is not None:
            return np.cumsum(self.gaps(rng, int(n)))
        # Draw in blocks until the horizon is passed; the blocks come from one stream,
        # so the result depends only on the seed, not on the block size.
        out: list[np.ndarray] = []
        t = 0.0
        block = max(16, int(self.mean_rate * duration * 1.2) + 16)
        while True:
            ts = t + np.cumsum(self.gaps(rng, block))
            out.append(ts)
            t = float(ts[-1])
            if t >= duration:
                break
        all_t = np.concatenate(out)
        return all_t[all_t < duration]


@dataclass(frozen=True)
class Poisson(ArrivalProcess):
    rate: float

    def __post_init__(self) -> None:
        check_rate("rate", self.rate)

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return float(self.rate)

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=n)


@dataclass(frozen=True)
class Gamma(ArrivalProcess):
    """Gamma-distributed gaps with mean 1/rate and coefficient of variation ``cv``."""

    rate: float
    cv: float

    def __post_init__(self) -> None:
        check_rate("rate", self.rate)
        check_positive("cv", self.cv)
        if not (MIN_CV <= float(self.cv) <= MAX_CV):
            raise ConfigError(
                f"cv must be between {MIN_CV:g} and {MAX_CV:g} (1 is Poisson), got {show(self.cv)}"
            )

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return float(self.rate)

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return rng.gamma(shape, (1.0 / self.rate) / shape, size=n)


@dataclass(frozen=True)
class Constant(ArrivalProcess):
    rate: float

    def __post_init__(self) -> None:
        check_rate("rate", self.rate)

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return float(self.rate)

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, 1.0 / self.rate)


@dataclass(frozen=True)
class RushHour(ArrivalProcess):
    """Poisson arrivals whose rate changes by phase: ((seconds, rate), ...), repeated as a day
    repeats.

    Generated exactly by time-rescaling: unit-rate Poisson points mapped through the
    inverse of the cumulative rate, so no thinning and no approximation.
    """

    phases: tuple[tuple[float, float], ...] = ((20.0, 2.0), (20.0, 10.0), (20.0, 2.0))

    def __post_init__(self) -> None:
        if isinstance(self.phases, str) or not isinstance(self.phases, (tuple, list)):
            hint = (
                f" (parse_arrival('rush-hour:{self.phases}', rate) reads the command line's form)"
                if isinstance(self.phases, str)
                else ""
            )
            raise ConfigError(
                f"phases must be ((seconds, rate), ...) pairs{hint}, got {show(self.phases)}"
            )
        if not self.phases:
            raise ConfigError("phases must not be empty")
        for i, phase in enumerate(self.phases):
            if isinstance(phase, str) or not isinstance(phase, (tuple, list)) or len(phase) != 2:
                raise ConfigError(f"phases[{i}] must be a (seconds, rate) pair, got {show(phase)}")
        for i, (d, r) in enumerate(self.phases):
            check_positive(f"phases[{i}].duration", d)
            check_at_most(f"phases[{i}].duration", d, 1e9, "seconds")
            check_rate(f"phases[{i}].rate", r)

    @property
    def period(self) -> float:
        return float(sum(d for d, _ in self.phases))

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return sum(d * r for d, r in self.phases) / self.period

    def rate_at(self, t: float) -> float:
        t = t % self.period
        for d, r in self.phases:
            if t < d:
                return r
            t -= d
        return self.phases[-1][1]

    def times(
        self, rng: np.random.Generator, n: int | None = None, duration: float | None = None
    ) -> np.ndarray:
        _check_extent(n, duration, self.mean_rate)
        durations = np.array([d for d, _ in self.phases])
        rates = np.array([r for _, r in self.phases])
        mass = durations * rates  # expected arrivals per phase
        period_mass = float(mass.sum())
        if n is not None:
            unit = np.cumsum(rng.exponential(1.0, size=n))
        else:
            unit = np.cumsum(
                rng.exponential(
                    1.0, size=int(period_mass * (duration / self.period + 1) * 1.3) + 32
                )
            )
        cycles, rem = np.divmod(unit, period_mass)
        edges = np.concatenate([[0.0], np.cumsum(mass)])
        k = np.clip(np.searchsorted(edges, rem, side="right") - 1, 0, len(mass) - 1)
        starts = np.concatenate([[0.0], np.cumsum(durations)])[:-1]
        t = cycles * self.period + starts[k] + (rem - edges[k]) / rates[k]
        if duration is not None:
            t = t[t < duration]
        return t

    def gaps(
        self, rng: np.random.Generator, n: int
    ) -> np.ndarray:  # pragma: no cover - times() overrides
        return np.diff(self.times(rng, n=n), prepend=0.0)


def parse_arrival(spec: str, rate: float) -> ArrivalProcess:
    """``poisson``, ``gamma:CV``, ``constant``, ``rush-hour`` or ``rush-hour:S1@R1,S2@R2,...``."""
    name, _, arg = str(spec).strip().partition(":")
    try:
        if name in ("poisson", "constant") and arg:
            raise ConfigError(
                f"arrival {name} takes no parameter, got {spec!r} (the rate is --rate)"
            )
        if name == "poisson":
            return Poisson(rate)
        if name == "gamma":
            return Gamma(rate, float(arg) if arg else 2.0)
        if name == "constant":
            return Constant(rate)
        if name == "rush-hour":
            if not arg:
                # Default day: a quiet spell, a peak at 4x the rate, quiet again; mean rate = rate.
                return RushHour(((20.0, rate * 0.5), (20.0, rate * 2.0), (20.0, rate * 0.5)))
            phases = []
            for part in arg.split(","):
                s, at, r = part.partition("@")
                if not at:
                    raise ValueError(part)
                phases.append((float(s), float(r)))
            return RushHour(tuple(phases))
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(
            f"arrival must be poisson, gamma:CV, constant or rush-hour[:S@R,...], got {show(spec)}"
        ) from None
    raise ConfigError(
        f"arrival must be poisson, gamma:CV, constant, rush-hour or trace:PATH, got {show(spec)}"
    )
