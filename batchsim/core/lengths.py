"""How long prompts and answers are: token-count distributions.

Each distribution has ``sample(rng, n)`` (integers >= 1), ``mean`` and a readable
repr. ``parse_length`` reads the command-line forms: ``128``, ``uniform:LO,HI``,
``lognormal:MEAN,MEDIAN``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, check_int_at_least

__all__ = ["LengthDist", "Fixed", "Uniform", "LogNormal", "Empirical", "parse_length"]


class LengthDist:
    mean: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(LengthDist):
    value: int

    def __post_init__(self) -> None:
        check_int_at_least("length", self.value, 1)

    @property
    def mean(self) -> float:  # type: ignore[override]
        return float(self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class Uniform(LengthDist):
    """Integers uniform on [lo, hi], both included."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        check_int_at_least("uniform lo", self.lo, 1)
        check_int_at_least("uniform hi", self.hi, self.lo)

    @property
    def mean(self) -> float:  # type: ignore[override]
        return (self.lo + self.hi) / 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)


@dataclass(frozen=True)
class LogNormal(LengthDist):
    """Log-normal with the given mean and median (mean > median: a long right tail), rounded, at least 1.

    median = exp(mu) and mean = exp(mu + sigma^2/2), so sigma^2 = 2 ln(mean/median).
    Rounding and the floor at 1 shift the mean a little for small values.
    """

    mean_tokens: float
    median_tokens: float

    def __post_init__(self) -> None:
        if not (self.median_tokens >= 1):
            raise ConfigError(f"lognormal median must be >= 1, got {self.median_tokens!r}")
        if not (self.mean_tokens > self.median_tokens):
            raise ConfigError(f"lognormal mean must be > median, got mean={self.mean_tokens!r} median={self.median_tokens!r}")

    @property
    def mean(self) -> float:  # type: ignore[override]
        return float(self.mean_tokens)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mu = math.log(self.median_tokens)
        sigma = math.sqrt(2 * math.log(self.mean_tokens / self.median_tokens))
        return np.maximum(1, np.rint(rng.lognormal(mu, sigma, size=n))).astype(np.int64)


@dataclass(frozen=True)
class Empirical(LengthDist):
    """Resampled with replacement from observed lengths (for instance a trace's)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or min(self.values) < 1:
            raise ConfigError("empirical lengths must be a non-empty list of integers >= 1")

    @property
    def mean(self) -> float:  # type: ignore[override]
        return float(np.mean(self.values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)

    def __repr__(self) -> str:
        return f"Empirical(n={len(self.values)}, mean={self.mean:.1f})"


def parse_length(spec: str | int, field: str = "length") -> LengthDist:
    """Read ``128``, ``uniform:LO,HI`` or ``lognormal:MEAN,MEDIAN``; errors name ``field``."""
    if isinstance(spec, int):
        return Fixed(spec)
    text = str(spec).strip()
    name, _, arg = text.partition(":")
    try:
        if not arg:
            return Fixed(int(name))
        a, _, b = arg.partition(",")
        if name == "uniform":
            return Uniform(int(a), int(b))
        if name == "lognormal":
            return LogNormal(float(a), float(b))
    except ConfigError as e:
        raise ConfigError(f"{field}: {e}") from None
    except ValueError:
        pass
    raise ConfigError(f"{field} must be an integer, uniform:LO,HI or lognormal:MEAN,MEDIAN, got {text!r}")
