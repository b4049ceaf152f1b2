"""How long prompts and answers are: token-count distributions.

Each distribution has ``sample(rng, n)`` (integers >= 1), ``mean`` and a readable
repr. ``parse_length`` reads the command-line forms: ``128``, ``uniform:LO,HI``,
``lognormal:MEAN,MEDIAN``.

No prompt or answer is longer than ``MAX_TOKENS``: a count beyond it is a typo, and a
run's arrays grow with it until memory is gone. A log-normal's samples are capped
there too (its tail is unbounded: with mean 10^7 and median 1, one draw in a few
thousand would pass 10^12 tokens); the cap moves the mean only for such extreme shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, check_at_most, check_int_at_least, is_number, show

__all__ = ["LengthDist", "Fixed", "Uniform", "LogNormal", "Empirical", "parse_length", "MAX_TOKENS"]

#: The most tokens one prompt or one answer may have: ten times the longest context windows on
#: offer in 2025 (about 1M tokens).
MAX_TOKENS = 10_000_000


def _check_tokens(field: str, value) -> None:
    check_int_at_least(field, value, 1)
    check_at_most(field, value, MAX_TOKENS, "tokens; no model reads more")


class LengthDist:
    mean: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(LengthDist):
    value: int

    def __post_init__(self) -> None:
        _check_tokens("length", self.value)

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
        _check_tokens("uniform lo", self.lo)
        _check_tokens("uniform hi", self.hi)
        check_int_at_least("uniform hi", self.hi, self.lo)

    @property
    def mean(self) -> float:  # type: ignore[override]
        return (self.lo + self.hi) / 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)


@dataclass(frozen=True)
class LogNormal(LengthDist):
    """Log-normal with the given mean and median (mean > median: a long right tail), rounded, at
    least 1.

    median = exp(mu) and mean = exp(mu + sigma^2/2), so sigma^2 = 2 ln(mean/median).
    Rounding and the floor at 1 shift the mean a little for small values.
    """

    mean_tokens: float
    median_tokens: float

    def __post_init__(self) -> None:
        for name, v in (("mean", self.mean_tokens), ("median", self.median_tokens)):
            if not is_number(v):
                raise ConfigError(f"lognormal {name} must be a number, got {show(v)}")
            check_at_most(f"lognormal {name}", v, MAX_TOKENS, "tokens; no model reads more")
        if not (self.median_tokens >= 1):
            raise ConfigError(f"lognormal median must be >= 1, got {show(self.median_tokens)}")
        if not (self.mean_tokens > self.median_tokens):
            raise ConfigError(
                f"lognormal mean must be > median, got mean={show(self.mean_tokens)} "
                f"median={show(self.median_tokens)}"
            )

    @property
    def mean(self) -> float:  # type: ignore[override]
        return float(self.mean_tokens)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mu = math.log(self.median_tokens)
        sigma = math.sqrt(2 * math.log(self.mean_tokens / self.median_tokens))
        return np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, MAX_TOKENS).astype(np.int64)


@dataclass(frozen=True)
class Empirical(LengthDist):
    """Resampled with replacement from observed lengths (for instance a trace's)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError("empirical lengths must be a non-empty list of integers >= 1")
        for v in self.values:
            _check_tokens("empirical length", v)

    @property
    def mean(self) -> float:  # type: ignore[override]
        return float(np.mean(self.values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)

    def __repr__(self) -> str:
        return f"Empirical(n={len(self.values)}, mean={self.mean:.1f})"


def parse_length(spec: str | int, field: str = "length") -> LengthDist:
    """Read ``128``, ``uniform:LO,HI`` or ``lognormal:MEAN,MEDIAN``; errors name ``field``."""
    if is_number(spec) and math.isfinite(float(spec)) and float(spec) == int(spec):
        try:
            return Fixed(int(spec))
        except ConfigError as e:
            raise ConfigError(f"{field}: {e}") from None
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
    raise ConfigError(
        f"{field} must be an integer, uniform:LO,HI or lognormal:MEAN,MEDIAN, got {show(text)}"
    )
