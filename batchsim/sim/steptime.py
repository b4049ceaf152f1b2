"""How long a step takes: the server's stopwatch.

A step runs as one or more forward passes (its pass plan, ``batchsim.core.plan``); a
step-time model prices each pass from its shape and a step costs the sum of its passes.
A pass's shape, as these models read it, is three numbers: prompt tokens computed
(padding included), rows decoding (padded rows included) and the KV-cache tokens its
attention reads (a rectangle's padding included). Models work on arrays, so the
simulator prices a run of ``repeat`` decode steps in one vectorised call.

- ``ConstantStepTime(t)``: every step takes t seconds whatever its size. Unreal,
  but it makes the server a textbook queue (M/D/1), which is how theory checks work.
- ``ExponentialStepTime(mean, rng)``: random step times, for the M/M/1 check.
- ``LinearStepTime(c0, c1, c2, c3)``: a pass takes c0 + c1*prefill_tokens + c2*decode_rows
  + c3*kv_tokens_read. c0 is the fixed cost of a pass (reading the weights, launching
  kernels): paid once however many rows share it, which is why batching pays.

``plan`` says how the modelled server runs a step: ``"fused"`` (one pass, as vLLM and
the GPU servers of the catalog), ``"grouped"`` (realrun's engine on a rectangular cache:
prefill passes, then a decode pass) or ``"paged"`` (realrun's engine on its block pool: one
packed prefill pass, then a decode pass, both reading each row's own blocks). ``step_gap`` is the
server's own time between two steps (deciding, recording: the driver's Python), added before each
step.

The interface every model offers is ``StepTimeModel`` (``batchsim.sim.stepmodel``, re-exported
here); ``load_step_time`` reads a calibration file into the model it names (linear, or the
measured grids of ``batchsim.sim.profiled``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import (
    ConfigError,
    check_at_most,
    check_choice,
    check_nonneg,
    check_positive,
    is_number,
    show,
)
from ..core.plan import PLANS, Pass
from ..core.step import Step
from .stepmodel import StepTimeModel

__all__ = [
    "StepTimeModel",
    "ConstantStepTime",
    "ExponentialStepTime",
    "LinearStepTime",
    "ScaledStepTime",
    "load_step_time",
]


@dataclass(frozen=True)
class ConstantStepTime(StepTimeModel):
    seconds: float = 0.02

    def __post_init__(self) -> None:
        check_positive("step_time", self.seconds)

    def times(self, prefill_tokens, decode_rows, kv_read):
        return np.full(np.shape(prefill_tokens), self.seconds)

    def durations(self, step: Step, m: int) -> np.ndarray:
        # A step, not a pass, takes the constant: however the server runs it (the textbook queue).
        return np.full(m, self.seconds)

    def step_time(
        self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0
    ) -> float:
        return self.seconds


@dataclass(frozen=True)
class ExponentialStepTime(StepTimeModel):
    """Exponentially distributed step times with the given mean, from an explicit generator.

    One draw a pass, in the order the passes run: the draws of a repeat's passes that an arrival
    cut off come back (``put_back``) and price the next passes, so the n-th pass of a run takes
    the n-th draw however the server grouped passes (``tests/test_textbook.py`` holds it)."""

    mean: float
    rng: np.random.Generator = field(
        compare=False, repr=False, default_factory=lambda: np.random.default_rng(0)
    )
    #: Draws put back, unused, the first to be handed out again.
    _back: list = field(default_factory=list, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_positive("mean step time", self.mean)

    def times(self, prefill_tokens, decode_rows, kv_read):
        shape, back = np.shape(prefill_tokens), self._back
        if not back:
            return self.rng.exponential(self.mean, size=shape)
        k = min(int(np.prod(shape)), len(back))
        fresh = self.rng.exponential(self.mean, size=int(np.prod(shape)) - k)
        out = np.concatenate((back[:k], fresh)).reshape(shape)
        del back[:k]
        return out

    def put_back(self, seconds) -> None:
        # A pass's draw does not depend on the shape it prices: it is the next pass's as it is.
        self._back[:0] = [float(x) for x in seconds]


def _first_read(step: Step, rows: int, plan: str) -> int:
    """What a decode-only step's first pass reads, as ``plan_step`` counts it: the rectangle
    (grouped), each row's own blocks with no padding (paged), or ``kv_read`` (fused)."""
    if plan == "grouped":
        return rows * step.decode_width
    return step.kv_read - step.kv_padding if plan == "paged" else step.kv_read


@dataclass(frozen=True)
class LinearStepTime(StepTimeModel):
    c0: float
    c1: float = 0.0
    c2: float = 0.0
    c3: float = 0.0
    source: str = ""
    plan: str = "fused"
    step_gap: float = 0.0

    def __post_init__(self) -> None:
        check_positive("c0", self.c0)
        for name in ("c1", "c2", "c3", "step_gap"):
            check_nonneg(name, getattr(self, name))
        check_choice("plan", self.plan, PLANS)

    def times(self, prefill_tokens, decode_rows, kv_read):
        return self.c0 + self.c1 * prefill_tokens + self.c2 * decode_rows + self.c3 * kv_read

    def step_time(
        self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0
    ) -> float:
        return float(self.c0 + self.c1 * prefill_tokens + self.c2 * decode_rows + self.c3 * kv_read)

    def durations(self, step: Step, m: int) -> np.ndarray:
        # The simulator's hot path: a step is priced from its own fields, without building its plan.
        # The sums are the very ones the plan's pricing makes, in the same order, so both give the
        # same floats (the shortcut equivalence tests rely on it).
        if m <= SHORT_REPEAT:
            d = self._floats(step, m)
            if d is not None:
                return np.array(d)
        if step.prefill:
            return super().durations(step, m)
        rows = len(step.decode)
        attn = _first_read(step, rows, self.plan)
        # base + c3 * (attn + j * rows), in place: the same operations in the same order, one array.
        # ``c1 * 0``: ``times``'s prefill term, zero for a decode pass, written out so that this is
        # term for term the sum the textbook's pass makes, priced alone (its ``server.price``).
        d = np.arange(m, dtype=np.float64)
        d *= rows
        d += attn
        d *= self.c3
        d += self.c0 + self.c1 * 0 + self.c2 * rows
        return d

    def short_durations(self, step: Step, m: int) -> list[float] | None:
        # A subclass that prices passes its own way (its own ``durations``) is not priced here.
        if m > SHORT_REPEAT or type(self).durations is not LinearStepTime.durations:
            return None
        return self._floats(step, m)

    def _floats(self, step: Step, m: int) -> list[float] | None:
        """The m passes' seconds in Python floats (None: a step whose plan must be priced pass by
        pass).

        ``j * rows + attn`` is an exact integer, so each is the very float the numpy path
        computes."""
        rows = len(step.decode)
        if step.prefill:
            if self.plan != "fused" or m != 1:
                return None
            return [
                self.c0 + self.c1 * step.prefill_tokens + self.c2 * rows + self.c3 * step.kv_read
            ]
        attn = _first_read(step, rows, self.plan)
        base, c3 = self.c0 + self.c1 * 0 + self.c2 * rows, self.c3
        return [base + c3 * (j * rows + attn) for j in range(m)]

    def to_json(self, path: str | Path, **extra) -> None:
        Path(path).write_text(
            json.dumps({"model": "linear", **asdict(self), **extra}, indent=2) + "\n"
        )

    @classmethod
    def from_json(cls, path: str | Path) -> LinearStepTime:
        from ..core.files import read_json

        p = Path(path)
        data = read_json(p, "calibration")
        if not isinstance(data, dict) or data.get("model", "linear") != "linear":
            raise ConfigError(
                f"calibration {str(p)!r}: model must be 'linear', got "
                f"{data.get('model') if isinstance(data, dict) else data!r}"
            )
        coeffs = {}
        for k in ("c0", "c1", "c2", "c3"):
            if k not in data:
                raise ConfigError(f"calibration {str(p)!r}: missing coefficient {k}")
            v = data[k]
            # A bool is an int to Python: "c0": true would be read as one second per step.
            if not is_number(v) or not math.isfinite(v):
                raise ConfigError(f"calibration {str(p)!r}: {k} must be a number, got {show(v)}")
            # Seconds per pass (c0) or per token (c1..c3): past an hour, sums of steps overflow long
            # before a run ends, and no hardware is that slow.
            check_at_most(f"calibration {str(p)!r}: {k}", v, _MAX_COEFF, "seconds")
            coeffs[k] = float(v)
        source = data.get("source", p.name)
        try:
            plan = data.get("plan", "fused")
            if plan not in PLANS:
                raise ConfigError(f"plan must be one of {', '.join(PLANS)}, got {show(plan)}")
            gap = data.get("step_gap", 0.0)
            if not is_number(gap) or not math.isfinite(gap):
                raise ConfigError(f"step_gap must be a number, got {show(gap)}")
            return cls(
                **coeffs,
                source=source if isinstance(source, str) else p.name,
                plan=plan,
                step_gap=float(gap),
            )
        except ConfigError as e:
            raise ConfigError(f"calibration {str(p)!r}: {e}") from None


#: Steps of up to this many passes are priced in Python floats (``LinearStepTime.short_durations``):
#: measured here, a 10-pass repeat costs 3 us that way against 12 us in numpy; at 30 passes they are
#: even. Speed alone: the textbook prices every pass with ``durations(step, 1)`` (its
#: ``server.price``).
SHORT_REPEAT = 16

#: The largest coefficient a calibration file may hold, in seconds.
_MAX_COEFF = 3600.0


class ScaledStepTime(StepTimeModel):
    """Another model's every time (passes, gaps, wake-ups) times ``factor``: the same machine,
    running faster or slower than when it was measured (``batchsim.sim.level`` moves prefill apart
    from it)."""

    def __init__(self, inner: StepTimeModel, factor: float) -> None:
        check_positive("factor", factor)
        check_at_most("factor", factor, 100.0)
        self.inner, self.factor = inner, float(factor)
        self.plan = inner.plan
        self.step_gap = inner.step_gap * self.factor

    def __repr__(self) -> str:
        return f"{self.inner!r} x {self.factor:.3f}"

    def times(self, prefill_tokens, decode_rows, kv_read):
        return self.inner.times(prefill_tokens, decode_rows, kv_read) * self.factor

    def pass_time(self, p: Pass) -> float:
        return self.inner.pass_time(p) * self.factor

    def durations(self, step: Step, m: int) -> np.ndarray:
        return self.inner.durations(step, m) * self.factor

    def cold_extra(self, p: Pass, rep: int) -> float:
        return self.inner.cold_extra(p, rep) * self.factor

    def wake_penalty(self, idle: float) -> tuple[float, float]:
        late, extra = self.inner.wake_penalty(idle)
        return late * self.factor, extra * self.factor

    def for_policy(self, name: str) -> StepTimeModel:
        inner = self.inner.for_policy(name)
        return self if inner is self.inner else ScaledStepTime(inner, self.factor)


def load_step_time(path: str | Path) -> StepTimeModel:
    """Load a calibration file written by ``python -m realrun profile`` (or a linear one by
    hand)."""
    from ..core.files import read_json

    p = Path(path)
    data = read_json(p, "calibration")
    if isinstance(data, dict) and data.get("model") == "profiled":
        from .profiled import ProfiledStepTime

        return ProfiledStepTime.from_dict(data, f"calibration {str(p)!r}")
    return LinearStepTime.from_json(p)
