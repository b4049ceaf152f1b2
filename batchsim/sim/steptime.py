"""How long one forward pass takes: the server's stopwatch.

A step-time model maps a step's shape to seconds. The shape is three numbers:
prompt tokens computed (padding included), rows decoding (padded rows included)
and KV-cache tokens read. Models work on arrays, so the simulator prices a run of
``repeat`` decode steps in one vectorised call.

- ``ConstantStepTime(t)``: every step takes t seconds whatever its size. Unreal,
  but it makes the server a textbook queue (M/D/1), which is how theory checks work.
- ``ExponentialStepTime(mean, rng)``: random step times, for the M/M/1 check.
- ``LinearStepTime(c0, c1, c2, c3)``: t = c0 + c1*prefill_tokens + c2*decode_rows
  + c3*kv_tokens_read. c0 is the fixed cost of a pass (reading the weights, launching
  kernels): paid once however many rows share it, which is why batching pays.
  realrun's profiler fits these coefficients and writes them as JSON.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError, check_at_most, check_nonneg, check_positive, is_number, show
from ..core.step import Step

__all__ = ["StepTimeModel", "ConstantStepTime", "ExponentialStepTime", "LinearStepTime", "load_step_time"]


class StepTimeModel(ABC):
    @abstractmethod
    def times(self, prefill_tokens: np.ndarray, decode_rows: np.ndarray, kv_read: np.ndarray) -> np.ndarray:
        """Seconds for each step described by the three arrays."""

    def durations(self, step: Step, m: int) -> np.ndarray:
        """Seconds for each of the first m repetitions of ``step``."""
        if m == 1:  # the common case, kept off numpy's per-call overhead where a model allows
            return np.array([self.step_time(step.prefill_tokens, len(step.decode), step.kv_read)])
        return np.asarray(self.times(*step.shape_arrays(m)), dtype=np.float64)

    def step_time(self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0) -> float:
        return float(self.times(np.array([prefill_tokens], float), np.array([decode_rows], float), np.array([kv_read], float))[0])


@dataclass(frozen=True)
class ConstantStepTime(StepTimeModel):
    seconds: float = 0.02

    def __post_init__(self) -> None:
        check_positive("step_time", self.seconds)

    def times(self, prefill_tokens, decode_rows, kv_read):
        return np.full(np.shape(prefill_tokens), self.seconds)

    def step_time(self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0) -> float:
        return self.seconds


@dataclass(frozen=True)
class ExponentialStepTime(StepTimeModel):
    """Exponentially distributed step times with the given mean, from an explicit generator."""

    mean: float
    rng: np.random.Generator = field(compare=False, repr=False, default_factory=lambda: np.random.default_rng(0))

    def __post_init__(self) -> None:
        check_positive("mean step time", self.mean)

    def times(self, prefill_tokens, decode_rows, kv_read):
        return self.rng.exponential(self.mean, size=np.shape(prefill_tokens))


@dataclass(frozen=True)
class LinearStepTime(StepTimeModel):
    c0: float
    c1: float = 0.0
    c2: float = 0.0
    c3: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        check_positive("c0", self.c0)
        for name in ("c1", "c2", "c3"):
            check_nonneg(name, getattr(self, name))

    def times(self, prefill_tokens, decode_rows, kv_read):
        return self.c0 + self.c1 * prefill_tokens + self.c2 * decode_rows + self.c3 * kv_read

    def step_time(self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0) -> float:
        return float(self.c0 + self.c1 * prefill_tokens + self.c2 * decode_rows + self.c3 * kv_read)

    def to_json(self, path: str | Path, **extra) -> None:
        Path(path).write_text(json.dumps({"model": "linear", **asdict(self), **extra}, indent=2) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> "LinearStepTime":
        from ..core.files import read_json

        p = Path(path)
        data = read_json(p, "calibration")
        if not isinstance(data, dict) or data.get("model", "linear") != "linear":
            raise ConfigError(f"calibration {str(p)!r}: model must be 'linear', got {data.get('model') if isinstance(data, dict) else data!r}")
        coeffs = {}
        for k in ("c0", "c1", "c2", "c3"):
            if k not in data:
                raise ConfigError(f"calibration {str(p)!r}: missing coefficient {k}")
            v = data[k]
            # A bool is an int to Python: "c0": true would be read as one second per step.
            if not is_number(v) or not math.isfinite(v):
                raise ConfigError(f"calibration {str(p)!r}: {k} must be a number, got {show(v)}")
            # Seconds per pass (c0) or per token (c1..c3): past an hour, sums of steps overflow long before
            # a run ends, and no hardware is that slow.
            check_at_most(f"calibration {str(p)!r}: {k}", v, _MAX_COEFF, "seconds")
            coeffs[k] = float(v)
        source = data.get("source", p.name)
        try:
            return cls(**coeffs, source=source if isinstance(source, str) else p.name)
        except ConfigError as e:
            raise ConfigError(f"calibration {str(p)!r}: {e}") from None


#: The largest coefficient a calibration file may hold, in seconds.
_MAX_COEFF = 3600.0


def load_step_time(path: str | Path) -> StepTimeModel:
    """Load a calibration file written by ``python -m realrun profile`` (or by hand)."""
    return LinearStepTime.from_json(path)
