"""What every step-time model offers the simulator: a pass's price, and a step's as the sum of its
passes.

A step runs as one or more forward passes (its pass plan, ``batchsim.core.plan``); a
model prices each pass from its shape (``times``, on arrays, so a run of ``repeat`` decode
steps is priced in one vectorised call) and a step costs the sum of its passes
(``durations``). ``plan`` says how the modelled server runs a step, ``step_gap`` what it
spends between two steps. The models themselves: ``batchsim.sim.steptime`` (constant,
exponential, linear, scaled), ``batchsim.sim.profiled`` (measured grids),
``batchsim.sim.level`` and ``batchsim.sim.sampled``; each imports this interface, not one another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..core.plan import Pass, plan_step
from ..core.step import Step

__all__ = ["StepTimeModel"]


class StepTimeModel(ABC):
    """Prices a pass from its shape (``times``); a step costs the sum of its planned passes."""

    #: How the modelled server runs a step (see ``batchsim.core.plan``).
    plan: str = "fused"
    #: Seconds the server spends between two steps (its own bookkeeping), before each step.
    step_gap: float = 0.0

    @abstractmethod
    def times(
        self, prefill_tokens: np.ndarray, decode_rows: np.ndarray, kv_read: np.ndarray
    ) -> np.ndarray:
        """Seconds for each pass described by the three arrays (kv_read: KV tokens its attention
        reads)."""

    def pass_time(self, p: Pass) -> float:
        """Seconds for one pass."""
        return self.step_time(p.prefill_tokens, p.decode_rows, p.attn_read)

    def durations(self, step: Step, m: int) -> np.ndarray:
        """Seconds for each of the first m repetitions of ``step``: the sum of its planned
        passes."""
        passes = plan_step(step, self.plan)
        if m == 1:
            t = 0.0
            for p in passes:
                t += self.pass_time(p)
            return np.array([t])
        # A decode-only step repeats one pass, every row (and the rectangle) a token longer each
        # time.
        (d,) = passes
        j = np.arange(m, dtype=np.float64)
        return np.asarray(self._decode_times(d, d.attn_read + j * d.decode_rows), dtype=np.float64)

    def _decode_times(self, d: Pass, attn_read: np.ndarray) -> np.ndarray:
        return self.times(
            np.zeros(len(attn_read)), np.full(len(attn_read), float(d.decode_rows)), attn_read
        )

    def short_durations(self, step: Step, m: int) -> list[float] | None:
        """``durations(step, m)`` as a list of Python floats, the very same ones, where the model
        can price a short step more cheaply that way (the simulator's hot path: most steps under
        load are a pass or a few, and numpy's calls cost more than their arithmetic); None: it
        cannot."""
        return None

    def put_back(self, seconds) -> None:  # noqa: B027 - a hook: most models draw nothing, so nothing to put back
        """``seconds``, priced by the last call for passes that never ran (a repeat cut at an
        arrival), in order. A model that draws each pass's time (``ExponentialStepTime``) prices
        the next passes with them, so each pass gets the draw it would get priced one at a time
        (as ``batchsim.textbook`` prices it); a model that prices a shape has nothing to take
        back."""

    def cold_extra(self, p: Pass, rep: int) -> float:
        """Seconds ``p`` costs beyond its price because its step had just begun: ``rep`` is the
        repetition of the step it ran in (0: the first). ``durations`` includes it; a referee that
        prices a run's passes one by one adds it (``realrun.timing.pass_level.priced_passes``)."""
        return 0.0

    def wake_penalty(self, idle: float) -> tuple[float, float]:
        """(late start, extra seconds of work) for a step that follows ``idle`` seconds with nothing
        to run: a real server wakes late from its sleep and runs its first passes cold."""
        return 0.0, 0.0

    def for_policy(self, name: str) -> StepTimeModel:
        """The model as it applies to one policy (a profiled model knows each policy's own
        overhead)."""
        return self

    def step_time(
        self, prefill_tokens: float = 0, decode_rows: float = 0, kv_read: float = 0
    ) -> float:
        """Seconds for one pass of this shape."""
        return float(
            self.times(
                np.array([prefill_tokens], float),
                np.array([decode_rows], float),
                np.array([kv_read], float),
            )[0]
        )
