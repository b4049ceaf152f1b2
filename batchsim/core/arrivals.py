"""When requests arrive: the timetable at the bus stop.

Each arrival process is a small frozen dataclass with ``times(rng, n=..., duration=...)``
returning sorted arrival times in seconds, a ``mean_rate`` and a readable repr, so
tests can hold simulation against theory (Ciw's habit). Randomness comes only from
the ``numpy.random.Generator`` passed in.

- ``Poisson(rate)``: independent arrivals, exponential gaps (the M in M/D/1).
- ``Gamma(rate, cv)``: bursty arrivals; cv=1 is Poisson, cv>1 clumps requests together.
- ``Constant(rate)``: a perfectly regular timetable (the D in D/D/1).
- ``RushHour(phases)``: piecewise-constant Poisson rate, e.g. quiet, peak, quiet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, check_positive

__all__ = ["ArrivalProcess", "Poisson", "Gamma", "Constant", "RushHour", "parse_arrival"]


def _check_extent(n: int | None, duration: float | None) -> None:
    if (n is None) == (duration is None):
        raise ConfigError("give exactly one of requests (n) or duration")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ConfigError(f"requests must be an integer >= 1, got {n!r}")
    if duration is not None:
        check_positive("duration", duration)


class ArrivalProcess:
    """Base: renewal processes generate gaps; ``times`` cumulates them."""

    mean_rate: float

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def times(self, rng: np.random.Generator, n: int | None = None, duration: float | None = None) -> np.ndarray:
        _check_extent(n, duration)
        if n is not None:
            return np.cumsum(self.gaps(rng, n))
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
        check_positive("rate", self.rate)

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return self.rate

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=n)


@dataclass(frozen=True)
class Gamma(ArrivalProcess):
    """Gamma-distributed gaps with mean 1/rate and coefficient of variation ``cv``."""

    rate: float
    cv: float

    def __post_init__(self) -> None:
        check_positive("rate", self.rate)
        check_positive("cv", self.cv)

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return self.rate

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return rng.gamma(shape, (1.0 / self.rate) / shape, size=n)


@dataclass(frozen=True)
class Constant(ArrivalProcess):
    rate: float

    def __post_init__(self) -> None:
        check_positive("rate", self.rate)

    @property
    def mean_rate(self) -> float:  # type: ignore[override]
        return self.rate

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, 1.0 / self.rate)


@dataclass(frozen=True)
class RushHour(ArrivalProcess):
    """Poisson arrivals whose rate changes by phase: ((seconds, rate), ...), repeated as a day repeats.

    Generated exactly by time-rescaling: unit-rate Poisson points mapped through the
    inverse of the cumulative rate, so no thinning and no approximation.
    """

    phases: tuple[tuple[float, float], ...] = ((20.0, 2.0), (20.0, 10.0), (20.0, 2.0))

    def __post_init__(self) -> None:
        if not self.phases:
            raise ConfigError("phases must not be empty")
        for i, (d, r) in enumerate(self.phases):
            check_positive(f"phases[{i}].duration", d)
            check_positive(f"phases[{i}].rate", r)

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

    def times(self, rng: np.random.Generator, n: int | None = None, duration: float | None = None) -> np.ndarray:
        _check_extent(n, duration)
        durations = np.array([d for d, _ in self.phases])
        rates = np.array([r for _, r in self.phases])
        mass = durations * rates  # expected arrivals per phase
        period_mass = float(mass.sum())
        if n is not None:
            unit = np.cumsum(rng.exponential(1.0, size=n))
        else:
            unit = np.cumsum(rng.exponential(1.0, size=int(period_mass * (duration / self.period + 1) * 1.3) + 32))
        cycles, rem = np.divmod(unit, period_mass)
        edges = np.concatenate([[0.0], np.cumsum(mass)])
        k = np.clip(np.searchsorted(edges, rem, side="right") - 1, 0, len(mass) - 1)
        starts = np.concatenate([[0.0], np.cumsum(durations)])[:-1]
        t = cycles * self.period + starts[k] + (rem - edges[k]) / rates[k]
        if duration is not None:
            t = t[t < duration]
        return t

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover - times() overrides
        return np.diff(self.times(rng, n=n), prepend=0.0)


def parse_arrival(spec: str, rate: float) -> ArrivalProcess:
    """``poisson``, ``gamma:CV``, ``constant``, ``rush-hour`` or ``rush-hour:S1@R1,S2@R2,...``."""
    name, _, arg = spec.partition(":")
    try:
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
                s, _, r = part.partition("@")
                phases.append((float(s), float(r)))
            return RushHour(tuple(phases))
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"arrival must be poisson, gamma:CV, constant or rush-hour[:S@R,...], got {spec!r}") from None
    raise ConfigError(f"arrival must be poisson, gamma:CV, constant, rush-hour or trace:PATH, got {spec!r}")
