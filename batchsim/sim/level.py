"""A model's prices at the machine's speed of now, prefill and decode apart.

A profile is the shape of the cost; the level moves. On a shared CPU the machine's speed
changes by tens of per cent over minutes as other work comes and goes, and not alike for
every pass: measured here (gpt2-6l, one thread), while another process ran on the second
core, prefill passes (compute-bound: they share the core's arithmetic) ran 1.19-1.21x their
profiled price run after run, while decode passes (which stream the weights from memory)
ran 0.98-1.00x. One factor for both would have been wrong for both.

``LevelStepTime(inner, prefill, decode)`` prices every prefill pass at ``prefill`` times the
inner model's price and every decode pass at ``decode`` times; the work around a step, the
gap between steps and the cold start after idling go with ``decode`` (the machine as a
whole). ``realrun``'s canary measures the two factors around the measured runs.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import check_at_most, check_positive
from ..core.plan import Pass, plan_step
from ..core.step import Step
from .steptime import ScaledStepTime, StepTimeModel

__all__ = ["LevelStepTime"]


class LevelStepTime(ScaledStepTime):
    """``inner``'s prefill passes times ``prefill``, everything else times ``decode``: a scaling by
    ``decode`` (``factor``) whose prefill passes are moved to their own level."""

    def __init__(self, inner: StepTimeModel, prefill: float, decode: float) -> None:
        for name, v in (("prefill", prefill), ("decode", decode)):
            check_positive(f"level {name}", v)
            check_at_most(f"level {name}", v, 100.0)
        super().__init__(inner, decode)
        self.prefill, self.decode = float(prefill), float(decode)

    def __repr__(self) -> str:
        return f"{self.inner!r} at prefill x {self.prefill:.3f}, decode x {self.decode:.3f}"

    def times(self, prefill_tokens, decode_rows, kv_read):
        t = np.asarray(self.inner.times(prefill_tokens, decode_rows, kv_read), dtype=np.float64)
        return t * np.where(np.asarray(prefill_tokens) > 0, self.prefill, self.decode)

    def pass_time(self, p: Pass) -> float:
        return self.inner.pass_time(p) * (self.prefill if p.prefill_rows else self.decode)

    def durations(self, step: Step, m: int) -> np.ndarray:
        d = np.array(self.inner.durations(step, m), dtype=np.float64) * self.decode
        if m == 1 and self.prefill != self.decode:
            # The step at the decode level, then each prefill pass moved from that level to its own.
            d[0] += sum(
                (self.prefill - self.decode) * self.inner.pass_time(p)
                for p in plan_step(step, self.plan)
                if p.prefill_rows
            )
        return d

    def _decode_times(self, d: Pass, attn_read: np.ndarray) -> np.ndarray:
        return np.asarray(self.inner._decode_times(d, attn_read), dtype=np.float64) * self.decode

    def for_policy(self, name: str) -> StepTimeModel:
        inner = self.inner.for_policy(name)
        return self if inner is self.inner else LevelStepTime(inner, self.prefill, self.decode)
